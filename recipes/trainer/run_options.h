// recipes/trainer/run_options.h — what a caller of the trainer sets beside
// the recipe (RunOptions), and what it hears after every step (StepRecord).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "layers/gpt.h"

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

}  // namespace gtp::recipes
