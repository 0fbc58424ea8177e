// bazel run //recipes/moe_tiny:train — see recipes/moe_tiny/moe_tiny.pbtxt.
#include "recipes/trainer/main.h"

int main(int argc, char** argv) {
  return gtp::recipes::RecipeMain(argc, argv, "recipes/moe_tiny/moe_tiny.pbtxt");
}
