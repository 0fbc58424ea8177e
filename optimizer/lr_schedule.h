// optimizer/lr_schedule.h — learning-rate schedules.
//
// A schedule is a pure function of the optimizer step, so its only state is
// the step counter the optimizer keeps (OptimizerProgress::step), which the
// checkpoint saves; resuming at step s continues the same curve.
//
//   LrSchedule s{LrDecay::kCosine, /*max_lr=*/6e-4f, /*min_lr=*/6e-5f,
//                /*warmup_steps=*/100, /*decay_steps=*/5000};
//   float lr = LrAt(s, step);   // step = optimizer steps already taken
//
// warmup: lr = max_lr·(step + 1)/warmup_steps for step < warmup_steps (the
// first step already moves, as in Megatron-LM); then, with progress
// p = (step − warmup_steps)/(decay_steps − warmup_steps) clamped to [0, 1]:
//   kConstant  max_lr
//   kCosine    min_lr + (max_lr − min_lr)·(1 + cos(π·p))/2
//   kLinear    max_lr − (max_lr − min_lr)·p
// Pure; thread-safe.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace gtp::optimizer {

enum class LrDecay { kConstant, kCosine, kLinear };

struct LrSchedule {
  LrDecay decay = LrDecay::kConstant;
  float max_lr = 1e-3f;
  float min_lr = 0.0f;
  int64_t warmup_steps = 0;
  // Step at which decay ends (counting warmup); min_lr afterwards.
  int64_t decay_steps = 0;
};

// InvalidArgument naming the field for negative steps/rates or
// decay_steps < warmup_steps with a decaying schedule.
absl::Status Validate(const LrSchedule& s);

// The learning rate for the optimizer step that follows `step` completed ones.
float LrAt(const LrSchedule& s, int64_t step);

// "cosine(max=0.0006, min=6e-05, warmup=100, decay=5000)", for start-up logs.
std::string ToString(const LrSchedule& s);

}  // namespace gtp::optimizer
