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

namespace gtp::recipes {

struct StepRecord {
  int64_t step = 0;  // 1-based
  float loss = 0;
  float lr = 0;
  double grad_norm = 0;
  bool skipped = false;
  double ms = 0;
  double tokens_per_s = 0;
  // Host time the step blocked on GTP gathers / reduce-scatters and gradient
  // reductions (communication not hidden behind compute).
  double comm_exposed_ms = 0;
  // MoE models: the step's routing figures (layers::GptModel::FinishMoeStep).
  layers::GptModel::MoeStats moe;
  // Pipeline runs: the fraction of the step this rank blocked receiving
  // activations or gradients (the bubble); −1 without pipeline stages.
  double bubble = -1;
};

struct RunOptions {
  // Where checkpoints and metrics go (created if missing).
  std::string run_dir = "gtp_runs/run";
  // Progress bar instead of log lines (default: when stdout is a terminal).
  bool progress_bar = false;
  // Called on rank 0 after every step (tests).
  std::function<void(const StepRecord&)> on_step;
};

// Runs the (finalised) recipe. Returns the first error of any rank; OK also
// when stopped early by SIGTERM/SIGINT after writing a checkpoint.
// Installs SIGTERM/SIGINT handlers for the duration of the run. Blocks.
absl::Status Train(const proto::Recipe& recipe, const RunOptions& options);

// True once SIGTERM/SIGINT was received during Train (for the exit code).
bool StoppedBySignal();

}  // namespace gtp::recipes
