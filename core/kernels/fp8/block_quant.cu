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
// R·C = 0 launches nothing. Deterministic, no atomics.
#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"
#include "core/kernels/cuda/common.cuh"
#include "core/kernels/fp8/block_quant_cuda.h"
#include "core/kernels/fp8/block_scale.h"

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
                      uint8_t* __restrict__ q, float* __restrict__ scales) {
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
    if (lane == 0) scales[w] = s;
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
                       uint8_t* __restrict__ q, float* __restrict__ scales) {
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
    if (threadIdx.x == 0) scales[t] = s;
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
                                 float* __restrict__ scales_t) {
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
      if (lane == 0) scales_t[c * nbr + bi] = s;
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
    TransposeScalesKernel(const float* __restrict__ s, int64_t rb, int64_t cb,
                          float* __restrict__ st) {
  const int64_t n = rb * cb;
  for (int64_t k = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; k < n;
       k += int64_t{gridDim.x} * blockDim.x)
    st[(k % cb) * rb + k / cb] = s[k];
}

// ---------------------------------------------------------------- launchers

void RequireShape(int64_t R, int64_t C, const char* op) {
  GTP_CU_REQUIRE(R >= 0 && C >= 0, "%s: negative shape %lld x %lld", op, static_cast<long long>(R),
                 static_cast<long long>(C));
}

template <typename T>
void LaunchRow(const T* x, int64_t R, int64_t C, uint8_t* q, float* scales, cudaStream_t stream) {
  RequireShape(R, C, "fp8::cuda::QuantizeRow1x128");
  if (R == 0 || C == 0) return;
  const int64_t nb = Fp8NumBlocks(C);
  QuantizeRowKernel<T><<<GridFor(R * nb, kWarps), kThreads, 0, stream>>>(x, R, C, nb, q, scales);
  GTP_CU_LAUNCH_CHECK();
}

template <typename T>
void LaunchTile(const T* x, int64_t R, int64_t C, uint8_t* q, float* scales, cudaStream_t stream) {
  RequireShape(R, C, "fp8::cuda::QuantizeTile128x128");
  if (R == 0 || C == 0) return;
  const int64_t rb = Fp8NumBlocks(R), cb = Fp8NumBlocks(C);
  QuantizeTileKernel<T><<<GridFor(rb * cb, 1), kThreads, 0, stream>>>(x, R, C, rb, cb, q, scales);
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
                          cudaStream_t stream) {
  RequireShape(R, C, "fp8::cuda::QuantizeRowsTransposed");
  if (R == 0 || C == 0) return;
  const int64_t nbr = Fp8NumBlocks(R), ncb = CeilDiv(C, kTCols);
  QuantizeRowsTransposedKernel<T>
      <<<GridFor(nbr * ncb, 1), kThreads, 0, stream>>>(x, R, C, nbr, ncb, qt, scales_t);
  GTP_CU_LAUNCH_CHECK();
}

}  // namespace

void QuantizeRow1x128(const float* x, int64_t R, int64_t C, uint8_t* q, float* scales,
                      cudaStream_t stream) {
  LaunchRow(x, R, C, q, scales, stream);
}
void QuantizeRow1x128(const bf16* x, int64_t R, int64_t C, uint8_t* q, float* scales,
                      cudaStream_t stream) {
  LaunchRow(x, R, C, q, scales, stream);
}

void QuantizeTile128x128(const float* x, int64_t R, int64_t C, uint8_t* q, float* scales,
                         cudaStream_t stream) {
  LaunchTile(x, R, C, q, scales, stream);
}
void QuantizeTile128x128(const bf16* x, int64_t R, int64_t C, uint8_t* q, float* scales,
                         cudaStream_t stream) {
  LaunchTile(x, R, C, q, scales, stream);
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
                            cudaStream_t stream) {
  LaunchRowsTransposed(x, R, C, qt, scales_t, stream);
}
void QuantizeRowsTransposed(const bf16* x, int64_t R, int64_t C, uint8_t* qt, float* scales_t,
                            cudaStream_t stream) {
  LaunchRowsTransposed(x, R, C, qt, scales_t, stream);
}

void TransposeTiles(const uint8_t* q, const float* scales, int64_t R, int64_t C, uint8_t* qt,
                    float* scales_t, cudaStream_t stream) {
  RequireShape(R, C, "fp8::cuda::TransposeTiles");
  if (R == 0 || C == 0) return;
  const int64_t nrt = CeilDiv(R, kT), nct = CeilDiv(C, kT);
  TransposeBytesKernel<<<GridFor(nrt * nct, 1), kThreads, 0, stream>>>(q, R, C, nrt, nct, qt);
  GTP_CU_LAUNCH_CHECK();
  const int64_t rb = Fp8NumBlocks(R), cb = Fp8NumBlocks(C);
  TransposeScalesKernel<<<GridFor(rb * cb, kThreads), kThreads, 0, stream>>>(scales, rb, cb,
                                                                             scales_t);
  GTP_CU_LAUNCH_CHECK();
}

}  // namespace gtp::kernels::fp8::cuda
