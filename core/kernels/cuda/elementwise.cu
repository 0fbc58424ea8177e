// Elementwise helpers on f32 or bf16 (see core/kernels/cpu/elementwise.cc for
// the math; f32 math for bf16, cuda/elem.cuh). SumSquares is deterministic:
// fixed-size per-block partials in double, then one block sums the partials in
// a fixed order. bf16 Axpby moves 8 elements (16 bytes) per access when x and
// y are 16-byte aligned.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#include "core/kernels/cuda.h"
#include "core/kernels/cuda/elem.cuh"

namespace gtp::kernels::cuda {
namespace {

using internal::Aligned16;
using internal::Load;
using internal::LoadVec;
using internal::Store;
using internal::StoreVec;
using internal::WithVec;

#define GTP_EW_LAUNCH_CHECK()                                                          \
  do {                                                                                 \
    cudaError_t e_ = cudaGetLastError();                                               \
    if (e_ != cudaSuccess) {                                                           \
      std::fprintf(stderr, "%s:%d: CUDA launch failed: %s\n", __FILE__, __LINE__,      \
                   cudaGetErrorString(e_));                                            \
      std::abort();                                                                    \
    }                                                                                  \
  } while (0)

// Vectors [0, n / kVec) by the grid-stride loop, then the n % kVec tail.
template <typename T, int kVec>
__global__ void AxpbyKernel(float alpha, const T* __restrict__ x, float beta, T* __restrict__ y,
                            int64_t n) {
  const int64_t tid = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = tid; i < n / kVec; i += stride) {
    float xv[kVec], yv[kVec];
    LoadVec<kVec>(x + i * kVec, xv);
    if (beta == 0.0f) {
#pragma unroll
      for (int k = 0; k < kVec; ++k) yv[k] = alpha * xv[k];
    } else {
      LoadVec<kVec>(y + i * kVec, yv);
#pragma unroll
      for (int k = 0; k < kVec; ++k) yv[k] = alpha * xv[k] + beta * yv[k];
    }
    StoreVec<kVec>(y + i * kVec, yv);
  }
  if constexpr (kVec > 1) {
    for (int64_t i = n / kVec * kVec + tid; i < n; i += stride) {
      y[i] = Store<T>(beta == 0.0f ? alpha * Load(x[i]) : alpha * Load(x[i]) + beta * Load(y[i]));
    }
  }
}

template <typename T>
__global__ void FillKernel(T* __restrict__ x, T v, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    x[i] = v;
  }
}

constexpr int kThreads = 256;
constexpr int kPartials = 1024;  // fixed: the result does not depend on the GPU

template <typename T>
__global__ void SumSquaresPartial(const T* __restrict__ x, int64_t n,
                                  double* __restrict__ partial) {
  __shared__ double sh[kThreads];
  double s = 0.0;
  for (int64_t i = blockIdx.x * (int64_t)kThreads + threadIdx.x; i < n;
       i += (int64_t)kPartials * kThreads) {
    double v = Load(x[i]);
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

template <typename T>
void AxpbyT(float alpha, const T* x, float beta, T* y, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  WithVec<T>(Aligned16({x, y}), [&](auto vec) {
    constexpr int kVec = decltype(vec)::value;
    AxpbyKernel<T, kVec>
        <<<Blocks((n + kVec - 1) / kVec), kThreads, 0, stream>>>(alpha, x, beta, y, n);
  });
  GTP_EW_LAUNCH_CHECK();
}

template <typename T>
void FillT(T* x, T value, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  FillKernel<T><<<Blocks(n), kThreads, 0, stream>>>(x, value, n);
  GTP_EW_LAUNCH_CHECK();
}

template <typename T>
void SumSquaresT(const T* x, int64_t n, double* out, cudaStream_t stream) {
  // The partials live right after *out's allocation is not ours to assume:
  // use a stream-ordered temporary.
  double* partial = nullptr;
  if (cudaMallocAsync(&partial, kPartials * sizeof(double), stream) != cudaSuccess) {
    std::fprintf(stderr, "%s:%d: cudaMallocAsync failed\n", __FILE__, __LINE__);
    std::abort();
  }
  SumSquaresPartial<T><<<kPartials, kThreads, 0, stream>>>(x, n < 0 ? 0 : n, partial);
  GTP_EW_LAUNCH_CHECK();
  SumPartials<<<1, kThreads, 0, stream>>>(partial, out);
  GTP_EW_LAUNCH_CHECK();
  cudaFreeAsync(partial, stream);
}

}  // namespace

void Axpby(float alpha, const float* x, float beta, float* y, int64_t n, cudaStream_t stream) {
  AxpbyT(alpha, x, beta, y, n, stream);
}
void Axpby(float alpha, const bf16* x, float beta, bf16* y, int64_t n, cudaStream_t stream) {
  AxpbyT(alpha, x, beta, y, n, stream);
}

void Fill(float* x, float value, int64_t n, cudaStream_t stream) { FillT(x, value, n, stream); }
void Fill(bf16* x, float value, int64_t n, cudaStream_t stream) {
  FillT(x, ToBF16(value), n, stream);  // rounded once, on the host
}

void SumSquares(const float* x, int64_t n, double* out, cudaStream_t stream) {
  SumSquaresT(x, n, out, stream);
}
void SumSquares(const bf16* x, int64_t n, double* out, cudaStream_t stream) {
  SumSquaresT(x, n, out, stream);
}

}  // namespace gtp::kernels::cuda
