// core/kernels/ssm/ssd_chunked_common.cuh — what the chunked SSD scan's two
// .cu files share (ssd_chunked.cu: the chunk states and the forward;
// ssd_chunked_backward.cu: the backward): the shared-memory sizes and chunk
// length, the cp.async copy helpers, the 3×TF32 tensor-core products, the
// scratch layout, and the state launchers (EntryStates for the forward,
// BackwardStates for the backward). The math is at the
// top of ssd_chunked.cu. Private to this package's .cu files (internal linkage
// but for the launchers in chunked_internal, defined in ssd_chunked.cu).
#pragma once

#include <cuda_runtime.h>
#include <mma.h>

#include <cstdint>
#include <type_traits>

#include "core/kernels/cuda/common.cuh"
#include "core/kernels/ssm/ssd_common.cuh"
#include "core/kernels/ssm/ssd_scan_cuda.h"

namespace gtp::kernels::ssm::cuda {
namespace {

using ::gtp::kernels::cuda::internal::CeilDiv;
using ::gtp::kernels::cuda::internal::CpAsync4;
using ::gtp::kernels::cuda::internal::CpAsyncCommit;
using ::gtp::kernels::cuda::internal::CpAsyncWait;
using ::gtp::kernels::cuda::internal::GridFor;
using ::gtp::kernels::cuda::internal::kFullMask;
using ::gtp::kernels::cuda::internal::kWarpSize;
using ::gtp::kernels::cuda::internal::Launch;

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / kWarpSize;
constexpr int kMaxChunk = 2 * kWarpSize;  // ScanDecays: two steps a lane
constexpr size_t kMaxSmemBytes = 200 * 1024;

// ------------------------------------------------------------ shared memory
//
// Every chunk kernel starts its shared memory with the doubles (cumulative
// decays and scalars), then floats. The tensor-core kernels (Output,
// Backward) keep their matrices zero-padded to 16 rows/columns (the wmma
// tile) with row strides of a multiple of 16 plus 4 floats: a multiple of
// 4 (wmma's ldm for f32), every 16-row or 8-column tile start 32-byte
// aligned, and rows 4 banks apart.

__host__ __device__ __forceinline__ int64_t Pad16(int64_t d) { return (d + 15) / 16 * 16; }
__host__ __device__ __forceinline__ int64_t Ld(int64_t d) { return Pad16(d) + 4; }

__host__ __device__ __forceinline__ int64_t OuterSmemBytes(int L, int64_t P, int64_t N) {
  return int64_t{8} * L + int64_t{4} * (2 * L + L * P + L * N);
}
// ChunkStatesKernel: both of the backward's outer sums (never more than the
// backward block, so ChunkLength's check of it cannot bind).
__host__ __device__ __forceinline__ int64_t StatesSmemBytes(int L, int64_t P, int64_t N) {
  return int64_t{8} * L + int64_t{4} * (3 * L + 2 * L * P + 2 * L * N);
}
// doubles: cs [L]; floats: dt [L], X, Y [L][Ld(P)], B, C, Ce [L][Ld(N)],
// S [Pad16(P)][Ld(N)], M [L][Ld(L)].
__host__ __device__ __forceinline__ int64_t OutputSmemBytes(int L, int64_t P, int64_t N) {
  return int64_t{8} * L +
         int64_t{4} * (L + 2 * L * Ld(P) + 3 * L * Ld(N) + Pad16(P) * Ld(N) + L * Ld(L));
}
// doubles: cs, expl, dcs, rw [L], red [2·kWarps]; floats: dt, e, w [L], X,
// dY, dX [L][Ld(P)], B, C, Bw, DyS, XG, dC, dB [L][Ld(N)], S, G
// [Pad16(P)][Ld(N)], CB, DX, Q [L][Ld(L)].
__host__ __device__ __forceinline__ int64_t BackwardSmemBytes(int L, int64_t P, int64_t N) {
  return int64_t{8} * (4 * L + 2 * kWarps) +
         int64_t{4} * (3 * L + 3 * L * Ld(P) + 7 * L * Ld(N) + 2 * Pad16(P) * Ld(N) + 3 * L * Ld(L));
}
// ChunkHeadsOutputKernel: as OutputSmemBytes, with dt, X and S twice (this
// head's and the next's) and C·Bᵀ kept apart from M.
__host__ __device__ __forceinline__ int64_t HeadsOutputSmemBytes(int L, int64_t P, int64_t N) {
  return int64_t{8} * L +
         int64_t{4} * (2 * L + 3 * L * Ld(P) + 3 * L * Ld(N) + 2 * Pad16(P) * Ld(N) + 2 * L * Ld(L));
}
// ChunkHeadsBackwardKernel: as BackwardSmemBytes, with dt, X, dY, S and G
// twice (this head's and the next's), C·Bᵀ kept apart from M1, and the dC,
// dB sums over the block's heads [L][Ld(N)].
__host__ __device__ __forceinline__ int64_t HeadsBackwardSmemBytes(int L, int64_t P, int64_t N) {
  return int64_t{8} * (4 * L + 2 * kWarps) +
         int64_t{4} * (4 * L + 5 * L * Ld(P) + 9 * L * Ld(N) + 4 * Pad16(P) * Ld(N) + 4 * L * Ld(L));
}

// The chunk length: 64, 32 or 16 (wmma tiles of 16 rows), the largest not
// above max(chunk, 16) whose blocks fit; 0 when even 16 does not. T need not
// be a multiple (the last chunk is shorter, its rows zero-padded). kHeadGroups
// takes kPerHead's length or none (0 when its larger backward block does not
// fit at that length), so that both cut the sequence alike and their
// outputs can be the same bits.
int ChunkLength(int64_t P, int64_t N, int64_t chunk,
                ChunkedBlocks kernel = ChunkedBlocks::kPerHead) {
  for (int l = kMaxChunk; l >= 16; l /= 2) {
    if (l > chunk && l > 16) continue;
    if (BackwardSmemBytes(l, P, N) <= static_cast<int64_t>(kMaxSmemBytes) &&
        OutputSmemBytes(l, P, N) <= static_cast<int64_t>(kMaxSmemBytes) &&
        OuterSmemBytes(l, P, N) <= static_cast<int64_t>(kMaxSmemBytes) &&
        StatesSmemBytes(l, P, N) <= static_cast<int64_t>(kMaxSmemBytes)) {
      if (kernel == ChunkedBlocks::kHeadGroups &&
          HeadsBackwardSmemBytes(l, P, N) > static_cast<int64_t>(kMaxSmemBytes))
        return 0;
      return l;
    }
  }
  return 0;
}

// A block's shared memory within the kernels' budget (Launch raises the
// kernel's limit where it passes 48 KB).
inline void CheckSmem(int64_t bytes) {
  GTP_CU_REQUIRE(bytes <= static_cast<int64_t>(kMaxSmemBytes),
                 "SsdChunked (CUDA): %lld bytes of shared memory", static_cast<long long>(bytes));
}

// ------------------------------------------------------------ device helpers

// Block b·H·nc + … → (b, h, c), the chunk's first step and its length.
struct ChunkIdx {
  int64_t b, h, c, bh, t0;
  int len;
};
__device__ __forceinline__ ChunkIdx ThisChunk(int64_t H, int64_t nc, int64_t T, int L) {
  ChunkIdx k;
  k.c = blockIdx.x % nc;
  k.bh = blockIdx.x / nc;
  k.b = k.bh / H;
  k.h = k.bh % H;
  k.t0 = k.c * L;
  k.len = static_cast<int>(T - k.t0 < L ? T - k.t0 : L);
  return k;
}

// sCs[i] = Σ_{k ≤ i} sDt[k]·A in double, for i < len ≤ 64 (sDt staged and
// visible): warp 0 scans, lane l owning steps 2l and 2l + 1 (a fixed tree:
// the same bits every run). With kFactors the same warp also writes, for
// i < L, sE[i] = e_i = exp(cs_i) and sW[i] = w_i = exp(cs_last − cs_i)·dt_i
// (0 for i ≥ len), from the same doubles it stores in sCs (the backward's
// per-step factors, without a pass and a barrier of their own). Ends with a
// barrier.
template <bool kFactors = false>
__device__ __forceinline__ void ScanDecays(const float* sDt, float Ah, int len, double* sCs,
                                           int L = 0, float* sE = nullptr, float* sW = nullptr) {
  if (threadIdx.x < kWarpSize) {
    const int lane = threadIdx.x, i0 = 2 * lane, i1 = i0 + 1;
    const double a0 = i0 < len ? static_cast<double>(sDt[i0]) * Ah : 0.0;
    const double a1 = i1 < len ? static_cast<double>(sDt[i1]) * Ah : 0.0;
    double incl = a0 + a1;  // inclusive scan of the lanes' pair sums
    for (int o = 1; o < kWarpSize; o <<= 1) {
      const double up = __shfl_up_sync(kFullMask, incl, o);
      if (lane >= o) incl += up;
    }
    const double prev = __shfl_up_sync(kFullMask, incl, 1);
    const double before = lane > 0 ? prev : 0.0;
    const double c0 = before + a0, c1 = incl;  // cs at i0, i1
    if (i0 < len) sCs[i0] = c0;
    if (i1 < len) sCs[i1] = c1;
    if (kFactors) {
      const int last = len - 1;
      const double cs_last = __shfl_sync(kFullMask, (last & 1) ? c1 : c0, last / 2);
      if (i0 < L) {
        sE[i0] = i0 < len ? expf(static_cast<float>(c0)) : 0.0f;
        sW[i0] = i0 < len ? expf(static_cast<float>(cs_last - c0)) * sDt[i0] : 0.0f;
      }
      if (i1 < L) {
        sE[i1] = i1 < len ? expf(static_cast<float>(c1)) : 0.0f;
        sW[i1] = i1 < len ? expf(static_cast<float>(cs_last - c1)) * sDt[i1] : 0.0f;
      }
    }
  }
  __syncthreads();
}

// The block's sum of v in double, in a fixed order (warp xor butterfly, then
// the warps in order); every thread gets it. `scratch` holds kWarps doubles.
__device__ __forceinline__ double BlockSumDouble(double v, double* scratch) {
  for (int o = kWarpSize / 2; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
  const int warp = threadIdx.x / kWarpSize;
  __syncthreads();
  if (threadIdx.x % kWarpSize == 0) scratch[warp] = v;
  __syncthreads();
  double s = 0.0;
  for (int w = 0; w < kWarps; ++w) s += scratch[w];
  return s;
}

// ------------------------------------------------------------ tensor cores
//
// The chunk products run on the tensor cores as 3×TF32 (wmma m16n16k8): each
// f32 operand is split into a TF32 head and the TF32 of its remainder, and
// a·b ≈ a_hi·b_hi + a_hi·b_lo + a_lo·b_hi with f32 accumulation, which keeps
// about 21 bits of each product (single TF32 keeps 10, not enough for the
// f32 tolerances of ssm_gpu_test). Warps take 16×16 output tiles round-robin.

namespace wmma = nvcuda::wmma;
using Acc = wmma::fragment<wmma::accumulator, 16, 16, 8, float>;

template <class Frag>
__device__ __forceinline__ void SplitTf32(Frag& hi, Frag& lo) {
#pragma unroll
  for (int t = 0; t < hi.num_elements; ++t) {
    const float v = hi.x[t];
    const float h = wmma::__float_to_tf32(v);
    hi.x[t] = h;
    lo.x[t] = wmma::__float_to_tf32(v - h);
  }
}

// acc += A[row0 : row0 + 16, k0 : k1] · B[k0 : k1, col0 : col0 + 16] (k0, k1
// multiples of 8). A row-major: a[r·lda + k]; col-major: a[r + k·lda]. B
// row-major: b[k·ldb + c]; col-major: b[k + c·ldb].
template <class LayoutA, class LayoutB>
__device__ __forceinline__ void Mma3(Acc& acc, const float* a, int lda, const float* b, int ldb,
                                     int row0, int col0, int k0, int k1) {
  constexpr bool kArow = std::is_same<LayoutA, wmma::row_major>::value;
  constexpr bool kBrow = std::is_same<LayoutB, wmma::row_major>::value;
  for (int k = k0; k < k1; k += 8) {
    wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, LayoutA> ah, al;
    wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, LayoutB> bh, bl;
    wmma::load_matrix_sync(ah, kArow ? a + row0 * lda + k : a + row0 + k * lda, lda);
    wmma::load_matrix_sync(bh, kBrow ? b + k * ldb + col0 : b + k + col0 * ldb, ldb);
    SplitTf32(ah, al);
    SplitTf32(bh, bl);
    wmma::mma_sync(acc, al, bh, acc);
    wmma::mma_sync(acc, ah, bl, acc);
    wmma::mma_sync(acc, ah, bh, acc);
  }
}

using Row = wmma::row_major;
using Col = wmma::col_major;

// sCB's lower 16×16 tiles = C·Bᵀ's (sC, sB: [L][ln], zero-padded to Np
// columns), warps taking tiles round-robin: what the per-head kernels form in
// their own M (the same products). The heads kernels form it once for their
// heads.
__device__ __forceinline__ void LowerCB(const float* sC, const float* sB, float* sCB, int ln,
                                        int ll, int L, int Np) {
  const int warp = threadIdx.x / kWarpSize, Lt = L / 16, tri = Lt * (Lt + 1) / 2;
  for (int t = warp; t < tri; t += kWarps) {
    int tj = t, ti = 0;  // the t-th lower tile, row by row
    while (tj > ti) tj -= ++ti;
    Acc acc;
    wmma::fill_fragment(acc, 0.0f);
    Mma3<Row, Col>(acc, sC, ln, sB, ln, ti * 16, tj * 16, 0, Np);
    wmma::store_matrix_sync(sCB + ti * 16 * ll + tj * 16, acc, ll, wmma::mem_row_major);
  }
}

// ------------------------------------------------------------ heads kernels
//
// A heads kernel's block ((b·G + g)·S + split)·nc + c walks the hs = H/(G·S)
// heads g·(H/G) + split·hs + i of chunk c in order (HeadSplits picks S).
struct HeadsChunk {
  ChunkIdx k;  // h, bh: the block's first head
  int64_t g, split, hs;
};
__device__ __forceinline__ HeadsChunk ThisHeadsChunk(int64_t H, int64_t G, int64_t S, int64_t nc,
                                                     int64_t T, int L) {
  HeadsChunk hc;
  hc.k.c = blockIdx.x % nc;
  const int64_t rest = blockIdx.x / nc, bg = rest / S;
  hc.split = rest % S;
  hc.g = bg % G;
  hc.k.b = bg / G;
  hc.k.t0 = hc.k.c * L;
  hc.k.len = static_cast<int>(T - hc.k.t0 < L ? T - hc.k.t0 : L);
  hc.hs = H / G / S;
  hc.k.h = hc.g * (H / G) + hc.split * hc.hs;
  hc.k.bh = hc.k.b * H + hc.k.h;
  return hc;
}

// The same chunk of the next head.
__device__ __forceinline__ ChunkIdx NextHead(ChunkIdx k) {
  ++k.h;
  ++k.bh;
  return k;
}

// ------------------------------------------------------------ cp.async staging
//
// Every chunk kernel copies its rows in with cp.async: all of a thread's
// loads in flight at once, then one wait (a plain staging loop waits for
// each load before the next store). The heads kernels (a block per chunk and
// heads of a group) copy the next head's rows while one head computes. The
// padded copies write every element of the destination (zeros where
// padded), so nothing of an earlier head is left.

// sDt[i] = dt_{t0+i} of head k.h for i < len, 0 for len ≤ i < L.
__device__ __forceinline__ void CopyDtAsync(const float* __restrict__ dt, const ChunkIdx& k, int L,
                                            int64_t T, int64_t H, float* sDt) {
  for (int i = threadIdx.x; i < L; i += blockDim.x) {
    const bool v = i < k.len;
    CpAsync4(sDt + i, dt + (v ? (k.b * T + k.t0 + i) * H + k.h : 0), v);
  }
}

// dst[r][c] (stride ld), r < rows, c < cols: the chunk's rows of index x
// (head or group) of a [B, T, X, D] tensor, zero for r ≥ len or c ≥ D.
__device__ __forceinline__ void CopyRowsAsync(const float* __restrict__ src, float* dst, int ld,
                                              const ChunkIdx& k, int rows, int cols, int64_t T,
                                              int64_t X, int64_t x, int D) {
  for (int i = threadIdx.x; i < rows * cols; i += blockDim.x) {
    const int r = i / cols, c = i - r * cols;
    const bool v = r < k.len && c < D;
    CpAsync4(dst + r * ld + c, src + (v ? ((k.b * T + k.t0 + r) * X + x) * D + c : 0), v);
  }
}

// dst[r][c] (stride ld), r < L, c < Pad16(P): the chunk's rows of head k.h of
// a [B, T, H, P] tensor, zero for r ≥ len or c ≥ P.
__device__ __forceinline__ void CopyHeadRowsAsync(const float* __restrict__ src, float* dst, int ld,
                                                  const ChunkIdx& k, int L, int64_t T, int64_t H,
                                                  int P) {
  CopyRowsAsync(src, dst, ld, k, L, static_cast<int>(Pad16(P)), T, H, k.h, P);
}

// dst[p][n] (stride ld), p < Pad16(P), n < Pad16(N): a [P, N] state, zero-padded.
__device__ __forceinline__ void CopyStateAsync(const float* __restrict__ src, float* dst, int ld,
                                               int P, int N) {
  const int pp = static_cast<int>(Pad16(P)), np = static_cast<int>(Pad16(N));
  for (int i = threadIdx.x; i < pp * np; i += blockDim.x) {
    const int p = i / np, n = i - p * np;
    const bool v = p < P && n < N;
    CpAsync4(dst + p * ld + n, src + (v ? int64_t{p} * N + n : 0), v);
  }
}

// The splits S of a group's H/G heads over a heads kernel's blocks: the
// fewest (a divisor of H/G) that give B·nc·G·S ≥ `blocks` blocks, else H/G
// (a head a block). A function of the shape only (not of the device), so
// that an order of sums that follows the splits depends on the shape only.
int64_t HeadSplits(int64_t B, int64_t nc, int64_t H, int64_t G, int64_t blocks) {
  const int64_t hpg = H / G, have = B * nc * G;
  for (int64_t s = 1; s < hpg; ++s) {
    if (hpg % s == 0 && have * s >= blocks) return s;
  }
  return hpg;
}

// Scratch, doubles first: dad [BH·nc·2] (backward), then floats: dec [BH·nc],
// S [BH·nc·P·N], Gs [BH·nc·P·N] (backward), parts 2·[B·T·H·N] (backward, G < H;
// kHeadGroups uses the first B·T·G·S·N of each, S ≤ H/G its head splits).
struct Scratch {
  double* dad;
  float *dec, *S, *Gs, *dB_part, *dC_part;
};
int64_t ScratchLayout(int64_t B, int64_t T, int64_t H, int64_t P, int64_t G, int64_t N, int L,
                      bool backward, float* base, Scratch* out) {
  const int64_t nc = CeilDiv(T, L), BHc = B * H * nc, states = BHc * P * N;
  const int64_t dad_floats = backward ? 4 * BHc : 0;  // doubles as float pairs
  const int64_t parts = backward && H != G ? B * T * H * N : 0;
  if (out != nullptr) {
    out->dad = backward ? reinterpret_cast<double*>(base) : nullptr;
    out->dec = base + dad_floats;
    out->S = out->dec + BHc;
    out->Gs = backward ? out->S + states : nullptr;
    out->dB_part = parts > 0 ? out->S + 2 * states : nullptr;
    out->dC_part = parts > 0 ? out->dB_part + parts : nullptr;
  }
  return dad_floats + BHc + (backward ? 2 : 1) * states + 2 * parts;
}

// The chunk length of a call, after its argument checks (abort naming op).
int CheckedChunkLength(const char* op, int64_t H, int64_t P, int64_t G, int64_t N, int64_t chunk,
                       ChunkedBlocks kernel = ChunkedBlocks::kPerHead) {
  GTP_CU_REQUIRE(G >= 1 && H % G == 0 && P >= 1 && N >= 0 && chunk >= 1,
                 "%s (CUDA): H = %lld, G = %lld, P = %lld, N = %lld, chunk = %lld", op,
                 static_cast<long long>(H), static_cast<long long>(G), static_cast<long long>(P),
                 static_cast<long long>(N), static_cast<long long>(chunk));
  const int L = ChunkLength(P, N, chunk, kernel);
  GTP_CU_REQUIRE(L > 0, "%s (CUDA): P = %lld, N = %lld do not fit a chunk block", op,
                 static_cast<long long>(P), static_cast<long long>(N));
  return L;
}

}  // namespace

// Defined in ssd_chunked.cu, used by both files.
namespace chunked_internal {
// S ← S_in [BH, nc, P, N] and dec [BH, nc], from the inputs (the forward's
// first two kernels).
void EntryStates(const float* x, const float* dt, const float* A, const float* Bm, float* S,
                 float* dec, int64_t B, int64_t T, int64_t H, int64_t P, int64_t G, int64_t N,
                 int L, cudaStream_t stream);
// The backward's chunk states, two kernels: S ← S_in, dec as EntryStates,
// and Gs ← G_c = ∂L/∂S_in[c+1] [BH, nc, P, N] (from dy, C and dec).
void BackwardStates(const float* x, const float* dy, const float* dt, const float* A,
                    const float* Bm, const float* Cm, float* S, float* Gs, float* dec, int64_t B,
                    int64_t T, int64_t H, int64_t P, int64_t G, int64_t N, int L,
                    cudaStream_t stream);
}  // namespace chunked_internal

}  // namespace gtp::kernels::ssm::cuda
