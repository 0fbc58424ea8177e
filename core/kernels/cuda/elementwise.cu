// Elementwise f32 helpers (see core/kernels/cpu/elementwise.cc for the math).
// SumSquares is deterministic: fixed-size per-block partials in double, then
// one block sums the partials in a fixed order.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#include "core/kernels/cuda.h"

namespace gtp::kernels::cuda {
namespace {

#define GTP_EW_LAUNCH_CHECK()                                                          \
  do {                                                                                 \
    cudaError_t e_ = cudaGetLastError();                                               \
    if (e_ != cudaSuccess) {                                                           \
      std::fprintf(stderr, "%s:%d: CUDA launch failed: %s\n", __FILE__, __LINE__,      \
                   cudaGetErrorString(e_));                                            \
      std::abort();                                                                    \
    }                                                                                  \
  } while (0)

__global__ void AxpbyKernel(float alpha, const float* __restrict__ x, float beta,
                            float* __restrict__ y, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    y[i] = beta == 0.0f ? alpha * x[i] : alpha * x[i] + beta * y[i];
  }
}

__global__ void FillKernel(float* __restrict__ x, float v, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    x[i] = v;
  }
}

constexpr int kThreads = 256;
constexpr int kPartials = 1024;  // fixed: the result does not depend on the GPU

__global__ void SumSquaresPartial(const float* __restrict__ x, int64_t n,
                                  double* __restrict__ partial) {
  __shared__ double sh[kThreads];
  double s = 0.0;
  for (int64_t i = blockIdx.x * (int64_t)kThreads + threadIdx.x; i < n;
       i += (int64_t)kPartials * kThreads) {
    double v = x[i];
    s += v * v;
  }
  sh[threadIdx.x] = s;
  __syncthreads();
  for (int w = kThreads / 2; w > 0; w /= 2) {
    if (threadIdx.x < w) sh[threadIdx.x] += sh[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[blockIdx.x] = sh[0];
}

__global__ void SumPartials(const double* __restrict__ partial, double* __restrict__ out) {
  __shared__ double sh[kThreads];
  double s = 0.0;
  for (int i = threadIdx.x; i < kPartials; i += kThreads) s += partial[i];
  sh[threadIdx.x] = s;
  __syncthreads();
  for (int w = kThreads / 2; w > 0; w /= 2) {
    if (threadIdx.x < w) sh[threadIdx.x] += sh[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) *out = sh[0];
}

int Blocks(int64_t n) {
  int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<int>(b < 4096 ? (b < 1 ? 1 : b) : 4096);
}

}  // namespace

void Axpby(float alpha, const float* x, float beta, float* y, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  AxpbyKernel<<<Blocks(n), kThreads, 0, stream>>>(alpha, x, beta, y, n);
  GTP_EW_LAUNCH_CHECK();
}

void Fill(float* x, float value, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  FillKernel<<<Blocks(n), kThreads, 0, stream>>>(x, value, n);
  GTP_EW_LAUNCH_CHECK();
}

void SumSquares(const float* x, int64_t n, double* out, cudaStream_t stream) {
  // The partials live right after *out's allocation is not ours to assume:
  // use a stream-ordered temporary.
  double* partial = nullptr;
  if (cudaMallocAsync(&partial, kPartials * sizeof(double), stream) != cudaSuccess) {
    std::fprintf(stderr, "%s:%d: cudaMallocAsync failed\n", __FILE__, __LINE__);
    std::abort();
  }
  SumSquaresPartial<<<kPartials, kThreads, 0, stream>>>(x, n < 0 ? 0 : n, partial);
  GTP_EW_LAUNCH_CHECK();
  SumPartials<<<1, kThreads, 0, stream>>>(partial, out);
  GTP_EW_LAUNCH_CHECK();
  cudaFreeAsync(partial, stream);
}

}  // namespace gtp::kernels::cuda
