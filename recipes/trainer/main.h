// recipes/trainer/main.h — the shared main() of every recipe binary.
//
//   bazel run //recipes/gpt_tiny:train -- [--config FILE] [--set a.b=v,c.d=w]
//                                         [--run_dir DIR] [--progress]
// With no flags the recipe's own config runs. Outputs go to --run_dir
// (default gtp_runs/<recipe name> under the directory bazel run was started
// from). Exit codes: 0 done (also when stopped by SIGTERM/SIGINT after
// writing a checkpoint), 1 error (one line naming it), 2 bad usage.
#pragma once

namespace gtp::recipes {

// `default_config` is the recipe's config file, relative to the workspace root
// (found through the binary's runfiles).
int RecipeMain(int argc, char** argv, const char* default_config);

}  // namespace gtp::recipes
