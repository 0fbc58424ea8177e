// core/kernels/cuda/cast.cu — casts and blockwise fp8, bit-identical to the
// CPU versions (core/kernels/cpu/cast.cc, which has the full math):
//   bf16 ↔ f32: round to nearest even (core/dtype.h), exact widening.
//   MXFP8: one E8M0 scale byte per block of kFp8BlockSize = 32 elements (the
//   last block may be shorter):
//     e_b = Fp8BlockExponent(max_i bits(|x_i|))   (kernels.h; 255 on NaN/inf)
//     q_i = fp8(x_i / 2^(e_b − 127))              (kFp8NaNCode when e_b = 255)
//     y_i = fp8⁻¹(q_i)·2^(e_b − 127)              (NaN when e_b = 255)
// The exponent comes from an integer max of the bits and the shared
// host/device helper; the division and multiply by a power of two are exact
// (written with the _rn intrinsics, no FMA contraction; subnormals are not
// flushed); the encoders are core/dtype.h's host/device functions. So the GPU
// produces the CPU's bits. One warp per scale block: lane i holds element i.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "core/kernels/cuda.h"
#include "core/kernels/cuda/common.cuh"

namespace gtp::kernels::cuda {
namespace {

using internal::GridFor;
using internal::kFullMask;
using internal::kWarpSize;

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

struct CastManyArgs {
  CastPair pair[kCastManyMax];
};

// blockIdx.y picks the pair; each element converted as the two kernels
// above convert it (the same encoders, so the same bits), or copied.
__global__ void CastManyKernel(const CastManyArgs args) {
  const CastPair p = args.pair[blockIdx.y];
  const int64_t n = p.rows * p.width;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    int64_t si = i, di = i;
    if (p.rows > 1) {
      // A 32-bit division where the index fits (far fewer instructions
      // than a 64-bit one: the column blocks are small).
      int64_t r;
      if (n <= int64_t{UINT32_MAX}) {
        r = static_cast<uint32_t>(i) / static_cast<uint32_t>(p.width);
      } else {
        r = i / p.width;
      }
      const int64_t c = i - r * p.width;
      si = r * p.src_pitch + c;
      di = r * p.dst_pitch + c;
    }
    const float v = p.src_type == DType::kF32
                        ? static_cast<const float*>(p.src)[si]
                        : BF16BitsToF32(static_cast<const bf16*>(p.src)[si].bits);
    if (p.dst_type == DType::kF32) {
      static_cast<float*>(p.dst)[di] = v;
    } else if (p.src_type == DType::kBF16) {  // a bf16 copy: the same bits back
      static_cast<bf16*>(p.dst)[di] = static_cast<const bf16*>(p.src)[si];
    } else {
      static_cast<bf16*>(p.dst)[di].bits = F32ToBF16Bits(v);
    }
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

__device__ __forceinline__ uint32_t WarpMaxU32(uint32_t v) {
  for (int o = kWarpSize / 2; o > 0; o >>= 1) v = max(v, __shfl_xor_sync(kFullMask, v, o));
  return v;
}

template <bool kBF16In, bool kE4M3>
__global__ void QuantizeKernel(const void* __restrict__ x, uint8_t* __restrict__ q,
                               uint8_t* __restrict__ scales, int64_t n) {
  const int lane = threadIdx.x % kWarpSize;
  const int64_t warp = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) / kWarpSize;
  const int64_t warps = int64_t{gridDim.x} * blockDim.x / kWarpSize;
  const int64_t blocks = (n + kFp8BlockSize - 1) / kFp8BlockSize;
  for (int64_t blk = warp; blk < blocks; blk += warps) {  // uniform over the warp
    const int64_t i = blk * kFp8BlockSize + lane;
    const float v = i < n ? LoadF32<kBF16In>(x, i) : 0.0f;
    // Bits of |v|: NaN and inf order above every finite value, as on the CPU.
    const uint32_t amax_bits = WarpMaxU32(FloatBits(v) & 0x7fffffffu);
    const uint8_t e = Fp8BlockExponent(amax_bits, kE4M3 ? kE4M3Max : kE5M2Max);
    if (i < n) {
      const float scaled = __fdiv_rn(v, E8M0ToF32(e));
      q[i] = e == kE8M0NaN ? kFp8NaNCode : kE4M3 ? F32ToE4M3Bits(scaled) : F32ToE5M2Bits(scaled);
    }
    if (lane == 0) scales[blk] = e;
  }
}

template <bool kBF16Out, bool kE4M3>
__global__ void DequantizeKernel(const uint8_t* __restrict__ q, const uint8_t* __restrict__ scales,
                                 void* __restrict__ y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const uint8_t e = scales[i / kFp8BlockSize];
    const float decoded = kE4M3 ? E4M3BitsToF32(q[i]) : E5M2BitsToF32(q[i]);
    const float v = e == kE8M0NaN ? BitsFloat(0x7fc00000u) : __fmul_rn(decoded, E8M0ToF32(e));
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
void LaunchQuantize(const void* x, uint8_t* q, uint8_t* scales, int64_t n, cudaStream_t stream) {
  const int64_t blocks = (n + kFp8BlockSize - 1) / kFp8BlockSize;
  QuantizeKernel<kBF16In, kE4M3>
      <<<GridFor(blocks * kWarpSize, kThreads), kThreads, 0, stream>>>(x, q, scales, n);
  GTP_CU_LAUNCH_CHECK();
}

template <bool kBF16Out, bool kE4M3>
void LaunchDequantize(const uint8_t* q, const uint8_t* scales, void* y, int64_t n,
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

void CastMany(const CastPair* pairs, int count, cudaStream_t stream) {
  GTP_CU_REQUIRE(count >= 0 && count <= kCastManyMax, "CastMany: ", count, " pairs (at most ",
                 kCastManyMax, ")");
  CastManyArgs args{};
  int64_t most = 0;
  for (int i = 0; i < count; ++i) {
    const CastPair& p = pairs[i];
    auto ok = [](DType t) { return t == DType::kF32 || t == DType::kBF16; };
    GTP_CU_REQUIRE(p.rows >= 0 && p.width >= 0 && p.src_pitch >= p.width &&
                       p.dst_pitch >= p.width && ok(p.src_type) && ok(p.dst_type),
                   "CastMany: pair ", i, " rows ", p.rows, " width ", p.width, " pitches ",
                   p.src_pitch, "/", p.dst_pitch, " (f32 or bf16)");
    args.pair[i] = p;
    most = std::max(most, p.rows * p.width);
  }
  if (most == 0) return;
  CastManyKernel<<<dim3(GridFor(most, kThreads), count), kThreads, 0, stream>>>(args);
  GTP_CU_LAUNCH_CHECK();
}

void QuantizeFp8Blockwise(const void* x, DType x_type, uint8_t* q, uint8_t* scales, int64_t n,
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

void DequantizeFp8Blockwise(const uint8_t* q, const uint8_t* scales, void* y, DType y_type,
                            int64_t n, DType fmt, cudaStream_t stream) {
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
