// bazel run //recipes/gpt_124m:train — see recipes/gpt_124m/gpt_124m.pbtxt.
#include "recipes/trainer/main.h"

int main(int argc, char** argv) {
  return gtp::recipes::RecipeMain(argc, argv, "recipes/gpt_124m/gpt_124m.pbtxt");
}
