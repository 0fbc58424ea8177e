// recipes/trainer/step.h — one training step's compute on one rank: every
// micro-batch's forward and backward with gradient accumulation (through
// the pipeline schedule when the model has stages, then the tied-embedding
// sync), or the whole step replayed as a CUDA graph (CUDA, one rank or an
// NCCL world, AdamW, no MoE, no CP, no pipeline: train.cuda_graphs), and the step's
// loss.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include <cuda_runtime_api.h>

#include "absl/status/statusor.h"
#include "comm/communicator.h"
#include "core/timeline.h"
#include "optimizer/optimizer.h"
#include "recipes/trainer/batches.h"
#include "recipes/trainer/state.h"

namespace gtp::recipes {

class StepRunner {
 public:
  // `s` and `batches` must outlive the runner; `rank0` prints.
  StepRunner(RankState& s, BatchStager& batches, bool rank0);
  ~StepRunner();
  StepRunner(const StepRunner&) = delete;
  StepRunner& operator=(const StepRunner&) = delete;

  // Forward/backward of every micro-batch of this step (enqueued; the
  // losses stay on the device until Loss). The optimizer step follows.
  absl::Status Accumulate();
  // Whether this run replays its steps as a CUDA graph (see the file comment).
  bool UseCudaGraphs() const;
  // FailedPrecondition naming the reason when train.cuda_graphs=on but the
  // step cannot be captured here; OK otherwise.
  absl::Status CheckCudaGraphs() const;
  // One training step as a CUDA graph: the batches go into fixed device
  // buffers and the step's lr into the optimizer's page-locked scalars
  // (both outside the graph), then the graph — captured on the first call
  // from the same code the eager step runs (every micro-batch's forward and
  // backward, the optimizer's EnqueueStep) — is launched, and the
  // optimizer's one read ends the step.
  absl::StatusOr<optimizer::StepStats> GraphStep();
  // The global mean loss of the step just run: one device read.
  absl::StatusOr<float> Loss();
  // The last step's pipeline bubble (time blocked receiving / step).
  double bubble() const { return bubble_; }
  // Spans of the next steps on `tl` (null: none). Not owned.
  void set_timeline(Timeline* tl) { tl_ = tl; }

 private:
  RankState& s_;
  BatchStager& batches_;
  const proto::Recipe& r_;
  comm::Communicator& world_;
  comm::Communicator& host_;
  const kernels::Exec& exec_;
  const bool rank0_;
  Timeline* tl_ = nullptr;
  double bubble_ = 0;
  cudaGraphExec_t graph_exec_ = nullptr;
  std::vector<std::pair<Tensor, Tensor>> graph_batches_;  // fixed token buffers the graph reads
};

// The world mean of a loss that only the ranks holding the LM head (the
// last pipeline stage) computed, as `sum` over `count` micro-batches (see
// step.cc). Collective over `host`.
absl::StatusOr<float> MeanOverHeadRanks(comm::Communicator& host, int pp_size, bool holds_head,
                                        float sum, int64_t count);

}  // namespace gtp::recipes
