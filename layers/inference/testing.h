// layers/inference/testing.h — shared by the inference tests (testonly).
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "layers/gpt.h"

namespace gtp::layers::inference::testing {

// Non-trivial norm weights and biases (they start at 1 and 0): weights
// 1 + 0.2·N(0, 1), biases 0.2·N(0, 1), Philox stream `seed` + k for the k-th
// replicated parameter (position embeddings left as they are).
absl::Status PerturbReplicated(GptModel& m, uint64_t seed);

}  // namespace gtp::layers::inference::testing
