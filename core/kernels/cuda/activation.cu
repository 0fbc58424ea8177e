// core/kernels/cuda/activation.cu — pointwise activations.
//
// GELU (tanh approximation), s = √(2/π):
//   u = s·(x + 0.044715·x³),  y = ½·x·(1 + tanh u)
//   dy/dx = ½·(1 + tanh u) + ½·x·(1 − tanh² u)·s·(1 + 3·0.044715·x²)
// SwiGLU on x[N, 2H] = [gate | up] per row:
//   y = silu(g)·u, silu(g) = g·σ(g)
//   dg = dy·u·σ(g)·(1 + g·(1 − σ(g))),  du = dy·silu(g)        (=)
// Grid-stride loops, one element per thread per iteration; accurate tanhf and
// expf (no fast-math intrinsics).
#include <cuda_runtime.h>

#include "core/kernels/cuda.h"
#include "core/kernels/cuda/common.cuh"

namespace gtp::kernels::cuda {
namespace {

using internal::GridFor;

constexpr int kThreads = 256;
constexpr float kGeluS = 0.7978845608028654f;  // √(2/π)
constexpr float kGeluC = 0.044715f;

__device__ __forceinline__ float Sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

__global__ void GeluForwardKernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float xi = x[i];
    y[i] = 0.5f * xi * (1.0f + tanhf(kGeluS * (xi + kGeluC * xi * xi * xi)));
  }
}

__global__ void GeluBackwardKernel(const float* __restrict__ dy, const float* __restrict__ x,
                                   float* __restrict__ dx, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float xi = x[i];
    const float t = tanhf(kGeluS * (xi + kGeluC * xi * xi * xi));
    const float du = kGeluS * (1.0f + 3.0f * kGeluC * xi * xi);
    dx[i] = dy[i] * (0.5f * (1.0f + t) + 0.5f * xi * (1.0f - t * t) * du);
  }
}

__global__ void SwiGluForwardKernel(const float* __restrict__ x, float* __restrict__ y, int64_t N,
                                    int64_t H) {
  const int64_t total = N * H;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t n = i / H, h = i % H;
    const float g = x[n * 2 * H + h], u = x[n * 2 * H + H + h];
    y[i] = g * Sigmoid(g) * u;
  }
}

__global__ void SwiGluBackwardKernel(const float* __restrict__ dy, const float* __restrict__ x,
                                     float* __restrict__ dx, int64_t N, int64_t H) {
  const int64_t total = N * H;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t n = i / H, h = i % H;
    const int64_t gi = n * 2 * H + h;
    const float g = x[gi], u = x[gi + H], s = Sigmoid(g), d = dy[i];
    dx[gi] = d * u * s * (1.0f + g * (1.0f - s));
    dx[gi + H] = d * g * s;
  }
}

void CheckSize(const char* op, int64_t a, int64_t b = 0) {
  GTP_CU_REQUIRE(a >= 0 && b >= 0, "%s: negative size", op);
}

}  // namespace

void GeluForward(const float* x, float* y, int64_t n, cudaStream_t stream) {
  CheckSize("GeluForward", n);
  if (n == 0) return;
  GeluForwardKernel<<<GridFor(n, kThreads), kThreads, 0, stream>>>(x, y, n);
  GTP_CU_LAUNCH_CHECK();
}

void GeluBackward(const float* dy, const float* x, float* dx, int64_t n, cudaStream_t stream) {
  CheckSize("GeluBackward", n);
  if (n == 0) return;
  GeluBackwardKernel<<<GridFor(n, kThreads), kThreads, 0, stream>>>(dy, x, dx, n);
  GTP_CU_LAUNCH_CHECK();
}

void SwiGluForward(const float* x, float* y, int64_t N, int64_t H, cudaStream_t stream) {
  CheckSize("SwiGluForward", N, H);
  if (N == 0 || H == 0) return;
  SwiGluForwardKernel<<<GridFor(N * H, kThreads), kThreads, 0, stream>>>(x, y, N, H);
  GTP_CU_LAUNCH_CHECK();
}

void SwiGluBackward(const float* dy, const float* x, float* dx, int64_t N, int64_t H,
                    cudaStream_t stream) {
  CheckSize("SwiGluBackward", N, H);
  if (N == 0 || H == 0) return;
  SwiGluBackwardKernel<<<GridFor(N * H, kThreads), kThreads, 0, stream>>>(dy, x, dx, N, H);
  GTP_CU_LAUNCH_CHECK();
}

}  // namespace gtp::kernels::cuda
