// Causal softmax over the rows of S[BH, T, T] (row t keeps columns j <= t;
// the rest become 0) and its backward, for the GEMM-based attention
// (attention_gemm.cc). One warp per row; fixed-order reductions.
//   forward : P[t, j] = exp(S[t, j] − max) / Σ_{j' <= t} exp(S[t, j'] − max), j <= t
//   backward: dS[t, j] = scale · P[t, j] · (dP[t, j] − Σ_j' dP[t, j'] P[t, j'])
#include <cuda_runtime.h>

#include "core/kernels/cuda/common.cuh"

namespace gtp::kernels::cuda::internal {
namespace {

__global__ void CausalSoftmaxKernel(float* __restrict__ s, int64_t rows, int64_t T) {
  const int64_t row = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const int64_t t = row % T;
  float* r = s + row * T;
  float m = -INFINITY;
  for (int64_t j = lane; j <= t; j += 32) m = fmaxf(m, r[j]);
  m = WarpMax(m);
  float sum = 0.0f;
  for (int64_t j = lane; j <= t; j += 32) sum += expf(r[j] - m);
  sum = WarpSum(sum);
  const float inv = 1.0f / sum;
  for (int64_t j = lane; j < T; j += 32) r[j] = j <= t ? expf(r[j] - m) * inv : 0.0f;
}

__global__ void CausalSoftmaxBackwardKernel(const float* __restrict__ p, float* __restrict__ dp,
                                            int64_t rows, int64_t T, float scale) {
  const int64_t row = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const int64_t t = row % T;
  const float* pr = p + row * T;
  float* d = dp + row * T;
  float dot = 0.0f;
  for (int64_t j = lane; j <= t; j += 32) dot += pr[j] * d[j];
  dot = WarpSum(dot);
  for (int64_t j = lane; j < T; j += 32) d[j] = j <= t ? scale * pr[j] * (d[j] - dot) : 0.0f;
}

}  // namespace

void LaunchCausalSoftmax(float* s, int64_t rows, int64_t T, cudaStream_t stream) {
  if (rows == 0) return;
  const int threads = 256;
  CausalSoftmaxKernel<<<static_cast<unsigned>(CeilDiv(rows * 32, threads)), threads, 0, stream>>>(
      s, rows, T);
  GTP_CU_LAUNCH_CHECK();
}

void LaunchCausalSoftmaxBackward(const float* p, float* dp, int64_t rows, int64_t T, float scale,
                                 cudaStream_t stream) {
  if (rows == 0) return;
  const int threads = 256;
  CausalSoftmaxBackwardKernel<<<static_cast<unsigned>(CeilDiv(rows * 32, threads)), threads, 0,
                                stream>>>(p, dp, rows, T, scale);
  GTP_CU_LAUNCH_CHECK();
}

}  // namespace gtp::kernels::cuda::internal
