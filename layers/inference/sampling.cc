#include "layers/inference/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/philox.h"

namespace gtp::layers::inference {

int32_t Argmax(absl::Span<const float> logits) {
  if (logits.empty()) return -1;
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

std::vector<double> SamplingDistribution(absl::Span<const float> logits, const SamplingOptions& o) {
  const size_t V = logits.size();
  std::vector<double> p(V, 0.0);
  if (V == 0) return p;
  const double inv_t = 1.0 / std::max(o.temperature, 1e-6f);
  const double mx = *std::max_element(logits.begin(), logits.end());
  for (size_t i = 0; i < V; ++i) p[i] = std::exp((logits[i] - mx) * inv_t);
  // Most likely first, ties by id: the order top-k and top-p cut in.
  std::vector<size_t> order(V);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return p[a] > p[b]; });
  size_t keep = V;
  if (o.top_k > 0) keep = std::min<size_t>(keep, o.top_k);
  double total = 0;
  for (size_t i = 0; i < keep; ++i) total += p[order[i]];
  if (o.top_p < 1.0f) {
    double mass = 0;
    for (size_t i = 0; i < keep; ++i) {
      mass += p[order[i]];
      if (mass >= o.top_p * total) {
        keep = i + 1;
        break;
      }
    }
  }
  double kept = 0;
  for (size_t i = 0; i < keep; ++i) kept += p[order[i]];
  std::vector<double> out(V, 0.0);
  for (size_t i = 0; i < keep; ++i) out[order[i]] = p[order[i]] / kept;
  return out;
}

int32_t SampleToken(absl::Span<const float> logits, const SamplingOptions& o, uint64_t step) {
  if (o.temperature <= 0.0f) return Argmax(logits);
  const std::vector<double> p = SamplingDistribution(logits, o);
  const double u = PhiloxUniform(MixKey(o.seed, step), 0);
  double c = 0;
  int32_t last = -1;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] <= 0) continue;
    last = static_cast<int32_t>(i);
    c += p[i];
    if (u < c) return last;
  }
  return last;  // rounding left u above the last cumulative sum
}

}  // namespace gtp::layers::inference
