// tools/eval — loss and perplexity of a trainer checkpoint on the
// validation split of its recipe's data.
//
//   eval --checkpoint runs/gpt_tiny/checkpoints [--samples N] [--set a.b=v,...]
//
// Runs the trainer's own validation (recipes::EvaluateCheckpoint: the same
// data source, samples and loss code as the periodic evaluation) with the
// recipe stored in the checkpoint, on its saved layout unless --set changes
// it (e.g. --set parallel.world_size=1,parallel.tp=1,parallel.tp_num_weight_shards=1:
// the checkpoint reshards on load) or the data (data.source, data.path).
// --samples: validation samples 0 .. N − 1 (0: train.eval_batches ×
// micro_batch × data lanes of the saved layout, what the run's evaluation
// scored), so another layout scores the same samples.
//
// Stdout, one line: "loss X  perplexity Y  tokens N". Errors: one line on
// stderr, exit status 1.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "core/cli.h"
#include "core/status.h"
#include "core/user_path.h"
#include "recipes/trainer/config.h"
#include "recipes/trainer/trainer.h"
#include "tools/generate/checkpoint_model.h"

ABSL_FLAG(std::string, checkpoint, "", "checkpoint root (with `latest`) or an iter_ directory");
ABSL_FLAG(int64_t, samples, 0, "validation samples to score; 0: as many as the run's evaluation");
ABSL_FLAG(std::vector<std::string>, set, {},
          "overrides of the checkpoint's recipe, comma-separated (layout, data, train.device...)");

namespace gtp::tools {
namespace {

// Data lanes of a recipe's layout (world / (TP · PP · CP), as the trainer's "data" group).
absl::StatusOr<int64_t> Lanes(const recipes::proto::Recipe& r) {
  const int64_t world = r.parallel().world_size();
  const int64_t per_lane = static_cast<int64_t>(std::max(1, r.parallel().tp())) *
                           std::max(1, r.parallel().pp()) * std::max(1, r.parallel().cp());
  if (world <= 0 || world % per_lane != 0) {
    return absl::InvalidArgumentError("the saved layout does not divide its world size");
  }
  return world / per_lane;
}

absl::Status Eval() {
  const std::string path = absl::GetFlag(FLAGS_checkpoint);
  if (path.empty()) return absl::InvalidArgumentError("--checkpoint is required");
  GTP_ASSIGN_OR_RETURN(CheckpointRecipe ck, ReadCheckpointRecipe(path));
  int64_t samples = absl::GetFlag(FLAGS_samples);
  if (samples < 0) return absl::InvalidArgumentError("--samples must be >= 0");
  // The recipe as the run resolved it, or (an imported checkpoint, whose
  // recipe has only its model) with the trainer's defaults filled in: an
  // imported checkpoint used to fail with "the saved layout does not divide
  // its world size" until its layout was typed in.
  recipes::proto::Recipe r = ck.recipe;
  // An imported recipe has only its model: an evaluation needs no optimizer
  // or step count, and reads one micro-batch of 8 samples at a time unless
  // --set says otherwise.
  if (r.optim().lr() == 0) r.mutable_optim()->set_lr(1e-3f);  // never used: nothing is trained
  if (r.train().steps() == 0) r.mutable_train()->set_steps(1);
  if (r.train().micro_batch() == 0) r.mutable_train()->set_micro_batch(8);
  if (samples == 0) {
    // What the run's own evaluation covered, on its saved layout (the same
    // samples whatever layout --set asks for).
    recipes::proto::Recipe saved = r;
    GTP_RETURN_IF_ERROR(recipes::FinalizeRecipe(&saved));
    GTP_ASSIGN_OR_RETURN(int64_t lanes, Lanes(saved));
    samples = saved.train().eval_batches() * saved.train().micro_batch() * lanes;
  }
  GTP_RETURN_IF_ERROR(recipes::ApplyOverrides(absl::GetFlag(FLAGS_set), &r));
  GTP_RETURN_IF_ERROR(recipes::FinalizeRecipe(&r));
  absl::StatusOr<recipes::EvalResult> e = recipes::EvaluateCheckpoint(r, ck.dir, samples);
  if (absl::IsOutOfRange(e.status())) {  // more samples than the validation split holds
    return absl::OutOfRangeError(
        absl::StrCat(absl::GetFlag(FLAGS_samples) > 0
                         ? "--samples: "
                         : "the run's evaluation (train.eval_batches; --samples picks fewer): ",
                     e.status().message()));
  }
  if (!e.ok()) return e.status();
  std::printf("loss %.6f  perplexity %.4f  tokens %lld\n", e->loss, std::exp(e->loss),
              static_cast<long long>(e->tokens));
  return absl::OkStatus();
}

}  // namespace
}  // namespace gtp::tools

int main(int argc, char** argv) {
  gtp::SetUsage("loss and perplexity of a gtp checkpoint; see tools/eval/README.md");
  gtp::ParseCommandLine(argc, argv);
  // Paths typed by the user mean the directory `bazel run` was called from.
  absl::SetFlag(&FLAGS_checkpoint, gtp::UserPath(absl::GetFlag(FLAGS_checkpoint)));
  absl::Status st = gtp::tools::Eval();
  if (!st.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(st.message()).c_str());
    return 1;
  }
  return 0;
}
