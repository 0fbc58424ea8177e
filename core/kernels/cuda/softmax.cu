// core/kernels/cuda/softmax.cu — row softmax over the last dim of x[N, C].
//
//   y  = exp(x − max x) / Σ exp(x − max x)
//   dx = y ⊙ (dy − Σ dy·y)                      (=)
//
// One warp per row; lane-strided partial results reduced by xor shuffles
// (fixed order, so deterministic).
#include <cuda_runtime.h>

#include "core/kernels/cuda.h"
#include "core/kernels/cuda/common.cuh"

namespace gtp::kernels::cuda {
namespace {

using internal::CeilDiv;
using internal::kWarpSize;
using internal::WarpMax;
using internal::WarpSum;

constexpr int kThreads = 256;
constexpr int kRowsPerBlock = kThreads / kWarpSize;

__global__ void SoftmaxForwardKernel(const float* __restrict__ x, float* __restrict__ y, int64_t N,
                                     int64_t C) {
  const int lane = threadIdx.x % kWarpSize;
  const int64_t row = blockIdx.x * int64_t{kRowsPerBlock} + threadIdx.x / kWarpSize;
  if (row >= N) return;
  const float* xr = x + row * C;
  float* yr = y + row * C;
  float mx = -INFINITY;
  for (int64_t c = lane; c < C; c += kWarpSize) mx = fmaxf(mx, xr[c]);
  mx = WarpMax(mx);
  float sum = 0.0f;
  for (int64_t c = lane; c < C; c += kWarpSize) {
    const float e = expf(xr[c] - mx);
    yr[c] = e;
    sum += e;
  }
  const float inv = 1.0f / WarpSum(sum);
  // Each lane rescales only the elements it wrote itself.
  for (int64_t c = lane; c < C; c += kWarpSize) yr[c] *= inv;
}

__global__ void SoftmaxBackwardKernel(const float* __restrict__ dy, const float* __restrict__ y,
                                      float* __restrict__ dx, int64_t N, int64_t C) {
  const int lane = threadIdx.x % kWarpSize;
  const int64_t row = blockIdx.x * int64_t{kRowsPerBlock} + threadIdx.x / kWarpSize;
  if (row >= N) return;
  const float* dyr = dy + row * C;
  const float* yr = y + row * C;
  float* dxr = dx + row * C;
  float dot = 0.0f;
  for (int64_t c = lane; c < C; c += kWarpSize) dot += dyr[c] * yr[c];
  dot = WarpSum(dot);
  for (int64_t c = lane; c < C; c += kWarpSize) dxr[c] = yr[c] * (dyr[c] - dot);
}

void CheckArgs(const char* op, int64_t N, int64_t C) {
  GTP_CU_REQUIRE(N >= 0 && C >= 0, "%s: negative size N=%lld C=%lld", op, static_cast<long long>(N),
                 static_cast<long long>(C));
  GTP_CU_REQUIRE(N == 0 || C > 0, "%s: C must be positive", op);
}

}  // namespace

void SoftmaxForward(const float* x, float* y, int64_t N, int64_t C, cudaStream_t stream) {
  CheckArgs("SoftmaxForward", N, C);
  if (N == 0) return;
  SoftmaxForwardKernel<<<static_cast<unsigned>(CeilDiv(N, kRowsPerBlock)), kThreads, 0, stream>>>(
      x, y, N, C);
  GTP_CU_LAUNCH_CHECK();
}

void SoftmaxBackward(const float* dy, const float* y, float* dx, int64_t N, int64_t C,
                     cudaStream_t stream) {
  CheckArgs("SoftmaxBackward", N, C);
  if (N == 0) return;
  SoftmaxBackwardKernel<<<static_cast<unsigned>(CeilDiv(N, kRowsPerBlock)), kThreads, 0, stream>>>(
      dy, y, dx, N, C);
  GTP_CU_LAUNCH_CHECK();
}

}  // namespace gtp::kernels::cuda
