// layers/inference/sampling.h — the next token from a row of logits:
// greedy, temperature, top-k and top-p (nucleus) sampling, deterministic
// for a seed.
//
//   p_i ∝ exp(logit_i / temperature)                      (in double)
//   top_k > 0:  keep the k most likely tokens (ties: lower id first)
//   top_p < 1:  then keep the smallest most-likely-first prefix holding at
//               least top_p of the kept mass
//   renormalise; draw u = PhiloxUniform(MixKey(seed, step), 0) and take the
//   first token whose cumulative probability exceeds u (ids in order).
// temperature 0 is greedy: the argmax (lowest id among equal maxima), no
// random number drawn. The draw depends only on (seed, step), so a sequence
// sampled with one seed is reproducible on any machine.
//
// Pure functions; thread-safe; never block.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/types/span.h"

namespace gtp::layers::inference {

struct SamplingOptions {
  float temperature = 1.0f;  // 0: greedy
  int top_k = 0;             // 0: every token
  float top_p = 1.0f;        // 1: no nucleus cut
  uint64_t seed = 0;
};

// The lowest id among the maxima of `logits` (-1 when empty).
int32_t Argmax(absl::Span<const float> logits);

// The distribution SampleToken draws from (temperature > 0): probabilities
// over the ids, 0 outside the top-k / top-p support, summing to 1.
std::vector<double> SamplingDistribution(absl::Span<const float> logits,
                                         const SamplingOptions& options);

// The token for decoding step `step` (0, 1, 2, ... within a sequence).
int32_t SampleToken(absl::Span<const float> logits, const SamplingOptions& options, uint64_t step);

}  // namespace gtp::layers::inference
