// optimizer/testing/train_harness.h — trains a small GPT with the
// distributed optimizer on comm/local ranks, for the optimizer's tests and
// the cross-package parity tests (tests/optimizer_*_test.cc).
//
// Every layout sees the same global batch per step: lane l of L (a (DP, GTP)
// coordinate) takes samples [l·S/L, (l+1)·S/L), split into M micro-batches.
// After training, every parameter is reassembled into its global tensor
// through its global layout, so layouts compare element by element.
// Blocking; each call runs its own ranks.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "layers/gpt.h"
#include "optimizer/grad_buffer.h"
#include "optimizer/optimizer.h"
#include "parallel/process_groups.h"

namespace gtp::optimizer::testing {

struct Layout {
  const char* name;
  int tp = 1, gtp = 1, dp = 1;
};

// The layouts of the layers issue's parity matrix (tests/gpt_parity_test.cc).
std::vector<Layout> ParityLayouts();

// What a rank's hooks can reach.
struct RankContext {
  int world_rank = 0;
  const parallel::ProcessGroupCollection* pgs = nullptr;
  layers::GptModel* model = nullptr;
  GradBuffer* grads = nullptr;
  DistributedOptimizer* opt = nullptr;
};

struct RunConfig {
  layers::GptConfig model;
  Layout layout{"single"};
  int steps = 5;
  int64_t global_batch = 16;  // samples per step
  int64_t seq = 8;
  int microbatches = 1;
  LossNormalization normalization = LossNormalization::kMean;
  // Targets dropped (set to -1) at random, so lanes count different tokens.
  bool drop_targets = false;
  layers::GtpOptions gtp;  // grad_reduce is set from `normalization`
  GradBufferOptions buffer;  // normalization is set from `normalization`
  OptimizerConfig opt;
  // Hooks on every rank: after set-up; after each backward pass; before each
  // optimizer step (gradients not yet finished).
  std::function<void(RankContext&)> on_setup;
  std::function<void(RankContext&, int step, int micro)> after_backward;
  std::function<void(RankContext&, int step)> before_step;
};

struct RunResult {
  absl::Status status;
  std::vector<float> losses;       // global loss of each step (before its update)
  std::vector<StepStats> stats;    // world rank 0's
  std::map<std::string, std::vector<float>> params;  // global values after training
  std::vector<int64_t> state_bytes;      // per world rank, DistributedOptimizer::state_bytes()
  std::vector<int64_t> allocator_bytes;  // per world rank: bytes held by the optimizer's allocator
  std::vector<int64_t> num_skipped;      // per world rank
  // After training, tensors whose copies are not bit-identical across the
  // ranks that should hold the same values ("<param> over <group>"): every
  // replicated param over the whole world (TP-sharded ones over gtp and
  // replicate), every GTP shard over replicate.
  std::vector<std::string> replica_mismatches;
};

RunResult Train(const RunConfig& config);

// Max |a − b| / (atol + rtol·|b|) over every element of every param (≤ 1
// means within tolerance), and the param/element where it peaks.
struct Diff {
  double worst = 0.0;
  std::string where;
};
Diff CompareParams(const std::map<std::string, std::vector<float>>& got,
                   const std::map<std::string, std::vector<float>>& ref, double atol, double rtol);

// The small models the tests use: GPT-2 style (tied, LayerNorm, GELU,
// biases) or Llama style (untied, RMSNorm, SwiGLU, GQA, sequence parallel).
layers::GptConfig SmallModel(bool llama);

}  // namespace gtp::optimizer::testing
