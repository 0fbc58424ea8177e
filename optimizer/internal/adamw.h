// optimizer/internal/adamw.h — AdamW's distributed update beside Muon's
// (internal/muon.h): the fp32 state of every param Muon does not take, this
// rank's slice of each bucket (the replicate group's shard under
// `distributed`, else all of it), one multi-tensor update over all of them,
// and the all-gather of the updated params over the replicate group.
//
// Segments: a contiguous run of one param's elements inside this rank's
// slice of a bucket. Each has its exp_avg / exp_avg_sq range and, for a bf16
// param, an fp32 master range; an f32 param is updated in place. The segment
// table is built once (its pointers are stable); on CUDA it lives on the
// device.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "core/kernels/ops.h"
#include "optimizer/grad_buffer.h"
#include "optimizer/optimizer.h"

namespace gtp::optimizer::internal {

class AdamWUpdater {
 public:
  // Every param of `grads` whose `is_muon` entry is 0. Copies bf16 params
  // into their fp32 masters. Does not block.
  static std::unique_ptr<AdamWUpdater> Create(GradBuffer* grads, const std::vector<char>& is_muon,
                                              const kernels::Exec& exec, const AdamWConfig& config,
                                              bool distributed,
                                              const std::function<bool(const GradParam&)>& decay);

  // One update of every segment from the finished gradients, scaled by
  // `grad_scale`. With `device_scalars` / `device_step` (CUDA) the clip
  // scale, skip flag, lr and bias corrections are read on the device
  // (DistributedOptimizer::EnqueueStep). Does not block.
  void Step(float lr, int64_t t, float grad_scale, const float* device_scalars = nullptr,
            const float* device_step = nullptr) const;
  // True when the updated params must be all-gathered over the replicate
  // group (distributed, a group of more than one rank, any AdamW param).
  bool gather() const { return gather_; }
  // That all-gather, staged through the grad buffer (done with its
  // gradients), then cast into the params. Collective over the replicate
  // group; blocks.
  absl::Status Gather() const;

  void AppendState(std::vector<StateTensor>* out) const;
  int64_t state_bytes() const;

 private:
  struct Segment {
    int param;
    int bucket;
    int64_t buffer_offset;  // in the grad buffer
    int64_t local;          // in the param's flat storage
    int64_t n;
    int64_t state_offset;   // in exp_avg / exp_avg_sq
    int64_t master_offset;  // in master, or -1 for f32 params (updated in place)
    bool decay;
  };
  AdamWUpdater(GradBuffer* grads, const kernels::Exec& exec, const AdamWConfig& config)
      : grads_(grads), exec_(exec), config_(config) {}
  void BuildTable();

  GradBuffer* grads_;
  kernels::Exec exec_;
  AdamWConfig config_;
  std::vector<char> is_muon_;  // per GradBuffer param
  std::vector<Segment> segments_;
  Tensor exp_avg_, exp_avg_sq_, master_;
  bool gather_ = false;
  std::vector<kernels::AdamWSegment> table_;
  Tensor table_dev_, chunks_dev_;
  int num_chunks_ = 0;
};

}  // namespace gtp::optimizer::internal
