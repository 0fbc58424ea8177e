// core/kernels/ssm/ssd_chunked.cu — the SSD scan by chunks on CUDA
// (ssd_scan_cuda.h SsdChunked*; math in ssd_scan.h). The recurrence kernels
// (ssd_scan.cu) are serial in T per state element; here the sequence is cut
// into chunks of L = 16, 32 or 64 steps and everything but a short pass over
// the chunks runs parallel over (b, h, chunk). f32 data; the chunk products
// on the tensor cores as 3×TF32 with f32 accumulation (see "tensor cores"
// below), the chunk states on CUDA cores; the cumulative decays and the
// per-step scalar gradients in double; no atomics, every sum in a fixed
// order: bit-identical run to run.
//
// Per (b, h) and chunk c of len ≤ L steps from t0, with cs_i = Σ_{k ≤ i} dt_k·A
// (inside the chunk), E_ij = exp(cs_i − cs_j) for j ≤ i, e_i = exp(cs_i),
// w_j = exp(cs_last − cs_j)·dt_j and dec_c = exp(cs_last):
//   S_c       = Σ_j w_j · x_j ⊗ B_j                        (ChunkOuterKernel, kState)
//   S_in[c+1] = dec_c·S_in[c] + S_c,  S_in[0] = 0          (ChunkPassKernel, forward)
//   y_i = Σ_{j ≤ i} (C_i·B_j)·E_ij·dt_j·x_j + e_i·S_in[c]·C_i + D·x_i   (ChunkOutputKernel)
// Backward, with dy given and G_c = ∂L/∂S_in[c+1]:
//   local_c = Σ_i e_i · dy_i ⊗ C_i                          (ChunkOuterKernel, kDState)
//   ∂L/∂S_in[c] = local_c + dec_c·G_c,  G_{nc−1} = 0          (ChunkPassKernel, reverse)
// and per chunk (ChunkBackwardKernel), with CB_ij = C_i·B_j, DX_ij = dy_i·x_j,
// M1 = CB∘E, M2 = DX∘E, Q = CB∘DX∘E (all zero above the diagonal):
//   dx_j = dt_j·Σ_{i ≥ j} M1_ij·dy_i + w_j·G_c·B_j + D·dy_j
//   dC_i = Σ_{j ≤ i} M2_ij·dt_j·B_j + e_i·S_in[c]ᵀ·dy_i
//   dB_j = dt_j·Σ_{i ≥ j} M2_ij·C_i + w_j·G_cᵀ·x_j
// and the scalars (R_j = x_jᵀ·G_c·B_j, O_i = dy_iᵀ·S_in[c]·C_i):
//   ∂L/∂dt_j (explicit) = Σ_{i ≥ j} Q_ij + R_j·w_j/dt_j
//   ∂L/∂cs_t = Σ_{j ≤ t} Q_tj·dt_j − dt_t·Σ_{i ≥ t} Q_it + e_t·O_t − R_t·w_t
//              + [t = last]·(Σ_j R_j·w_j + dec_c·⟨G_c, S_in[c]⟩)
// then ∂L/∂a_k = Σ_{t ≥ k} ∂L/∂cs_t inside the chunk (a_k = dt_k·A), so
// ddt_k = explicit_k + A·∂L/∂a_k and dA += Σ_k dt_k·∂L/∂a_k.
//
// Nothing is saved by the forward: the backward recomputes S_in (two of the
// forward's three kernels). Shared memory bounds the shapes: ChunkLength
// takes the largest of 64, 32, 16 not above max(chunk, 16) whose blocks fit;
// a shape none fits (P·N beyond ~14k) is refused (SsdChunkedFits), and
// ssd_scan.cc's kAuto runs the recurrence kernels for it. Which kernel is
// faster for which shape: ssd_scan.h (SsdAutoKernel).
#include <cuda_runtime.h>
#include <mma.h>

#include <type_traits>

#include "core/kernels/cuda/common.cuh"
#include "core/kernels/ssm/ssd_common.cuh"
#include "core/kernels/ssm/ssd_scan_cuda.h"

namespace gtp::kernels::ssm::cuda {
namespace {

using ::gtp::kernels::cuda::internal::CeilDiv;
using ::gtp::kernels::cuda::internal::GridFor;
using ::gtp::kernels::cuda::internal::kFullMask;
using ::gtp::kernels::cuda::internal::kWarpSize;

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / kWarpSize;
constexpr int kMaxChunk = 2 * kWarpSize;  // StageDecays: two steps a lane
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

// The chunk length: 64, 32 or 16 (wmma tiles of 16 rows), the largest not
// above max(chunk, 16) whose blocks fit; 0 when even 16 does not. T need not
// be a multiple (the last chunk is shorter, its rows zero-padded).
int ChunkLength(int64_t P, int64_t N, int64_t chunk) {
  for (int l = kMaxChunk; l >= 16; l /= 2) {
    if (l > chunk && l > 16) continue;
    if (BackwardSmemBytes(l, P, N) <= static_cast<int64_t>(kMaxSmemBytes) &&
        OutputSmemBytes(l, P, N) <= static_cast<int64_t>(kMaxSmemBytes) &&
        OuterSmemBytes(l, P, N) <= static_cast<int64_t>(kMaxSmemBytes))
      return l;
  }
  return 0;
}

template <class K>
void AllowSmem(K kernel, int64_t bytes) {
  GTP_CU_REQUIRE(bytes <= static_cast<int64_t>(kMaxSmemBytes),
                 "SsdChunked (CUDA): %lld bytes of shared memory", static_cast<long long>(bytes));
  if (bytes > 48 * 1024) {
    GTP_CU_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      static_cast<int>(bytes)));
  }
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

// sDt[i] = dt_{t0+i}, sCs[i] = Σ_{k ≤ i} dt_k·A in double, for i < len ≤ 64:
// warp 0 scans, lane l owning steps 2l and 2l + 1 (a fixed tree: the same
// bits every run). Ends with a barrier.
__device__ __forceinline__ void StageDecays(const float* __restrict__ dt, float Ah,
                                            const ChunkIdx& k, int64_t T, int64_t H, float* sDt,
                                            double* sCs) {
  for (int i = threadIdx.x; i < k.len; i += blockDim.x) sDt[i] = dt[(k.b * T + k.t0 + i) * H + k.h];
  __syncthreads();
  if (threadIdx.x < kWarpSize) {
    const int lane = threadIdx.x, i0 = 2 * lane, i1 = i0 + 1;
    const double a0 = i0 < k.len ? static_cast<double>(sDt[i0]) * Ah : 0.0;
    const double a1 = i1 < k.len ? static_cast<double>(sDt[i1]) * Ah : 0.0;
    double incl = a0 + a1;  // inclusive scan of the lanes' pair sums
    for (int o = 1; o < kWarpSize; o <<= 1) {
      const double up = __shfl_up_sync(kFullMask, incl, o);
      if (lane >= o) incl += up;
    }
    const double prev = __shfl_up_sync(kFullMask, incl, 1);
    const double before = lane > 0 ? prev : 0.0;
    if (i0 < k.len) sCs[i0] = before + a0;
    if (i1 < k.len) sCs[i1] = incl;
  }
  __syncthreads();
}

// dst[i][0..P) (row stride ld) = the chunk's rows of head h of a [B, T, H, P] tensor.
__device__ __forceinline__ void StageHead(const float* __restrict__ src, float* dst, int ld,
                                          const ChunkIdx& k, int64_t T, int64_t H, int64_t P) {
  const int p_ = static_cast<int>(P);
  StageBatched<2>(
      k.len * p_,
      [=](int i) {
        const int r = i / p_, p = i - r * p_;
        return src[((k.b * T + k.t0 + r) * H + k.h) * P + p];
      },
      [=](int i, float v) {
        const int r = i / p_, p = i - r * p_;
        dst[r * ld + p] = v;
      });
}

// dst[i][0..N) (row stride ld) = the chunk's rows of group g of a [B, T, G, N] tensor.
__device__ __forceinline__ void StageGroup(const float* __restrict__ src, float* dst, int ld,
                                           const ChunkIdx& k, int64_t g, int64_t T, int64_t G,
                                           int64_t N) {
  const int n_ = static_cast<int>(N);
  StageBatched<2>(
      k.len * n_,
      [=](int i) {
        const int r = i / n_, j = i - r * n_;
        return src[((k.b * T + k.t0 + r) * G + g) * N + j];
      },
      [=](int i, float v) {
        const int r = i / n_, j = i - r * n_;
        dst[r * ld + j] = v;
      });
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

// ------------------------------------------------------------ kernels

enum OuterKind { kState = 0, kDState = 1 };

// Grid B·H·nc. kState:  out[bh, c] = Σ_j w_j·x_j ⊗ B_j, dec[bh, c] = exp(cs_last);
//              kDState: out[bh, c] = Σ_i e_i·dy_i ⊗ C_i.
// (u = src rows [T, H, P], v = group rows [T, G, N].)
template <int kKind>
__global__ void __launch_bounds__(kThreads)
    ChunkOuterKernel(const float* __restrict__ u, const float* __restrict__ v,
                     const float* __restrict__ dt, const float* __restrict__ A,
                     float* __restrict__ out, float* __restrict__ dec, int64_t T, int64_t H,
                     int64_t P64, int64_t G, int64_t N64, int L, int64_t nc) {
  const int P = static_cast<int>(P64), N = static_cast<int>(N64);  // < 2^31: they fit shared memory
  extern __shared__ double smem_d[];
  double* sCs = smem_d;
  float* sDt = reinterpret_cast<float*>(sCs + L);
  float* sW = sDt + L;
  float* sU = sW + L;
  float* sV = sU + L * P;
  const ChunkIdx k = ThisChunk(H, nc, T, L);
  const int64_t g = k.h / (H / G);
  StageDecays(dt, A[k.h], k, T, H, sDt, sCs);
  const double last = sCs[k.len - 1];
  for (int i = threadIdx.x; i < k.len; i += blockDim.x) {
    sW[i] = kKind == kState ? static_cast<float>(exp(last - sCs[i])) * sDt[i]
                            : static_cast<float>(exp(sCs[i]));
  }
  StageHead(u, sU, static_cast<int>(P), k, T, H, P);
  StageGroup(v, sV, static_cast<int>(N), k, g, T, G, N);
  __syncthreads();
  float* o = out + (k.bh * nc + k.c) * P * N;
  for (int e = threadIdx.x; e < P * N; e += blockDim.x) {
    const int p = e / N, n = e - p * N;
    float acc = 0.0f;
    for (int j = 0; j < k.len; ++j) acc = fmaf(sW[j] * sU[j * P + p], sV[j * N + n], acc);
    o[e] = acc;
  }
  if (kKind == kState && threadIdx.x == 0) dec[k.bh * nc + k.c] = static_cast<float>(exp(last));
}

// One thread per (b, h, p, n). Forward: s[bh, c] ← S_in[c] (from S_c, in
// place). Reverse: s[bh, c] ← G_c = ∂L/∂S_in[c+1] (from local_c, in place).
template <bool kReverse>
__global__ void ChunkPassKernel(float* __restrict__ s, const float* __restrict__ dec, int64_t BH,
                                int64_t PN, int64_t nc) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < BH * PN;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t bh = i / PN, e = i % PN;
    float carry = 0.0f;
    for (int64_t step = 0; step < nc; ++step) {
      const int64_t c = kReverse ? nc - 1 - step : step;
      float* at = s + (bh * nc + c) * PN + e;
      const float here = *at;
      *at = carry;
      carry = fmaf(dec[bh * nc + c], carry, here);
    }
  }
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

// dst[r][c] (stride ld), r < L, c < Pad16(D): the chunk's rows of a [B, T, X, D]
// tensor at index x (head or group), zero for r ≥ len or c ≥ D.
__device__ __forceinline__ void StagePadded(const float* __restrict__ src, float* dst, int ld,
                                            const ChunkIdx& k, int L, int64_t T, int64_t X,
                                            int64_t x, int D) {
  const int dp = static_cast<int>(Pad16(D));
  StageBatched(
      L * dp,
      [=](int i) {
        const int r = i / dp, c = i - r * dp;
        return r < k.len && c < D ? src[((k.b * T + k.t0 + r) * X + x) * D + c] : 0.0f;
      },
      [=](int i, float v) {
        const int r = i / dp, c = i - r * dp;
        dst[r * ld + c] = v;
      });
}

// dst[p][n] (stride ld), p < Pad16(P), n < Pad16(N): a [P, N] state, zero-padded.
__device__ __forceinline__ void StageStatePadded(const float* __restrict__ src, float* dst, int ld,
                                                 int P, int N) {
  const int pp = static_cast<int>(Pad16(P)), np = static_cast<int>(Pad16(N));
  StageBatched(
      pp * np,
      [=](int i) {
        const int p = i / np, c = i - p * np;
        return p < P && c < N ? src[p * N + c] : 0.0f;
      },
      [=](int i, float v) {
        const int p = i / np, c = i - p * np;
        dst[p * ld + c] = v;
      });
}

// Grid B·H·nc: y of the chunk (see the top of the file). sin = S_in [BH, nc, P, N].
__global__ void __launch_bounds__(kThreads)
    ChunkOutputKernel(const float* __restrict__ x, const float* __restrict__ dt,
                      const float* __restrict__ A, const float* __restrict__ Bm,
                      const float* __restrict__ Cm, const float* __restrict__ D,
                      const float* __restrict__ sin, float* __restrict__ y, int64_t T, int64_t H,
                      int64_t P64, int64_t G, int64_t N64, int L, int64_t nc) {
  extern __shared__ __align__(128) double smem_d[];
  const int P = static_cast<int>(P64), N = static_cast<int>(N64);
  const int lp = static_cast<int>(Ld(P)), ln = static_cast<int>(Ld(N)),
            ll = static_cast<int>(Ld(L));
  const int Pp = static_cast<int>(Pad16(P)), Np = static_cast<int>(Pad16(N));
  double* sCs = smem_d;
  float* sDt = reinterpret_cast<float*>(sCs + L);
  float* sX = sDt + L;
  float* sY = sX + L * lp;
  float* sB = sY + L * lp;
  float* sC = sB + L * ln;
  float* sCe = sC + L * ln;
  float* sS = sCe + L * ln;
  float* sM = sS + Pp * ln;
  const ChunkIdx k = ThisChunk(H, nc, T, L);
  const int64_t g = k.h / (H / G);
  StageDecays(dt, A[k.h], k, T, H, sDt, sCs);
  StagePadded(x, sX, lp, k, L, T, H, k.h, P);
  StagePadded(Bm, sB, ln, k, L, T, G, g, N);
  StagePadded(Cm, sC, ln, k, L, T, G, g, N);
  StageStatePadded(sin + (k.bh * nc + k.c) * P64 * N64, sS, ln, P, N);
  __syncthreads();
  for (int e = threadIdx.x; e < L * Np; e += blockDim.x) {
    const int i = e / Np, n = e - i * Np;
    sCe[i * ln + n] = i < k.len ? expf(static_cast<float>(sCs[i])) * sC[i * ln + n] : 0.0f;
  }
  const int warp = threadIdx.x / kWarpSize, Lt = L / 16;
  // C·Bᵀ, lower tiles.
  for (int t = warp; t < Lt * Lt; t += kWarps) {
    const int ti = t / Lt, tj = t - ti * Lt;
    if (tj > ti) continue;
    Acc acc;
    wmma::fill_fragment(acc, 0.0f);
    Mma3<Row, Col>(acc, sC, ln, sB, ln, ti * 16, tj * 16, 0, Np);
    wmma::store_matrix_sync(sM + ti * 16 * ll + tj * 16, acc, ll, wmma::mem_row_major);
  }
  __syncthreads();
  for (int e = threadIdx.x; e < L * L; e += blockDim.x) {
    const int i = e / L, j = e - i * L;
    float m = 0.0f;
    if (i < k.len && j <= i)
      m = sM[i * ll + j] * expf(static_cast<float>(sCs[i] - sCs[j])) * sDt[j];
    sM[i * ll + j] = m;
  }
  __syncthreads();
  // Y = M·X + Ce·S_inᵀ.
  const int Pt = Pp / 16;
  for (int t = warp; t < Lt * Pt; t += kWarps) {
    const int ti = t / Pt, tp = t - ti * Pt;
    Acc acc;
    wmma::fill_fragment(acc, 0.0f);
    Mma3<Row, Row>(acc, sM, ll, sX, lp, ti * 16, tp * 16, 0, (ti + 1) * 16);
    Mma3<Row, Col>(acc, sCe, ln, sS, ln, ti * 16, tp * 16, 0, Np);
    wmma::store_matrix_sync(sY + ti * 16 * lp + tp * 16, acc, lp, wmma::mem_row_major);
  }
  __syncthreads();
  const float Dh = D[k.h];
  for (int e = threadIdx.x; e < k.len * P; e += blockDim.x) {
    const int i = e / P, p = e - i * P;
    y[((k.b * T + k.t0 + i) * H + k.h) * P64 + p] = fmaf(Dh, sX[i * lp + p], sY[i * lp + p]);
  }
}

// Grid B·H·nc: dx, dB, dC (direct when H = G, else per-head partials
// [B, T, H, N]), ddt, and the chunk's dA, dD partials dad[bh, c, 0..1].
__global__ void __launch_bounds__(kThreads)
    ChunkBackwardKernel(const float* __restrict__ dy, const float* __restrict__ x,
                        const float* __restrict__ dt, const float* __restrict__ A,
                        const float* __restrict__ Bm, const float* __restrict__ Cm,
                        const float* __restrict__ D, const float* __restrict__ sin,
                        const float* __restrict__ gout, const float* __restrict__ dec,
                        float* __restrict__ dx, float* __restrict__ ddt, float* __restrict__ dB,
                        float* __restrict__ dC, double* __restrict__ dad, int64_t T, int64_t H,
                        int64_t P64, int64_t G, int64_t N64, int L, int64_t nc) {
  extern __shared__ __align__(128) double smem_d[];
  const int P = static_cast<int>(P64), N = static_cast<int>(N64);
  const int lp = static_cast<int>(Ld(P)), ln = static_cast<int>(Ld(N)),
            ll = static_cast<int>(Ld(L));
  const int Pp = static_cast<int>(Pad16(P)), Np = static_cast<int>(Pad16(N));
  double* sCs = smem_d;
  double* sExpl = sCs + L;   // ∂L/∂dt explicit, then ddt
  double* sDcs = sExpl + L;  // ∂L/∂cs
  double* sRw = sDcs + L;    // R_j·w_j
  double* sRed = sRw + L;    // [2·kWarps] block sums
  float* sDt = reinterpret_cast<float*>(sRed + 2 * kWarps);
  float* sE = sDt + L;  // e_i = exp(cs_i)
  float* sW = sE + L;   // w_j = exp(cs_last − cs_j)·dt_j
  float* sX = sW + L;
  float* sDy = sX + L * lp;
  float* sOx = sDy + L * lp;  // dx before D·dy
  float* sB = sOx + L * lp;
  float* sC = sB + L * ln;
  float* sBw = sC + L * ln;    // w_j·B_j
  float* sDyS = sBw + L * ln;  // dy_i·S_in
  float* sXG = sDyS + L * ln;  // x_j·G_c
  float* sOc = sXG + L * ln;   // dC before e_i·DyS
  float* sOb = sOc + L * ln;   // dB before w_j·XG
  float* sS = sOb + L * ln;    // S_in[c]  [Pp][ln]
  float* sG = sS + Pp * ln;    // G_c      [Pp][ln]
  float* sM1 = sG + Pp * ln;   // C·Bᵀ, then M1' = CB∘E·dt_j
  float* sM2 = sM1 + L * ll;   // dY·Xᵀ, then M2' = DX∘E·dt_j
  float* sQ = sM2 + L * ll;    // CB∘DX∘E
  const ChunkIdx k = ThisChunk(H, nc, T, L);
  const int64_t g = k.h / (H / G);
  const float Ah = A[k.h], Dh = D[k.h];
  StageDecays(dt, Ah, k, T, H, sDt, sCs);
  StagePadded(x, sX, lp, k, L, T, H, k.h, P);
  StagePadded(dy, sDy, lp, k, L, T, H, k.h, P);
  StagePadded(Bm, sB, ln, k, L, T, G, g, N);
  StagePadded(Cm, sC, ln, k, L, T, G, g, N);
  const int64_t state = (k.bh * nc + k.c) * P64 * N64;
  StageStatePadded(sin + state, sS, ln, P, N);
  StageStatePadded(gout + state, sG, ln, P, N);
  const int last = k.len - 1;
  const double cs_last = sCs[last];
  // The per-step factors, once a step (StageDecays' barrier made sCs, sDt).
  for (int j = threadIdx.x; j < L; j += blockDim.x) {
    sE[j] = j < k.len ? expf(static_cast<float>(sCs[j])) : 0.0f;
    sW[j] = j < k.len ? expf(static_cast<float>(cs_last - sCs[j])) * sDt[j] : 0.0f;
  }
  __syncthreads();  // B staged, e and w made
  for (int e = threadIdx.x; e < L * Np; e += blockDim.x) {
    const int j = e / Np, n = e - j * Np;
    sBw[j * ln + n] = j < k.len ? sW[j] * sB[j * ln + n] : 0.0f;
  }
  __syncthreads();
  const int warp = threadIdx.x / kWarpSize, Lt = L / 16, Pt = Pp / 16, Nt = Np / 16;
  // Phase A: C·Bᵀ and dY·Xᵀ (their lower tiles only, so every warp's turn
  // has work), dY·S_in, X·G.
  const int tri = Lt * (Lt + 1) / 2;
  for (int t = warp; t < 2 * tri + 2 * Lt * Nt; t += kWarps) {
    Acc acc;
    wmma::fill_fragment(acc, 0.0f);
    if (t < 2 * tri) {
      const int which = t / tri;
      int tj = t - which * tri, ti = 0;  // the r-th lower tile, row by row
      while (tj > ti) tj -= ++ti;
      if (which == 0) {
        Mma3<Row, Col>(acc, sC, ln, sB, ln, ti * 16, tj * 16, 0, Np);
        wmma::store_matrix_sync(sM1 + ti * 16 * ll + tj * 16, acc, ll, wmma::mem_row_major);
      } else {
        Mma3<Row, Col>(acc, sDy, lp, sX, lp, ti * 16, tj * 16, 0, Pp);
        wmma::store_matrix_sync(sM2 + ti * 16 * ll + tj * 16, acc, ll, wmma::mem_row_major);
      }
    } else {
      const int u = t - 2 * tri, which = u / (Lt * Nt), r = u - which * Lt * Nt, ti = r / Nt,
                tn = r - ti * Nt;
      if (which == 0) {
        Mma3<Row, Row>(acc, sDy, lp, sS, ln, ti * 16, tn * 16, 0, Pp);
        wmma::store_matrix_sync(sDyS + ti * 16 * ln + tn * 16, acc, ln, wmma::mem_row_major);
      } else {
        Mma3<Row, Row>(acc, sX, lp, sG, ln, ti * 16, tn * 16, 0, Pp);
        wmma::store_matrix_sync(sXG + ti * 16 * ln + tn * 16, acc, ln, wmma::mem_row_major);
      }
    }
  }
  __syncthreads();
  // M1', M2', Q on the lower tiles only: phase B and the scalars read nothing
  // above the diagonal tiles (the zeros above the diagonal inside them are
  // written). A thread per element of a 16×16 tile.
  static_assert(kThreads == 16 * 16, "one thread per element of a tile");
  for (int ti = 0; ti < Lt; ++ti) {
    for (int tj = 0; tj <= ti; ++tj) {
      const int i = ti * 16 + static_cast<int>(threadIdx.x) / 16;
      const int j = tj * 16 + static_cast<int>(threadIdx.x) % 16;
      float m1 = 0.0f, m2 = 0.0f, q = 0.0f;
      if (i < k.len && j <= i) {
        const float E = expf(static_cast<float>(sCs[i] - sCs[j]));
        const float cb = sM1[i * ll + j], dxx = sM2[i * ll + j];
        q = cb * dxx * E;
        m1 = cb * E * sDt[j];
        m2 = dxx * E * sDt[j];
      }
      sM1[i * ll + j] = m1;
      sM2[i * ll + j] = m2;
      sQ[i * ll + j] = q;
    }
  }
  __syncthreads();
  // Phase B: dx = M1'ᵀ·dY + Bw·Gᵀ, dC = M2'·B, dB = M2'ᵀ·C. A warp's turn
  // is a dx tile, or the dC and dB tiles of one (ti, tn): dC's K extent is
  // (ti + 1)·16 and dB's (Lt − ti)·16, so every pair costs the same, as
  // near as a dx tile does ((Lt − tj)·16 + Np).
  for (int t = warp; t < Lt * Pt + Lt * Nt; t += kWarps) {
    Acc acc;
    wmma::fill_fragment(acc, 0.0f);
    if (t < Lt * Pt) {
      const int tj = t / Pt, tp = t - tj * Pt;
      Mma3<Col, Row>(acc, sM1, ll, sDy, lp, tj * 16, tp * 16, tj * 16, L);
      Mma3<Row, Col>(acc, sBw, ln, sG, ln, tj * 16, tp * 16, 0, Np);
      wmma::store_matrix_sync(sOx + tj * 16 * lp + tp * 16, acc, lp, wmma::mem_row_major);
    } else {
      const int r = t - Lt * Pt, ti = r / Nt, tn = r - ti * Nt;
      Mma3<Row, Row>(acc, sM2, ll, sB, ln, ti * 16, tn * 16, 0, (ti + 1) * 16);
      wmma::store_matrix_sync(sOc + ti * 16 * ln + tn * 16, acc, ln, wmma::mem_row_major);
      wmma::fill_fragment(acc, 0.0f);
      Mma3<Col, Row>(acc, sM2, ll, sC, ln, ti * 16, tn * 16, ti * 16, L);
      wmma::store_matrix_sync(sOb + ti * 16 * ln + tn * 16, acc, ln, wmma::mem_row_major);
    }
  }
  // The per-step scalars, q = kThreads / L threads a step (their lanes are
  // consecutive in one warp), summed in a fixed xor order.
  {
    const int q = kThreads / L, t = threadIdx.x / q, part = threadIdx.x - t * q;
    double row = 0.0, col = 0.0, O = 0.0, R = 0.0;
    if (t < k.len) {
      for (int j = part; j <= t; j += q) row += static_cast<double>(sQ[t * ll + j]) * sDt[j];
      for (int i = t + part; i < k.len; i += q) col += sQ[i * ll + t];
      for (int n = part; n < N; n += q) {
        O += static_cast<double>(sC[t * ln + n]) * sDyS[t * ln + n];
        R += static_cast<double>(sB[t * ln + n]) * sXG[t * ln + n];
      }
    }
    for (int o = 1; o < q; o <<= 1) {
      row += __shfl_xor_sync(kFullMask, row, o);
      col += __shfl_xor_sync(kFullMask, col, o);
      O += __shfl_xor_sync(kFullMask, O, o);
      R += __shfl_xor_sync(kFullMask, R, o);
    }
    if (part == 0 && t < k.len) {
      const double ew = exp(cs_last - sCs[t]), dtt = sDt[t];
      sExpl[t] = col + R * ew;
      sRw[t] = R * ew * dtt;
      sDcs[t] = row - dtt * col + exp(sCs[t]) * O - R * ew * dtt;
    }
  }
  double gs = 0.0, xd = 0.0;
  for (int e = threadIdx.x; e < P * N; e += blockDim.x) {
    const int p = e / N, n = e - p * N;
    gs += static_cast<double>(sG[p * ln + n]) * sS[p * ln + n];
  }
  for (int e = threadIdx.x; e < k.len * P; e += blockDim.x) {
    const int i = e / P, p = e - i * P;
    xd += static_cast<double>(sDy[i * lp + p]) * sX[i * lp + p];
  }
  gs = BlockSumDouble(gs, sRed);  // (its barriers also complete phase B)
  xd = BlockSumDouble(xd, sRed + kWarps);
  __syncthreads();
  for (int e = threadIdx.x; e < k.len * P; e += blockDim.x) {
    const int j = e / P, p = e - j * P;
    dx[((k.b * T + k.t0 + j) * H + k.h) * P64 + p] = fmaf(Dh, sDy[j * lp + p], sOx[j * lp + p]);
  }
  const bool direct = H == G;
  for (int e = threadIdx.x; e < k.len * N; e += blockDim.x) {
    const int r = e / N, n = e - r * N;
    const float er = sE[r], wr = sW[r];
    const int64_t tt = k.b * T + k.t0 + r;
    const int64_t at = direct ? (tt * G + g) * N64 + n : (tt * H + k.h) * N64 + n;
    dC[at] = fmaf(er, sDyS[r * ln + n], sOc[r * ln + n]);
    dB[at] = fmaf(wr, sXG[r * ln + n], sOb[r * ln + n]);
  }
  // The chunk's tail, by warp 0 (lane l owns steps 2l and 2l + 1; L ≤ 64),
  // in fixed shuffle orders: the last step's extra term, ∂L/∂a_t = Σ_{s ≥ t}
  // ∂L/∂cs_s (a suffix scan), ddt_t += A·∂L/∂a_t, and dA's partial
  // Σ_t dt_t·∂L/∂a_t. (One thread walking the 64 steps serially kept the
  // other 255 waiting at the barrier below.)
  if (threadIdx.x < kWarpSize) {
    const int lane = threadIdx.x, i0 = 2 * lane, i1 = i0 + 1;
    const bool v0 = i0 < k.len, v1 = i1 < k.len;
    double rw = (v0 ? sRw[i0] : 0.0) + (v1 ? sRw[i1] : 0.0);
    for (int o = kWarpSize / 2; o > 0; o >>= 1) rw += __shfl_xor_sync(kFullMask, rw, o);
    const double extra = static_cast<double>(dec[k.bh * nc + k.c]) * gs + rw;
    double d0 = v0 ? sDcs[i0] : 0.0, d1 = v1 ? sDcs[i1] : 0.0;
    if (i0 == last) d0 += extra;
    if (i1 == last) d1 += extra;
    double incl = d0 + d1;  // Σ of the pair sums of lanes ≥ lane
    for (int o = 1; o < kWarpSize; o <<= 1) {
      const double below = __shfl_down_sync(kFullMask, incl, o);
      if (lane + o < kWarpSize) incl += below;
    }
    const double later = __shfl_down_sync(kFullMask, incl, 1);
    const double da1 = d1 + (lane + 1 < kWarpSize ? later : 0.0), da0 = d0 + da1;
    if (v0) sExpl[i0] += static_cast<double>(Ah) * da0;  // now ddt
    if (v1) sExpl[i1] += static_cast<double>(Ah) * da1;
    double da_dt = (v0 ? static_cast<double>(sDt[i0]) * da0 : 0.0) +
                   (v1 ? static_cast<double>(sDt[i1]) * da1 : 0.0);
    for (int o = kWarpSize / 2; o > 0; o >>= 1) da_dt += __shfl_xor_sync(kFullMask, da_dt, o);
    if (lane == 0) {
      dad[(k.bh * nc + k.c) * 2] = da_dt;
      dad[(k.bh * nc + k.c) * 2 + 1] = xd;
    }
  }
  __syncthreads();
  for (int t = threadIdx.x; t < k.len; t += blockDim.x)
    ddt[(k.b * T + k.t0 + t) * H + k.h] = static_cast<float>(sExpl[t]);
}

// dA[h] += Σ_b Σ_c dad[b·H + h, c, 0], dD[h] likewise with 1; b, then c, in order.
__global__ void AddChunkParamsKernel(const double* __restrict__ dad, float* __restrict__ dA,
                                     float* __restrict__ dD, int64_t B, int64_t H, int64_t nc) {
  const int64_t h = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (h >= H) return;
  double sa = 0.0, sd = 0.0;
  constexpr int kBatch = 8;  // loads in flight; the adds stay in order
  for (int64_t b = 0; b < B; ++b) {
    const double* p = dad + (b * H + h) * nc * 2;
    int64_t c = 0;
    for (; c + kBatch <= nc; c += kBatch) {
      double a[kBatch], d[kBatch];
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        a[u] = p[(c + u) * 2];
        d[u] = p[(c + u) * 2 + 1];
      }
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        sa += a[u];
        sd += d[u];
      }
    }
    for (; c < nc; ++c) {
      sa += p[c * 2];
      sd += p[c * 2 + 1];
    }
  }
  dA[h] += static_cast<float>(sa);
  dD[h] += static_cast<float>(sd);
}

// Scratch, doubles first: dad [BH·nc·2] (backward), then floats: dec [BH·nc],
// S [BH·nc·P·N], Gs [BH·nc·P·N] (backward), parts 2·[B·T·H·N] (backward, G < H).
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

// S ← S_in [BH, nc, P, N] and dec, from the inputs (the forward's first two kernels).
void EntryStates(const float* x, const float* dt, const float* A, const float* Bm, float* S,
                 float* dec, int64_t B, int64_t T, int64_t H, int64_t P, int64_t G, int64_t N,
                 int L, cudaStream_t stream) {
  const int64_t nc = CeilDiv(T, L);
  const unsigned blocks = static_cast<unsigned>(B * H * nc);
  const int64_t outer = OuterSmemBytes(L, P, N);
  AllowSmem(ChunkOuterKernel<kState>, outer);
  ChunkOuterKernel<kState>
      <<<blocks, kThreads, outer, stream>>>(x, Bm, dt, A, S, dec, T, H, P, G, N, L, nc);
  GTP_CU_LAUNCH_CHECK();
  if (P * N > 0) {
    ChunkPassKernel<false>
        <<<GridFor(B * H * P * N, kThreads), kThreads, 0, stream>>>(S, dec, B * H, P * N, nc);
    GTP_CU_LAUNCH_CHECK();
  }
}

// The chunk length of a call, after its argument checks (abort naming op).
int CheckedChunkLength(const char* op, int64_t H, int64_t P, int64_t G, int64_t N, int64_t chunk) {
  GTP_CU_REQUIRE(G >= 1 && H % G == 0 && P >= 1 && N >= 0 && chunk >= 1,
                 "%s (CUDA): H = %lld, G = %lld, P = %lld, N = %lld, chunk = %lld", op,
                 static_cast<long long>(H), static_cast<long long>(G), static_cast<long long>(P),
                 static_cast<long long>(N), static_cast<long long>(chunk));
  const int L = ChunkLength(P, N, chunk);
  GTP_CU_REQUIRE(L > 0, "%s (CUDA): P = %lld, N = %lld do not fit a chunk block", op,
                 static_cast<long long>(P), static_cast<long long>(N));
  return L;
}

}  // namespace

bool SsdChunkedFits(int64_t P, int64_t N, int64_t chunk) { return ChunkLength(P, N, chunk) > 0; }

int64_t SsdChunkedScratchFloats(int64_t B, int64_t T, int64_t H, int64_t P, int64_t G, int64_t N,
                                int64_t chunk, bool backward) {
  const int L = ChunkLength(P, N, chunk);
  GTP_CU_REQUIRE(L > 0, "SsdChunked (CUDA): P = %lld, N = %lld do not fit a chunk block",
                 static_cast<long long>(P), static_cast<long long>(N));
  return ScratchLayout(B, T, H, P, G, N, L, backward, nullptr, nullptr);
}

void SsdChunkedForward(const float* x, const float* dt, const float* A, const float* Bm,
                       const float* Cm, const float* D, float* y, float* scratch, int64_t B,
                       int64_t T, int64_t H, int64_t P, int64_t G, int64_t N, int64_t chunk,
                       cudaStream_t stream) {
  if (B * T * H == 0) return;
  const int L = CheckedChunkLength("SsdChunkedForward", H, P, G, N, chunk);
  Scratch sc;
  ScratchLayout(B, T, H, P, G, N, L, /*backward=*/false, scratch, &sc);
  EntryStates(x, dt, A, Bm, sc.S, sc.dec, B, T, H, P, G, N, L, stream);
  const int64_t nc = CeilDiv(T, L);
  const int64_t bytes = OutputSmemBytes(L, P, N);
  AllowSmem(ChunkOutputKernel, bytes);
  ChunkOutputKernel<<<static_cast<unsigned>(B * H * nc), kThreads, bytes, stream>>>(
      x, dt, A, Bm, Cm, D, sc.S, y, T, H, P, G, N, L, nc);
  GTP_CU_LAUNCH_CHECK();
}

void SsdChunkedBackward(const float* dy, const float* x, const float* dt, const float* A,
                        const float* Bm, const float* Cm, const float* D, float* dx, float* ddt,
                        float* dA, float* dBm, float* dCm, float* dD, float* scratch, int64_t B,
                        int64_t T, int64_t H, int64_t P, int64_t G, int64_t N, int64_t chunk,
                        cudaStream_t stream) {
  if (B * T * H == 0) return ZeroGroupGrads(dBm, dCm, B * T * G * N, stream);
  const int L = CheckedChunkLength("SsdChunkedBackward", H, P, G, N, chunk);
  Scratch sc;
  ScratchLayout(B, T, H, P, G, N, L, /*backward=*/true, scratch, &sc);
  const int64_t nc = CeilDiv(T, L);
  const unsigned blocks = static_cast<unsigned>(B * H * nc);
  EntryStates(x, dt, A, Bm, sc.S, sc.dec, B, T, H, P, G, N, L, stream);
  const int64_t outer = OuterSmemBytes(L, P, N);
  AllowSmem(ChunkOuterKernel<kDState>, outer);
  ChunkOuterKernel<kDState>
      <<<blocks, kThreads, outer, stream>>>(dy, Cm, dt, A, sc.Gs, nullptr, T, H, P, G, N, L, nc);
  GTP_CU_LAUNCH_CHECK();
  if (P * N > 0) {
    ChunkPassKernel<true><<<GridFor(B * H * P * N, kThreads), kThreads, 0, stream>>>(
        sc.Gs, sc.dec, B * H, P * N, nc);
    GTP_CU_LAUNCH_CHECK();
  }
  const bool direct = H == G;
  float* dB_out = direct ? dBm : sc.dB_part;
  float* dC_out = direct ? dCm : sc.dC_part;
  const int64_t bytes = BackwardSmemBytes(L, P, N);
  AllowSmem(ChunkBackwardKernel, bytes);
  ChunkBackwardKernel<<<blocks, kThreads, bytes, stream>>>(dy, x, dt, A, Bm, Cm, D, sc.S, sc.Gs,
                                                           sc.dec, dx, ddt, dB_out, dC_out, sc.dad,
                                                           T, H, P, G, N, L, nc);
  GTP_CU_LAUNCH_CHECK();
  const int64_t out = B * T * G * N;
  if (!direct && out > 0) {
    SumGroupHeadsKernel<<<GridFor(out, kThreads), kThreads, 0, stream>>>(sc.dB_part, dBm, B * T, H,
                                                                         G, N);
    GTP_CU_LAUNCH_CHECK();
    SumGroupHeadsKernel<<<GridFor(out, kThreads), kThreads, 0, stream>>>(sc.dC_part, dCm, B * T, H,
                                                                         G, N);
    GTP_CU_LAUNCH_CHECK();
  }
  AddChunkParamsKernel<<<static_cast<unsigned>(CeilDiv(H, kThreads)), kThreads, 0, stream>>>(
      sc.dad, dA, dD, B, H, nc);
  GTP_CU_LAUNCH_CHECK();
}

}  // namespace gtp::kernels::ssm::cuda
