// recipes/trainer/evaluation.h — the trainer's validation: the mean loss
// over micro-batches of the validation split, forward only (a forward-only
// pass through the pipeline stages when the model has them).
#pragma once

#include <cstdint>
#include <functional>

#include "absl/status/statusor.h"
#include "recipes/trainer/batches.h"
#include "recipes/trainer/state.h"

namespace gtp::recipes {

// Mean loss over n micro-batches per lane of the validation split (no
// gradient): validation samples 0 .. n·lanes·B − 1, the same samples on
// every layout with as many of them. The same value on every rank.
// Collective; blocks. `stop_requested` (optional) is polled every
// kStopCheckEvery micro-batches and agreed on over the host world: when any
// rank says yes, every rank returns Cancelled (a signal during a long
// evaluation). Not polled through the pipeline's forward-only schedule.
inline constexpr int64_t kStopCheckEvery = 4;
absl::StatusOr<float> Evaluate(RankState& state, BatchStager& batches, int64_t n,
                               const std::function<bool()>& stop_requested = nullptr);

// The micro-batches per lane that score validation samples 0 .. samples − 1
// on `state`'s layout (samples 0: train.eval_batches per lane, what the
// periodic evaluation covers). InvalidArgument when they do not split into
// whole micro-batches over the lanes; OutOfRange, naming the split's size
// and the most that works, when they are more than the validation split
// holds (they were scored several times over).
absl::StatusOr<int64_t> EvalMicroBatches(const RankState& state, int64_t samples);

}  // namespace gtp::recipes
