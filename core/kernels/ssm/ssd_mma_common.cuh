// core/kernels/ssm/ssd_mma_common.cuh — what the warp-level chunked SSD
// scan's two .cu files share (ssd_mma.cu: the chunk states, the passes and
// the forward; ssd_mma_backward.cu: the backward): the tile shapes, the
// bf16 tensor-core product of a warp (mma.sync m16n8k16) with operands
// split into two bf16 terms, the chunk staging and the per-step decays.
// The math is at the top of ssd_mma.cu. Private to this package's .cu files
// (internal linkage but for the launchers declared in ssd_scan_cuda.h).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>

#include "core/kernels/cuda/common.cuh"

namespace gtp::kernels::ssm::cuda {
namespace {

using ::gtp::kernels::cuda::internal::CeilDiv;
using ::gtp::kernels::cuda::internal::CpAsync16;
using ::gtp::kernels::cuda::internal::CpAsync4;
using ::gtp::kernels::cuda::internal::CpAsyncCommit;
using ::gtp::kernels::cuda::internal::CpAsyncWait;
using ::gtp::kernels::cuda::internal::GridFor;
using ::gtp::kernels::cuda::internal::kFullMask;
using ::gtp::kernels::cuda::internal::kWarpSize;
using ::gtp::kernels::cuda::internal::SmemAddr;

// ------------------------------------------------------------ shapes
//
// A warp owns one (b, h, chunk): the chunk's L = 64 or 32 steps
// (MmaChunkLength) as 16-row tiles, P and N zero-padded to kD (16, 32 or 64),
// every product a sum of 16×8 tiles. A block is hb ∈ {1, 2, 4} warps: hb
// consecutive heads of one group at the same (b, chunk), which share B and
// C (staged once a block).

template <int kD, int kLen>
struct MmaShape {
  static_assert(kD == 16 || kD == 32 || kD == 64, "kD: 16, 32 or 64");
  static_assert(kLen == 32 || (kLen == 64 && kD < 64), "kLen: 32, or 64 where kD < 64");
  static constexpr int kL = kLen;  // steps a chunk
  // Row stride of the staged [kL][kD] matrices: ≡ 8 (mod 16) words, so a
  // fragment's paired loads (8 rows × 4 pairs) hit 32 distinct banks in
  // each half-warp.
  static constexpr int kLd = kD + 8;
};

// The most dynamic shared memory a block takes (of the H200's 227 KB).
constexpr int64_t kMaxSmemBytes = 200 * 1024;

// The padded width of P and N that the kernels instantiate (0: too large).
inline int MmaWidth(int64_t P, int64_t N) {
  const int64_t m = P > N ? P : N;
  return m <= 16 ? 16 : m <= 32 ? 32 : m <= 64 ? 64 : 0;
}

// The chunk length the kernels take for the caller's `chunk`: 64 steps
// where chunk ≥ 64 and the width is 32, else 32. At width 64 a 64-step block
// would not fit shared memory; at width 16 the 32-step blocks were faster on
// an H100 (B = 8, T = 1024, H = 96, P = N = 16, forward + backward: 0.680
// against 0.763 ms with f32-accurate products, 0.646 against 0.677 in bf16;
// the hybrid bench step 20.10 against 20.29 ms; docs/PERFORMANCE.md,
// 2026-12-05), so the 64-step kernels are no longer built there.
inline int MmaChunkLength(int width, int64_t chunk) { return width == 32 && chunk >= 64 ? 64 : 32; }

// X(kD, kL) for each (width, chunk length) the kernels instantiate.
#define GTP_SSD_MMA_FOR_EACH_SHAPE(X) X(16, 32) X(32, 64) X(32, 32) X(64, 32)

// ------------------------------------------------------------ fragments
//
// mma.sync.m16n8k16 (bf16 in, f32 accumulate), lane = 4·g + t:
//   A 16×16 (row r, col k): a0 (g, 2t..2t+1), a1 (g+8, 2t..), a2 (g, 2t+8..), a3 (g+8, 2t+8..)
//   B 16×8  (row k, col n): b0 (2t..2t+1, g), b1 (2t+8..2t+9, g)
//   D 16×8  (row r, col n): d0, d1 (g, 2t..2t+1), d2, d3 (g+8, 2t..2t+1)
// Each f32 operand v is split into hi = bf16(v) and lo = bf16(v − hi)
// (|v − hi − lo| ≤ 2⁻¹⁸·|v|), and a·b ≈ a_lo·b_hi + a_hi·b_lo + a_hi·b_hi
// (the dropped a_lo·b_lo is below 2⁻¹⁶ of |a·b|): about f32 accuracy from
// three bf16 products, accumulated in f32.

struct FragA {
  uint32_t hi[4], lo[4];
};
struct FragB {
  uint32_t hi[2], lo[2];
};
using Acc = float[4];

// (a, b) → hi and lo pairs, a in the low half (the smaller k).
// Both halves rounded by one paired conversion (cvt.rn.bf16x2.f32), the hi
// values widened back by bit shifts (a bf16 is a float's upper 16 bits).
__device__ __forceinline__ void SplitPair(float a, float b, uint32_t& hi, uint32_t& lo) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(a, b);  // .x (a) in the low half
  std::memcpy(&hi, &h, sizeof(hi));
  const uint32_t a_bits = hi << 16, b_bits = hi & 0xffff0000u;
  float ah, bh;
  std::memcpy(&ah, &a_bits, sizeof(ah));
  std::memcpy(&bh, &b_bits, sizeof(bh));
  const __nv_bfloat162 l = __floats2bfloat162_rn(a - ah, b - bh);
  std::memcpy(&lo, &l, sizeof(lo));
}

#if defined(GTP_CUDA_HOST_EMULATION)
// The host test's warp emulator (core/kernels/cuda/testing/warp_emulator.h) runs the product.
__device__ __forceinline__ void MmaBf16(Acc& d, const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  ::gtp::emu::MmaM16N8K16Bf16(d, a, b);
}
#else
__device__ __forceinline__ void MmaBf16(Acc& d, const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
#endif

// d += a·b, the split product (small terms first).
__device__ __forceinline__ void MmaSplit(Acc& d, const FragA& a, const FragB& b) {
  MmaBf16(d, a.lo, b.hi);
  MmaBf16(d, a.hi, b.lo);
  MmaBf16(d, a.hi, b.hi);
}

// d += a·b at the kernels' chosen precision: the split product (kSplit:
// about f32 accuracy, three mma) or the bf16 one (a.hi·b.hi, one mma: the
// precision of Mamba-2's own kernels, which take bf16 operands).
template <bool kSplit>
__device__ __forceinline__ void MmaProd(Acc& d, const FragA& a, const FragB& b) {
  if constexpr (kSplit) {
    MmaSplit(d, a, b);
  } else {
    MmaBf16(d, a.hi, b.hi);
  }
}

__device__ __forceinline__ int LaneG() { return (threadIdx.x & 31) >> 2; }
__device__ __forceinline__ int LaneT() { return threadIdx.x & 3; }

// A fragment of the 16×16 tile at(r, k), r, k < 16 (at: a functor of the
// tile's row and column returning the f32 value).
template <class F>
__device__ __forceinline__ FragA MakeA(F at) {
  const int g = LaneG(), t = LaneT();
  FragA f;
  SplitPair(at(g, 2 * t), at(g, 2 * t + 1), f.hi[0], f.lo[0]);
  SplitPair(at(g + 8, 2 * t), at(g + 8, 2 * t + 1), f.hi[1], f.lo[1]);
  SplitPair(at(g, 2 * t + 8), at(g, 2 * t + 9), f.hi[2], f.lo[2]);
  SplitPair(at(g + 8, 2 * t + 8), at(g + 8, 2 * t + 9), f.hi[3], f.lo[3]);
  return f;
}

// A B fragment of the 16×8 tile at(k, n).
template <class F>
__device__ __forceinline__ FragB MakeB(F at) {
  const int g = LaneG(), t = LaneT();
  FragB f;
  SplitPair(at(2 * t, g), at(2 * t + 1, g), f.hi[0], f.lo[0]);
  SplitPair(at(2 * t + 8, g), at(2 * t + 9, g), f.hi[1], f.lo[1]);
  return f;
}

// The A fragment of two accumulator tiles side by side (columns 0..7 in
// left, 8..15 in right) — the accumulator layout is the A layout's, so no
// data moves between lanes.
__device__ __forceinline__ FragA AccToA(const Acc& left, const Acc& right) {
  FragA f;
  SplitPair(left[0], left[1], f.hi[0], f.lo[0]);
  SplitPair(left[2], left[3], f.hi[1], f.lo[1]);
  SplitPair(right[0], right[1], f.hi[2], f.lo[2]);
  SplitPair(right[2], right[3], f.hi[3], f.lo[3]);
  return f;
}

// The A fragments of rows r0..r0+15 of a staged [kL][kLd] matrix, one per
// 16-column k-step: formed once and kept where kD ≤ 32 (up to 16 registers
// each), else formed at each use (kD = 64 has no registers to spare).
template <int kD, int kLd>
struct RowFrags {
  static constexpr bool kKeep = kD <= 32;
  const float* m;
  int r0;
  FragA kept[kKeep ? kD / 16 : 1];
  __device__ __forceinline__ RowFrags(const float* matrix, int row0) : m(matrix), r0(row0) {
    if constexpr (kKeep) {
#pragma unroll
      for (int kk = 0; kk < kD / 16; ++kk) kept[kk] = Make(kk);
    }
  }
  __device__ __forceinline__ FragA Make(int kk) const {
    return MakeA([&](int r, int k) { return m[(r0 + r) * kLd + kk * 16 + k]; });
  }
  __device__ __forceinline__ FragA operator[](int kk) const {
    if constexpr (kKeep) {
      return kept[kk];
    } else {
      return Make(kk);
    }
  }
};

__device__ __forceinline__ void Zero(Acc& a) { a[0] = a[1] = a[2] = a[3] = 0.0f; }

// The sum of a row of an accumulator tile set over the 4 lanes of its quad
// (lanes 4g..4g+3 hold row g's columns): a fixed butterfly, every lane of the
// quad gets it.
__device__ __forceinline__ double QuadSum(double v) {
  v += __shfl_xor_sync(kFullMask, v, 1);
  v += __shfl_xor_sync(kFullMask, v, 2);
  return v;
}

// ------------------------------------------------------------ staging

// A block's place: blockIdx.x = (b·(H/hb) + hblk)·nc + c, the heads
// hblk·hb … hblk·hb + hb − 1 of group g; this warp's head h; the chunk's
// first step t0 and length len ≤ kL.
struct MmaChunk {
  int64_t b, hblk, h, g, c, t0;
  int len;
};
template <int kL>
__device__ __forceinline__ MmaChunk ThisMmaChunk(int64_t T, int64_t H, int64_t G, int64_t nc,
                                                 int hb) {
  MmaChunk k;
  const int64_t hblocks = H / hb, bhb = blockIdx.x / nc;
  k.c = blockIdx.x % nc;
  k.b = bhb / hblocks;
  k.hblk = bhb % hblocks;
  k.h = k.hblk * hb + (threadIdx.x >> 5);
  k.g = k.h / (H / G);
  k.t0 = k.c * kL;
  k.len = static_cast<int>(T - k.t0 < kL ? T - k.t0 : kL);
  return k;
}

// The warp's head's dt [B, T, H] over the chunk into sDt[kL] (0 at i ≥ len).
template <int kL>
__device__ __forceinline__ void StageDt(const float* __restrict__ dt, float* sDt, const MmaChunk& k,
                                        int64_t T, int64_t H) {
  for (int i = threadIdx.x & 31; i < kL; i += kWarpSize) {
    sDt[i] = i < k.len ? dt[(k.b * T + k.t0 + i) * H + k.h] : 0.0f;
  }
}

// Rows t0..t0+len−1 of a [.., T, S, W] tensor's slice s (row r at
// src[((b·T + t0 + r)·S + s)·W + c], c < W) into dst[r][c] (row stride ld,
// kL rows, kD columns): cp.async for the rows < len and columns < W, zeros
// elsewhere. The warp's lanes (or the block's threads: `lane`, `lanes`)
// share the copies. Commits nothing.
template <int kL, int kD, int kLd>
__device__ __forceinline__ void StageRows(const float* __restrict__ src, float* dst, int64_t b,
                                          int64_t T, int64_t S, int64_t s, int W, int64_t t0,
                                          int len, int lane, int lanes) {
  // 16-byte copies where every row start is 16-byte aligned (a tensor view
  // may start anywhere: then one float a copy).
  if (W % 4 == 0 && reinterpret_cast<uintptr_t>(src) % 16 == 0) {
    const int quads = kD / 4;
    for (int e = lane; e < kL * quads; e += lanes) {
      const int r = e / quads, c = (e - r * quads) * 4;
      float* d = dst + r * kLd + c;
      if (r < len && c < W) {
        CpAsync16(SmemAddr(d), src + ((b * T + t0 + r) * S + s) * W + c, true);
      } else {
        d[0] = d[1] = d[2] = d[3] = 0.0f;
      }
    }
  } else {
    for (int e = lane; e < kL * kD; e += lanes) {
      const int r = e / kD, c = e - r * kD;
      float* d = dst + r * kLd + c;
      if (r < len && c < W) {
        CpAsync4(d, src + ((b * T + t0 + r) * S + s) * W + c, true);
      } else {
        *d = 0.0f;
      }
    }
  }
}

// A P×N state matrix (row stride N in global) into dst[p][n] (row stride
// ld, kD×kD, zero-padded). Synchronous (small).
template <int kD, int kLd>
__device__ __forceinline__ void StageState(const float* __restrict__ src, float* dst, int P, int N,
                                           int lane, int lanes) {
  for (int e = lane; e < kD * kD; e += lanes) {
    const int p = e / kD, n = e - p * kD;
    dst[p * kLd + n] = p < P && n < N ? src[p * N + n] : 0.0f;
  }
}

// The chunk's per-step decays, by one warp (lane l owns steps 2l, 2l + 1;
// L ≤ 64): cs_i = log2(e)·Σ_{k ≤ i} dt_k·A in double by a fixed shuffle
// tree — base-2 exponents, so every exp below is one exp2f (ex2, ≤ 2 ulp)
// instead of expf's range reduction — steps ≥ len taking cs_last (their dt
// is 0); e_i = 2^cs_i; r_i = 2^(cs_last − cs_i); dec = 2^cs_last returned.
// dt[i] must be staged (0 at i ≥ len).
template <int kL>
__device__ __forceinline__ float ChunkDecays(const float* dt, float Ah, int len, double* cs,
                                             float* e, float* r) {
  const int lane = threadIdx.x & 31, i0 = 2 * lane, i1 = i0 + 1;
  const double A2 = static_cast<double>(Ah) * 1.4426950408889634;  // log2(e)
  const double a0 = i0 < kL ? static_cast<double>(dt[i0]) * A2 : 0.0;
  const double a1 = i1 < kL ? static_cast<double>(dt[i1]) * A2 : 0.0;
  double incl = a0 + a1;
  for (int o = 1; o < kWarpSize; o <<= 1) {
    const double up = __shfl_up_sync(kFullMask, incl, o);
    if (lane >= o) incl += up;
  }
  const double prev = __shfl_up_sync(kFullMask, incl, 1);  // every lane: the mask names all
  const double before = lane > 0 ? prev : 0.0;
  const double c0 = before + a0, c1 = incl;
  const int last = len - 1;
  const double cs_last = __shfl_sync(kFullMask, (last & 1) ? c1 : c0, last / 2);
  if (i0 < kL) {
    const double v = i0 < len ? c0 : cs_last;
    cs[i0] = v;
    e[i0] = exp2f(static_cast<float>(v));
    r[i0] = exp2f(static_cast<float>(cs_last - v));
  }
  if (i1 < kL) {
    const double v = i1 < len ? c1 : cs_last;
    cs[i1] = v;
    e[i1] = exp2f(static_cast<float>(v));
    r[i1] = exp2f(static_cast<float>(cs_last - v));
  }
  __syncwarp();
  return exp2f(static_cast<float>(cs_last));
}

// ------------------------------------------------------------ C·Bᵀ once a block
//
// A block's heads share B and C, so C·Bᵀ (before each head's decay mask) is
// one matrix for them all. Its lower 16×16 tiles (kt ≤ it, it < ⌈len/16⌉)
// are formed once a block — tile n (row by row over the lower triangle) by
// warp n mod hb, with the products a warp forming it alone would run, so
// the same bits — and kept in shared memory, f32 [kL][CbLd]. The stride
// ≡ 8 (mod 32) words: a half-warp's paired accesses in the accumulator
// layout hit distinct banks. Callers meet at a barrier before reading it.
template <int kL>
constexpr int CbLd() {
  return kL + 8;
}

template <int kD, int kL, int kLd, bool kSplit>
__device__ __forceinline__ void FormBlockCB(const float* sC, const float* sB, float* sCB, int len,
                                            int warp, int hb) {
  constexpr int kCb = CbLd<kL>();
  const int gq = LaneG(), tq = LaneT(), tiles = (len + 15) / 16;
  int n = 0;
  for (int it = 0; it < tiles; ++it) {
    for (int kt = 0; kt <= it; ++kt, ++n) {
      if (n % hb != warp) continue;
      const int i0 = it * 16, j0 = kt * 16;
      Acc cb[2];
      Zero(cb[0]);
      Zero(cb[1]);
#pragma unroll
      for (int nk = 0; nk < kD / 16; ++nk) {
        const FragA a = MakeA([&](int r, int k) { return sC[(i0 + r) * kLd + nk * 16 + k]; });
        for (int half = 0; half < 2; ++half) {
          const FragB bf =
              MakeB([&](int k, int c) { return sB[(j0 + half * 8 + c) * kLd + nk * 16 + k]; });
          MmaProd<kSplit>(cb[half], a, bf);
        }
      }
      for (int half = 0; half < 2; ++half) {
        for (int hr = 0; hr < 2; ++hr) {
          float2* d =
              reinterpret_cast<float2*>(sCB + (i0 + gq + hr * 8) * kCb + j0 + half * 8 + 2 * tq);
          *d = make_float2(cb[half][2 * hr], cb[half][2 * hr + 1]);
        }
      }
    }
  }
}

// The tile of C·Bᵀ at rows i0.., columns j0.. (cb[half]: columns j0 + 8·half
// …) in the accumulator layout.
template <int kL>
__device__ __forceinline__ void LoadCB(const float* sCB, int i0, int j0, Acc (&cb)[2]) {
  constexpr int kCb = CbLd<kL>();
  const int gq = LaneG(), tq = LaneT();
  for (int half = 0; half < 2; ++half) {
    for (int hr = 0; hr < 2; ++hr) {
      const float2 v =
          *reinterpret_cast<const float2*>(sCB + (i0 + gq + hr * 8) * kCb + j0 + half * 8 + 2 * tq);
      cb[half][2 * hr] = v.x;
      cb[half][2 * hr + 1] = v.y;
    }
  }
}

// The tile of B·Cᵀ = (C·Bᵀ)ᵀ at rows j0.., columns i0.. (bc[half]: columns
// i0 + 8·half …) in the accumulator layout.
template <int kL>
__device__ __forceinline__ void LoadBC(const float* sCB, int j0, int i0, Acc (&bc)[2]) {
  constexpr int kCb = CbLd<kL>();
  const int gq = LaneG(), tq = LaneT();
  for (int half = 0; half < 2; ++half) {
    for (int q = 0; q < 4; ++q) {
      bc[half][q] = sCB[(i0 + half * 8 + 2 * tq + (q & 1)) * kCb + j0 + gq + (q >> 1) * 8];
    }
  }
}

// The backward block's shared memory, the largest of the kernels' (hb warps).
// doubles: cs, colQ, rowQ, R, O [hb][kL]; floats: B, C [kL][kLd], C·Bᵀ
// [kL][CbLd], the head-sum slots [hb][16][kLd], per warp X, dY [kL][kLd],
// S, G [kD][kLd], dt, e, r [kL].
template <int kD, int kL>
int64_t BackwardBytes(int hb) {
  using S = MmaShape<kD, kL>;
  const int64_t mat = int64_t{S::kL} * S::kLd;
  return int64_t{8} * 5 * hb * S::kL +
         4 * (2 * mat + int64_t{S::kL} * CbLd<S::kL>() + hb * 16 * S::kLd +
              hb * (2 * mat + 2 * kD * S::kLd + 3 * S::kL));
}

// ------------------------------------------------------------ launches

// The kernel on grid × block with `bytes` of dynamic shared memory (common.cuh
// Launch: on the GPU, or on the host warp emulator in a CPU test), checked.
template <class... Params, class... Args>
void Launch(void (*kernel)(Params...), int64_t grid, int block, int64_t bytes, cudaStream_t stream,
            Args... args) {
  GTP_CU_REQUIRE(bytes <= kMaxSmemBytes, "SsdMma (CUDA): %lld bytes of shared memory",
                 static_cast<long long>(bytes));
  ::gtp::kernels::cuda::internal::Launch(kernel, dim3(static_cast<unsigned>(grid)),
                                         dim3(static_cast<unsigned>(block)),
                                         static_cast<size_t>(bytes), stream, args...);
  GTP_CU_LAUNCH_CHECK();
}

// The decays E_ij = exp(Σ_{j < k ≤ i} dt_k·A) = 2^(cs_i − cs_j) (ChunkDecays'
// base-2 cs) for j ≤ i, else 0, of a 16×16 tile in the accumulator layout
// (e[half][q] at row r0 + g + 8·(q >> 1), column c0 + 8·half + 2t + (q & 1)):
// rows i and columns j (kRowsI), or rows j and columns i. Each lane turns
// its 2 rows' and 4 columns' cs into floats relative to cs[r0] once (6
// double subtractions and conversions, not one a element), so an element
// costs a float subtraction and one ex2. The relative values span at most
// the chunk's decay, so the float subtraction loses ≈ 2⁻²⁴ of that span:
// ≈ 4e-6 of E where the span is 100 (a decay of 2⁻¹⁰⁰), below the split
// products' 1.1e-5.
struct TileDecays {
  float e[2][4];
};
template <bool kRowsI>
__device__ __forceinline__ TileDecays MakeTileDecays(const double* cs, int r0, int c0) {
  const int g = LaneG(), t = LaneT();
  const double ref = cs[r0];
  float fr[2], fc[2][2];
#pragma unroll
  for (int h = 0; h < 2; ++h) fr[h] = static_cast<float>(cs[r0 + g + 8 * h] - ref);
#pragma unroll
  for (int half = 0; half < 2; ++half) {
#pragma unroll
    for (int k = 0; k < 2; ++k)
      fc[half][k] = static_cast<float>(cs[c0 + half * 8 + 2 * t + k] - ref);
  }
  TileDecays d;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const int row = r0 + g + 8 * (q >> 1), col = c0 + half * 8 + 2 * t + (q & 1);
      const float fi = kRowsI ? fr[q >> 1] : fc[half][q & 1];
      const float fj = kRowsI ? fc[half][q & 1] : fr[q >> 1];
      const bool live = kRowsI ? col <= row : row <= col;
      d.e[half][q] = live ? exp2f(fi - fj) : 0.0f;
    }
  }
  return d;
}

}  // namespace
}  // namespace gtp::kernels::ssm::cuda
