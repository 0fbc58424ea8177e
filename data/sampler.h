// data/sampler.h — which samples each data lane reads, step by step.
//
// A data lane is one member of the data-distribution group (DP × GTP; the
// `data` group of parallel::ProcessGroupCollection): lanes read different
// samples, while the TP / CP / PP ranks of one lane read the same ones. An
// optimizer step consumes one global batch,
//
//   global_batch_size = num_lanes × micro_batch_size × num_micro_batches,
//
// the global sample indices [c, c + global_batch_size) where c is the
// number of samples consumed before the step. Lane l owns the contiguous
// block [c + l·L, c + (l+1)·L), L = micro_batch_size × num_micro_batches,
// cut into num_micro_batches micro-batches in order. So
//
//   * lanes are disjoint and together cover the global batch;
//   * concatenating the lanes' step samples in lane order gives the global
//     batch in order, for any number of lanes: the data a step sees depends
//     on (global_batch_size, consumed samples, dataset), never on the layout;
//   * the position is one integer (SamplerState, saved by the checkpoint), so
//     a run resumed on a different number of lanes continues the same stream.
//
//   GTP_ASSIGN_OR_RETURN(comm::Communicator* lanes, groups.Get(parallel::groups::kData));
//   SamplerConfig config{/*global_batch_size=*/32, /*micro_batch_size=*/4, lanes->size()};
//   GTP_ASSIGN_OR_RETURN(DistributedSampler s,
//                        DistributedSampler::Create(config, lanes->rank(), restored_state));
//   for (int64_t m = 0; m < s.num_micro_batches(); ++m) {
//     dataset.GetBatch(s.MicroBatch(m), tokens, targets);   // forward/backward
//   }
//   s.Advance();                                            // after the step
//   checkpoint.data_state = s.state();
//
// The indices are global sample indices for GptDataset (which shuffles and
// wraps epochs), so the sampler itself never shuffles and never ends.
//
// Thread safety: a DistributedSampler is a small value; const methods are
// thread-safe, Advance()/set_state() need exclusive access. Nothing blocks.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace gtp::data {

struct SamplerConfig {
  int64_t global_batch_size = 0;  // samples per optimizer step, all lanes together
  int64_t micro_batch_size = 0;   // samples per forward/backward on one lane
  int64_t num_lanes = 1;          // size of the data-distribution group (DP × GTP)
};

// InvalidArgumentError (naming the numbers) unless all sizes are >= 1 and
// global_batch_size is a multiple of micro_batch_size × num_lanes.
absl::Status ValidateSamplerConfig(const SamplerConfig& config);

// The resumable position: the checkpoint saves and restores this.
struct SamplerState {
  uint64_t consumed_samples = 0;  // global samples consumed by finished steps

  bool operator==(const SamplerState& o) const { return consumed_samples == o.consumed_samples; }
};

class DistributedSampler {
 public:
  // InvalidArgumentError for a bad config or lane outside [0, num_lanes).
  static absl::StatusOr<DistributedSampler> Create(const SamplerConfig& config, int64_t lane,
                                                   SamplerState state = {});

  const SamplerConfig& config() const { return config_; }
  int64_t lane() const { return lane_; }
  // global_batch_size / (micro_batch_size × num_lanes): gradient-accumulation steps.
  int64_t num_micro_batches() const { return num_micro_batches_; }
  // Steps finished, assuming every step used this global batch size.
  uint64_t step() const { return state_.consumed_samples / config_.global_batch_size; }

  const SamplerState& state() const { return state_; }
  void set_state(const SamplerState& state) { state_ = state; }

  // The micro_batch_size global sample indices of micro-batch m
  // (0 <= m < num_micro_batches(); aborts otherwise) of the current step.
  std::vector<uint64_t> MicroBatch(int64_t m) const;

  // This lane's samples of the current step, micro-batch after micro-batch.
  std::vector<uint64_t> StepSamples() const;

  // All lanes' samples of the current step, lane after lane (the global batch).
  std::vector<uint64_t> GlobalBatch() const;

  // Marks the current step consumed: consumed_samples += global_batch_size.
  void Advance() { state_.consumed_samples += static_cast<uint64_t>(config_.global_batch_size); }

 private:
  DistributedSampler() = default;

  SamplerConfig config_;
  int64_t lane_ = 0;
  int64_t num_micro_batches_ = 1;
  SamplerState state_;
};

}  // namespace gtp::data
