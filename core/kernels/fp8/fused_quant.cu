// core/kernels/fp8/fused_quant.cu — the fused quantisers (block_quant_cuda.h):
// a gradient's two 1×128 quantisations from one read, optionally with its
// column sums (QuantizeRowsAndTransposed, AddColumnPartials), and a weight's
// 128×128 codes with its transpose's in one pass (QuantizeTileAndTranspose).
// The same scalar rules as block_quant.cu's kernels (quant_device.cuh), so
// the same bits as the separate kernels they replace and as the CPU
// (block_quant_gpu_test.cc); where a fast path's conditions do not hold
// (f32 data, unaligned pointers) the launchers run those separate kernels.
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "core/dtype.h"
#include "core/kernels/cuda/gelu.cuh"
#include "core/kernels/fp8/block_quant_cuda.h"
#include "core/kernels/fp8/quant_device.cuh"

namespace gtp::kernels::fp8::cuda {
namespace {

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
    Store(sums, c, Load(sums, c) + InOrderSum<16>(col_partial + c, nbr, C));
  }
}

// ---------------------------------------------------------------- both 1×128 layouts

// What the fused quantiser applies to x as it reads it.
enum class InAct { kNone, kGelu, kGeluGrad };

// 8 bf16 (a 16-byte word) after kAct: GELU(x), or GeluGrad(x, pre) (x the
// gradient at GELU's output, pre its input), in f32 by cuda/gelu.cuh (the
// bf16 form, as the GELU kernels apply it to bf16 data) and
// rounded to bf16 as the GELU kernels store it (elem.cuh), so the same bits
// as they write.
template <InAct kAct>
__device__ __forceinline__ uint4 ApplyAct(const uint4& x, const uint4& pre) {
  namespace ci = ::gtp::kernels::cuda::internal;
  const uint32_t w[4] = {x.x, x.y, x.z, x.w};
  uint32_t out[4];
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    float lo = BitsFloat(w[k] << 16), hi = BitsFloat(w[k] & 0xffff0000u);
    if constexpr (kAct == InAct::kGelu) {  // pre unused (never read: kGelu keeps none)
      lo = ci::GeluFor<bf16>(lo);
      hi = ci::GeluFor<bf16>(hi);
    } else {
      const uint32_t pw[4] = {pre.x, pre.y, pre.z, pre.w};
      lo = ci::GeluGradFor<bf16>(lo, BitsFloat(pw[k] << 16));
      hi = ci::GeluGradFor<bf16>(hi, BitsFloat(pw[k] & 0xffff0000u));
    }
    out[k] = static_cast<uint32_t>(ci::Store<bf16>(lo).bits) |
             static_cast<uint32_t>(ci::Store<bf16>(hi).bits) << 16;
  }
  return make_uint4(out[0], out[1], out[2], out[3]);
}

constexpr int kPairCols = kBlock / 2;  // bf16 column pairs (32-bit words) in a tile row

// x [R, C] bf16 (C % 8 == 0) → its 1×128 quantisation along C (q, scales,
// lt) and that of xᵀ (qt, scales_t, lt_t), one read of x: block t (grid-
// stride) takes the 128 × 128 tile t = i·ncb + j. Phase 1: 16 threads per
// row (8 columns each, one 16-byte load), 16 rows a pass, 8 passes, every
// load issued first; each half-warp holds one 1×128 row block, quantises it
// and keeps the raw bf16 pairs in shared memory (rows of 65 words: the
// column reads below hit 32 different banks). Phase 2: warp w takes column
// pairs w, w + 8, …; lane l holds rows l, l + 32, l + 64, l + 96 of both
// columns, one warp max gives both columns' amax (bf16 pairs, MaxU16x2),
// lanes 2i and 2i + 1 work out pair i's two block scales of xᵀ (all pairs
// at once, in a pass before the codes), and each code goes out as a byte
// (a warp writes 32 consecutive bytes of a row of qt).
// The same scalar rules as every other kernel here, so the same bits as the
// two kernels it fuses. With kAct an activation applied to each element as
// it is read (ApplyAct: the codes, scales and sums of a = GELU(x), or of
// a = GeluGrad(x, pre)), the bits of writing a with the GELU kernels and
// quantising it.
template <InAct kAct>
__global__ void __launch_bounds__(kThreads, kAct == InAct::kNone ? 4 : 2)
    QuantizeRowsAndTransposedKernel(const bf16* __restrict__ x, const bf16* __restrict__ pre,
                                    int64_t R, int64_t C, int64_t ncb, uint8_t* __restrict__ q,
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
    uint4 raw[kPasses], raw_pre[kAct == InAct::kGeluGrad ? kPasses : 1];
#pragma unroll
    for (int p = 0; p < kPasses; ++p) {
      const int64_t r = r0 + p * kRowsPerPass + rsub;
      const bool in = r < R && c < C;
      raw[p] = in ? *reinterpret_cast<const uint4*>(x + r * C + c)
                  : make_uint4(0, 0, 0, 0);  // +0: never raises amax
      if constexpr (kAct == InAct::kGeluGrad) {
        raw_pre[p] = in ? *reinterpret_cast<const uint4*>(pre + r * C + c) : make_uint4(0, 0, 0, 0);
      }
    }
    if constexpr (kAct != InAct::kNone) {  // +0 stays +0 (GELU(+0) = +0·GELU'(+0) = +0)
#pragma unroll
      for (int p = 0; p < kPasses; ++p) {
        raw[p] = ApplyAct<kAct>(raw[p], raw_pre[kAct == InAct::kGeluGrad ? p : 0]);
      }
    }
#pragma unroll
    for (int p = 0; p < kPasses; ++p) {
      const int tr = p * kRowsPerPass + rsub;
      const int64_t r = r0 + tr;
      const uint32_t w[4] = {raw[p].x, raw[p].y, raw[p].z, raw[p].w};
      float v[kVec];
      uint32_t amax2 = 0;  // the bf16 pairs' |x| bits, maxed per half
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        v[2 * k] = BitsFloat(w[k] << 16);
        v[2 * k + 1] = BitsFloat(w[k] & 0xffff0000u);
        tile[tr][sub * 4 + k] = w[k];
        amax2 = MaxU16x2(amax2, w[k] & kBf16PairAbsMask);
      }
      const uint32_t amax = MaxU(amax2 << 16, amax2 & 0xffff0000u);  // as f32 bits
      const float s = Fp8BlockScale(HalfWarpMaxBits(amax));  // all lanes take part
      if (r < R && c < C) {
        *reinterpret_cast<uint2*>(q + r * C + c) = Encode8(v, MakeCoder(s));
        if (sub == 0) {
          scales[r * nbc + bj] = s;
          if (lt != nullptr) lt[LtScaleOffset(false, R, C, r, bj)] = s;
        }
      }
    }
    __syncthreads();
    // Phase 2 in two passes over the warp's column pairs cp = warp + 8i.
    // First both columns' maxima (and sums), lane 2i keeping column cc's and
    // lane 2i + 1 column cc + 1's, so that each lane then works out one
    // column's scale and reciprocal (sixteen columns at once, where every
    // lane would repeat each pair's two divisions); then the codes, each
    // pair's scales shuffled from its two lanes. The same scalar steps: the
    // same bits.
    constexpr int kPairsPerWarp = kPairCols / kWarps;  // 8
    uint32_t amax_mine = 0;  // of column c0 + 2·(warp + 8·(lane / 2)) + lane % 2
#pragma unroll
    for (int i = 0; i < kPairsPerWarp; ++i) {
      const int cp = warp + kWarps * i;
      const int64_t cc = c0 + 2 * cp;
      if (cc >= C) break;  // the same for the whole warp; C % 8 == 0: both columns exist
      uint32_t w[4], amax2 = 0;  // column cc's |x| bits in the low half, cc + 1's in the high
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        w[k] = tile[lane + k * kWarpSize][cp];
        amax2 = MaxU16x2(amax2, w[k] & kBf16PairAbsMask);
      }
      amax2 = WarpMaxU16x2(amax2);  // both columns' maxima in one butterfly
      if (lane == 2 * i) amax_mine = amax2 << 16;
      if (lane == 2 * i + 1) amax_mine = amax2 & 0xffff0000u;
      if (col_partial != nullptr) {  // the two columns' sums over the tile's rows
        float lo[4], hi[4];
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          lo[k] = BitsFloat(w[k] << 16);
          hi[k] = BitsFloat(w[k] & 0xffff0000u);
        }
        const float sum_lo = ColumnBlockSum(lo), sum_hi = ColumnBlockSum(hi);
        if (lane == 0) {
          col_partial[bi * C + cc] = sum_lo;
          col_partial[bi * C + cc + 1] = sum_hi;
        }
      }
    }
    const Fp8Coder mine = MakeCoder(Fp8BlockScale(amax_mine));
    {
      const int64_t cc = c0 + 2 * (warp + kWarps * (lane / 2)) + lane % 2;
      if (lane < 2 * kPairsPerWarp && cc < C) {
        scales_t[cc * nbr + bi] = mine.s;
        if (lt_t != nullptr) lt_t[LtScaleOffset(false, C, R, cc, bi)] = mine.s;
      }
    }
#pragma unroll
    for (int i = 0; i < kPairsPerWarp; ++i) {
      const int cp = warp + kWarps * i;
      const int64_t cc = c0 + 2 * cp;
      if (cc >= C) break;
      float lo[4], hi[4];
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const uint32_t w = tile[lane + k * kWarpSize][cp];
        lo[k] = BitsFloat(w << 16);
        hi[k] = BitsFloat(w & 0xffff0000u);
      }
      auto coder_of = [&](int src) {  // lane src's column coder
        return CoderWith(__shfl_sync(kFullMask, mine.s, src), __shfl_sync(kFullMask, mine.r, src));
      };
      const Fp8Coder k_lo = coder_of(2 * i), k_hi = coder_of(2 * i + 1);
      uint8_t* const col = qt + cc * R + r0 + lane;  // rows r0 + lane + 32k of column cc
      if (k_lo.fast && k_hi.fast && r0 + kBlock <= R) {
        // The common case, the same codes without a branch between them
        // (the scales are the warp's: a uniform test): two codes a
        // conversion (rows lane + 32k, + 32k + 32 of one column), a byte a
        // store.
#pragma unroll
        for (int k = 0; k < 4; k += 2) {
          const uint32_t l = Encode2Fast(lo[k], lo[k + 1], k_lo);
          const uint32_t h = Encode2Fast(hi[k], hi[k + 1], k_hi);
          col[k * kWarpSize] = static_cast<uint8_t>(l);
          col[(k + 1) * kWarpSize] = static_cast<uint8_t>(l >> 8);
          col[R + k * kWarpSize] = static_cast<uint8_t>(h);
          col[R + (k + 1) * kWarpSize] = static_cast<uint8_t>(h >> 8);
        }
      } else {
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          if (r0 + lane + k * kWarpSize < R) {
            col[k * kWarpSize] = EncodeHw(lo[k], k_lo);
            col[R + k * kWarpSize] = EncodeHw(hi[k], k_hi);
          }
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
    const float s = Fp8BlockScale(BlockMaxBits(amax, partial));
    const Fp8Coder kc = MakeCoder(s);
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
      const uint2 e8 = Encode8(v[p], kc);
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

template <typename T>
void LaunchRowsAndTransposed(const T* x, int64_t R, int64_t C, uint8_t* q, float* scales,
                             float* lt, uint8_t* qt, float* scales_t, float* lt_t,
                             float* col_partial, cudaStream_t stream) {
  RequireShape(R, C, "fp8::cuda::QuantizeRowsAndTransposed");
  if (R == 0 || C == 0) return;
  if constexpr (std::is_same_v<T, bf16>) {
    if (C % kVec == 0 && Aligned(x, 16) && Aligned(q, 8)) {
      const int64_t ncb = Fp8NumBlocks(C);
      Launch(QuantizeRowsAndTransposedKernel<InAct::kNone>, GridFor(Fp8NumBlocks(R) * ncb, 1),
             kThreads, 0, stream, x, static_cast<const bf16*>(nullptr), R, C, ncb, q, scales, lt,
             qt, scales_t, lt_t, col_partial);
      GTP_CU_LAUNCH_CHECK();
      return;
    }
  }
  QuantizeRow1x128(x, R, C, q, scales, lt, stream);  // f32 or unaligned: the separate kernels
  QuantizeRowsTransposed(x, R, C, qt, scales_t, lt_t, stream);
  if (col_partial != nullptr) {
    const int64_t nbr = Fp8NumBlocks(R);
    Launch(ColumnPartialSumsKernel<T>, GridFor(nbr * C, kWarps), kThreads, 0, stream, x, R, C, nbr,
           col_partial);
    GTP_CU_LAUNCH_CHECK();
  }
}

// The fused kernel with kAct where it applies (C % 8 == 0, x and pre 16-byte
// aligned, q 8-byte aligned): false, launching nothing, where it does not.
template <InAct kAct>
bool LaunchActRowsAndTransposed(const bf16* x, const bf16* pre, int64_t R, int64_t C, uint8_t* q,
                                float* scales, float* lt, uint8_t* qt, float* scales_t, float* lt_t,
                                float* col_partial, cudaStream_t stream) {
  RequireShape(R, C, "fp8::cuda::QuantizeActRowsAndTransposed");
  if (C % kVec != 0 || !Aligned(x, 16) || !Aligned(q, 8) ||
      (kAct == InAct::kGeluGrad && !Aligned(pre, 16))) {
    return false;
  }
  if (R == 0 || C == 0) return true;
  const int64_t ncb = Fp8NumBlocks(C);
  Launch(QuantizeRowsAndTransposedKernel<kAct>, GridFor(Fp8NumBlocks(R) * ncb, 1), kThreads, 0,
         stream, x, pre, R, C, ncb, q, scales, lt, qt, scales_t, lt_t, col_partial);
  GTP_CU_LAUNCH_CHECK();
  return true;
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
    Launch(QuantizeTileAndTransposeKernel<T>, GridFor(rb * cb, 1), kThreads, 0, stream, x, R, C, rb,
           cb, q, scales, lt, qt, scales_t, lt_t);
    GTP_CU_LAUNCH_CHECK();
    return;
  }
  QuantizeTile128x128(x, R, C, q, scales, lt, stream);  // the tile kernels, then the transpose
  TransposeTiles(q, scales, R, C, qt, scales_t, lt_t, stream);
}

template <typename T>
void LaunchAddColumnPartials(const float* col_partial, int64_t nbr, int64_t C, T* sums,
                             cudaStream_t stream) {
  if (C == 0) return;
  Launch(AddColumnPartialsKernel<T>, GridFor(C, kThreads), kThreads, 0, stream, col_partial, nbr, C,
         sums);
  GTP_CU_LAUNCH_CHECK();
}

}  // namespace

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

bool QuantizeGeluRowsAndTransposed(const bf16* x, int64_t R, int64_t C, uint8_t* q, float* scales,
                                   float* lt, uint8_t* qt, float* scales_t, float* lt_t,
                                   float* col_partial, cudaStream_t stream) {
  return LaunchActRowsAndTransposed<InAct::kGelu>(x, nullptr, R, C, q, scales, lt, qt, scales_t,
                                                  lt_t, col_partial, stream);
}
bool QuantizeGeluGradRowsAndTransposed(const bf16* dy, const bf16* pre, int64_t R, int64_t C,
                                       uint8_t* q, float* scales, float* lt, uint8_t* qt,
                                       float* scales_t, float* lt_t, float* col_partial,
                                       cudaStream_t stream) {
  return LaunchActRowsAndTransposed<InAct::kGeluGrad>(dy, pre, R, C, q, scales, lt, qt, scales_t,
                                                      lt_t, col_partial, stream);
}

void AddColumnPartials(const float* col_partial, int64_t nbr, int64_t C, float* sums,
                       cudaStream_t stream) {
  LaunchAddColumnPartials(col_partial, nbr, C, sums, stream);
}
void AddColumnPartials(const float* col_partial, int64_t nbr, int64_t C, bf16* sums,
                       cudaStream_t stream) {
  LaunchAddColumnPartials(col_partial, nbr, C, sums, stream);
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

}  // namespace gtp::kernels::fp8::cuda
