// core/kernels/fp8/quant_device.cuh — what the quantiser kernels of
// block_quant.cu and fused_quant.cu share (private to this package): the
// launch constants, the element loads and stores, the scalar steps of
// block_scale.h's rules on the device (amax bits, the hardware e4m3
// encoding of x / scale), 8-element vector loads and code packing, the warp
// and half-warp maxima, and the launchers' argument helpers.
#pragma once

#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"
#include "core/kernels/cuda/common.cuh"
#include "core/kernels/cuda/elem.cuh"
#include "core/kernels/fp8/block_scale.h"
#include "core/kernels/fp8/lt_scale_layout.h"

namespace gtp::kernels::fp8::cuda {

using ::gtp::kernels::cuda::internal::CeilDiv;
using ::gtp::kernels::cuda::internal::GridFor;
using ::gtp::kernels::cuda::internal::InOrderSum;
using ::gtp::kernels::cuda::internal::kFullMask;
using ::gtp::kernels::cuda::internal::kWarpSize;
using ::gtp::kernels::cuda::internal::Launch;
using ::gtp::kernels::cuda::internal::LoadVec;

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / kWarpSize;         // 8
constexpr int kBlock = static_cast<int>(kFp8Block);  // 128
constexpr int kPerLane = kBlock / kWarpSize;         // 4 elements of a 1×128 block per lane
constexpr int kTCols = 32;                           // x columns per transposed-quantise tile
constexpr int kT = 32;                               // side of a byte-transpose tile
static_assert(kPerLane * kWarpSize == kBlock, "a warp covers a 1x128 block");
static_assert(kTCols == kWarpSize && kT == kWarpSize, "one lane per tile column");

__device__ __forceinline__ float Load(const float* __restrict__ x, int64_t i) { return x[i]; }
__device__ __forceinline__ float Load(const bf16* __restrict__ x, int64_t i) {
  return BF16BitsToF32(x[i].bits);
}
__device__ __forceinline__ void Store(float* __restrict__ y, int64_t i, float v) { y[i] = v; }
__device__ __forceinline__ void Store(bf16* __restrict__ y, int64_t i, float v) {
  y[i].bits = F32ToBF16Bits(v);  // as the CPU's StoreF32
}

// The bits of |v| (ordered as unsigned: 0 < finite < inf < NaN).
__device__ __forceinline__ uint32_t AbsBits(float v) { return FloatBits(v) & 0x7fffffffu; }
__device__ __forceinline__ uint32_t MaxU(uint32_t a, uint32_t b) { return a > b ? a : b; }

// Two bf16 elements' amax bits at once: each 16-bit half of the result is
// the unsigned max of the halves of a and b (one max.u16x2 on sm_90; the
// host emulation and other targets take the halves apart). With each
// operand's sign bits cleared (& 0x7fff7fff), a half's max is the larger
// |x|'s bf16 bits, ordered as AbsBits orders their f32 widening (its bits
// << 16).
__device__ __forceinline__ uint32_t MaxU16x2(uint32_t a, uint32_t b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  uint32_t d;
  asm("max.u16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
#else
  return MaxU(a & 0xffff0000u, b & 0xffff0000u) | MaxU(a & 0xffffu, b & 0xffffu);
#endif
}
constexpr uint32_t kBf16PairAbsMask = 0x7fff7fffu;

// What encoding by one block's scale needs, made once per block: the
// reciprocal for Fp8Quotient (block_scale.h), which stands for the
// division when the scale allows it (not NaN, ≥ kFp8FastDivMinScale; the
// test is uniform over the block).
struct Fp8Coder {
  float s, r;
  bool nan, fast;
};
// The coder of scale s with its reciprocal r = RN(1/s) made elsewhere (a
// lane that divided for its column, shuffled to the lanes that encode it).
__device__ __forceinline__ Fp8Coder CoderWith(float s, float r) {
  return {s, r, s != s, s >= kFp8FastDivMinScale};
}
__device__ __forceinline__ Fp8Coder MakeCoder(float s) { return CoderWith(s, 1.0f / s); }

// x / s rounded to nearest, as Fp8BlockEncode divides.
__device__ __forceinline__ float Quotient(float x, const Fp8Coder& c) {
  return c.fast ? Fp8Quotient(x, c.s, c.r) : x / c.s;
}

// Fp8BlockEncode with the hardware's conversion (the file comment).
__device__ __forceinline__ uint8_t EncodeHw(float x, const Fp8Coder& c) {
  if (c.nan) return kE4M3NaNCode;
  return static_cast<uint8_t>(__nv_cvt_float_to_fp8(Quotient(x, c), __NV_SATFINITE, __NV_E4M3));
}

// The codes of a and b in one conversion: a in the low byte, b above it.
__device__ __forceinline__ uint32_t Encode2(float a, float b, const Fp8Coder& c) {
  if (c.nan) return kE4M3NaNCode * 0x0101u;
  return static_cast<uint32_t>(__nv_cvt_float2_to_fp8x2(
      make_float2(Quotient(a, c), Quotient(b, c)), __NV_SATFINITE, __NV_E4M3));
}

// 8 consecutive elements (16-byte aligned) as f32 (bf16: elem.cuh's LoadVec).
__device__ __forceinline__ void Load8(const float* __restrict__ p, float (&v)[8]) {
  const float4 a = *reinterpret_cast<const float4*>(p);
  const float4 b = *reinterpret_cast<const float4*>(p + 4);
  v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}
__device__ __forceinline__ void Load8(const bf16* __restrict__ p, float (&v)[8]) {
  LoadVec<8>(p, v);
}

// Encode2 where c.fast holds (so not NaN): Fp8Quotient with no test per
// element, so a block's elements encode with no control flow between them
// (the quantisers are issue-bound: docs/PERFORMANCE.md, session 28).
__device__ __forceinline__ uint32_t Encode2Fast(float a, float b, const Fp8Coder& c) {
  return static_cast<uint32_t>(__nv_cvt_float2_to_fp8x2(
      make_float2(Fp8Quotient(a, c.s, c.r), Fp8Quotient(b, c.s, c.r)), __NV_SATFINITE, __NV_E4M3));
}

// 8 codes of v with a block's coder, packed for one 8-byte store (byte k =
// v[k]); one test of the coder for the 8.
__device__ __forceinline__ uint2 Encode8(const float v[8], const Fp8Coder& c) {
  if (c.fast) {
    return make_uint2(Encode2Fast(v[0], v[1], c) | Encode2Fast(v[2], v[3], c) << 16,
                      Encode2Fast(v[4], v[5], c) | Encode2Fast(v[6], v[7], c) << 16);
  }
  return make_uint2(Encode2(v[0], v[1], c) | Encode2(v[2], v[3], c) << 16,
                    Encode2(v[4], v[5], c) | Encode2(v[6], v[7], c) << 16);
}

// Unsigned max over the warp; every lane gets it. All 32 lanes must call.
__device__ __forceinline__ uint32_t WarpMaxBits(uint32_t v) {
  for (int o = kWarpSize / 2; o > 0; o >>= 1) v = MaxU(v, __shfl_xor_sync(kFullMask, v, o));
  return v;
}

// The same for each 16-bit half (MaxU16x2): two columns' maxima in one pass.
__device__ __forceinline__ uint32_t WarpMaxU16x2(uint32_t v) {
  for (int o = kWarpSize / 2; o > 0; o >>= 1) v = MaxU16x2(v, __shfl_xor_sync(kFullMask, v, o));
  return v;
}

// Unsigned max over the block's kWarps warps; every thread gets it. All
// threads must call. `partial` (kWarps words of shared memory) may be
// written again only after a __syncthreads that follows the call.
__device__ __forceinline__ uint32_t BlockMaxBits(uint32_t v, uint32_t* partial) {
  v = WarpMaxBits(v);
  if (threadIdx.x % kWarpSize == 0) partial[threadIdx.x / kWarpSize] = v;
  __syncthreads();
  uint32_t m = 0;
#pragma unroll
  for (int k = 0; k < kWarps; ++k) m = MaxU(m, partial[k]);
  return m;
}

// ---------------------------------------------------------------- vectorised

constexpr int kVec = 8;                      // elements per thread
constexpr int kChunksPerBlock = kBlock / kVec;  // 16: a half-warp per 1×128 block
constexpr int kVTCols = 64;                  // x columns per vectorised transposed tile
static_assert(2 * kChunksPerBlock == kWarpSize, "two 1x128 blocks per warp");

// Max over the 16 lanes of each half-warp (xor offsets < 16 stay inside it).
__device__ __forceinline__ uint32_t HalfWarpMaxBits(uint32_t v) {
  for (int o = kChunksPerBlock / 2; o > 0; o >>= 1) v = MaxU(v, __shfl_xor_sync(kFullMask, v, o));
  return v;
}

inline bool Aligned(const void* p, uintptr_t n) { return reinterpret_cast<uintptr_t>(p) % n == 0; }

// ---------------------------------------------------------------- launch helpers

inline void RequireShape(int64_t R, int64_t C, const char* op) {
  GTP_CU_REQUIRE(R >= 0 && C >= 0, "%s: negative shape %lld x %lld", op, static_cast<long long>(R),
                 static_cast<long long>(C));
}

// A tile operand [rows, K]'s cuBLASLt buffer: its padding entries (K blocks
// past ceil(K/128), up to a multiple of 4) are NaN bytes, as ToLtScales
// writes them; the kernels fill the rest.
inline void PadLtTiles(float* lt, int64_t rows, int64_t K, cudaStream_t stream) {
  if (lt == nullptr || Fp8NumBlocks(K) % 4 == 0) return;
  ::gtp::kernels::cuda::internal::FillBytesAsync(
      lt, 0xff, sizeof(float) * LtScaleCount(true, rows, K), stream);
}

}  // namespace gtp::kernels::fp8::cuda
