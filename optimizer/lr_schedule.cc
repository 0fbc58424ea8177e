#include "optimizer/lr_schedule.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace gtp::optimizer {

absl::Status Validate(const LrSchedule& s) {
  if (!(s.max_lr >= 0) || !(s.min_lr >= 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("LrSchedule: max_lr and min_lr must be >= 0, got ", s.max_lr, ", ", s.min_lr));
  }
  if (s.warmup_steps < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("LrSchedule.warmup_steps must be >= 0, got ", s.warmup_steps));
  }
  if (s.decay != LrDecay::kConstant && s.decay_steps < s.warmup_steps) {
    return absl::InvalidArgumentError(absl::StrCat("LrSchedule.decay_steps (", s.decay_steps,
                                                   ") must be >= warmup_steps (", s.warmup_steps,
                                                   ")"));
  }
  return absl::OkStatus();
}

float LrAt(const LrSchedule& s, int64_t step) {
  if (step < s.warmup_steps) {
    return s.max_lr * static_cast<float>(static_cast<double>(step + 1) / s.warmup_steps);
  }
  if (s.decay == LrDecay::kConstant) return s.max_lr;
  const int64_t span = s.decay_steps - s.warmup_steps;
  const double p =
      span <= 0 ? 1.0 : std::clamp(static_cast<double>(step - s.warmup_steps) / span, 0.0, 1.0);
  const double range = static_cast<double>(s.max_lr) - s.min_lr;
  double lr;
  if (s.decay == LrDecay::kCosine) {
    lr = s.min_lr + range * 0.5 * (1.0 + std::cos(M_PI * p));
  } else {
    lr = s.max_lr - range * p;
  }
  return static_cast<float>(lr);
}

std::string ToString(const LrSchedule& s) {
  const char* kind = s.decay == LrDecay::kConstant ? "constant"
                     : s.decay == LrDecay::kCosine ? "cosine"
                                                   : "linear";
  return absl::StrCat(kind, "(max=", s.max_lr, ", min=", s.min_lr, ", warmup=", s.warmup_steps,
                      ", decay=", s.decay_steps, ")");
}

}  // namespace gtp::optimizer
