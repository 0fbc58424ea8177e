// Softmax cross-entropy over vocab-sharded logits[N, V] (this rank holds
// global columns [vocab_start, vocab_start + V)):
//   loss[n] = log Σ_v exp(l[n, v]) − l[n, t_n]
//           = log(sumexp) + m − l[n, t_n],   m = max_v l[n, v],
//             sumexp = Σ_v exp(l[n, v] − m)
//   dl[n, v] = dloss[n]·(exp(l[n, v] − m)/sumexp − [v = t_n])      (=)
// Targets t_n < 0 are ignored: loss 0, gradient 0. Each stage is local; the
// layer all-reduces between stages (max for m; sum for the target logit and
// sumexp), so every shard sees the global m and sumexp.
#include <cmath>

#include "core/kernels/cpu.h"
#include "core/status.h"

namespace gtp::kernels::cpu {

void CrossEntropyStats(const float* logits, const int32_t* targets, float* row_max,
                       float* target_logit, int64_t N, int64_t V, int64_t vocab_start) {
  GTP_CHECK(N >= 0 && V >= 0, "CrossEntropyStats: negative size");
  for (int64_t n = 0; n < N; ++n) {
    const float* __restrict__ l = logits + n * V;
    float mx = -INFINITY;  // an empty shard must not win the max all-reduce
    for (int64_t v = 0; v < V; ++v) mx = std::fmax(mx, l[v]);
    row_max[n] = mx;
    const int64_t col = static_cast<int64_t>(targets[n]) - vocab_start;
    target_logit[n] = targets[n] >= 0 && col >= 0 && col < V ? l[col] : 0.0f;
  }
}

void CrossEntropySumExp(const float* logits, const float* row_max, float* sumexp, int64_t N,
                        int64_t V) {
  GTP_CHECK(N >= 0 && V >= 0, "CrossEntropySumExp: negative size");
  for (int64_t n = 0; n < N; ++n) {
    const float* __restrict__ l = logits + n * V;
    const float mx = row_max[n];
    float sum = 0;
    for (int64_t v = 0; v < V; ++v) sum += std::exp(l[v] - mx);
    sumexp[n] = sum;
  }
}

void CrossEntropyLoss(const float* row_max, const float* sumexp, const float* target_logit,
                      const int32_t* targets, float* loss, int64_t N) {
  GTP_CHECK(N >= 0, "CrossEntropyLoss: negative size");
  for (int64_t n = 0; n < N; ++n) {
    loss[n] = targets[n] < 0 ? 0.0f : std::log(sumexp[n]) + row_max[n] - target_logit[n];
  }
}

void CrossEntropyBackward(const float* logits, const float* row_max, const float* sumexp,
                          const int32_t* targets, const float* dloss, float* dlogits, int64_t N,
                          int64_t V, int64_t vocab_start) {
  GTP_CHECK(N >= 0 && V >= 0, "CrossEntropyBackward: negative size");
  for (int64_t n = 0; n < N; ++n) {
    const float* __restrict__ l = logits + n * V;
    float* __restrict__ dl = dlogits + n * V;
    if (targets[n] < 0) {
      for (int64_t v = 0; v < V; ++v) dl[v] = 0.0f;
      continue;
    }
    const float mx = row_max[n], g = dloss[n], inv = 1.0f / sumexp[n];
    const int64_t col = static_cast<int64_t>(targets[n]) - vocab_start;
    for (int64_t v = 0; v < V; ++v) {
      dl[v] = g * (std::exp(l[v] - mx) * inv - (v == col ? 1.0f : 0.0f));
    }
  }
}

void CrossEntropyForward(const float* logits, const int32_t* targets, float* loss, float* scratch,
                         int64_t N, int64_t V) {
  for (int64_t n = 0; n < N; ++n) {
    GTP_CHECK(targets[n] < V, "CrossEntropyForward: target ", targets[n], " >= V=", V);
  }
  float* row_max = scratch;
  float* target_logit = scratch + N;
  float* sumexp = scratch + 2 * N;
  CrossEntropyStats(logits, targets, row_max, target_logit, N, V, /*vocab_start=*/0);
  CrossEntropySumExp(logits, row_max, sumexp, N, V);
  CrossEntropyLoss(row_max, sumexp, target_logit, targets, loss, N);
}

}  // namespace gtp::kernels::cpu
