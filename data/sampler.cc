#include "data/sampler.h"

#include "absl/strings/str_cat.h"
#include "core/status.h"

namespace gtp::data {

absl::Status ValidateSamplerConfig(const SamplerConfig& c) {
  if (c.global_batch_size < 1 || c.micro_batch_size < 1 || c.num_lanes < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("sampler: global_batch_size (", c.global_batch_size, "), micro_batch_size (",
                     c.micro_batch_size, ") and num_lanes (", c.num_lanes, ") must all be >= 1"));
  }
  if (c.global_batch_size % (c.micro_batch_size * c.num_lanes) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("sampler: global_batch_size ", c.global_batch_size,
                     " is not a multiple of micro_batch_size × data lanes = ", c.micro_batch_size,
                     " × ", c.num_lanes, " = ", c.micro_batch_size * c.num_lanes));
  }
  return absl::OkStatus();
}

absl::StatusOr<DistributedSampler> DistributedSampler::Create(const SamplerConfig& config,
                                                              int64_t lane, SamplerState state) {
  GTP_RETURN_IF_ERROR(ValidateSamplerConfig(config));
  if (lane < 0 || lane >= config.num_lanes) {
    return absl::InvalidArgumentError(
        absl::StrCat("sampler: lane ", lane, " is not in [0, ", config.num_lanes, ")"));
  }
  DistributedSampler s;
  s.config_ = config;
  s.lane_ = lane;
  s.num_micro_batches_ = config.global_batch_size / (config.micro_batch_size * config.num_lanes);
  s.state_ = state;
  return s;
}

std::vector<uint64_t> DistributedSampler::MicroBatch(int64_t m) const {
  GTP_CHECK(m >= 0 && m < num_micro_batches_, "micro-batch ", m, " of ", num_micro_batches_);
  const uint64_t mbs = static_cast<uint64_t>(config_.micro_batch_size);
  const uint64_t per_lane = mbs * static_cast<uint64_t>(num_micro_batches_);
  const uint64_t first = state_.consumed_samples + static_cast<uint64_t>(lane_) * per_lane +
                         static_cast<uint64_t>(m) * mbs;
  std::vector<uint64_t> out(mbs);
  for (uint64_t i = 0; i < mbs; ++i) out[i] = first + i;
  return out;
}

std::vector<uint64_t> DistributedSampler::StepSamples() const {
  std::vector<uint64_t> out;
  out.reserve(static_cast<size_t>(config_.micro_batch_size * num_micro_batches_));
  for (int64_t m = 0; m < num_micro_batches_; ++m) {
    std::vector<uint64_t> mb = MicroBatch(m);
    out.insert(out.end(), mb.begin(), mb.end());
  }
  return out;
}

std::vector<uint64_t> DistributedSampler::GlobalBatch() const {
  std::vector<uint64_t> out(static_cast<size_t>(config_.global_batch_size));
  for (size_t i = 0; i < out.size(); ++i) out[i] = state_.consumed_samples + i;
  return out;
}

}  // namespace gtp::data
