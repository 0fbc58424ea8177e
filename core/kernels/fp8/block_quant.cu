// core/kernels/fp8/block_quant.cu — CUDA kernels of block-scaled e4m3
// quantisation (block_quant_cuda.h; formats and rules in block_scale.h).
//
// Bit-identical to the CPU paths (block_quant.cc): every scale is
// Fp8BlockScale of the block's amax bits, every code Fp8BlockEncode, every
// dequantised value Fp8BlockDecode (block_scale.h and core/dtype.h, GTP_HD:
// the same source on both sides). amax is the unsigned max of
// FloatBits(x) & 0x7fffffff over the block: exact and order-independent, so
// any reduction order gives the CPU's bits (NaN > inf > finite, which is how
// Fp8BlockScale sees a non-finite block). bf16 inputs widen exactly. The
// divisions are IEEE `/` (nvcc's default -prec-div=true; no fast math in
// tools/build_defs, so no FTZ either) and no kernel adds after a multiply,
// so FMA contraction cannot change a result.
//
//   1×128 blocks: one warp per (row, block), lane l holds columns
//     l, l + 32, l + 64, l + 96 of the block (coalesced), a warp max by xor
//     shuffles, then each lane encodes its 4 elements.
//   128×128 tiles: one thread block (256) per tile: a strided pass for amax,
//     a block max through shared memory, a second pass that encodes.
//   Transposed 1×128 (blocks along R): one thread block per 128 rows × 32
//     columns of x, read row-wise (coalesced) into shared memory; each warp
//     then takes one column (= one output block) as in the 1×128 case.
//   Dequantisation and the scale transpose: one thread per element. The code
//     transpose: 32×32 byte tiles through shared memory.
// Edge blocks are masked (padding reads as 0, which never raises amax);
// R·C = 0 launches nothing. Deterministic.
//
// Vectorised paths (taken when C is a multiple of 8 and the pointers are
// 16-byte aligned, as every tensor of a trainer's linear is; the kernels
// above stay for the rest):
//   1×128: a thread loads 8 consecutive elements (16 bytes of bf16), 16
//     threads share a block (a half-warp max), 8 codes go out as one 8-byte
//     store.
//   128×128: three passes over the matrix, all in parallel over 1×8 chunks:
//     each 1×128 row block's amax goes into its tile's slot by atomicMax on
//     the amax bits (an unsigned max: exact and order-independent, so
//     deterministic), the chunks are encoded with their tile's scale, and a
//     last pass turns the slots (the scales buffer itself) into scales.
//   Transposed 1×128: tiles of 128 rows × 64 columns loaded 8 elements per
//     thread; a lane encodes 4 consecutive rows of a column of xᵀ and stores
//     them as one 4-byte word (needs R a multiple of 4).
// Codes come from the hardware's e4m3 conversion (cvt.rn.satfinite, round
// to nearest even, saturating to ±448) of the IEEE quotient x / scale: for
// the finite quotients that reach it (|x / scale| ≤ 448·(1 + 2⁻²³); a NaN
// scale gives the NaN code first) the same bits as F32ToE4M3Bits, which
// block_quant_gpu_test.cc checks against the CPU byte for byte.
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "core/dtype.h"
#include "core/kernels/cuda/common.cuh"
#include "core/kernels/fp8/block_quant_cuda.h"
#include "core/kernels/fp8/block_scale.h"
#include "core/kernels/fp8/lt_scale_layout.h"

namespace gtp::kernels::fp8::cuda {
namespace {

using ::gtp::kernels::cuda::internal::CeilDiv;
using ::gtp::kernels::cuda::internal::GridFor;
using ::gtp::kernels::cuda::internal::kFullMask;
using ::gtp::kernels::cuda::internal::kWarpSize;

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

// Fp8BlockEncode with the hardware's conversion (the file comment).
__device__ __forceinline__ uint8_t EncodeHw(float x, float scale) {
  if (scale != scale) return kE4M3NaNCode;
  return static_cast<uint8_t>(__nv_cvt_float_to_fp8(x / scale, __NV_SATFINITE, __NV_E4M3));
}

// 8 consecutive elements (16-byte aligned) as f32.
__device__ __forceinline__ void Load8(const float* __restrict__ p, float v[8]) {
  const float4 a = *reinterpret_cast<const float4*>(p);
  const float4 b = *reinterpret_cast<const float4*>(p + 4);
  v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}
__device__ __forceinline__ void Load8(const bf16* __restrict__ p, float v[8]) {
  const uint4 u = *reinterpret_cast<const uint4*>(p);
  const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int k = 0; k < 4; ++k) {  // little-endian: the lower half is the earlier element
    v[2 * k] = BitsFloat(w[k] << 16);
    v[2 * k + 1] = BitsFloat(w[k] & 0xffff0000u);
  }
}

// 8 codes of v with scale s, packed for one 8-byte store (byte k = v[k]).
__device__ __forceinline__ uint2 Encode8(const float v[8], float s) {
  uint32_t lo = 0, hi = 0;
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    lo |= static_cast<uint32_t>(EncodeHw(v[k], s)) << (8 * k);
    hi |= static_cast<uint32_t>(EncodeHw(v[k + 4], s)) << (8 * k);
  }
  return make_uint2(lo, hi);
}

// Unsigned max over the warp; every lane gets it. All 32 lanes must call.
__device__ __forceinline__ uint32_t WarpMaxBits(uint32_t v) {
  for (int o = kWarpSize / 2; o > 0; o >>= 1) v = MaxU(v, __shfl_xor_sync(kFullMask, v, o));
  return v;
}

// ---------------------------------------------------------------- 1×128

// Warp w (grid-stride) quantises block w = r·nb + b: row r, columns
// [128·b, min(C, 128·b + 128)).
template <typename T>
__global__ void __launch_bounds__(kThreads)
    QuantizeRowKernel(const T* __restrict__ x, int64_t R, int64_t C, int64_t nb,
                      uint8_t* __restrict__ q, float* __restrict__ scales, float* __restrict__ lt) {
  const int lane = threadIdx.x % kWarpSize;
  const int64_t total = R * nb, stride = int64_t{gridDim.x} * kWarps;
  // w is the same for the whole warp: the shuffles see all 32 lanes.
  for (int64_t w = blockIdx.x * int64_t{kWarps} + threadIdx.x / kWarpSize; w < total; w += stride) {
    const int64_t r = w / nb, c0 = (w % nb) * kBlock;
    const int64_t base = r * C;
    float v[kPerLane];
    uint32_t amax = 0;
#pragma unroll
    for (int k = 0; k < kPerLane; ++k) {
      const int64_t c = c0 + lane + k * kWarpSize;
      v[k] = c < C ? Load(x, base + c) : 0.0f;
      amax = MaxU(amax, AbsBits(v[k]));
    }
    const float s = Fp8BlockScale(WarpMaxBits(amax));
    if (lane == 0) {
      scales[w] = s;
      if (lt != nullptr) lt[LtScaleOffset(false, R, C, r, w % nb)] = s;
    }
#pragma unroll
    for (int k = 0; k < kPerLane; ++k) {
      const int64_t c = c0 + lane + k * kWarpSize;
      if (c < C) q[base + c] = Fp8BlockEncode(v[k], s);
    }
  }
}

// ---------------------------------------------------------------- 128×128

// Block t (grid-stride) quantises tile t = i·cb + j: rows [128·i, ...),
// columns [128·j, ...), clipped to R × C. Thread e of a pass visits tile
// elements e, e + 256, ... (row e / 128, column e % 128: coalesced).
template <typename T>
__global__ void __launch_bounds__(kThreads)
    QuantizeTileKernel(const T* __restrict__ x, int64_t R, int64_t C, int64_t rb, int64_t cb,
                       uint8_t* __restrict__ q, float* __restrict__ scales,
                       float* __restrict__ lt) {
  __shared__ uint32_t partial[kWarps];
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  for (int64_t t = blockIdx.x; t < rb * cb; t += gridDim.x) {  // the same for the whole block
    const int64_t r0 = (t / cb) * kBlock, c0 = (t % cb) * kBlock;
    const int rows = static_cast<int>(R - r0 < kBlock ? R - r0 : kBlock);
    const int cols = static_cast<int>(C - c0 < kBlock ? C - c0 : kBlock);
    uint32_t amax = 0;
    for (int e = threadIdx.x; e < rows * kBlock; e += kThreads) {
      const int r = e / kBlock, c = e % kBlock;
      if (c < cols) amax = MaxU(amax, AbsBits(Load(x, (r0 + r) * C + c0 + c)));
    }
    amax = WarpMaxBits(amax);
    if (lane == 0) partial[warp] = amax;
    __syncthreads();
    uint32_t m = 0;
#pragma unroll
    for (int k = 0; k < kWarps; ++k) m = MaxU(m, partial[k]);
    __syncthreads();  // every thread has read `partial` before the next tile writes it
    const float s = Fp8BlockScale(m);
    if (threadIdx.x == 0) {
      scales[t] = s;
      if (lt != nullptr) lt[LtScaleOffset(true, R, C, t / cb, t % cb)] = s;
    }
    for (int e = threadIdx.x; e < rows * kBlock; e += kThreads) {
      const int r = e / kBlock, c = e % kBlock;
      if (c < cols) {
        const int64_t i = (r0 + r) * C + c0 + c;
        q[i] = Fp8BlockEncode(Load(x, i), s);
      }
    }
  }
}

// ---------------------------------------------------------------- dequantise

template <typename T>
__global__ void __launch_bounds__(kThreads)
    DequantizeKernel(const uint8_t* __restrict__ q, const float* __restrict__ scales, bool tiles,
                     int64_t R, int64_t C, int64_t cb, T* __restrict__ y) {
  const int64_t n = R * C;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = i / C, c = i % C;
    const int64_t srow = tiles ? r / kBlock : r;
    Store(y, i, Fp8BlockDecode(q[i], scales[srow * cb + c / kBlock]));
  }
}

// ---------------------------------------------------------------- transposed 1×128

// Block t (grid-stride) handles x rows [128·i, +128) × columns [32·j, +32),
// t = i·ncb + j: output blocks (row c of xᵀ, block i) for its 32 columns c.
// Load: warp w reads rows w, w + 8, ... of the tile, lane = column. Quantise:
// warp w takes tile columns w, w + 8, w + 16, w + 24; lane l holds rows
// l, l + 32, l + 64, l + 96 (tile[row][col] with a 33-float row: the column
// reads hit 32 different banks).
template <typename T>
__global__ void __launch_bounds__(kThreads)
    QuantizeRowsTransposedKernel(const T* __restrict__ x, int64_t R, int64_t C, int64_t nbr,
                                 int64_t ncb, uint8_t* __restrict__ qt,
                                 float* __restrict__ scales_t, float* __restrict__ lt) {
  __shared__ float tile[kBlock][kTCols + 1];
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  for (int64_t t = blockIdx.x; t < nbr * ncb; t += gridDim.x) {  // the same for the whole block
    const int64_t bi = t / ncb, r0 = bi * kBlock, c0 = (t % ncb) * kTCols;
    {
      const int64_t c = c0 + lane;
      for (int r = warp; r < kBlock; r += kWarps)
        tile[r][lane] = (r0 + r < R && c < C) ? Load(x, (r0 + r) * C + c) : 0.0f;
    }
    __syncthreads();
    for (int cc = warp; cc < kTCols; cc += kWarps) {
      const int64_t c = c0 + cc;
      if (c >= C) break;  // the same for the whole warp
      float v[kPerLane];
      uint32_t amax = 0;
#pragma unroll
      for (int k = 0; k < kPerLane; ++k) {
        v[k] = tile[lane + k * kWarpSize][cc];
        amax = MaxU(amax, AbsBits(v[k]));
      }
      const float s = Fp8BlockScale(WarpMaxBits(amax));
      if (lane == 0) {
        scales_t[c * nbr + bi] = s;
        if (lt != nullptr) lt[LtScaleOffset(false, C, R, c, bi)] = s;
      }
#pragma unroll
      for (int k = 0; k < kPerLane; ++k) {
        const int64_t r = r0 + lane + k * kWarpSize;
        if (r < R) qt[c * R + r] = Fp8BlockEncode(v[k], s);
      }
    }
    __syncthreads();  // every warp has read `tile` before the next tile overwrites it
  }
}

// ---------------------------------------------------------------- transposes

// qt[c·R + r] = q[r·C + c] by 32×32 tiles t = i·nct + j (rows 32·i, columns
// 32·j of q): read along q's rows, written along qt's rows.
__global__ void __launch_bounds__(kThreads)
    TransposeBytesKernel(const uint8_t* __restrict__ q, int64_t R, int64_t C, int64_t nrt,
                         int64_t nct, uint8_t* __restrict__ qt) {
  __shared__ uint8_t tile[kT][kT + 1];
  const int tx = threadIdx.x % kT, ty = threadIdx.x / kT;
  for (int64_t t = blockIdx.x; t < nrt * nct; t += gridDim.x) {  // the same for the whole block
    const int64_t r0 = (t / nct) * kT, c0 = (t % nct) * kT;
    for (int r = ty; r < kT; r += kWarps)
      if (r0 + r < R && c0 + tx < C) tile[r][tx] = q[(r0 + r) * C + c0 + tx];
    __syncthreads();
    for (int c = ty; c < kT; c += kWarps)
      if (c0 + c < C && r0 + tx < R) qt[(c0 + c) * R + r0 + tx] = tile[tx][c];
    __syncthreads();  // every thread has read `tile` before the next tile overwrites it
  }
}

// st[j·rb + i] = s[i·cb + j].
__global__ void __launch_bounds__(kThreads)
    TransposeScalesKernel(const float* __restrict__ s, int64_t R, int64_t C, int64_t rb,
                          int64_t cb, float* __restrict__ st, float* __restrict__ lt) {
  const int64_t n = rb * cb;
  for (int64_t k = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; k < n;
       k += int64_t{gridDim.x} * blockDim.x) {
    st[(k % cb) * rb + k / cb] = s[k];
    // Entry (j, i) of the [C, R] operand's tile table.
    if (lt != nullptr) lt[LtScaleOffset(true, C, R, k % cb, k / cb)] = s[k];
  }
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

// The 1×8 chunks of x [R, C] (C % 8 == 0): chunk g = w·16 + sub is block
// w = r·nb + b's sub-th, columns 128·b + 8·sub … + 8 (absent when ≥ C). The
// loop is warp-uniform (all lanes shuffle); `Body(live, r, c, w, sub, v,
// block_amax_bits)` runs for every lane, live when its chunk exists.
template <typename T, typename Body>
__device__ __forceinline__ void ForEachChunk(const T* __restrict__ x, int64_t R, int64_t C,
                                             int64_t nb, Body body) {
  const int64_t chunks = R * nb * kChunksPerBlock, stride = int64_t{gridDim.x} * kThreads;
  for (int64_t g0 = blockIdx.x * int64_t{kThreads} + (threadIdx.x & ~(kWarpSize - 1)); g0 < chunks;
       g0 += stride) {
    const int64_t g = g0 + threadIdx.x % kWarpSize;
    const int64_t w = g / kChunksPerBlock;
    const int sub = static_cast<int>(g % kChunksPerBlock);
    const int64_t r = w / nb, c = (w % nb) * kBlock + sub * kVec;
    const bool live = g < chunks && c < C;
    float v[kVec] = {0, 0, 0, 0, 0, 0, 0, 0};
    uint32_t amax = 0;
    if (live) {
      Load8(x + r * C + c, v);
#pragma unroll
      for (int k = 0; k < kVec; ++k) amax = MaxU(amax, AbsBits(v[k]));
    }
    body(live, r, c, w, sub, v, HalfWarpMaxBits(amax));
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    QuantizeRowVecKernel(const T* __restrict__ x, int64_t R, int64_t C, int64_t nb,
                         uint8_t* __restrict__ q, float* __restrict__ scales,
                         float* __restrict__ lt) {
  ForEachChunk(x, R, C, nb, [&](bool live, int64_t r, int64_t c, int64_t w, int sub,
                                const float* v, uint32_t amax) {
    if (!live) return;
    const float s = Fp8BlockScale(amax);
    if (sub == 0) {
      scales[w] = s;
      if (lt != nullptr) lt[LtScaleOffset(false, R, C, r, w % nb)] = s;
    }
    *reinterpret_cast<uint2*>(q + r * C + c) = Encode8(v, s);
  });
}

// Pass 1 of 128×128: slot[tile] = max(slot[tile], the 1×128 block's amax
// bits) (slots zeroed before).
template <typename T>
__global__ void __launch_bounds__(kThreads)
    TileAmaxKernel(const T* __restrict__ x, int64_t R, int64_t C, int64_t nb,
                   uint32_t* __restrict__ slots) {
  ForEachChunk(x, R, C, nb, [&](bool live, int64_t r, int64_t c, int64_t, int sub, const float*,
                                uint32_t amax) {
    if (live && sub == 0) atomicMax(slots + (r / kBlock) * nb + c / kBlock, amax);
  });
}

// Pass 2: every chunk encoded with its tile's scale (from the slot's bits).
template <typename T>
__global__ void __launch_bounds__(kThreads)
    TileEncodeKernel(const T* __restrict__ x, int64_t R, int64_t C, int64_t nb,
                     const uint32_t* __restrict__ slots, uint8_t* __restrict__ q) {
  ForEachChunk(x, R, C, nb, [&](bool live, int64_t r, int64_t c, int64_t, int, const float* v,
                                uint32_t) {
    if (!live) return;
    const float s = Fp8BlockScale(slots[(r / kBlock) * nb + c / kBlock]);
    *reinterpret_cast<uint2*>(q + r * C + c) = Encode8(v, s);
  });
}

// Pass 3: each slot's amax bits become its scale, in place.
__global__ void __launch_bounds__(kThreads)
    TileScalesKernel(int64_t R, int64_t C, int64_t cb, float* __restrict__ scales,
                     float* __restrict__ lt) {
  const int64_t n = Fp8NumBlocks(R) * cb;
  for (int64_t t = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; t < n;
       t += int64_t{gridDim.x} * blockDim.x) {
    const float s = Fp8BlockScale(FloatBits(scales[t]));
    scales[t] = s;
    if (lt != nullptr) lt[LtScaleOffset(true, R, C, t / cb, t % cb)] = s;
  }
}

// Transposed 1×128, tiles of 128 rows × 64 columns (C % 8 == 0, R % 4 ==
// 0): 8 threads load a row's 64 columns, 32 rows a pass; then warp w takes
// columns w, w + 8, …, lane l rows 4l … 4l + 3 of the column (one word out).
template <typename T>
__global__ void __launch_bounds__(kThreads)
    QuantizeRowsTransposedVecKernel(const T* __restrict__ x, int64_t R, int64_t C, int64_t nbr,
                                    int64_t ncb, uint8_t* __restrict__ qt,
                                    float* __restrict__ scales_t, float* __restrict__ lt) {
  __shared__ float tile[kBlock][kVTCols + 1];
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  constexpr int kThreadsPerRow = kVTCols / kVec;           // 8
  constexpr int kRowsPerPass = kThreads / kThreadsPerRow;  // 32
  for (int64_t t = blockIdx.x; t < nbr * ncb; t += gridDim.x) {  // the same for the whole block
    const int64_t bi = t / ncb, r0 = bi * kBlock, c0 = (t % ncb) * kVTCols;
    const int cl = (threadIdx.x % kThreadsPerRow) * kVec;
    for (int r = threadIdx.x / kThreadsPerRow; r < kBlock; r += kRowsPerPass) {
      float v[kVec] = {0, 0, 0, 0, 0, 0, 0, 0};
      if (r0 + r < R && c0 + cl < C) Load8(x + (r0 + r) * C + c0 + cl, v);
#pragma unroll
      for (int k = 0; k < kVec; ++k) tile[r][cl + k] = v[k];
    }
    __syncthreads();
    for (int cc = warp; cc < kVTCols; cc += kWarps) {
      const int64_t c = c0 + cc;
      if (c >= C) break;  // the same for the whole warp
      float v[4];
      uint32_t amax = 0;
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        v[k] = tile[4 * lane + k][cc];
        amax = MaxU(amax, AbsBits(v[k]));
      }
      const float s = Fp8BlockScale(WarpMaxBits(amax));
      if (lane == 0) {
        scales_t[c * nbr + bi] = s;
        if (lt != nullptr) lt[LtScaleOffset(false, C, R, c, bi)] = s;
      }
      const int64_t r = r0 + 4 * lane;
      if (r < R) {  // R % 4 == 0: all four rows exist
        uint32_t word = 0;
#pragma unroll
        for (int k = 0; k < 4; ++k) word |= static_cast<uint32_t>(EncodeHw(v[k], s)) << (8 * k);
        *reinterpret_cast<uint32_t*>(qt + c * R + r) = word;
      }
    }
    __syncthreads();  // every warp has read `tile` before the next tile overwrites it
  }
}

// ---------------------------------------------------------------- column sums

// A column's sum over one 128-row block, in the order block_quant.h fixes
// (ColumnBlockSumOrder): lane l adds rows l, l + 32, l + 64, l + 96 (v[0..3])
// left to right, then a butterfly over the lanes (xor 16, 8, 4, 2, 1; f32
// addition commutes, so every lane ends with the same bits). All 32 lanes
// must call.
__device__ __forceinline__ float ColumnBlockSum(const float v[4]) {
  float p = ((v[0] + v[1]) + v[2]) + v[3];
  for (int o = kWarpSize / 2; o > 0; o >>= 1) p = p + __shfl_xor_sync(kFullMask, p, o);
  return p;
}

// The same for any x (the fused kernel's fallback): warp w (grid-stride)
// takes (row block bi, column c) = (w / C, w % C); rows past R add +0.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    ColumnPartialSumsKernel(const T* __restrict__ x, int64_t R, int64_t C, int64_t nbr,
                            float* __restrict__ col_partial) {
  const int lane = threadIdx.x % kWarpSize;
  const int64_t total = nbr * C, stride = int64_t{gridDim.x} * kWarps;
  for (int64_t w = blockIdx.x * int64_t{kWarps} + threadIdx.x / kWarpSize; w < total; w += stride) {
    const int64_t bi = w / C, c = w % C;
    float v[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int64_t r = bi * kBlock + lane + k * kWarpSize;
      v[k] = r < R ? Load(x, r * C + c) : 0.0f;
    }
    const float sum = ColumnBlockSum(v);
    if (lane == 0) col_partial[w] = sum;
  }
}

// sums[c] (f32 or bf16) = sums[c] + (the blocks' partial sums added in
// ascending block order, from +0), in f32, rounded once for bf16.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    AddColumnPartialsKernel(const float* __restrict__ col_partial, int64_t nbr, int64_t C,
                            T* __restrict__ sums) {
  for (int64_t c = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; c < C;
       c += int64_t{gridDim.x} * blockDim.x) {
    float acc = 0.0f;
    for (int64_t bi = 0; bi < nbr; ++bi) acc += col_partial[bi * C + c];
    Store(sums, c, Load(sums, c) + acc);
  }
}

// ---------------------------------------------------------------- both 1×128 layouts

constexpr int kPairCols = kBlock / 2;  // bf16 column pairs (32-bit words) in a tile row

// x [R, C] bf16 (C % 8 == 0) → its 1×128 quantisation along C (q, scales,
// lt) and that of xᵀ (qt, scales_t, lt_t), one read of x: block t (grid-
// stride) takes the 128 × 128 tile t = i·ncb + j. Phase 1: 16 threads per
// row (8 columns each, one 16-byte load), 16 rows a pass, 8 passes, every
// load issued first; each half-warp holds one 1×128 row block, quantises it
// and keeps the raw bf16 pairs in shared memory (rows of 65 words: the
// column reads below hit 32 different banks). Phase 2: warp w takes column
// pairs w, w + 8, …; lane l holds rows l, l + 32, l + 64, l + 96 of both
// columns, a warp max per column gives xᵀ's two block scales, and each code
// goes out as a byte (a warp writes 32 consecutive bytes of a row of qt).
// The same scalar rules as every other kernel here, so the same bits as the
// two kernels it fuses.
__global__ void __launch_bounds__(kThreads)
    QuantizeRowsAndTransposedKernel(const bf16* __restrict__ x, int64_t R, int64_t C,
                                    int64_t ncb, uint8_t* __restrict__ q,
                                    float* __restrict__ scales, float* __restrict__ lt,
                                    uint8_t* __restrict__ qt, float* __restrict__ scales_t,
                                    float* __restrict__ lt_t, float* __restrict__ col_partial) {
  __shared__ uint32_t tile[kBlock][kPairCols + 1];
  constexpr int kRowsPerPass = kThreads / kChunksPerBlock;  // 16
  constexpr int kPasses = kBlock / kRowsPerPass;            // 8
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  const int sub = threadIdx.x % kChunksPerBlock, rsub = threadIdx.x / kChunksPerBlock;
  const int64_t nbc = Fp8NumBlocks(C), nbr = Fp8NumBlocks(R), tiles = nbr * ncb;
  for (int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {  // the same for the whole block
    const int64_t bi = t / ncb, bj = t % ncb, r0 = bi * kBlock, c0 = bj * kBlock;
    const int64_t c = c0 + sub * kVec;
    uint4 raw[kPasses];
#pragma unroll
    for (int p = 0; p < kPasses; ++p) {
      const int64_t r = r0 + p * kRowsPerPass + rsub;
      raw[p] = (r < R && c < C) ? *reinterpret_cast<const uint4*>(x + r * C + c)
                                : make_uint4(0, 0, 0, 0);  // +0: never raises amax
    }
#pragma unroll
    for (int p = 0; p < kPasses; ++p) {
      const int tr = p * kRowsPerPass + rsub;
      const int64_t r = r0 + tr;
      const uint32_t w[4] = {raw[p].x, raw[p].y, raw[p].z, raw[p].w};
      float v[kVec];
      uint32_t amax = 0;
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        v[2 * k] = BitsFloat(w[k] << 16);
        v[2 * k + 1] = BitsFloat(w[k] & 0xffff0000u);
        tile[tr][sub * 4 + k] = w[k];
      }
#pragma unroll
      for (int k = 0; k < kVec; ++k) amax = MaxU(amax, AbsBits(v[k]));
      const float s = Fp8BlockScale(HalfWarpMaxBits(amax));  // all lanes take part
      if (r < R && c < C) {
        *reinterpret_cast<uint2*>(q + r * C + c) = Encode8(v, s);
        if (sub == 0) {
          scales[r * nbc + bj] = s;
          if (lt != nullptr) lt[LtScaleOffset(false, R, C, r, bj)] = s;
        }
      }
    }
    __syncthreads();
    for (int cp = warp; cp < kPairCols; cp += kWarps) {
      const int64_t cc = c0 + 2 * cp;
      if (cc >= C) break;  // the same for the whole warp; C % 8 == 0: both columns exist
      float lo[4], hi[4];
      uint32_t amax_lo = 0, amax_hi = 0;
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const uint32_t w = tile[lane + k * kWarpSize][cp];
        lo[k] = BitsFloat(w << 16);
        hi[k] = BitsFloat(w & 0xffff0000u);
        amax_lo = MaxU(amax_lo, AbsBits(lo[k]));
        amax_hi = MaxU(amax_hi, AbsBits(hi[k]));
      }
      const float s_lo = Fp8BlockScale(WarpMaxBits(amax_lo));
      const float s_hi = Fp8BlockScale(WarpMaxBits(amax_hi));
      if (col_partial != nullptr) {  // the two columns' sums over the tile's rows
        const float sum_lo = ColumnBlockSum(lo), sum_hi = ColumnBlockSum(hi);
        if (lane == 0) {
          col_partial[bi * C + cc] = sum_lo;
          col_partial[bi * C + cc + 1] = sum_hi;
        }
      }
      if (lane == 0) {
        scales_t[cc * nbr + bi] = s_lo;
        scales_t[(cc + 1) * nbr + bi] = s_hi;
        if (lt_t != nullptr) {
          lt_t[LtScaleOffset(false, C, R, cc, bi)] = s_lo;
          lt_t[LtScaleOffset(false, C, R, cc + 1, bi)] = s_hi;
        }
      }
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const int64_t r = r0 + lane + k * kWarpSize;
        if (r < R) {
          qt[cc * R + r] = EncodeHw(lo[k], s_lo);
          qt[(cc + 1) * R + r] = EncodeHw(hi[k], s_hi);
        }
      }
    }
    __syncthreads();  // every warp has read `tile` before the next tile overwrites it
  }
}

// ---------------------------------------------------------------- 128×128 and its transpose

constexpr int kCodeRowWords = kBlock / 4 + 1;  // a tile row of codes in shared memory, padded

// x [R, C] (C % 8 == 0) → its 128×128 quantisation (q, scales, lt) and
// that of xᵀ (qt, scales_t, lt_t: the transposed codes and scale grid, as
// TransposeTiles makes them), one thread block per tile t = i·cb + j (grid-
// stride): 16 threads per row (8 columns each), 16 rows a pass, 8 passes,
// every load issued first; the tile's amax by warp maxima and a block max;
// the codes go out row-wise and into shared memory (rows of 33 words), from
// which warp w writes the tile's columns w, w + 8, … as rows of qt, lane l
// holding rows l, l + 32, l + 64, l + 96 (a byte each; a warp writes 32
// consecutive bytes of a row of qt).
template <typename T>
__global__ void __launch_bounds__(kThreads)
    QuantizeTileAndTransposeKernel(const T* __restrict__ x, int64_t R, int64_t C, int64_t rb,
                                   int64_t cb, uint8_t* __restrict__ q,
                                   float* __restrict__ scales, float* __restrict__ lt,
                                   uint8_t* __restrict__ qt, float* __restrict__ scales_t,
                                   float* __restrict__ lt_t) {
  __shared__ uint32_t codes[kBlock][kCodeRowWords];
  __shared__ uint32_t partial[kWarps];
  constexpr int kRowsPerPass = kThreads / kChunksPerBlock;  // 16
  constexpr int kPasses = kBlock / kRowsPerPass;            // 8
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  const int sub = threadIdx.x % kChunksPerBlock, rsub = threadIdx.x / kChunksPerBlock;
  for (int64_t t = blockIdx.x; t < rb * cb; t += gridDim.x) {  // the same for the whole block
    const int64_t i = t / cb, j = t % cb, r0 = i * kBlock, c0 = j * kBlock;
    const int64_t c = c0 + sub * kVec;
    float v[kPasses][kVec];
    uint32_t amax = 0;
#pragma unroll
    for (int p = 0; p < kPasses; ++p) {
      const int64_t r = r0 + p * kRowsPerPass + rsub;
      if (r < R && c < C) {
        Load8(x + r * C + c, v[p]);
      } else {
#pragma unroll
        for (int k = 0; k < kVec; ++k) v[p][k] = 0.0f;  // +0: never raises amax
      }
    }
#pragma unroll
    for (int p = 0; p < kPasses; ++p)
#pragma unroll
      for (int k = 0; k < kVec; ++k) amax = MaxU(amax, AbsBits(v[p][k]));
    amax = WarpMaxBits(amax);
    if (lane == 0) partial[warp] = amax;
    __syncthreads();
    uint32_t m = 0;
#pragma unroll
    for (int k = 0; k < kWarps; ++k) m = MaxU(m, partial[k]);
    const float s = Fp8BlockScale(m);
    if (threadIdx.x == 0) {
      scales[t] = s;
      scales_t[j * rb + i] = s;
      if (lt != nullptr) lt[LtScaleOffset(true, R, C, i, j)] = s;
      if (lt_t != nullptr) lt_t[LtScaleOffset(true, C, R, j, i)] = s;
    }
#pragma unroll
    for (int p = 0; p < kPasses; ++p) {
      const int tr = p * kRowsPerPass + rsub;
      const int64_t r = r0 + tr;
      const uint2 e8 = Encode8(v[p], s);
      codes[tr][2 * sub] = e8.x;
      codes[tr][2 * sub + 1] = e8.y;
      if (r < R && c < C) *reinterpret_cast<uint2*>(q + r * C + c) = e8;
    }
    __syncthreads();
    const uint8_t* bytes = reinterpret_cast<const uint8_t*>(&codes[0][0]);
    for (int cc = warp; cc < kBlock && c0 + cc < C; cc += kWarps) {
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const int tr = lane + k * kWarpSize;
        if (r0 + tr < R) qt[(c0 + cc) * R + r0 + tr] = bytes[tr * 4 * kCodeRowWords + cc];
      }
    }
    __syncthreads();  // `codes` and `partial` read by all before the next tile writes them
  }
}

bool Aligned(const void* p, uintptr_t n) { return reinterpret_cast<uintptr_t>(p) % n == 0; }

// ---------------------------------------------------------------- launchers

void RequireShape(int64_t R, int64_t C, const char* op) {
  GTP_CU_REQUIRE(R >= 0 && C >= 0, "%s: negative shape %lld x %lld", op, static_cast<long long>(R),
                 static_cast<long long>(C));
}

// A tile operand [rows, K]'s cuBLASLt buffer: its padding entries (K blocks
// past ceil(K/128), up to a multiple of 4) are NaN bytes, as ToLtScales
// writes them; the kernels fill the rest.
void PadLtTiles(float* lt, int64_t rows, int64_t K, cudaStream_t stream) {
  if (lt == nullptr || Fp8NumBlocks(K) % 4 == 0) return;
  GTP_CU_CHECK(cudaMemsetAsync(lt, 0xff, sizeof(float) * LtScaleCount(true, rows, K), stream));
}

template <typename T>
void LaunchRow(const T* x, int64_t R, int64_t C, uint8_t* q, float* scales, float* lt,
               cudaStream_t stream) {
  RequireShape(R, C, "fp8::cuda::QuantizeRow1x128");
  if (R == 0 || C == 0) return;
  const int64_t nb = Fp8NumBlocks(C);
  if (C % kVec == 0 && Aligned(x, 16) && Aligned(q, 8)) {
    QuantizeRowVecKernel<T><<<GridFor(R * nb * kChunksPerBlock, kThreads), kThreads, 0, stream>>>(
        x, R, C, nb, q, scales, lt);
  } else {
    QuantizeRowKernel<T>
        <<<GridFor(R * nb, kWarps), kThreads, 0, stream>>>(x, R, C, nb, q, scales, lt);
  }
  GTP_CU_LAUNCH_CHECK();
}

template <typename T>
void LaunchTile(const T* x, int64_t R, int64_t C, uint8_t* q, float* scales, float* lt,
                cudaStream_t stream) {
  RequireShape(R, C, "fp8::cuda::QuantizeTile128x128");
  if (R == 0 || C == 0) return;
  const int64_t rb = Fp8NumBlocks(R), cb = Fp8NumBlocks(C);
  PadLtTiles(lt, R, C, stream);
  if (C % kVec == 0 && Aligned(x, 16) && Aligned(q, 8)) {
    uint32_t* slots = reinterpret_cast<uint32_t*>(scales);
    GTP_CU_CHECK(cudaMemsetAsync(slots, 0, sizeof(uint32_t) * rb * cb, stream));
    const unsigned grid = GridFor(R * cb * kChunksPerBlock, kThreads);
    TileAmaxKernel<T><<<grid, kThreads, 0, stream>>>(x, R, C, cb, slots);
    GTP_CU_LAUNCH_CHECK();
    TileEncodeKernel<T><<<grid, kThreads, 0, stream>>>(x, R, C, cb, slots, q);
    GTP_CU_LAUNCH_CHECK();
    TileScalesKernel<<<GridFor(rb * cb, kThreads), kThreads, 0, stream>>>(R, C, cb, scales, lt);
  } else {
    QuantizeTileKernel<T>
        <<<GridFor(rb * cb, 1), kThreads, 0, stream>>>(x, R, C, rb, cb, q, scales, lt);
  }
  GTP_CU_LAUNCH_CHECK();
}

template <typename T>
void LaunchDequantize(const uint8_t* q, const float* scales, bool tiles, int64_t R, int64_t C, T* y,
                      cudaStream_t stream) {
  RequireShape(R, C, "fp8::cuda::DequantizeBlocks");
  if (R == 0 || C == 0) return;
  DequantizeKernel<T><<<GridFor(R * C, kThreads), kThreads, 0, stream>>>(q, scales, tiles, R, C,
                                                                         Fp8NumBlocks(C), y);
  GTP_CU_LAUNCH_CHECK();
}

template <typename T>
void LaunchRowsTransposed(const T* x, int64_t R, int64_t C, uint8_t* qt, float* scales_t,
                          float* lt, cudaStream_t stream) {
  RequireShape(R, C, "fp8::cuda::QuantizeRowsTransposed");
  if (R == 0 || C == 0) return;
  const int64_t nbr = Fp8NumBlocks(R);
  if (C % kVec == 0 && R % 4 == 0 && Aligned(x, 16) && Aligned(qt, 4)) {
    const int64_t ncb = CeilDiv(C, kVTCols);
    QuantizeRowsTransposedVecKernel<T>
        <<<GridFor(nbr * ncb, 1), kThreads, 0, stream>>>(x, R, C, nbr, ncb, qt, scales_t, lt);
  } else {
    const int64_t ncb = CeilDiv(C, kTCols);
    QuantizeRowsTransposedKernel<T>
        <<<GridFor(nbr * ncb, 1), kThreads, 0, stream>>>(x, R, C, nbr, ncb, qt, scales_t, lt);
  }
  GTP_CU_LAUNCH_CHECK();
}

template <typename T>
void LaunchRowsAndTransposed(const T* x, int64_t R, int64_t C, uint8_t* q, float* scales,
                             float* lt, uint8_t* qt, float* scales_t, float* lt_t,
                             float* col_partial, cudaStream_t stream) {
  RequireShape(R, C, "fp8::cuda::QuantizeRowsAndTransposed");
  if (R == 0 || C == 0) return;
  if constexpr (std::is_same_v<T, bf16>) {
    if (C % kVec == 0 && Aligned(x, 16) && Aligned(q, 8)) {
      const int64_t ncb = Fp8NumBlocks(C);
      QuantizeRowsAndTransposedKernel<<<GridFor(Fp8NumBlocks(R) * ncb, 1), kThreads, 0, stream>>>(
          x, R, C, ncb, q, scales, lt, qt, scales_t, lt_t, col_partial);
      GTP_CU_LAUNCH_CHECK();
      return;
    }
  }
  LaunchRow(x, R, C, q, scales, lt, stream);  // f32 or unaligned: the separate kernels
  LaunchRowsTransposed(x, R, C, qt, scales_t, lt_t, stream);
  if (col_partial != nullptr) {
    const int64_t nbr = Fp8NumBlocks(R);
    ColumnPartialSumsKernel<T>
        <<<GridFor(nbr * C, kWarps), kThreads, 0, stream>>>(x, R, C, nbr, col_partial);
    GTP_CU_LAUNCH_CHECK();
  }
}

template <typename T>
void LaunchTileAndTranspose(const T* x, int64_t R, int64_t C, uint8_t* q, float* scales,
                            float* lt, uint8_t* qt, float* scales_t, float* lt_t,
                            cudaStream_t stream) {
  RequireShape(R, C, "fp8::cuda::QuantizeTileAndTranspose");
  if (R == 0 || C == 0) return;
  if (C % kVec == 0 && Aligned(x, 16) && Aligned(q, 8)) {
    const int64_t rb = Fp8NumBlocks(R), cb = Fp8NumBlocks(C);
    PadLtTiles(lt, R, C, stream);
    PadLtTiles(lt_t, C, R, stream);
    QuantizeTileAndTransposeKernel<T><<<GridFor(rb * cb, 1), kThreads, 0, stream>>>(
        x, R, C, rb, cb, q, scales, lt, qt, scales_t, lt_t);
    GTP_CU_LAUNCH_CHECK();
    return;
  }
  LaunchTile(x, R, C, q, scales, lt, stream);  // the tile kernels, then the transpose
  TransposeTiles(q, scales, R, C, qt, scales_t, lt_t, stream);
}

}  // namespace

void QuantizeRow1x128(const float* x, int64_t R, int64_t C, uint8_t* q, float* scales, float* lt,
                      cudaStream_t stream) {
  LaunchRow(x, R, C, q, scales, lt, stream);
}
void QuantizeRow1x128(const bf16* x, int64_t R, int64_t C, uint8_t* q, float* scales, float* lt,
                      cudaStream_t stream) {
  LaunchRow(x, R, C, q, scales, lt, stream);
}

void QuantizeTile128x128(const float* x, int64_t R, int64_t C, uint8_t* q, float* scales,
                         float* lt, cudaStream_t stream) {
  LaunchTile(x, R, C, q, scales, lt, stream);
}
void QuantizeTile128x128(const bf16* x, int64_t R, int64_t C, uint8_t* q, float* scales,
                         float* lt, cudaStream_t stream) {
  LaunchTile(x, R, C, q, scales, lt, stream);
}

void DequantizeBlocks(const uint8_t* q, const float* scales, bool tiles, int64_t R, int64_t C,
                      float* y, cudaStream_t stream) {
  LaunchDequantize(q, scales, tiles, R, C, y, stream);
}
void DequantizeBlocks(const uint8_t* q, const float* scales, bool tiles, int64_t R, int64_t C,
                      bf16* y, cudaStream_t stream) {
  LaunchDequantize(q, scales, tiles, R, C, y, stream);
}

void QuantizeRowsTransposed(const float* x, int64_t R, int64_t C, uint8_t* qt, float* scales_t,
                            float* lt, cudaStream_t stream) {
  LaunchRowsTransposed(x, R, C, qt, scales_t, lt, stream);
}
void QuantizeRowsTransposed(const bf16* x, int64_t R, int64_t C, uint8_t* qt, float* scales_t,
                            float* lt, cudaStream_t stream) {
  LaunchRowsTransposed(x, R, C, qt, scales_t, lt, stream);
}

void QuantizeRowsAndTransposed(const float* x, int64_t R, int64_t C, uint8_t* q, float* scales,
                               float* lt, uint8_t* qt, float* scales_t, float* lt_t,
                               float* col_partial, cudaStream_t stream) {
  LaunchRowsAndTransposed(x, R, C, q, scales, lt, qt, scales_t, lt_t, col_partial, stream);
}
void QuantizeRowsAndTransposed(const bf16* x, int64_t R, int64_t C, uint8_t* q, float* scales,
                               float* lt, uint8_t* qt, float* scales_t, float* lt_t,
                               float* col_partial, cudaStream_t stream) {
  LaunchRowsAndTransposed(x, R, C, q, scales, lt, qt, scales_t, lt_t, col_partial, stream);
}

void AddColumnPartials(const float* col_partial, int64_t nbr, int64_t C, float* sums,
                       cudaStream_t stream) {
  if (C == 0) return;
  AddColumnPartialsKernel<float>
      <<<GridFor(C, kThreads), kThreads, 0, stream>>>(col_partial, nbr, C, sums);
  GTP_CU_LAUNCH_CHECK();
}
void AddColumnPartials(const float* col_partial, int64_t nbr, int64_t C, bf16* sums,
                       cudaStream_t stream) {
  if (C == 0) return;
  AddColumnPartialsKernel<bf16>
      <<<GridFor(C, kThreads), kThreads, 0, stream>>>(col_partial, nbr, C, sums);
  GTP_CU_LAUNCH_CHECK();
}

void QuantizeTileAndTranspose(const float* x, int64_t R, int64_t C, uint8_t* q, float* scales,
                              float* lt, uint8_t* qt, float* scales_t, float* lt_t,
                              cudaStream_t stream) {
  LaunchTileAndTranspose(x, R, C, q, scales, lt, qt, scales_t, lt_t, stream);
}
void QuantizeTileAndTranspose(const bf16* x, int64_t R, int64_t C, uint8_t* q, float* scales,
                              float* lt, uint8_t* qt, float* scales_t, float* lt_t,
                              cudaStream_t stream) {
  LaunchTileAndTranspose(x, R, C, q, scales, lt, qt, scales_t, lt_t, stream);
}

void TransposeTiles(const uint8_t* q, const float* scales, int64_t R, int64_t C, uint8_t* qt,
                    float* scales_t, float* lt, cudaStream_t stream) {
  RequireShape(R, C, "fp8::cuda::TransposeTiles");
  if (R == 0 || C == 0) return;
  const int64_t nrt = CeilDiv(R, kT), nct = CeilDiv(C, kT);
  TransposeBytesKernel<<<GridFor(nrt * nct, 1), kThreads, 0, stream>>>(q, R, C, nrt, nct, qt);
  GTP_CU_LAUNCH_CHECK();
  const int64_t rb = Fp8NumBlocks(R), cb = Fp8NumBlocks(C);
  PadLtTiles(lt, C, R, stream);
  TransposeScalesKernel<<<GridFor(rb * cb, kThreads), kThreads, 0, stream>>>(scales, R, C, rb, cb,
                                                                             scales_t, lt);
  GTP_CU_LAUNCH_CHECK();
}

}  // namespace gtp::kernels::fp8::cuda
