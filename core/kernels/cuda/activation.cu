// core/kernels/cuda/activation.cu — pointwise activations.
//
// GELU (tanh approximation) and its derivative: cuda/gelu.cuh (accurate
// tanhf for f32 data, the σ form for bf16).
// SwiGLU on x[N, 2H] = [gate | up] per row:
//   y = silu(g)·u, silu(g) = g·σ(g)
//   dg = dy·u·σ(g)·(1 + g·(1 − σ(g))),  du = dy·silu(g)        (=)
// Grid-stride loops, launched through internal::Launch (so that the host
// warp emulator can run them); SwiGLU with accurate expf.
// f32 or bf16 storage, f32 math (cuda/elem.cuh). f32: one element per thread
// per iteration. bf16: 8 elements (16 bytes) per access when the buffers are
// 16-byte aligned (and, for SwiGLU, H % 8 == 0), the rest one at a time.
#include <cuda_runtime.h>

#include "core/kernels/cuda.h"
#include "core/kernels/cuda/common.cuh"
#include "core/kernels/cuda/elem.cuh"
#include "core/kernels/cuda/gelu.cuh"

namespace gtp::kernels::cuda {
namespace {

using internal::Aligned16;
using internal::CeilDiv;
using internal::GeluFor;
using internal::GeluGradFor;
using internal::GridFor;
using internal::kBf16Vec;
using internal::Load;
using internal::LoadVec;
using internal::Store;
using internal::StoreVec;
using internal::WithVec;

constexpr int kThreads = 256;

__device__ __forceinline__ float Sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

// Vectors [0, n / kVec) by the grid-stride loop, then the n % kVec tail.
template <typename T, int kVec>
__global__ void GeluForwardKernel(const T* __restrict__ x, T* __restrict__ y, int64_t n) {
  const int64_t tid = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = tid; i < n / kVec; i += stride) {
    float v[kVec];
    LoadVec<kVec>(x + i * kVec, v);
#pragma unroll
    for (int k = 0; k < kVec; ++k) v[k] = GeluFor<T>(v[k]);
    StoreVec<kVec>(y + i * kVec, v);
  }
  if constexpr (kVec > 1) {
    for (int64_t i = n / kVec * kVec + tid; i < n; i += stride)
      y[i] = Store<T>(GeluFor<T>(Load(x[i])));
  }
}

template <typename T, int kVec>
__global__ void GeluBackwardKernel(const T* __restrict__ dy, const T* __restrict__ x,
                                   T* __restrict__ dx, int64_t n) {
  const int64_t tid = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = tid; i < n / kVec; i += stride) {
    float xv[kVec], d[kVec];
    LoadVec<kVec>(x + i * kVec, xv);
    LoadVec<kVec>(dy + i * kVec, d);
#pragma unroll
    for (int k = 0; k < kVec; ++k) xv[k] = GeluGradFor<T>(d[k], xv[k]);
    StoreVec<kVec>(dx + i * kVec, xv);
  }
  if constexpr (kVec > 1) {
    for (int64_t i = n / kVec * kVec + tid; i < n; i += stride) {
      dx[i] = Store<T>(GeluGradFor<T>(Load(dy[i]), Load(x[i])));
    }
  }
}

// One (vector of kVec) output element(s) per iteration; kVec divides H.
template <typename T, int kVec>
__global__ void SwiGluForwardKernel(const T* __restrict__ x, T* __restrict__ y, int64_t N,
                                    int64_t H) {
  const int64_t total = N * H / kVec;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t e = i * kVec, n = e / H, h = e % H;
    float g[kVec], u[kVec];
    LoadVec<kVec>(x + n * 2 * H + h, g);
    LoadVec<kVec>(x + n * 2 * H + H + h, u);
#pragma unroll
    for (int k = 0; k < kVec; ++k) g[k] = g[k] * Sigmoid(g[k]) * u[k];
    StoreVec<kVec>(y + e, g);
  }
}

template <typename T, int kVec>
__global__ void SwiGluBackwardKernel(const T* __restrict__ dy, const T* __restrict__ x,
                                     T* __restrict__ dx, int64_t N, int64_t H) {
  const int64_t total = N * H / kVec;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t e = i * kVec, n = e / H, h = e % H;
    const int64_t gi = n * 2 * H + h;
    float g[kVec], u[kVec], d[kVec], dg[kVec], du[kVec];
    LoadVec<kVec>(x + gi, g);
    LoadVec<kVec>(x + gi + H, u);
    LoadVec<kVec>(dy + e, d);
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      const float s = Sigmoid(g[k]);
      dg[k] = d[k] * u[k] * s * (1.0f + g[k] * (1.0f - s));
      du[k] = d[k] * g[k] * s;
    }
    StoreVec<kVec>(dx + gi, dg);
    StoreVec<kVec>(dx + gi + H, du);
  }
}

void CheckSize(const char* op, int64_t a, int64_t b = 0) {
  GTP_CU_REQUIRE(a >= 0 && b >= 0, "%s: negative size", op);
}

template <typename T>
void GeluForwardT(const T* x, T* y, int64_t n, cudaStream_t stream) {
  CheckSize("GeluForward", n);
  if (n == 0) return;
  WithVec<T>(Aligned16({x, y}), [&](auto vec) {
    constexpr int kVec = decltype(vec)::value;
    internal::Launch(GeluForwardKernel<T, kVec>, GridFor(CeilDiv(n, kVec), kThreads), kThreads, 0,
                     stream, x, y, n);
  });
  GTP_CU_LAUNCH_CHECK();
}

template <typename T>
void GeluBackwardT(const T* dy, const T* x, T* dx, int64_t n, cudaStream_t stream) {
  CheckSize("GeluBackward", n);
  if (n == 0) return;
  WithVec<T>(Aligned16({dy, x, dx}), [&](auto vec) {
    constexpr int kVec = decltype(vec)::value;
    internal::Launch(GeluBackwardKernel<T, kVec>, GridFor(CeilDiv(n, kVec), kThreads), kThreads, 0,
                     stream, dy, x, dx, n);
  });
  GTP_CU_LAUNCH_CHECK();
}

template <typename T>
void SwiGluForwardT(const T* x, T* y, int64_t N, int64_t H, cudaStream_t stream) {
  CheckSize("SwiGluForward", N, H);
  if (N == 0 || H == 0) return;
  WithVec<T>(H % kBf16Vec == 0 && Aligned16({x, y}), [&](auto vec) {
    constexpr int kVec = decltype(vec)::value;
    internal::Launch(SwiGluForwardKernel<T, kVec>, GridFor(N * H / kVec, kThreads), kThreads, 0,
                     stream, x, y, N, H);
  });
  GTP_CU_LAUNCH_CHECK();
}

template <typename T>
void SwiGluBackwardT(const T* dy, const T* x, T* dx, int64_t N, int64_t H, cudaStream_t stream) {
  CheckSize("SwiGluBackward", N, H);
  if (N == 0 || H == 0) return;
  WithVec<T>(H % kBf16Vec == 0 && Aligned16({dy, x, dx}), [&](auto vec) {
    constexpr int kVec = decltype(vec)::value;
    internal::Launch(SwiGluBackwardKernel<T, kVec>, GridFor(N * H / kVec, kThreads), kThreads, 0,
                     stream, dy, x, dx, N, H);
  });
  GTP_CU_LAUNCH_CHECK();
}

}  // namespace

void GeluForward(const float* x, float* y, int64_t n, cudaStream_t stream) {
  GeluForwardT(x, y, n, stream);
}
void GeluForward(const bf16* x, bf16* y, int64_t n, cudaStream_t stream) {
  GeluForwardT(x, y, n, stream);
}

void GeluBackward(const float* dy, const float* x, float* dx, int64_t n, cudaStream_t stream) {
  GeluBackwardT(dy, x, dx, n, stream);
}
void GeluBackward(const bf16* dy, const bf16* x, bf16* dx, int64_t n, cudaStream_t stream) {
  GeluBackwardT(dy, x, dx, n, stream);
}

void SwiGluForward(const float* x, float* y, int64_t N, int64_t H, cudaStream_t stream) {
  SwiGluForwardT(x, y, N, H, stream);
}
void SwiGluForward(const bf16* x, bf16* y, int64_t N, int64_t H, cudaStream_t stream) {
  SwiGluForwardT(x, y, N, H, stream);
}

void SwiGluBackward(const float* dy, const float* x, float* dx, int64_t N, int64_t H,
                    cudaStream_t stream) {
  SwiGluBackwardT(dy, x, dx, N, H, stream);
}
void SwiGluBackward(const bf16* dy, const bf16* x, bf16* dx, int64_t N, int64_t H,
                    cudaStream_t stream) {
  SwiGluBackwardT(dy, x, dx, N, H, stream);
}

}  // namespace gtp::kernels::cuda
