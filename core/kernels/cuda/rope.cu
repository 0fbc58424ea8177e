// Rotary position embedding on the GPU (math in core/kernels/cpu/rope.cc).
// One thread per (b, t, head, d < HS/2) pair; angles in double like the CPU.
// f32 or bf16 data; bf16 is rotated in f32 and rounded once (cuda/elem.cuh).
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#include "core/kernels/cuda.h"
#include "core/kernels/cuda/elem.cuh"

namespace gtp::kernels::cuda {
namespace {

using internal::Load;
using internal::Store;

// x and y may alias (in place): each thread reads its pair before writing it.
template <typename E>  // element type (T is the sequence length here)
__global__ void RopeKernel(const E* x, E* y, int64_t B, int64_t T, int64_t NH, int64_t HS,
                           int64_t rs, double theta, float sign, const int32_t* pos) {
  const int64_t h = HS / 2;
  const int64_t total = B * T * NH * h;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
       i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t d = i % h;
    const int64_t n = (i / h) % NH;
    const int64_t bt = i / (h * NH);
    const int64_t t = bt % T;
    const double a = (pos ? pos[t] : t) * pow(theta, -2.0 * d / HS);
    const float c = static_cast<float>(cos(a)), s = sign * static_cast<float>(sin(a));
    const int64_t base = bt * rs + n * HS;
    const float x0 = Load(x[base + d]), x1 = Load(x[base + d + h]);
    y[base + d] = Store<E>(__fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s)));
    y[base + d + h] = Store<E>(__fadd_rn(__fmul_rn(x1, c), __fmul_rn(x0, s)));
  }
}

template <typename E>
void Launch(const E* x, E* y, int64_t B, int64_t T, int64_t NH, int64_t HS, float theta, float sign,
            cudaStream_t stream, const int32_t* pos, int64_t row_stride) {
  if (HS % 2 != 0) {
    std::fprintf(stderr, "%s:%d: RoPE needs an even head size, got %lld\n", __FILE__, __LINE__,
                 static_cast<long long>(HS));
    std::abort();
  }
  const int64_t total = B * T * NH * (HS / 2);
  if (total == 0) return;
  int64_t blocks = (total + 255) / 256;
  if (blocks > 65535) blocks = 65535;
  const int64_t rs = row_stride > 0 ? row_stride : NH * HS;
  RopeKernel<<<static_cast<int>(blocks), 256, 0, stream>>>(x, y, B, T, NH, HS, rs, theta, sign,
                                                           pos);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s:%d: RoPE launch failed: %s\n", __FILE__, __LINE__,
                 cudaGetErrorString(e));
    std::abort();
  }
}

}  // namespace

void RopeForward(const float* x, float* y, int64_t B, int64_t T, int64_t NH, int64_t HS,
                 float theta, cudaStream_t stream, const int32_t* pos, int64_t row_stride) {
  Launch(x, y, B, T, NH, HS, theta, 1.0f, stream, pos, row_stride);
}

void RopeBackward(const float* dy, float* dx, int64_t B, int64_t T, int64_t NH, int64_t HS,
                  float theta, cudaStream_t stream, const int32_t* pos, int64_t row_stride) {
  Launch(dy, dx, B, T, NH, HS, theta, -1.0f, stream, pos, row_stride);
}

void RopeForward(const bf16* x, bf16* y, int64_t B, int64_t T, int64_t NH, int64_t HS, float theta,
                 cudaStream_t stream, const int32_t* pos, int64_t row_stride) {
  Launch(x, y, B, T, NH, HS, theta, 1.0f, stream, pos, row_stride);
}

void RopeBackward(const bf16* dy, bf16* dx, int64_t B, int64_t T, int64_t NH, int64_t HS,
                  float theta, cudaStream_t stream, const int32_t* pos, int64_t row_stride) {
  Launch(dy, dx, B, T, NH, HS, theta, -1.0f, stream, pos, row_stride);
}

}  // namespace gtp::kernels::cuda
