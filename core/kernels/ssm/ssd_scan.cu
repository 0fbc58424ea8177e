// core/kernels/ssm/ssd_scan.cu — CUDA kernels of the Mamba-2 SSD scan
// (ssd_scan_cuda.h; math in ssd_scan.h). Simple and deterministic first: every
// reduction is done by one thread in a fixed order or by a warp's xor
// shuffles; no atomics.
//
// The recurrence parallel over (b, h, p, n), no state in global memory; the
// backward as two independent sweeps plus a suffix sum of per-step scalars
// (derivation at the scan kernels below).
#include <cuda_runtime.h>

#include <type_traits>

#include "core/kernels/cuda/common.cuh"
#include "core/kernels/ssm/ssd_common.cuh"
#include "core/kernels/ssm/ssd_scan_cuda.h"

namespace gtp::kernels::ssm::cuda {
namespace {

using ::gtp::kernels::cuda::internal::BlocksPerSm;
using ::gtp::kernels::cuda::internal::CeilDiv;
using ::gtp::kernels::cuda::internal::CpAsync4;
using ::gtp::kernels::cuda::internal::CpAsyncCommit;
using ::gtp::kernels::cuda::internal::CpAsyncWait;
using ::gtp::kernels::cuda::internal::GridFor;
using ::gtp::kernels::cuda::internal::kFullMask;
using ::gtp::kernels::cuda::internal::kWarpSize;
using ::gtp::kernels::cuda::internal::Launch;

constexpr int kThreads = 256;
constexpr size_t kMaxSharedBytes = 227 * 1024;

// ---------------------------------------------------------------- SSD scan
//
// The recurrence S_t = α_t·S_{t−1} + dt_t·x_t ⊗ B_t (α_t = exp(dt_t·A_h)) run
// with one thread per (p, a few n): every state element of every (b, h) is
// live at once, so the serial dependence is one FMA per step per thread and
// the GPU is filled by B·H·P·N/kR threads. (In f32 the chunked quadratic
// form costs ~7× the FLOPs of this at P = N = 16 without tensor cores, and
// TF32 would not meet the f32 tolerance.)
//
// Layout. A block owns `rows` consecutive p of one (b, h) (a p-tile; pt =
// ⌈P / rows⌉ tiles per head) and every n. Thread tid: row = tid / kNL,
// nl = tid % kNL; it holds S[p0 + row, nl + kNL·r] for r < kR (n strided by
// kNL, so the kNL lanes of a row read consecutive floats of B_t and C_t in
// shared memory, conflict-free, and the 32/kNL rows of a warp read the same
// floats, a broadcast). N ≤ NP = kNL·kR; the padding n ≥ N reads B = C = 0,
// so those states stay 0. Rows ≥ P read x = dy = 0 and write nothing; they
// still take part in every shuffle and barrier.
// Worked example, the training shape P = N = 16: kNL = 16, kR = 1, rows =
// 16, 256 threads, pt = 1. Warp 3 = rows 6 and 7: lanes 0–15 hold p = 6,
// n = lane; lanes 16–31 hold p = 7, n = lane − 16. Σ_n (y, dx) = xor shuffles
// 8, 4, 2, 1 (inside each half-warp); Σ_p over the warp's two rows = xor 16;
// over the 8 warps = a loop in warp order over a shared buffer. An xor
// butterfly gives every lane of the group the same bits (a + b = b + a), so
// the results do not depend on which lane writes them.
//
// Time goes in tiles of ts steps: the block copies dt, its rows of x (and
// dy) and the tile's B, C rows into shared memory (cp.async, the next tile's
// while this one computes), one barrier, forms α, one barrier, runs ts steps
// with no barrier (per-step results into shared buffers), one barrier, then
// reduces the buffers and writes them out coalesced. Three barriers per tile.
//
// Backward without stored states. With dS_t = ∂L/∂S_t = dy_t ⊗ C_t +
// α_{t+1}·dS_{t+1}, gb_t[p] = Σ_n dS_t[p, n]·B_t[n], g_t = Σ_p x_t[p]·gb_t[p]
// and f_t = Σ_p dy_t[p]·(S_t·C_t)[p]:
//   dx_t = dt_t·gb_t + D·dy_t,   dB_t = dt_t·dS_tᵀ·x_t,   dC_t = S_tᵀ·dy_t,
// and the decay terms need r_t = α_t·⟨dS_t, S_{t−1}⟩ (ddt_t = g_t + A·r_t,
// dA = Σ_t dt_t·r_t). Since S_t − dt_t·x_t ⊗ B_t = α_t·S_{t−1}:
//   r_t = ⟨dS_t, S_t⟩ − dt_t·g_t,  and ⟨dS_t, S_t⟩ = f_t + r_{t+1},
// so r_t = u_t + r_{t+1}, u_t = f_t − dt_t·g_t, r_T = 0: a suffix sum of
// per-step scalars. Hence two independent sweeps, run as the two halves of
// one grid:
//   forward  (blockIdx.y = 0): S from 0; dC_t and f_t, reduced over p;
//   reverse  (blockIdx.y = 1): dS from 0 at T; dx_t, dB_t and g_t, and dD;
// then one warp per (b, h) takes the suffix sums in double (SsdScalarKernel),
// and fixed-order kernels add the p-tiles and heads of a group (dB, dC) and
// the batches (dA, dD).
// In f32 the identity holds only up to each step's rounding of S and dS, so
// a suffix sum over all of T would let dA's error grow like T (seen in an
// f32 emulation: 4e-4 relative at T = 1024). So r restarts from its exact
// value at every chunk boundary t = c·L (L = min(chunk, T)):
//   r_{cL} = ⟨α_{cL}·dS_{cL}, S_{cL−1}⟩,
// the forward sweep saving S_{cL−1} and the reverse sweep its carry
// α_{cL}·dS_{cL} (B·H·(⌈T/L⌉ − 1)·P·N floats each, the only states written),
// one warp per boundary taking the dot product (SsdBoundaryKernel).

constexpr int kScanMaxThreads = 512;
constexpr int kScanMaxWarps = kScanMaxThreads / kWarpSize;
// Dynamic shared memory a scan block aims at: two blocks per SM.
constexpr size_t kScanSmemTarget = 96 * 1024;

// The tiles are copied in with cp.async, double-buffered: while a block
// computes tile k, tile k + 1's dt, x (dy) and B, C rows are in flight (a
// staging loop that waited on each load was, by a rough count, ~40 % of the
// forward's time). Values land as the old staging left them.

// dst[s][r] (s < steps, r < rows) = rows [t0, t0 + steps) of head (b, h) of
// a [B, T, H, P] tensor, p = p0 + r; zero for r ≥ prow.
__device__ __forceinline__ void CopyHeadRows(const float* __restrict__ src, float* dst, int64_t b,
                                             int64_t h, int64_t t0, int steps, int64_t T,
                                             int64_t H, int64_t P, int64_t p0, int rows,
                                             int prow) {
  for (int i = threadIdx.x; i < steps * rows; i += blockDim.x) {
    const int st = i / rows, r = i % rows;
    const bool v = r < prow;
    CpAsync4(dst + i, src + (v ? ((b * T + t0 + st) * H + h) * P + p0 + r : 0), v);
  }
}

// The inverse of CopyHeadRows for r < prow.
__device__ __forceinline__ void StoreHeadRows(const float* src, float* __restrict__ dst,
                                              int64_t b, int64_t h, int64_t t0, int steps,
                                              int64_t T, int64_t H, int64_t P, int64_t p0,
                                              int rows, int prow) {
  for (int i = threadIdx.x; i < steps * rows; i += blockDim.x) {
    const int s = i / rows, r = i % rows;
    if (r < prow) dst[((b * T + t0 + s) * H + h) * P + p0 + r] = src[i];
  }
}

// dst[s][n] (n < np) = group g's rows of a [B, T, G, N] tensor, zero for n ≥ N.
__device__ __forceinline__ void CopyGroupRows(const float* __restrict__ src, float* dst,
                                              int64_t b, int64_t g, int64_t t0, int steps,
                                              int64_t T, int64_t G, int64_t N, int np) {
  for (int i = threadIdx.x; i < steps * np; i += blockDim.x) {
    const int st = i / np, n = i % np;
    if (n < N) {
      CpAsync4(dst + i, src + ((b * T + t0 + st) * G + g) * N + n, true);
    } else {
      dst[i] = 0.0f;  // a plain store: with N = 0, src may be null (no rows)
    }
  }
}

// sDt[s] = dt_t for the tile's steps.
__device__ __forceinline__ void CopyDt(const float* __restrict__ dt, float* sDt, int64_t b,
                                       int64_t h, int64_t t0, int steps, int64_t T, int64_t H) {
  for (int i = threadIdx.x; i < steps; i += blockDim.x) {
    CpAsync4(sDt + i, dt + (b * T + t0 + i) * H + h, true);
  }
}

// sA[s] = α_t = exp(dt_t·A_h) from the copied sDt.
__device__ __forceinline__ void Decays(const float* sDt, float Ah, float* sA, int steps) {
  for (int i = threadIdx.x; i < steps; i += blockDim.x) sA[i] = expf(sDt[i] * Ah);
}

// Floats of dynamic shared memory of a scan block (the kernels carve it in
// this order).
__host__ __device__ __forceinline__ int64_t ScanSmemFloats(bool backward, int rows, int np,
                                                           int warps, int ts) {
  // forward:  α [ts], y [ts][rows]; twice (the tile and the next): dt [ts],
  //           x [ts][rows], B, C [ts][np]
  // backward: α [ts], dx [ts][rows], buf [ts][warps][np + 1] (per-warp Σ_p
  //           partials, column np: the scalar); twice: dt [ts], x, dy
  //           [ts][rows], B, C [ts][np]
  return backward ? int64_t{ts} * (1 + rows + warps * (np + 1) + 2 * (1 + 2 * rows + 2 * np))
                  : int64_t{ts} * (1 + rows + 2 * (1 + rows + 2 * np));
}

// Grid B·H·pt blocks (block = (b·H + h)·pt + tile), rows·kNL threads.
template <int kNL, int kR>
__global__ void __launch_bounds__(kScanMaxThreads)
    SsdScanForwardKernel(const float* __restrict__ x, const float* __restrict__ dt,
                         const float* __restrict__ A, const float* __restrict__ Bm,
                         const float* __restrict__ Cm, const float* __restrict__ D,
                         float* __restrict__ y, int64_t T, int64_t H, int64_t P, int64_t G,
                         int64_t N, int rows, int pt, int ts) {
  constexpr int NP = kNL * kR;
  GTP_DYNAMIC_SHARED(float, smem);
  float* sA = smem;
  float* sY = sA + ts;
  float* stage = sY + ts * rows;  // two sets of dt, x, B, C
  const int per_stage = ts * (1 + rows + 2 * NP);
  const int64_t tile = blockIdx.x % pt, bh = blockIdx.x / pt, b = bh / H, h = bh % H;
  const int64_t g = h / (H / G), p0 = tile * rows;
  const int prow = static_cast<int>(P - p0 < rows ? P - p0 : rows);
  const int tid = threadIdx.x, nl = tid % kNL, row = tid / kNL;
  const float Ah = A[h], Dh = D[h];
  // Tile k's copies into stage k % 2, one cp.async group.
  auto copy_tile = [=](int64_t k) {
    float* sDt = stage + (k & 1) * per_stage;
    const int64_t t0 = k * ts;
    const int steps = static_cast<int>(T - t0 < ts ? T - t0 : ts);
    CopyDt(dt, sDt, b, h, t0, steps, T, H);
    CopyHeadRows(x, sDt + ts, b, h, t0, steps, T, H, P, p0, rows, prow);
    CopyGroupRows(Bm, sDt + ts * (1 + rows), b, g, t0, steps, T, G, N, NP);
    CopyGroupRows(Cm, sDt + ts * (1 + rows + NP), b, g, t0, steps, T, G, N, NP);
  };
  float S[kR];
#pragma unroll
  for (int r = 0; r < kR; ++r) S[r] = 0.0f;
  const int64_t tiles = (T + ts - 1) / ts;
  copy_tile(0);
  CpAsyncCommit();
  for (int64_t k = 0; k < tiles; ++k) {
    const int64_t t0 = k * ts;
    const int steps = static_cast<int>(T - t0 < ts ? T - t0 : ts);
    // The next tile's copies go into the set tile k − 1 used (its compute
    // ended before the last barrier of iteration k − 1).
    if (k + 1 < tiles) copy_tile(k + 1);
    CpAsyncCommit();
    CpAsyncWait<1>();  // all but the newest group: tile k's copies are in
    __syncthreads();
    const float* sDt = stage + (k & 1) * per_stage;
    const float* sX = sDt + ts;
    const float* sB = sX + ts * rows;
    const float* sC = sB + ts * NP;
    Decays(sDt, Ah, sA, steps);
    __syncthreads();
    for (int s = 0; s < steps; ++s) {
      const float xv = sX[s * rows + row], a = sA[s], w = sDt[s] * xv;
      const float* bs = sB + s * NP + nl;
      const float* cs = sC + s * NP + nl;
      float acc = 0.0f;
#pragma unroll
      for (int r = 0; r < kR; ++r) {
        S[r] = fmaf(a, S[r], w * bs[r * kNL]);
        acc = fmaf(S[r], cs[r * kNL], acc);
      }
#pragma unroll
      for (int o = kNL / 2; o > 0; o >>= 1) acc += __shfl_xor_sync(kFullMask, acc, o);
      if (nl == 0) sY[s * rows + row] = fmaf(Dh, xv, acc);
    }
    __syncthreads();
    // The next tile's copies touch neither sY nor anything read here.
    StoreHeadRows(sY, y, b, h, t0, steps, T, H, P, p0, rows, prow);
  }
}

// Grid (B·H·pt, 2): y = 0 the forward sweep, y = 1 the reverse sweep (see
// above). Partials per p-tile: dC_part / dB_part [B, T, H, pt, N] (block
// writes index ((b·T + t)·H + h)·pt + tile; with pt = 1 and H = G that is
// dCm / dBm itself), f_part / g_part [B·H·pt, T], dD_part [B·H·pt] (double).
template <int kNL, int kR>
__global__ void __launch_bounds__(kScanMaxThreads)
    SsdScanBackwardSweepKernel(const float* __restrict__ dy, const float* __restrict__ x,
                               const float* __restrict__ dt, const float* __restrict__ A,
                               const float* __restrict__ Bm, const float* __restrict__ Cm,
                               const float* __restrict__ D, float* __restrict__ dx,
                               float* __restrict__ dB_part, float* __restrict__ dC_part,
                               float* __restrict__ f_part, float* __restrict__ g_part,
                               double* __restrict__ dD_part, float* __restrict__ ck_S,
                               float* __restrict__ ck_G, int64_t T, int64_t H, int64_t P,
                               int64_t G, int64_t N, int64_t L, int64_t nb, int rows, int pt,
                               int ts) {
  constexpr int NP = kNL * kR, kCols = NP + 1;
  GTP_DYNAMIC_SHARED(float, smem);
  __shared__ double sDD[kScanMaxWarps];
  const int W = static_cast<int>(blockDim.x) / kWarpSize;
  float* sA = smem;
  float* sDx = sA + ts;
  float* buf = sDx + ts * rows;      // [ts][W][kCols]
  float* stage = buf + ts * W * kCols;  // two sets of dt, x, dy, B, C
  const int per_stage = ts * (1 + 2 * rows + 2 * NP);
  const bool reverse = blockIdx.y == 1;
  const int64_t tile = blockIdx.x % pt, bh = blockIdx.x / pt, b = bh / H, h = bh % H;
  const int64_t g = h / (H / G), p0 = tile * rows;
  const int prow = static_cast<int>(P - p0 < rows ? P - p0 : rows);
  const int tid = threadIdx.x, nl = tid % kNL, row = tid / kNL;
  const int lane = tid % kWarpSize, warp = tid / kWarpSize;
  const float Ah = A[h], Dh = D[h];
  float* part = reverse ? dB_part : dC_part;
  float* scal = reverse ? g_part : f_part;
  float St[kR];  // S_t (forward) or the carry α_{t+1}·dS_{t+1} (reverse)
#pragma unroll
  for (int r = 0; r < kR; ++r) St[r] = 0.0f;
  double dd = 0.0;  // Σ dy·x of this thread's row (lanes nl = 0 only)
  const int64_t tiles = (T + ts - 1) / ts;
  // The k-th tile of the sweep (from the end when reverse) into stage k % 2,
  // one cp.async group.
  auto copy_tile = [=](int64_t k) {
    float* sDt = stage + (k & 1) * per_stage;
    const int64_t t0 = (reverse ? tiles - 1 - k : k) * ts;
    const int steps = static_cast<int>(T - t0 < ts ? T - t0 : ts);
    CopyDt(dt, sDt, b, h, t0, steps, T, H);
    CopyHeadRows(x, sDt + ts, b, h, t0, steps, T, H, P, p0, rows, prow);
    CopyHeadRows(dy, sDt + ts * (1 + rows), b, h, t0, steps, T, H, P, p0, rows, prow);
    CopyGroupRows(Bm, sDt + ts * (1 + 2 * rows), b, g, t0, steps, T, G, N, NP);
    CopyGroupRows(Cm, sDt + ts * (1 + 2 * rows + NP), b, g, t0, steps, T, G, N, NP);
  };
  copy_tile(0);
  CpAsyncCommit();
  for (int64_t k = 0; k < tiles; ++k) {
    const int64_t t0 = (reverse ? tiles - 1 - k : k) * ts;
    const int steps = static_cast<int>(T - t0 < ts ? T - t0 : ts);
    // The next tile's copies go into the set tile k − 1 used (its compute
    // ended before iteration k − 1's third barrier).
    if (k + 1 < tiles) copy_tile(k + 1);
    CpAsyncCommit();
    CpAsyncWait<1>();  // all but the newest group: tile k's copies are in
    __syncthreads();
    const float* sDt = stage + (k & 1) * per_stage;
    const float* sX = sDt + ts;
    const float* sDy = sX + ts * rows;
    const float* sB = sDy + ts * rows;
    const float* sC = sB + ts * NP;
    Decays(sDt, Ah, sA, steps);
    __syncthreads();
    for (int i = 0; i < steps; ++i) {
      const int s = reverse ? steps - 1 - i : i;
      const float xv = sX[s * rows + row], dyv = sDy[s * rows + row];
      const float a = sA[s], dtv = sDt[s], w = dtv * xv;
      const float* bs = sB + s * NP + nl;
      const float* cs = sC + s * NP + nl;
      float v[kR];
      float sc;
      if (!reverse) {
        // S_t; v = dy_t[p]·S_t[p, n] (→ dC_t); sc = Σ_{p, n} of v·C_t (→ f_t).
        float f = 0.0f;
#pragma unroll
        for (int r = 0; r < kR; ++r) {
          St[r] = fmaf(a, St[r], w * bs[r * kNL]);
          v[r] = dyv * St[r];
          f = fmaf(v[r], cs[r * kNL], f);
        }
#pragma unroll
        for (int o = kWarpSize / 2; o > 0; o >>= 1) f += __shfl_xor_sync(kFullMask, f, o);
        sc = f;
      } else {
        // dS_t = carry + dy_t[p]·C_t; gb = Σ_n dS_t·B_t; v = dt·x[p]·dS_t (→ dB_t);
        // sc = Σ_p x[p]·gb[p] (→ g_t); carry ← α_t·dS_t.
        float gb = 0.0f;
#pragma unroll
        for (int r = 0; r < kR; ++r) {
          St[r] = fmaf(dyv, cs[r * kNL], St[r]);
          gb = fmaf(St[r], bs[r * kNL], gb);
        }
#pragma unroll
        for (int o = kNL / 2; o > 0; o >>= 1) gb += __shfl_xor_sync(kFullMask, gb, o);
        if (nl == 0) {
          sDx[s * rows + row] = fmaf(dtv, gb, Dh * dyv);
          dd = fma(static_cast<double>(dyv), static_cast<double>(xv), dd);
        }
#pragma unroll
        for (int r = 0; r < kR; ++r) {
          v[r] = w * St[r];
          St[r] *= a;
        }
        sc = xv * gb;  // the same in every lane of the row
#pragma unroll
        for (int o = kNL; o < kWarpSize; o <<= 1) sc += __shfl_xor_sync(kFullMask, sc, o);
      }
      // Σ over the warp's rows (none when kNL = 32).
#pragma unroll
      for (int r = 0; r < kR; ++r) {
#pragma unroll
        for (int o = kNL; o < kWarpSize; o <<= 1) v[r] += __shfl_xor_sync(kFullMask, v[r], o);
      }
      if (lane < kNL) {
        float* out = buf + (s * W + warp) * kCols;
#pragma unroll
        for (int r = 0; r < kR; ++r) out[nl + r * kNL] = v[r];
        if (lane == 0) out[NP] = sc;
      }
      // Boundary c: the forward sweep saves S_{cL−1} after step cL − 1, the
      // reverse sweep the carry α_{cL}·dS_{cL} after step cL (0 < cL < T).
      // E.g. T = 300, L = 128: c = 1, 2 at t = 127, 255 (forward) and
      // t = 128, 256 (reverse); slot c − 1 of nb = 2.
      const int64_t t = t0 + s;
      const int64_t c = reverse ? (t % L == 0 ? t / L : 0) : ((t + 1) % L == 0 ? (t + 1) / L : 0);
      if (c > 0 && c <= nb && row < prow) {
        float* ck = (reverse ? ck_G : ck_S) + ((bh * nb + c - 1) * P + p0 + row) * N;
#pragma unroll
        for (int r = 0; r < kR; ++r) {
          const int n = nl + r * kNL;
          if (n < N) ck[n] = St[r];
        }
      }
    }
    __syncthreads();
    // Σ over the warps in order; the next tile's copies touch neither buf
    // nor sDx, and its compute starts after its barriers.
    for (int i = tid; i < steps * kCols; i += blockDim.x) {
      const int s = i / kCols, j = i % kCols;
      if (j >= N && j < NP) continue;  // padding columns
      float acc = 0.0f;
      for (int q = 0; q < W; ++q) acc += buf[(s * W + q) * kCols + j];
      const int64_t t = t0 + s;
      if (j < NP) {
        part[(((b * T + t) * H + h) * pt + tile) * N + j] = acc;
      } else {
        scal[(bh * pt + tile) * T + t] = acc;
      }
    }
    if (reverse) StoreHeadRows(sDx, dx, b, h, t0, steps, T, H, P, p0, rows, prow);
  }
  if (reverse) {
#pragma unroll
    for (int o = kWarpSize / 2; o > 0; o >>= 1) dd += __shfl_xor_sync(kFullMask, dd, o);
    if (lane == 0) sDD[warp] = dd;
    __syncthreads();
    if (tid == 0) {
      double s = 0.0;
      for (int q = 0; q < W; ++q) s += sDD[q];
      dD_part[bh * pt + tile] = s;
    }
  }
}

constexpr int kScalarThreads = 256;
constexpr int kScalarWarps = kScalarThreads / kWarpSize;

// One warp per boundary item = (b·H + h)·nb + c − 1: R[item] = Σ_{p, n}
// ck_G·ck_S in double, lanes strided over the P·N floats, then xor shuffles.
__global__ void SsdBoundaryKernel(const float* __restrict__ ck_S, const float* __restrict__ ck_G,
                                  double* __restrict__ R, int64_t items, int64_t PN) {
  const int64_t item = blockIdx.x * int64_t{kScalarWarps} + threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  if (item >= items) return;  // whole warps only
  double s = 0.0;
  for (int64_t i = lane; i < PN; i += kWarpSize)
    s = fma(static_cast<double>(ck_G[item * PN + i]), static_cast<double>(ck_S[item * PN + i]), s);
#pragma unroll
  for (int o = kWarpSize / 2; o > 0; o >>= 1) s += __shfl_xor_sync(kFullMask, s, o);
  if (lane == 0) R[item] = s;
}

// One warp per (b, h): r_t = u_t + m_t·r_{t+1} + (1 − m_t)·R_{(t+1)/L}, with
// m_t = 0 where t + 1 is a boundary (restart from the exact value), else 1;
// u_t = f_t − dt_t·g_t (f, g summed over the p-tiles in order). By 32-step
// slabs from the end: each lane starts with (m_t, v_t) (v_t = u_t plus the
// restart value), a suffix scan over the lanes composes
//   (M, V)_i ∘ (M, V)_{i+o} = (M_i·M_{i+o}, V_i + M_i·V_{i+o})
// in double, and then r_t = V + M·r_{base+32}. ddt_t = g_t + A·r_t (=);
// dad[bh] = (Σ_t dt_t·r_t, Σ_tiles dD_part).
// Example, T = 40, L = 16: slab base 32 has lanes 0–7 live (t = 32..39) and
// lanes 8–31 hold the identity (1, 0); lane 15 of slab 0 (t = 15) and lane
// 31 (t = 31) have m = 0 and add R for boundaries 1 and 2.
__global__ void SsdScalarKernel(const float* __restrict__ f_part, const float* __restrict__ g_part,
                                const double* __restrict__ dD_part,
                                const double* __restrict__ R, const float* __restrict__ dt,
                                const float* __restrict__ A, float* __restrict__ ddt,
                                double* __restrict__ dad, int64_t B, int64_t T, int64_t H,
                                int64_t L, int64_t nb, int pt) {
  const int64_t bh = blockIdx.x * int64_t{kScalarWarps} + threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  if (bh >= B * H) return;  // whole warps only
  const int64_t b = bh / H, h = bh % H;
  const double Ah = A[h];
  double carry = 0.0, da = 0.0;  // carry = r_{base+32}
  for (int64_t base = ((T - 1) / kWarpSize) * kWarpSize; base >= 0; base -= kWarpSize) {
    const int64_t t = base + lane;
    double M = 1.0, V = 0.0;
    float gs = 0.0f, dtv = 0.0f;
    if (t < T) {
      float fs = 0.0f;
      for (int k = 0; k < pt; ++k) {
        fs += f_part[(bh * pt + k) * T + t];
        gs += g_part[(bh * pt + k) * T + t];
      }
      dtv = dt[(b * T + t) * H + h];
      V = static_cast<double>(fs) - static_cast<double>(dtv) * gs;
      if ((t + 1) % L == 0 && t + 1 < T) {
        M = 0.0;
        V += R[bh * nb + (t + 1) / L - 1];
      }
    }
#pragma unroll
    for (int o = 1; o < kWarpSize; o <<= 1) {
      const double Mn = __shfl_down_sync(kFullMask, M, o);
      const double Vn = __shfl_down_sync(kFullMask, V, o);
      if (lane + o < kWarpSize) {
        V = fma(M, Vn, V);
        M *= Mn;
      }
    }
    const double r = fma(M, carry, V);
    if (t < T) {
      ddt[(b * T + t) * H + h] = static_cast<float>(static_cast<double>(gs) + Ah * r);
      da = fma(static_cast<double>(dtv), r, da);
    }
    carry = __shfl_sync(kFullMask, r, 0);  // r_base
  }
#pragma unroll
  for (int o = kWarpSize / 2; o > 0; o >>= 1) da += __shfl_xor_sync(kFullMask, da, o);
  if (lane == 0) {
    double s = 0.0;
    for (int k = 0; k < pt; ++k) s += dD_part[bh * pt + k];
    dad[bh * 2] = da;
    dad[bh * 2 + 1] = s;
  }
}

// dA[h] += Σ_b dad[b·H + h, 0], dD[h] += Σ_b dad[b·H + h, 1], b in order.
__global__ void AddHeadParamsKernel(const double* __restrict__ dad, float* __restrict__ dA,
                                    float* __restrict__ dD, int64_t B, int64_t H) {
  const int64_t h = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (h >= H) return;
  double sa = 0.0, sd = 0.0;
  for (int64_t b = 0; b < B; ++b) {
    sa += dad[(b * H + h) * 2];
    sd += dad[(b * H + h) * 2 + 1];
  }
  dA[h] += static_cast<float>(sa);
  dD[h] += static_cast<float>(sd);
}

// How a scan is cut: lanes per row and states per lane by N, rows per block
// (all of P when it fits in kScanMaxThreads), tiles of P, steps per shared
// tile (the most, up to 32, that keeps the block within kScanSmemTarget).
struct ScanPlan {
  int nl, r, rows, threads, warps, pt, ts;
  size_t smem;  // bytes of dynamic shared memory
};

ScanPlan MakeScanPlan(int64_t P, int64_t N, bool backward) {
  ScanPlan s{};
  if (N <= 4) {
    s.nl = 4, s.r = 1;
  } else if (N <= 8) {
    s.nl = 8, s.r = 1;
  } else if (N <= 16) {
    s.nl = 16, s.r = 1;
  } else if (N <= 32) {
    s.nl = 16, s.r = 2;
  } else if (N <= 64) {
    s.nl = 16, s.r = 4;
  } else if (N <= 128) {
    s.nl = 16, s.r = 8;
  } else {
    s.nl = 32, s.r = 8;  // N ≤ kSsdMaxN = 256
  }
  const int per_warp = kWarpSize / s.nl, max_rows = kScanMaxThreads / s.nl;
  const int64_t want = CeilDiv(P, per_warp) * per_warp;
  s.rows = static_cast<int>(want < max_rows ? want : max_rows);
  s.threads = s.rows * s.nl;  // a multiple of 32: rows is a multiple of per_warp
  s.warps = s.threads / kWarpSize;
  s.pt = static_cast<int>(CeilDiv(P, s.rows));
  const int np = s.nl * s.r;
  s.ts = 32;
  while (s.ts > 1 &&
         ScanSmemFloats(backward, s.rows, np, s.warps, s.ts) * sizeof(float) > kScanSmemTarget)
    s.ts /= 2;
  s.smem = static_cast<size_t>(ScanSmemFloats(backward, s.rows, np, s.warps, s.ts)) *
           sizeof(float);
  return s;
}

// Calls f(integral_constant<kNL>, integral_constant<kR>) for the plan's pair.
template <int V>
using Int = std::integral_constant<int, V>;
template <class F>
void DispatchLanes(const ScanPlan& s, F&& f) {
  switch (s.nl * 100 + s.r) {
    case 401: return f(Int<4>{}, Int<1>{});
    case 801: return f(Int<8>{}, Int<1>{});
    case 1601: return f(Int<16>{}, Int<1>{});
    case 1602: return f(Int<16>{}, Int<2>{});
    case 1604: return f(Int<16>{}, Int<4>{});
    case 1608: return f(Int<16>{}, Int<8>{});
    case 3208: return f(Int<32>{}, Int<8>{});
  }
  GTP_CU_REQUIRE(false, "SsdScan (CUDA): no kernel for %d lanes × %d states", s.nl, s.r);
}

// Raises a kernel's dynamic shared-memory limit when the plan needs > 48 KB
// (before the occupancy calculator sees it; Launch raises it to the tile's).
template <class K>
void AllowSmem(K kernel, size_t bytes) {
  GTP_CU_REQUIRE(bytes + sizeof(double) * kScanMaxWarps <= kMaxSharedBytes,
                 "SsdScan (CUDA): %zu bytes of shared memory", bytes);
#if !defined(GTP_CUDA_HOST_EMULATION)
  if (bytes > 48 * 1024) {
    GTP_CU_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      static_cast<int>(bytes)));
  }
#else
  (void)kernel;
#endif
}

// The tile length of a launch: among the plan's ts (the longest within
// kScanSmemTarget) and its halvings down to 8, the longest whose blocks run
// as many at once on an SM as the best of them (the occupancy calculator:
// registers, threads, shared memory). The second copy set of the double
// buffer made some blocks large enough to lose a block an SM (e.g. the
// forward at P = 64, N = 128: 3 → 2 at ts = 32, 3 again at 16). No output
// depends on ts: the forward carries S in registers across tiles, the
// backward reduces each step over the warps in one order and keys its
// checkpoints by absolute t. Call after AllowSmem(kernel, plan.smem).
template <class K>
int TileSteps(K kernel, const ScanPlan& s, bool backward) {
  const int np = s.nl * s.r;
  int best_ts = s.ts, best = -1;
  for (int ts = s.ts; ts >= 1 && (ts >= 8 || ts == s.ts); ts /= 2) {
    const size_t bytes =
        static_cast<size_t>(ScanSmemFloats(backward, s.rows, np, s.warps, ts)) * sizeof(float);
    const int blocks = BlocksPerSm(kernel, s.threads, bytes);
    if (blocks > best) {  // strictly more: a tie keeps the longer tile
      best = blocks;
      best_ts = ts;
    }
  }
  return best_ts;
}

size_t TileSmemBytes(const ScanPlan& s, bool backward, int ts) {
  return static_cast<size_t>(ScanSmemFloats(backward, s.rows, s.nl * s.r, s.warps, ts)) *
         sizeof(float);
}

void CheckScanSizes(int64_t H, int64_t P, int64_t G, int64_t N) {
  GTP_CU_REQUIRE(P >= 1 && P <= 1024, "SsdScan (CUDA): head dim P = %lld must be in [1, 1024]",
                 static_cast<long long>(P));
  GTP_CU_REQUIRE(N >= 0 && N <= kSsdMaxN, "SsdScan (CUDA): state size N = %lld not in [0, %lld]",
                 static_cast<long long>(N), static_cast<long long>(kSsdMaxN));
  GTP_CU_REQUIRE(G >= 1 && H % G == 0, "SsdScan (CUDA): H = %lld, G = %lld",
                 static_cast<long long>(H), static_cast<long long>(G));
}

// Scratch of the backward, in this order (doubles first, for alignment).
struct BackwardScratch {
  double* dad;      // [B·H, 2]
  double* R;        // [B·H·nb] r at the chunk boundaries
  double* dD_part;  // [B·H·pt]
  float* f_part;    // [B·H·pt, T]
  float* g_part;    // [B·H·pt, T]
  float* dB_part;   // [B, T, H, pt, N], or null when H = G and pt = 1 (written in place)
  float* dC_part;
  float* ck_S;      // [B·H·nb, P, N] S_{cL−1}
  float* ck_G;      // [B·H·nb, P, N] α_{cL}·dS_{cL}
};

// Boundary spacing and the number of interior boundaries c·L < T.
int64_t Spacing(int64_t T, int64_t chunk) { return chunk < T ? chunk : (T > 0 ? T : 1); }
int64_t Boundaries(int64_t T, int64_t chunk) {
  return T > 0 ? CeilDiv(T, Spacing(T, chunk)) - 1 : 0;
}

bool PartialsInPlace(int64_t H, int64_t G, int pt) { return H == G && pt == 1; }

int64_t BackwardScratchLayout(int64_t B, int64_t T, int64_t H, int64_t P, int64_t G, int64_t N,
                              int64_t chunk, float* base, BackwardScratch* out) {
  const ScanPlan s = MakeScanPlan(P, N, /*backward=*/true);
  const int64_t BHp = B * H * s.pt, nb = Boundaries(T, chunk);
  const int64_t parts = PartialsInPlace(H, G, s.pt) ? 0 : B * T * H * s.pt * N;
  const int64_t cks = B * H * nb * P * N;
  if (out != nullptr) {
    out->dad = reinterpret_cast<double*>(base);
    out->R = out->dad + 2 * B * H;
    out->dD_part = out->R + B * H * nb;
    out->f_part = reinterpret_cast<float*>(out->dD_part + BHp);
    out->g_part = out->f_part + BHp * T;
    out->dB_part = parts > 0 ? out->g_part + BHp * T : nullptr;
    out->dC_part = parts > 0 ? out->dB_part + parts : nullptr;
    out->ck_S = out->g_part + BHp * T + 2 * parts;
    out->ck_G = out->ck_S + cks;
  }
  return 4 * B * H + 2 * B * H * nb + 2 * BHp + 2 * BHp * T + 2 * parts + 2 * cks;
}
unsigned Blocks(int64_t n) { return static_cast<unsigned>(CeilDiv(n, kThreads)); }

}  // namespace

void SsdScanForward(const float* x, const float* dt, const float* A, const float* Bm,
                    const float* Cm, const float* D, float* y, int64_t B, int64_t T, int64_t H,
                    int64_t P, int64_t G, int64_t N, cudaStream_t stream) {
  if (B * T * H == 0) return;
  CheckScanSizes(H, P, G, N);
  const ScanPlan s = MakeScanPlan(P, N, /*backward=*/false);
  DispatchLanes(s, [&](auto nl, auto r) {
    constexpr int kNL = decltype(nl)::value, kR = decltype(r)::value;
    AllowSmem(SsdScanForwardKernel<kNL, kR>, s.smem);
    const int ts = TileSteps(SsdScanForwardKernel<kNL, kR>, s, /*backward=*/false);
    Launch(SsdScanForwardKernel<kNL, kR>, static_cast<unsigned>(B * H * s.pt),
           static_cast<unsigned>(s.threads), TileSmemBytes(s, false, ts), stream, x, dt, A, Bm, Cm,
           D, y, T, H, P, G, N, s.rows, s.pt, ts);
  });
  GTP_CU_LAUNCH_CHECK();
}

int64_t SsdScanBackwardScratchFloats(int64_t B, int64_t T, int64_t H, int64_t P, int64_t G,
                                     int64_t N, int64_t chunk) {
  return BackwardScratchLayout(B, T, H, P, G, N, chunk, nullptr, nullptr);
}

void SsdScanBackward(const float* dy, const float* x, const float* dt, const float* A,
                     const float* Bm, const float* Cm, const float* D, float* dx, float* ddt,
                     float* dA, float* dBm, float* dCm, float* dD, float* scratch, int64_t B,
                     int64_t T, int64_t H, int64_t P, int64_t G, int64_t N, int64_t chunk,
                     cudaStream_t stream) {
  if (B * T * H == 0) return ZeroGroupGrads(dBm, dCm, B * T * G * N, stream);
  CheckScanSizes(H, P, G, N);
  GTP_CU_REQUIRE(chunk >= 1, "SsdScanBackward (CUDA): chunk = %lld", static_cast<long long>(chunk));
  const ScanPlan s = MakeScanPlan(P, N, /*backward=*/true);
  const int64_t L = Spacing(T, chunk), nb = Boundaries(T, chunk);
  BackwardScratch sc;
  BackwardScratchLayout(B, T, H, P, G, N, chunk, scratch, &sc);
  const bool in_place = PartialsInPlace(H, G, s.pt);
  float* dB_part = in_place ? dBm : sc.dB_part;
  float* dC_part = in_place ? dCm : sc.dC_part;
  DispatchLanes(s, [&](auto nl, auto r) {
    constexpr int kNL = decltype(nl)::value, kR = decltype(r)::value;
    AllowSmem(SsdScanBackwardSweepKernel<kNL, kR>, s.smem);
    const int ts = TileSteps(SsdScanBackwardSweepKernel<kNL, kR>, s, /*backward=*/true);
    Launch(SsdScanBackwardSweepKernel<kNL, kR>, dim3(static_cast<unsigned>(B * H * s.pt), 2),
           static_cast<unsigned>(s.threads), TileSmemBytes(s, true, ts), stream, dy, x, dt, A, Bm,
           Cm, D, dx, dB_part, dC_part, sc.f_part, sc.g_part, sc.dD_part, sc.ck_S, sc.ck_G, T, H, P,
           G, N, L, nb, s.rows, s.pt, ts);
  });
  GTP_CU_LAUNCH_CHECK();
  if (nb > 0) {
    Launch(SsdBoundaryKernel, static_cast<unsigned>(CeilDiv(B * H * nb, kScalarWarps)),
           kScalarThreads, 0, stream, sc.ck_S, sc.ck_G, sc.R, B * H * nb, P * N);
    GTP_CU_LAUNCH_CHECK();
  }
  Launch(SsdScalarKernel, static_cast<unsigned>(CeilDiv(B * H, kScalarWarps)), kScalarThreads, 0,
         stream, sc.f_part, sc.g_part, sc.dD_part, sc.R, dt, A, ddt, sc.dad, B, T, H, L, nb, s.pt);
  GTP_CU_LAUNCH_CHECK();
  const int64_t out = B * T * G * N;
  if (!in_place && out > 0) {
    // The [H·pt] partial rows of a group are consecutive: a group sum over H·pt "heads".
    Launch(SumGroupHeadsKernel, GridFor(out, kThreads), kThreads, 0, stream, sc.dB_part, dBm, B * T,
           H * s.pt, G, N);
    GTP_CU_LAUNCH_CHECK();
    Launch(SumGroupHeadsKernel, GridFor(out, kThreads), kThreads, 0, stream, sc.dC_part, dCm, B * T,
           H * s.pt, G, N);
    GTP_CU_LAUNCH_CHECK();
  }
  Launch(AddHeadParamsKernel, Blocks(H), kThreads, 0, stream, sc.dad, dA, dD, B, H);
  GTP_CU_LAUNCH_CHECK();
}
}  // namespace gtp::kernels::ssm::cuda
