// recipes/trainer/trainer.h — the training loop shared by every recipe.
//
// Train() runs a recipe end to end on this process's ranks:
//   - ranks: under a launcher (RANK/WORLD_SIZE or Slurm variables set, e.g.
//     by gtprun) this process is one rank and ranks talk over UCX; otherwise
//     parallel.world_size ranks run as threads of this process (comm/local);
//   - model (layers/gpt.h), gradient buffer and distributed optimizer
//     (optimizer/), data (data/: embedded corpus, mock or Megatron indexed
//     files) through a lane-invariant, resumable sampler;
//   - per step: micro-batches with gradient accumulation, one optimizer step
//     (NaN/Inf steps are skipped and counted; too many aborts), a log line
//     (loss, lr, grad norm, tokens/s, ms/step, MFU on cuda or with peak_tflops,
//     memory) or a progress bar with ETA on a terminal, and a JSON line in
//     <run_dir>/metrics.jsonl (with train.tensorboard_dir, TensorBoard
//     scalars too: recipes/trainer/tensorboard/event_writer.h);
//   - periodic evaluation on the validation split;
//   - with train.sample_every, a text sample from rank 0 (layers/inference);
//   - checkpoints every checkpoint.every steps, at the end, and when
//     SIGTERM/SIGINT arrives (then a clean exit); resume from `latest`.
// The same recipe and seed give the same losses, on any layout that should
// be equivalent and after a resume.
#pragma once

#include <cstdint>
#include <functional>
#include <string>


#include "absl/status/status.h"
#include "layers/gpt.h"
#include "recipes/trainer/config.pb.h"
#include "recipes/trainer/run_options.h"

namespace gtp::recipes {

// Runs the (finalised) recipe. Returns the first error of any rank; OK also
// when stopped early by SIGTERM/SIGINT after writing a checkpoint.
// Installs SIGTERM/SIGINT handlers for the duration of the run. Blocks.
absl::Status Train(const proto::Recipe& recipe, const RunOptions& options);

// True once SIGTERM/SIGINT was received during Train (for the exit code).
bool StoppedBySignal();

struct EvalResult {
  double loss = 0;      // mean cross-entropy (nats per token)
  int64_t samples = 0;  // validation samples scored
  int64_t tokens = 0;   // targets scored: samples × seq_len
};
// The trainer's own validation (periodic evaluation) of a checkpoint's
// weights: builds the recipe's model on its layout (world, TP, GTP, PP...;
// any layout loads any saved one), loads `checkpoint` (a root with `latest`
// or an iter_ directory, as checkpoint.init_from) and returns the mean loss
// over validation samples 0 .. samples − 1 (0: train.eval_batches ×
// micro_batch × data lanes, what a training step's evaluation covers).
// The same samples give the loss the training run reported for that step.
// InvalidArgument when `samples` does not split into whole micro-batches
// over the lanes, OutOfRange when they are more than the validation split
// holds; the checkpoint's model must match the recipe's (as init_from
// checks). Writes nothing; blocks.
absl::StatusOr<EvalResult> EvaluateCheckpoint(const proto::Recipe& recipe,
                                              const std::string& checkpoint, int64_t samples = 0);

}  // namespace gtp::recipes
