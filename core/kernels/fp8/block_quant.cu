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
#include "core/kernels/fp8/quant_device.cuh"

namespace gtp::kernels::fp8::cuda {
namespace {

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
  for (int64_t t = blockIdx.x; t < rb * cb; t += gridDim.x) {  // the same for the whole block
    const int64_t r0 = (t / cb) * kBlock, c0 = (t % cb) * kBlock;
    const int rows = static_cast<int>(R - r0 < kBlock ? R - r0 : kBlock);
    const int cols = static_cast<int>(C - c0 < kBlock ? C - c0 : kBlock);
    uint32_t amax = 0;
    for (int e = threadIdx.x; e < rows * kBlock; e += kThreads) {
      const int r = e / kBlock, c = e % kBlock;
      if (c < cols) amax = MaxU(amax, AbsBits(Load(x, (r0 + r) * C + c0 + c)));
    }
    const uint32_t m = BlockMaxBits(amax, partial);
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
    // Row and K block of w (a 32-bit division where both fit: the 64-bit
    // one is a long instruction sequence, once per 8 elements).
    int64_t r, j;
    if (w <= INT32_MAX && nb <= INT32_MAX) {
      const uint32_t w32 = static_cast<uint32_t>(w), nb32 = static_cast<uint32_t>(nb);
      r = w32 / nb32;
      j = w32 - static_cast<uint32_t>(r) * nb32;
    } else {
      r = w / nb;
      j = w % nb;
    }
    const int64_t c = j * kBlock + sub * kVec;
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
    *reinterpret_cast<uint2*>(q + r * C + c) = Encode8(v, MakeCoder(s));
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
    *reinterpret_cast<uint2*>(q + r * C + c) = Encode8(v, MakeCoder(s));
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
        const Fp8Coder kc = MakeCoder(s);
        *reinterpret_cast<uint32_t*>(qt + c * R + r) =
            Encode2(v[0], v[1], kc) | Encode2(v[2], v[3], kc) << 16;
      }
    }
    __syncthreads();  // every warp has read `tile` before the next tile overwrites it
  }
}

template <typename T>
void LaunchRow(const T* x, int64_t R, int64_t C, uint8_t* q, float* scales, float* lt,
               cudaStream_t stream) {
  RequireShape(R, C, "fp8::cuda::QuantizeRow1x128");
  if (R == 0 || C == 0) return;
  const int64_t nb = Fp8NumBlocks(C);
  if (C % kVec == 0 && Aligned(x, 16) && Aligned(q, 8)) {
    Launch(QuantizeRowVecKernel<T>, GridFor(R * nb * kChunksPerBlock, kThreads), kThreads, 0,
           stream, x, R, C, nb, q, scales, lt);
  } else {
    Launch(QuantizeRowKernel<T>, GridFor(R * nb, kWarps), kThreads, 0, stream, x, R, C, nb, q,
           scales, lt);
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
    ::gtp::kernels::cuda::internal::ZeroAsync(slots, sizeof(uint32_t) * rb * cb, stream);
    const unsigned grid = GridFor(R * cb * kChunksPerBlock, kThreads);
    Launch(TileAmaxKernel<T>, grid, kThreads, 0, stream, x, R, C, cb, slots);
    GTP_CU_LAUNCH_CHECK();
    Launch(TileEncodeKernel<T>, grid, kThreads, 0, stream, x, R, C, cb, slots, q);
    GTP_CU_LAUNCH_CHECK();
    Launch(TileScalesKernel, GridFor(rb * cb, kThreads), kThreads, 0, stream, R, C, cb, scales, lt);
  } else {
    Launch(QuantizeTileKernel<T>, GridFor(rb * cb, 1), kThreads, 0, stream, x, R, C, rb, cb, q,
           scales, lt);
  }
  GTP_CU_LAUNCH_CHECK();
}

template <typename T>
void LaunchDequantize(const uint8_t* q, const float* scales, bool tiles, int64_t R, int64_t C, T* y,
                      cudaStream_t stream) {
  RequireShape(R, C, "fp8::cuda::DequantizeBlocks");
  if (R == 0 || C == 0) return;
  Launch(DequantizeKernel<T>, GridFor(R * C, kThreads), kThreads, 0, stream, q, scales, tiles, R, C,
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
    Launch(QuantizeRowsTransposedVecKernel<T>, GridFor(nbr * ncb, 1), kThreads, 0, stream, x, R, C,
           nbr, ncb, qt, scales_t, lt);
  } else {
    const int64_t ncb = CeilDiv(C, kTCols);
    Launch(QuantizeRowsTransposedKernel<T>, GridFor(nbr * ncb, 1), kThreads, 0, stream, x, R, C,
           nbr, ncb, qt, scales_t, lt);
  }
  GTP_CU_LAUNCH_CHECK();
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

void TransposeTiles(const uint8_t* q, const float* scales, int64_t R, int64_t C, uint8_t* qt,
                    float* scales_t, float* lt, cudaStream_t stream) {
  RequireShape(R, C, "fp8::cuda::TransposeTiles");
  if (R == 0 || C == 0) return;
  const int64_t nrt = CeilDiv(R, kT), nct = CeilDiv(C, kT);
  Launch(TransposeBytesKernel, GridFor(nrt * nct, 1), kThreads, 0, stream, q, R, C, nrt, nct, qt);
  GTP_CU_LAUNCH_CHECK();
  const int64_t rb = Fp8NumBlocks(R), cb = Fp8NumBlocks(C);
  PadLtTiles(lt, C, R, stream);
  Launch(TransposeScalesKernel, GridFor(rb * cb, kThreads), kThreads, 0, stream, scales, R, C, rb,
         cb, scales_t, lt);
  GTP_CU_LAUNCH_CHECK();
}

}  // namespace gtp::kernels::fp8::cuda
