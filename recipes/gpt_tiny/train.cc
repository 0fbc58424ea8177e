// bazel run //recipes/gpt_tiny:train — see recipes/gpt_tiny/gpt_tiny.pbtxt.
#include "recipes/trainer/main.h"

int main(int argc, char** argv) {
  return gtp::recipes::RecipeMain(argc, argv, "recipes/gpt_tiny/gpt_tiny.pbtxt");
}
