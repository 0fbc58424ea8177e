// core/kernels/cuda/cross_entropy.cu — softmax cross-entropy over
// vocab-sharded logits[N, V] (this rank holds global columns
// [vocab_start, vocab_start + V)):
//   loss[n] = log(sumexp) + m − l[n, t_n],  m = max_v l[n, v],
//             sumexp = Σ_v exp(l[n, v] − m)
//   dl[n, v] = dloss[n]·(exp(l[n, v] − m)/sumexp − [v = t_n])      (=)
// Targets t_n < 0 are ignored (loss 0, gradient 0). The stages are separate
// so the layer can all-reduce between them (see core/kernels/cpu.h).
//
// One block per row for the reductions (V is a vocabulary, often 10⁴–10⁵);
// block reductions run in a fixed order, so results are deterministic.
#include <cuda_runtime.h>

#include "core/kernels/cuda.h"
#include "core/kernels/cuda/common.cuh"

namespace gtp::kernels::cuda {
namespace {

using internal::BlockMax;
using internal::BlockSum;
using internal::GridFor;

constexpr int kThreads = 256;

// Rows handled by a grid-stride loop over blocks (N may exceed the grid).
__global__ void __launch_bounds__(kThreads)
    StatsKernel(const float* __restrict__ logits, const int32_t* __restrict__ targets,
                float* __restrict__ row_max, float* __restrict__ target_logit, int64_t N, int64_t V,
                int64_t vocab_start) {
  for (int64_t n = blockIdx.x; n < N; n += gridDim.x) {
    const float* l = logits + n * V;
    float mx = -INFINITY;  // an empty shard must not win the max all-reduce
    for (int64_t v = threadIdx.x; v < V; v += kThreads) mx = fmaxf(mx, l[v]);
    mx = BlockMax<kThreads>(mx);
    if (threadIdx.x == 0) {
      row_max[n] = mx;
      const int32_t t = targets[n];
      const int64_t col = static_cast<int64_t>(t) - vocab_start;
      target_logit[n] = t >= 0 && col >= 0 && col < V ? l[col] : 0.0f;
    }
  }
}

__global__ void __launch_bounds__(kThreads)
    SumExpKernel(const float* __restrict__ logits, const float* __restrict__ row_max,
                 float* __restrict__ sumexp, int64_t N, int64_t V) {
  for (int64_t n = blockIdx.x; n < N; n += gridDim.x) {
    const float* l = logits + n * V;
    const float mx = row_max[n];
    float s = 0.0f;
    for (int64_t v = threadIdx.x; v < V; v += kThreads) s += expf(l[v] - mx);
    s = BlockSum<kThreads>(s);
    if (threadIdx.x == 0) sumexp[n] = s;
  }
}

__global__ void LossKernel(const float* __restrict__ row_max, const float* __restrict__ sumexp,
                           const float* __restrict__ target_logit,
                           const int32_t* __restrict__ targets, float* __restrict__ loss,
                           int64_t N) {
  for (int64_t n = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; n < N;
       n += int64_t{gridDim.x} * blockDim.x) {
    loss[n] = targets[n] < 0 ? 0.0f : logf(sumexp[n]) + row_max[n] - target_logit[n];
  }
}

__global__ void __launch_bounds__(kThreads)
    BackwardKernel(const float* __restrict__ logits, const float* __restrict__ row_max,
                   const float* __restrict__ sumexp, const int32_t* __restrict__ targets,
                   const float* __restrict__ dloss, float* __restrict__ dlogits, int64_t N,
                   int64_t V, int64_t vocab_start) {
  for (int64_t n = blockIdx.x; n < N; n += gridDim.x) {
    const float* l = logits + n * V;
    float* dl = dlogits + n * V;
    const int32_t t = targets[n];
    if (t < 0) {
      for (int64_t v = threadIdx.x; v < V; v += kThreads) dl[v] = 0.0f;
      continue;
    }
    const float mx = row_max[n], g = dloss[n], inv = 1.0f / sumexp[n];
    const int64_t col = static_cast<int64_t>(t) - vocab_start;
    for (int64_t v = threadIdx.x; v < V; v += kThreads) {
      dl[v] = g * (expf(l[v] - mx) * inv - (v == col ? 1.0f : 0.0f));
    }
  }
}

unsigned RowGrid(int64_t N) {
  const int64_t kMax = int64_t{1} << 20;
  return static_cast<unsigned>(N < kMax ? N : kMax);
}

void CheckArgs(const char* op, int64_t N, int64_t V) {
  GTP_CU_REQUIRE(N >= 0 && V >= 0, "%s: negative size N=%lld V=%lld", op, static_cast<long long>(N),
                 static_cast<long long>(V));
}

}  // namespace

void CrossEntropyStats(const float* logits, const int32_t* targets, float* row_max,
                       float* target_logit, int64_t N, int64_t V, int64_t vocab_start,
                       cudaStream_t stream) {
  CheckArgs("CrossEntropyStats", N, V);
  if (N == 0) return;
  StatsKernel<<<RowGrid(N), kThreads, 0, stream>>>(logits, targets, row_max, target_logit, N, V,
                                                   vocab_start);
  GTP_CU_LAUNCH_CHECK();
}

void CrossEntropySumExp(const float* logits, const float* row_max, float* sumexp, int64_t N,
                        int64_t V, cudaStream_t stream) {
  CheckArgs("CrossEntropySumExp", N, V);
  if (N == 0) return;
  SumExpKernel<<<RowGrid(N), kThreads, 0, stream>>>(logits, row_max, sumexp, N, V);
  GTP_CU_LAUNCH_CHECK();
}

void CrossEntropyLoss(const float* row_max, const float* sumexp, const float* target_logit,
                      const int32_t* targets, float* loss, int64_t N, cudaStream_t stream) {
  CheckArgs("CrossEntropyLoss", N, 0);
  if (N == 0) return;
  LossKernel<<<GridFor(N, kThreads), kThreads, 0, stream>>>(row_max, sumexp, target_logit, targets,
                                                            loss, N);
  GTP_CU_LAUNCH_CHECK();
}

void CrossEntropyBackward(const float* logits, const float* row_max, const float* sumexp,
                          const int32_t* targets, const float* dloss, float* dlogits, int64_t N,
                          int64_t V, int64_t vocab_start, cudaStream_t stream) {
  CheckArgs("CrossEntropyBackward", N, V);
  if (N == 0 || V == 0) return;
  BackwardKernel<<<RowGrid(N), kThreads, 0, stream>>>(logits, row_max, sumexp, targets, dloss,
                                                      dlogits, N, V, vocab_start);
  GTP_CU_LAUNCH_CHECK();
}

void CrossEntropyForward(const float* logits, const int32_t* targets, float* loss, float* scratch,
                         int64_t N, int64_t V, cudaStream_t stream) {
  CheckArgs("CrossEntropyForward", N, V);
  if (N == 0) return;
  // Targets are device data; unlike the CPU version, t ≥ V is not checked here
  // (it would need a host sync): such a row gets target_logit 0.
  float* row_max = scratch;
  float* target_logit = scratch + N;
  float* sumexp = scratch + 2 * N;
  CrossEntropyStats(logits, targets, row_max, target_logit, N, V, /*vocab_start=*/0, stream);
  CrossEntropySumExp(logits, row_max, sumexp, N, V, stream);
  CrossEntropyLoss(row_max, sumexp, target_logit, targets, loss, N, stream);
}

}  // namespace gtp::kernels::cuda
