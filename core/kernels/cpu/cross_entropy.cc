// Softmax cross-entropy over vocab-sharded logits[N, V] (this rank holds
// global columns [vocab_start, vocab_start + V)):
//   loss[n] = log Σ_v exp(l[n, v]) − l[n, t_n]
//           = log(sumexp) + m − l[n, t_n],   m = max_v l[n, v],
//             sumexp = Σ_v exp(l[n, v] − m)
//   dl[n, v] = dloss[n]·(exp(l[n, v] − m)/sumexp − [v = t_n])      (=)
// Targets t_n < 0 are ignored: loss 0, gradient 0. Each stage is local; the
// layer all-reduces between stages (max for m; sum for the target logit and
// sumexp), so every shard sees the global m and sumexp.
// logits and dlogits are f32 or bf16; row_max, target_logit, sumexp, loss and
// dloss are f32, and the math is f32 (cpu/elem.h).
#include <cmath>

#include "core/kernels/cpu.h"
#include "core/kernels/cpu/elem.h"
#include "core/status.h"

namespace gtp::kernels::cpu {
namespace {

using internal::Load;
using internal::Store;

template <typename T>
void CrossEntropyStatsT(const T* logits, const int32_t* targets, float* row_max,
                        float* target_logit, int64_t N, int64_t V, int64_t vocab_start,
                        int64_t ld) {
  if (ld <= 0) ld = V;
  GTP_CHECK(N >= 0 && V >= 0 && ld >= V, "CrossEntropyStats: bad size N=", N, " V=", V, " ld=", ld);
  for (int64_t n = 0; n < N; ++n) {
    const T* __restrict__ l = logits + n * ld;
    float mx = -INFINITY;  // an empty shard must not win the max all-reduce
    for (int64_t v = 0; v < V; ++v) mx = std::fmax(mx, Load(l[v]));
    row_max[n] = mx;
    const int64_t col = static_cast<int64_t>(targets[n]) - vocab_start;
    target_logit[n] = targets[n] >= 0 && col >= 0 && col < V ? Load(l[col]) : 0.0f;
  }
}

template <typename T>
void CrossEntropySumExpT(const T* logits, const float* row_max, float* sumexp, int64_t N,
                         int64_t V, int64_t ld) {
  if (ld <= 0) ld = V;
  GTP_CHECK(N >= 0 && V >= 0 && ld >= V, "CrossEntropySumExp: bad size N=", N, " V=", V, " ld=", ld);
  for (int64_t n = 0; n < N; ++n) {
    const T* __restrict__ l = logits + n * ld;
    const float mx = row_max[n];
    float sum = 0;
    for (int64_t v = 0; v < V; ++v) sum += std::exp(Load(l[v]) - mx);
    sumexp[n] = sum;
  }
}

template <typename T>
void CrossEntropyBackwardT(const T* logits, const float* row_max, const float* sumexp,
                           const int32_t* targets, const float* dloss, T* dlogits, int64_t N,
                           int64_t V, int64_t vocab_start, int64_t ld) {
  if (ld <= 0) ld = V;
  GTP_CHECK(N >= 0 && V >= 0 && ld >= V, "CrossEntropyBackward: bad size N=", N, " V=", V, " ld=", ld);
  for (int64_t n = 0; n < N; ++n) {
    const T* l = logits + n * ld;  // may alias dl: in place is allowed
    T* dl = dlogits + n * ld;
    for (int64_t v = V; v < ld; ++v) dl[v] = Store<T>(0.0f);  // padding
    if (targets[n] < 0) {
      for (int64_t v = 0; v < V; ++v) dl[v] = Store<T>(0.0f);
      continue;
    }
    const float mx = row_max[n], g = dloss[n], inv = 1.0f / sumexp[n];
    const int64_t col = static_cast<int64_t>(targets[n]) - vocab_start;
    for (int64_t v = 0; v < V; ++v) {
      dl[v] = Store<T>(g * (std::exp(Load(l[v]) - mx) * inv - (v == col ? 1.0f : 0.0f)));
    }
  }
}

}  // namespace

void CrossEntropyStats(const float* logits, const int32_t* targets, float* row_max,
                       float* target_logit, int64_t N, int64_t V, int64_t vocab_start, int64_t ld) {
  CrossEntropyStatsT(logits, targets, row_max, target_logit, N, V, vocab_start, ld);
}
void CrossEntropyStats(const bf16* logits, const int32_t* targets, float* row_max,
                       float* target_logit, int64_t N, int64_t V, int64_t vocab_start, int64_t ld) {
  CrossEntropyStatsT(logits, targets, row_max, target_logit, N, V, vocab_start, ld);
}

void CrossEntropySumExp(const float* logits, const float* row_max, float* sumexp, int64_t N,
                        int64_t V, int64_t ld) {
  CrossEntropySumExpT(logits, row_max, sumexp, N, V, ld);
}
void CrossEntropySumExp(const bf16* logits, const float* row_max, float* sumexp, int64_t N,
                        int64_t V, int64_t ld) {
  CrossEntropySumExpT(logits, row_max, sumexp, N, V, ld);
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
                          int64_t V, int64_t vocab_start, int64_t ld) {
  CrossEntropyBackwardT(logits, row_max, sumexp, targets, dloss, dlogits, N, V, vocab_start, ld);
}
void CrossEntropyBackward(const bf16* logits, const float* row_max, const float* sumexp,
                          const int32_t* targets, const float* dloss, bf16* dlogits, int64_t N,
                          int64_t V, int64_t vocab_start, int64_t ld) {
  CrossEntropyBackwardT(logits, row_max, sumexp, targets, dloss, dlogits, N, V, vocab_start, ld);
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
