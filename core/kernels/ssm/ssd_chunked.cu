// core/kernels/ssm/ssd_chunked.cu — the SSD scan by chunks on CUDA
// (ssd_scan_cuda.h SsdChunked*; math in ssd_scan.h). The recurrence kernels
// (ssd_scan.cu) are serial in T per state element; here the sequence is cut
// into chunks of L ≤ 64 steps and everything but a short pass over the
// chunks runs parallel over (b, h, chunk). f32 data, f32 products, the
// cumulative decays and the per-step scalar gradients in double; no atomics,
// every sum in a fixed order: bit-identical run to run.
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
// halves L from min(chunk, 64, T) until the backward block fits; a shape no L
// fits (P·N beyond ~24k) is not taken (SsdChunkedFits), and ssd_scan.cc runs
// the recurrence kernels for it.
#include <cuda_runtime.h>

#include "core/kernels/cuda/common.cuh"
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
// decays and scalars), then floats. Row strides of the matrices the dot
// products walk are padded to an odd count (P + 1, N + 1, L + 1) so threads
// of a warp reading different rows hit different banks.

__host__ __device__ __forceinline__ int64_t OuterSmemBytes(int L, int64_t P, int64_t N) {
  return int64_t{8} * L + int64_t{4} * (2 * L + L * P + L * N);
}
__host__ __device__ __forceinline__ int64_t OutputSmemBytes(int L, int64_t P, int64_t N) {
  return int64_t{8} * L +
         int64_t{4} * (L + L * (P + 1) + 2 * L * (N + 1) + P * (N + 1) + L * (L + 1));
}
__host__ __device__ __forceinline__ int64_t BackwardSmemBytes(int L, int64_t P, int64_t N) {
  return int64_t{8} * (4 * L + 2 * kWarps) +
         int64_t{4} * (L + 2 * L * (P + 1) + 4 * L * (N + 1) + 2 * P * (N + 1) + 3 * L * (L + 1));
}

// The chunk length: min(chunk, kMaxChunk, T), halved until every kernel's
// block fits; 0 when none does.
int ChunkLength(int64_t T, int64_t P, int64_t N, int64_t chunk) {
  int64_t L = chunk < kMaxChunk ? chunk : kMaxChunk;
  if (T < L) L = T;
  if (L < 1) L = 1;
  while (L >= 1) {
    const int l = static_cast<int>(L);
    if (BackwardSmemBytes(l, P, N) <= static_cast<int64_t>(kMaxSmemBytes) &&
        OutputSmemBytes(l, P, N) <= static_cast<int64_t>(kMaxSmemBytes) &&
        OuterSmemBytes(l, P, N) <= static_cast<int64_t>(kMaxSmemBytes))
      return l;
    L /= 2;
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
  const int p_ = static_cast<int>(P), n = k.len * p_;
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const int r = i / p_, p = i - r * p_;
    dst[r * ld + p] = src[((k.b * T + k.t0 + r) * H + k.h) * P + p];
  }
}

// dst[i][0..N) (row stride ld) = the chunk's rows of group g of a [B, T, G, N] tensor.
__device__ __forceinline__ void StageGroup(const float* __restrict__ src, float* dst, int ld,
                                           const ChunkIdx& k, int64_t g, int64_t T, int64_t G,
                                           int64_t N) {
  const int n_ = static_cast<int>(N), n = k.len * n_;
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const int r = i / n_, j = i - r * n_;
    dst[r * ld + j] = src[((k.b * T + k.t0 + r) * G + g) * N + j];
  }
}

// dst[p][0..N) (row stride ld) = a [P, N] state.
__device__ __forceinline__ void StageState(const float* __restrict__ src, float* dst, int ld,
                                           int64_t P, int64_t N) {
  const int n_ = static_cast<int>(N), pn = static_cast<int>(P * N);
  for (int i = threadIdx.x; i < pn; i += blockDim.x) {
    const int p = i / n_;
    dst[p * ld + i - p * n_] = src[i];
  }
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

// Grid B·H·nc: y of the chunk (see the top of the file). sin = S_in [BH, nc, P, N].
__global__ void __launch_bounds__(kThreads)
    ChunkOutputKernel(const float* __restrict__ x, const float* __restrict__ dt,
                      const float* __restrict__ A, const float* __restrict__ Bm,
                      const float* __restrict__ Cm, const float* __restrict__ D,
                      const float* __restrict__ sin, float* __restrict__ y, int64_t T, int64_t H,
                      int64_t P64, int64_t G, int64_t N64, int L, int64_t nc) {
  const int P = static_cast<int>(P64), N = static_cast<int>(N64);  // < 2^31: they fit shared memory
  extern __shared__ double smem_d[];
  const int lp = P + 1, ln = N + 1, ll = L + 1;
  double* sCs = smem_d;
  float* sDt = reinterpret_cast<float*>(sCs + L);
  float* sX = sDt + L;
  float* sB = sX + L * lp;
  float* sC = sB + L * ln;
  float* sS = sC + L * ln;
  float* sM = sS + P * ln;
  const ChunkIdx k = ThisChunk(H, nc, T, L);
  const int64_t g = k.h / (H / G);
  StageDecays(dt, A[k.h], k, T, H, sDt, sCs);
  StageHead(x, sX, lp, k, T, H, P);
  StageGroup(Bm, sB, ln, k, g, T, G, N);
  StageGroup(Cm, sC, ln, k, g, T, G, N);
  StageState(sin + (k.bh * nc + k.c) * P * N, sS, ln, P, N);
  __syncthreads();
  for (int e = threadIdx.x; e < L * L; e += blockDim.x) {
    const int i = e / L, j = e % L;
    float m = 0.0f;
    if (i < k.len && j <= i) {
      float cb = 0.0f;
      for (int n = 0; n < N; ++n) cb = fmaf(sC[i * ln + n], sB[j * ln + n], cb);
      m = cb * expf(static_cast<float>(sCs[i] - sCs[j])) * sDt[j];
    }
    sM[i * ll + j] = m;
  }
  __syncthreads();
  const float Dh = D[k.h];
  for (int e = threadIdx.x; e < k.len * P; e += blockDim.x) {
    const int i = e / P, p = e - i * P;
    float diag = 0.0f;
    for (int j = 0; j <= i; ++j) diag = fmaf(sM[i * ll + j], sX[j * lp + p], diag);
    float off = 0.0f;
    for (int n = 0; n < N; ++n) off = fmaf(sS[p * ln + n], sC[i * ln + n], off);
    const float ei = expf(static_cast<float>(sCs[i]));
    y[((k.b * T + k.t0 + i) * H + k.h) * P + p] = diag + fmaf(ei, off, Dh * sX[i * lp + p]);
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
  const int P = static_cast<int>(P64), N = static_cast<int>(N64);  // < 2^31: they fit shared memory
  extern __shared__ double smem_d[];
  const int lp = P + 1, ln = N + 1, ll = L + 1;
  double* sCs = smem_d;
  double* sExpl = sCs + L;   // ∂L/∂dt explicit
  double* sDcs = sExpl + L;  // ∂L/∂cs
  double* sRw = sDcs + L;    // R_j·w_j
  double* sRed = sRw + L;    // [2·kWarps] block sums
  float* sDt = reinterpret_cast<float*>(sRed + 2 * kWarps);
  float* sX = sDt + L;
  float* sDy = sX + L * lp;
  float* sB = sDy + L * lp;
  float* sC = sB + L * ln;
  float* sDyS = sC + L * ln;   // dy_i·S_in   [L][N]
  float* sXG = sDyS + L * ln;  // x_j·G_c      [L][N]
  float* sS = sXG + L * ln;    // S_in[c]     [P][N]
  float* sG = sS + P * ln;     // G_c         [P][N]
  float* sM1 = sG + P * ln;
  float* sM2 = sM1 + L * ll;
  float* sQ = sM2 + L * ll;
  const ChunkIdx k = ThisChunk(H, nc, T, L);
  const int64_t g = k.h / (H / G);
  const float Ah = A[k.h], Dh = D[k.h];
  StageDecays(dt, Ah, k, T, H, sDt, sCs);
  StageHead(x, sX, lp, k, T, H, P);
  StageHead(dy, sDy, lp, k, T, H, P);
  StageGroup(Bm, sB, ln, k, g, T, G, N);
  StageGroup(Cm, sC, ln, k, g, T, G, N);
  const int64_t state = (k.bh * nc + k.c) * P * N;
  StageState(sin + state, sS, ln, P, N);
  StageState(gout + state, sG, ln, P, N);
  __syncthreads();
  const int last = k.len - 1;
  const double cs_last = sCs[last];
  // Phase A: the L×L matrices, dy·S_in and x·G.
  for (int e = threadIdx.x; e < L * L; e += blockDim.x) {
    const int i = e / L, j = e % L;
    float m1 = 0.0f, m2 = 0.0f, q = 0.0f;
    if (i < k.len && j <= i) {
      float cb = 0.0f, dxx = 0.0f;
      for (int n = 0; n < N; ++n) cb = fmaf(sC[i * ln + n], sB[j * ln + n], cb);
      for (int p = 0; p < P; ++p) dxx = fmaf(sDy[i * lp + p], sX[j * lp + p], dxx);
      const float E = expf(static_cast<float>(sCs[i] - sCs[j]));
      m1 = cb * E;
      m2 = dxx * E;
      q = m1 * dxx;
    }
    sM1[i * ll + j] = m1;
    sM2[i * ll + j] = m2;
    sQ[i * ll + j] = q;
  }
  for (int e = threadIdx.x; e < k.len * N; e += blockDim.x) {
    const int i = e / N, n = e - i * N;
    float a = 0.0f, b = 0.0f;
    for (int p = 0; p < P; ++p) {
      a = fmaf(sDy[i * lp + p], sS[p * ln + n], a);
      b = fmaf(sX[i * lp + p], sG[p * ln + n], b);
    }
    sDyS[i * ln + n] = a;
    sXG[i * ln + n] = b;
  }
  __syncthreads();
  // Phase B: dx, dC, dB; the per-step scalars; the block sums.
  for (int e = threadIdx.x; e < k.len * P; e += blockDim.x) {
    const int j = e / P, p = e - j * P;
    float acc = 0.0f;
    for (int i = j; i < k.len; ++i) acc = fmaf(sM1[i * ll + j], sDy[i * lp + p], acc);
    float gb = 0.0f;
    for (int n = 0; n < N; ++n) gb = fmaf(sG[p * ln + n], sB[j * ln + n], gb);
    const float wj = expf(static_cast<float>(cs_last - sCs[j])) * sDt[j];
    dx[((k.b * T + k.t0 + j) * H + k.h) * P + p] =
        fmaf(sDt[j], acc, fmaf(wj, gb, Dh * sDy[j * lp + p]));
  }
  const bool direct = H == G;
  for (int e = threadIdx.x; e < k.len * N; e += blockDim.x) {
    const int r = e / N, n = e - r * N;
    float c_acc = 0.0f, b_acc = 0.0f;
    for (int j = 0; j <= r; ++j) c_acc = fmaf(sM2[r * ll + j] * sDt[j], sB[j * ln + n], c_acc);
    for (int i = r; i < k.len; ++i) b_acc = fmaf(sM2[i * ll + r], sC[i * ln + n], b_acc);
    const float er = expf(static_cast<float>(sCs[r]));
    const float wr = expf(static_cast<float>(cs_last - sCs[r])) * sDt[r];
    const float dcv = fmaf(er, sDyS[r * ln + n], c_acc);
    const float dbv = fmaf(wr, sXG[r * ln + n], sDt[r] * b_acc);
    const int64_t t = k.b * T + k.t0 + r;
    const int64_t at = direct ? (t * G + g) * N + n : (t * H + k.h) * N + n;
    dC[at] = dcv;
    dB[at] = dbv;
  }
  for (int t = threadIdx.x; t < k.len; t += blockDim.x) {
    double row = 0.0, col = 0.0, O = 0.0, R = 0.0;
    for (int j = 0; j <= t; ++j) row += static_cast<double>(sQ[t * ll + j]) * sDt[j];
    for (int i = t; i < k.len; ++i) col += sQ[i * ll + t];
    for (int n = 0; n < N; ++n) {
      O += static_cast<double>(sC[t * ln + n]) * sDyS[t * ln + n];
      R += static_cast<double>(sB[t * ln + n]) * sXG[t * ln + n];
    }
    const double ew = exp(cs_last - sCs[t]), dtt = sDt[t];
    sExpl[t] = col + R * ew;
    sRw[t] = R * ew * dtt;
    sDcs[t] = row - dtt * col + exp(sCs[t]) * O - R * ew * dtt;
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
  gs = BlockSumDouble(gs, sRed);
  xd = BlockSumDouble(xd, sRed + kWarps);
  __syncthreads();  // sExpl, sRw, sDcs complete
  if (threadIdx.x == 0) {
    double extra = static_cast<double>(dec[k.bh * nc + k.c]) * gs;
    for (int j = 0; j < k.len; ++j) extra += sRw[j];
    sDcs[last] += extra;
    double da = 0.0, dA_acc = 0.0;
    for (int t = last; t >= 0; --t) {
      da += sDcs[t];
      dA_acc += static_cast<double>(sDt[t]) * da;
      sExpl[t] += static_cast<double>(Ah) * da;  // now ddt_t
    }
    dad[(k.bh * nc + k.c) * 2] = dA_acc;
    dad[(k.bh * nc + k.c) * 2 + 1] = xd;
  }
  __syncthreads();
  for (int t = threadIdx.x; t < k.len; t += blockDim.x)
    ddt[(k.b * T + k.t0 + t) * H + k.h] = static_cast<float>(sExpl[t]);
}

// out[r, g, n] = Σ_{k < H/G} in[r, g·H/G + k, n], k in order.
__global__ void SumHeadsKernel(const float* __restrict__ in, float* __restrict__ out, int64_t rows,
                               int64_t H, int64_t G, int64_t N) {
  const int64_t total = rows * G * N, hpg = H / G;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t n = i % N, g = (i / N) % G, r = i / (N * G);
    float s = 0.0f;
    for (int64_t k = 0; k < hpg; ++k) s += in[((r * H) + g * hpg + k) * N + n];
    out[i] = s;
  }
}

// dA[h] += Σ_b Σ_c dad[b·H + h, c, 0], dD[h] likewise with 1; b, then c, in order.
__global__ void AddChunkParamsKernel(const double* __restrict__ dad, float* __restrict__ dA,
                                     float* __restrict__ dD, int64_t B, int64_t H, int64_t nc) {
  const int64_t h = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (h >= H) return;
  double sa = 0.0, sd = 0.0;
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t c = 0; c < nc; ++c) {
      sa += dad[((b * H + h) * nc + c) * 2];
      sd += dad[((b * H + h) * nc + c) * 2 + 1];
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

}  // namespace

bool SsdChunkedFits(int64_t T, int64_t P, int64_t N, int64_t chunk) {
  return ChunkLength(T, P, N, chunk) > 0;
}

int64_t SsdChunkedScratchFloats(int64_t B, int64_t T, int64_t H, int64_t P, int64_t G, int64_t N,
                                int64_t chunk, bool backward) {
  const int L = ChunkLength(T, P, N, chunk);
  GTP_CU_REQUIRE(L > 0, "SsdChunked (CUDA): P = %lld, N = %lld do not fit a chunk block",
                 static_cast<long long>(P), static_cast<long long>(N));
  return ScratchLayout(B, T, H, P, G, N, L, backward, nullptr, nullptr);
}

void SsdChunkedForward(const float* x, const float* dt, const float* A, const float* Bm,
                       const float* Cm, const float* D, float* y, float* scratch, int64_t B,
                       int64_t T, int64_t H, int64_t P, int64_t G, int64_t N, int64_t chunk,
                       cudaStream_t stream) {
  if (B * T * H == 0) return;
  GTP_CU_REQUIRE(G >= 1 && H % G == 0 && P >= 1 && N >= 0 && chunk >= 1,
                 "SsdChunkedForward (CUDA): H = %lld, G = %lld, P = %lld, N = %lld, chunk = %lld",
                 static_cast<long long>(H), static_cast<long long>(G), static_cast<long long>(P),
                 static_cast<long long>(N), static_cast<long long>(chunk));
  const int L = ChunkLength(T, P, N, chunk);
  GTP_CU_REQUIRE(L > 0, "SsdChunkedForward (CUDA): P = %lld, N = %lld do not fit a chunk block",
                 static_cast<long long>(P), static_cast<long long>(N));
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
  if (B * T * H == 0) {
    if (B * T * G * N > 0) {
      GTP_CU_CHECK(cudaMemsetAsync(dBm, 0, sizeof(float) * B * T * G * N, stream));
      GTP_CU_CHECK(cudaMemsetAsync(dCm, 0, sizeof(float) * B * T * G * N, stream));
    }
    return;
  }
  GTP_CU_REQUIRE(G >= 1 && H % G == 0 && P >= 1 && N >= 0 && chunk >= 1,
                 "SsdChunkedBackward (CUDA): H = %lld, G = %lld, P = %lld, N = %lld, chunk = %lld",
                 static_cast<long long>(H), static_cast<long long>(G), static_cast<long long>(P),
                 static_cast<long long>(N), static_cast<long long>(chunk));
  const int L = ChunkLength(T, P, N, chunk);
  GTP_CU_REQUIRE(L > 0, "SsdChunkedBackward (CUDA): P = %lld, N = %lld do not fit a chunk block",
                 static_cast<long long>(P), static_cast<long long>(N));
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
    SumHeadsKernel<<<GridFor(out, kThreads), kThreads, 0, stream>>>(sc.dB_part, dBm, B * T, H, G,
                                                                    N);
    GTP_CU_LAUNCH_CHECK();
    SumHeadsKernel<<<GridFor(out, kThreads), kThreads, 0, stream>>>(sc.dC_part, dCm, B * T, H, G,
                                                                    N);
    GTP_CU_LAUNCH_CHECK();
  }
  AddChunkParamsKernel<<<static_cast<unsigned>(CeilDiv(H, kThreads)), kThreads, 0, stream>>>(
      sc.dad, dA, dD, B, H, nc);
  GTP_CU_LAUNCH_CHECK();
}

}  // namespace gtp::kernels::ssm::cuda
