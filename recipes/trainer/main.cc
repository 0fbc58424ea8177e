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
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/cli.h"
#include "core/user_path.h"
#include "recipes/trainer/checkpointing.h"
#include "recipes/trainer/config.h"
#include "recipes/trainer/settings.h"
#include "recipes/trainer/trainer.h"

ABSL_FLAG(std::string, config, "", "recipe config (protobuf text); default: the recipe's own");
ABSL_FLAG(std::vector<std::string>, set, {},
          "overrides, comma-separated: train.steps=100,optim.lr=1e-3 (may be given several times; "
          "all apply, in order)");
ABSL_FLAG(std::string, run_dir, "", "output directory; default gtp_runs/<recipe name>");
ABSL_FLAG(bool, progress, false,
          "progress bar instead of log lines (default: on when stdout is a terminal; --noprogress turns it "
          "off there)");
ABSL_FLAG(bool, list_settings, false,
          "print every --set key with its value in this recipe (after --config/--set), its type and its "
          "comment from recipes/trainer/config.proto, then exit");

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
  gtp::SetUsage("trains a gtp recipe; see recipes/README.md");
  const std::vector<std::string> sets = TakeSets(&argc, argv);
  const bool progress_given = ProgressFlagGiven(argc, argv);
  const std::vector<char*> positional = gtp::ParseCommandLine(argc, argv);
  if (const std::string stray = StrayArgumentError(positional); !stray.empty()) {
    std::fprintf(stderr, "%s\n", stray.c_str());
    return 1;
  }
  // Paths the user typed mean the directory they ran from (core/user_path.h).
  std::string path = UserPath(absl::GetFlag(FLAGS_config));
  if (path.empty()) path = FindDefault(argv[0], default_config);
  auto recipe = LoadRecipe(path, sets);
  if (!recipe.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(recipe.status().message()).c_str());
    return 1;
  }
  for (std::string* p : {recipe->mutable_data()->mutable_path(), recipe->mutable_data()->mutable_tokenizer_vocab(),
                         recipe->mutable_data()->mutable_tokenizer_merges(),
                         recipe->mutable_data()->mutable_tokenizer_json(),
                         recipe->mutable_data()->mutable_tokenizer_model(),
                         recipe->mutable_checkpoint()->mutable_init_from(),
                         recipe->mutable_train()->mutable_dump_tokens()}) {
    *p = UserPath(*p);
  }
  if (recipe->checkpoint().init_model()) {
    absl::Status st = TakeModelFromInit(sets, &*recipe);
    if (!st.ok()) {
      std::fprintf(stderr, "error: %s\n", std::string(st.message()).c_str());
      return 1;
    }
  }
  if (absl::GetFlag(FLAGS_list_settings)) {
    std::printf("# --set keys of %s (key=value in this recipe  (type)  comment)\n%s", path.c_str(),
                SettingsTable(*recipe).c_str());
    return 0;
  }
  RunOptions opt;
  opt.run_dir = UserPath(absl::GetFlag(FLAGS_run_dir));
  if (opt.run_dir.empty()) {
    const char* wd = std::getenv("BUILD_WORKING_DIRECTORY");  // set by `bazel run`
    opt.run_dir = std::string(wd ? wd : ".") + "/gtp_runs/" + recipe->name();
  }
  opt.progress_bar = progress_given ? absl::GetFlag(FLAGS_progress) : ::isatty(STDOUT_FILENO) != 0;
  absl::Status st = Train(*recipe, opt);
  if (!st.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(st.message()).c_str());
    return 1;
  }
  return 0;
}

}  // namespace gtp::recipes
