#include "recipes/trainer/main.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_split.h"
#include "recipes/trainer/config.h"
#include "recipes/trainer/trainer.h"

ABSL_FLAG(std::string, config, "", "recipe config (protobuf text); default: the recipe's own");
ABSL_FLAG(std::vector<std::string>, set, {}, "overrides, comma-separated: train.steps=100,optim.lr=1e-3");
ABSL_FLAG(std::string, run_dir, "", "output directory; default gtp_runs/<recipe name>");
ABSL_FLAG(bool, progress, false, "progress bar instead of log lines (default when stdout is a terminal)");

namespace gtp::recipes {

namespace {

// The config shipped with the binary: beside it in its runfiles.
std::string FindDefault(const char* argv0, const char* rel) {
  namespace fs = std::filesystem;
  for (const std::string& base :
       {std::string(argv0) + ".runfiles/gtp/", std::string("./"),
        std::getenv("RUNFILES_DIR") ? std::string(std::getenv("RUNFILES_DIR")) + "/gtp/" : std::string()}) {
    if (!base.empty() && fs::exists(base + rel)) return base + rel;
  }
  return rel;
}

}  // namespace

int RecipeMain(int argc, char** argv, const char* default_config) {
  absl::SetProgramUsageMessage("trains a gtp recipe; see recipes/README.md");
  absl::ParseCommandLine(argc, argv);
  std::string path = absl::GetFlag(FLAGS_config);
  if (path.empty()) path = FindDefault(argv[0], default_config);
  auto recipe = LoadRecipe(path, absl::GetFlag(FLAGS_set));
  if (!recipe.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(recipe.status().message()).c_str());
    return 1;
  }
  RunOptions opt;
  opt.run_dir = absl::GetFlag(FLAGS_run_dir);
  if (opt.run_dir.empty()) {
    const char* wd = std::getenv("BUILD_WORKING_DIRECTORY");  // set by `bazel run`
    opt.run_dir = std::string(wd ? wd : ".") + "/gtp_runs/" + recipe->name();
  }
  opt.progress_bar = absl::GetFlag(FLAGS_progress) || ::isatty(STDOUT_FILENO);
  absl::Status st = Train(*recipe, opt);
  if (!st.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(st.message()).c_str());
    return 1;
  }
  return 0;
}

}  // namespace gtp::recipes
