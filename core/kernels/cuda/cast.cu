// core/kernels/cuda/cast.cu — casts and blockwise fp8, bit-identical to the
// CPU versions (core/kernels/cpu/cast.cc):
//   bf16 ↔ f32: round to nearest even (core/dtype.h), exact widening.
//   fp8 with one f32 scale per block of kFp8BlockSize = 32 elements (the last
//   block may be shorter):
//     scale_b = amax_b / fmt_max   (1 when amax_b is not > 0)
//     q_i     = fp8(x_i / scale_b)
//     y_i     = fp8⁻¹(q_i)·scale_b
// Every float operation is a single correctly rounded one written with the
// _rn intrinsics (no FMA contraction), and the encoders are core/dtype.h's
// host/device functions, so the GPU produces the CPU's bits. One warp per
// scale block: lane i holds element i of the block.
#include <cuda_runtime.h>

#include "core/kernels/cuda.h"
#include "core/kernels/cuda/common.cuh"

namespace gtp::kernels::cuda {
namespace {

using internal::GridFor;
using internal::kFullMask;
using internal::kWarpSize;
using internal::WarpMax;

constexpr int kThreads = 256;
static_assert(kFp8BlockSize == kWarpSize, "one warp per fp8 scale block");

__global__ void CastF32ToBF16Kernel(const float* __restrict__ x, bf16* __restrict__ y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    y[i].bits = F32ToBF16Bits(x[i]);
  }
}

__global__ void CastBF16ToF32Kernel(const bf16* __restrict__ x, float* __restrict__ y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    y[i] = BF16BitsToF32(x[i].bits);
  }
}

template <bool kBF16In>
__device__ __forceinline__ float LoadF32(const void* x, int64_t i) {
  if constexpr (kBF16In) {
    return BF16BitsToF32(static_cast<const bf16*>(x)[i].bits);
  } else {
    return static_cast<const float*>(x)[i];
  }
}

template <bool kBF16In, bool kE4M3>
__global__ void QuantizeKernel(const void* __restrict__ x, uint8_t* __restrict__ q,
                               float* __restrict__ scales, int64_t n) {
  const float fmt_max = kE4M3 ? kE4M3Max : kE5M2Max;
  const int lane = threadIdx.x % kWarpSize;
  const int64_t warp = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) / kWarpSize;
  const int64_t warps = int64_t{gridDim.x} * blockDim.x / kWarpSize;
  const int64_t blocks = (n + kFp8BlockSize - 1) / kFp8BlockSize;
  for (int64_t blk = warp; blk < blocks; blk += warps) {  // uniform over the warp
    const int64_t i = blk * kFp8BlockSize + lane;
    const float v = i < n ? LoadF32<kBF16In>(x, i) : 0.0f;
    // fmaxf drops NaN like the CPU's std::max(amax, |x|) does.
    const float amax = WarpMax(fabsf(v));
    const float scale = amax > 0.0f ? __fdiv_rn(amax, fmt_max) : 1.0f;
    if (i < n) {
      const float s = __fdiv_rn(v, scale);
      q[i] = kE4M3 ? F32ToE4M3Bits(s) : F32ToE5M2Bits(s);
    }
    if (lane == 0) scales[blk] = scale;
  }
}

template <bool kBF16Out, bool kE4M3>
__global__ void DequantizeKernel(const uint8_t* __restrict__ q, const float* __restrict__ scales,
                                 void* __restrict__ y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float decoded = kE4M3 ? E4M3BitsToF32(q[i]) : E5M2BitsToF32(q[i]);
    const float v = __fmul_rn(decoded, scales[i / kFp8BlockSize]);
    if constexpr (kBF16Out) {
      static_cast<bf16*>(y)[i].bits = F32ToBF16Bits(v);
    } else {
      static_cast<float*>(y)[i] = v;
    }
  }
}

void CheckFp8Args(const char* op, int64_t n, DType data_type, DType fmt) {
  GTP_CU_REQUIRE(n >= 0, "%s: negative size", op);
  GTP_CU_REQUIRE(data_type == DType::kF32 || data_type == DType::kBF16,
                 "%s: data must be f32 or bf16, got %s", op, DTypeName(data_type));
  GTP_CU_REQUIRE(fmt == DType::kF8E4M3 || fmt == DType::kF8E5M2,
                 "%s: fmt must be fp8_e4m3 or fp8_e5m2, got %s", op, DTypeName(fmt));
}

template <bool kBF16In, bool kE4M3>
void LaunchQuantize(const void* x, uint8_t* q, float* scales, int64_t n, cudaStream_t stream) {
  const int64_t blocks = (n + kFp8BlockSize - 1) / kFp8BlockSize;
  QuantizeKernel<kBF16In, kE4M3>
      <<<GridFor(blocks * kWarpSize, kThreads), kThreads, 0, stream>>>(x, q, scales, n);
  GTP_CU_LAUNCH_CHECK();
}

template <bool kBF16Out, bool kE4M3>
void LaunchDequantize(const uint8_t* q, const float* scales, void* y, int64_t n,
                      cudaStream_t stream) {
  DequantizeKernel<kBF16Out, kE4M3><<<GridFor(n, kThreads), kThreads, 0, stream>>>(q, scales, y, n);
  GTP_CU_LAUNCH_CHECK();
}

}  // namespace

void CastF32ToBF16(const float* x, bf16* y, int64_t n, cudaStream_t stream) {
  GTP_CU_REQUIRE(n >= 0, "CastF32ToBF16: negative size");
  if (n == 0) return;
  CastF32ToBF16Kernel<<<GridFor(n, kThreads), kThreads, 0, stream>>>(x, y, n);
  GTP_CU_LAUNCH_CHECK();
}

void CastBF16ToF32(const bf16* x, float* y, int64_t n, cudaStream_t stream) {
  GTP_CU_REQUIRE(n >= 0, "CastBF16ToF32: negative size");
  if (n == 0) return;
  CastBF16ToF32Kernel<<<GridFor(n, kThreads), kThreads, 0, stream>>>(x, y, n);
  GTP_CU_LAUNCH_CHECK();
}

void QuantizeFp8Blockwise(const void* x, DType x_type, uint8_t* q, float* scales, int64_t n,
                          DType fmt, cudaStream_t stream) {
  CheckFp8Args("QuantizeFp8Blockwise", n, x_type, fmt);
  if (n == 0) return;
  const bool bf16_in = x_type == DType::kBF16, e4m3 = fmt == DType::kF8E4M3;
  if (bf16_in) {
    e4m3 ? LaunchQuantize<true, true>(x, q, scales, n, stream)
         : LaunchQuantize<true, false>(x, q, scales, n, stream);
  } else {
    e4m3 ? LaunchQuantize<false, true>(x, q, scales, n, stream)
         : LaunchQuantize<false, false>(x, q, scales, n, stream);
  }
}

void DequantizeFp8Blockwise(const uint8_t* q, const float* scales, void* y, DType y_type, int64_t n,
                            DType fmt, cudaStream_t stream) {
  CheckFp8Args("DequantizeFp8Blockwise", n, y_type, fmt);
  if (n == 0) return;
  const bool bf16_out = y_type == DType::kBF16, e4m3 = fmt == DType::kF8E4M3;
  if (bf16_out) {
    e4m3 ? LaunchDequantize<true, true>(q, scales, y, n, stream)
         : LaunchDequantize<true, false>(q, scales, y, n, stream);
  } else {
    e4m3 ? LaunchDequantize<false, true>(q, scales, y, n, stream)
         : LaunchDequantize<false, false>(q, scales, y, n, stream);
  }
}

}  // namespace gtp::kernels::cuda
