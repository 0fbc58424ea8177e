// Row softmax over S[BH, T, T] and its backward, for the GEMM-based attention
// (attention_gemm.cc). Causal: row t keeps columns j < end = t + 1 and the
// rest become 0; otherwise end = T (every column). One warp per row;
// fixed-order reductions.
//   forward : P[t, j] = exp(S[t, j] − max) / Σ_{j' < end} exp(S[t, j'] − max), j < end
//   backward: dS[t, j] = scale · P[t, j] · (dP[t, j] − Σ_j' dP[t, j'] P[t, j'])
#include <cuda_runtime.h>

#include "core/kernels/cuda/common.cuh"

namespace gtp::kernels::cuda::internal {
namespace {

__global__ void AttentionSoftmaxKernel(float* __restrict__ s, int64_t rows, int64_t T,
                                       bool causal) {
  const int64_t row = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const int64_t end = causal ? row % T + 1 : T;
  float* r = s + row * T;
  float m = -INFINITY;
  for (int64_t j = lane; j < end; j += 32) m = fmaxf(m, r[j]);
  m = WarpMax(m);
  float sum = 0.0f;
  for (int64_t j = lane; j < end; j += 32) sum += expf(r[j] - m);
  sum = WarpSum(sum);
  const float inv = 1.0f / sum;
  for (int64_t j = lane; j < T; j += 32) r[j] = j < end ? expf(r[j] - m) * inv : 0.0f;
}

__global__ void AttentionSoftmaxBackwardKernel(const float* __restrict__ p, float* __restrict__ dp,
                                               int64_t rows, int64_t T, float scale, bool causal) {
  const int64_t row = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const int64_t end = causal ? row % T + 1 : T;
  const float* pr = p + row * T;
  float* d = dp + row * T;
  float dot = 0.0f;
  for (int64_t j = lane; j < end; j += 32) dot += pr[j] * d[j];
  dot = WarpSum(dot);
  for (int64_t j = lane; j < T; j += 32) d[j] = j < end ? scale * pr[j] * (d[j] - dot) : 0.0f;
}

}  // namespace

void LaunchAttentionSoftmax(float* s, int64_t rows, int64_t T, cudaStream_t stream, bool causal) {
  if (rows == 0) return;
  const int threads = 256;
  AttentionSoftmaxKernel<<<static_cast<unsigned>(CeilDiv(rows * 32, threads)), threads, 0,
                           stream>>>(s, rows, T, causal);
  GTP_CU_LAUNCH_CHECK();
}

void LaunchAttentionSoftmaxBackward(const float* p, float* dp, int64_t rows, int64_t T, float scale,
                                    cudaStream_t stream, bool causal) {
  if (rows == 0) return;
  const int threads = 256;
  AttentionSoftmaxBackwardKernel<<<static_cast<unsigned>(CeilDiv(rows * 32, threads)), threads, 0,
                                   stream>>>(p, dp, rows, T, scale, causal);
  GTP_CU_LAUNCH_CHECK();
}

}  // namespace gtp::kernels::cuda::internal
