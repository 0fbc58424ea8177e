// bazel run //recipes/moe_gpu:train — see recipes/moe_gpu/moe_gpu.pbtxt.
#include "recipes/trainer/main.h"

int main(int argc, char** argv) {
  return gtp::recipes::RecipeMain(argc, argv, "recipes/moe_gpu/moe_gpu.pbtxt");
}
