// bazel run //recipes/hybrid_tiny:train — see recipes/hybrid_tiny/hybrid_tiny.pbtxt.
#include "recipes/trainer/main.h"

int main(int argc, char** argv) {
  return gtp::recipes::RecipeMain(argc, argv, "recipes/hybrid_tiny/hybrid_tiny.pbtxt");
}
