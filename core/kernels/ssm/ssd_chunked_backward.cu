// core/kernels/ssm/ssd_chunked_backward.cu — the chunked SSD scan's backward
// (ssd_scan_cuda.h SsdChunkedBackward; the math at the top of ssd_chunked.cu).
//
// After the chunk states (chunked_internal::BackwardStates), one
// of two kernels does each chunk's work, both through HeadBackward below (the
// same code, so the same bits for a head):
//   ChunkBackwardKernel: a block per (b, h, chunk). It stages its head's rows,
//     B and C, and forms C·Bᵀ itself; with G < H it writes per-head dB, dC
//     partials that SumGroupHeadsKernel adds in head order.
//   ChunkHeadsBackwardKernel: a block per (b, chunk, group g, split s) that
//     walks the heads of its split in order. B, C and C·Bᵀ (the same for the
//     group's heads) are staged and formed once; the next head's rows are
//     copied in with cp.async while this head computes; dB and dC are summed
//     over the heads in the block in f32, in head order. With one split (the
//     usual case: HeadSplits) that is SumGroupHeadsKernel's sum, so every
//     output is bit for bit ChunkBackwardKernel's (the chunk length is the
//     same: ChunkLength); with S splits the S split sums are then added in
//     order, a different association.
// (ssd_chunked.cu's ChunkHeadsOutputKernel is the forward's heads kernel.)
// Shared memory allows one heads block an SM at P = N = 16 with 64-step
// chunks (about 146 KB), three with 32-step chunks (about 60 KB).
#include <cuda_runtime.h>
#include <mma.h>

#include "core/kernels/cuda/common.cuh"
#include "core/kernels/ssm/ssd_chunked_common.cuh"
#include "core/kernels/ssm/ssd_scan_cuda.h"

namespace gtp::kernels::ssm::cuda {
namespace {

// The shared memory of one head's backward (see BackwardSmemBytes).
struct HeadSmem {
  double* cs;    // cumulative decays [L]
  double* expl;  // ∂L/∂dt explicit, then ddt [L]
  double* dcs;   // ∂L/∂cs [L]
  double* rw;    // R_j·w_j [L]
  double* red;   // [2·kWarps] block sums
  float* dt;     // [L]
  float* e;      // e_i = exp(cs_i) [L]
  float* w;      // w_j = exp(cs_last − cs_j)·dt_j [L]
  float* X;      // [L][Ld(P)]
  float* dY;
  float* Ox;  // dx before D·dy
  float* B;   // [L][Ld(N)]
  float* C;
  float* Bw;   // w_j·B_j
  float* DyS;  // dy_i·S_in
  float* XG;   // x_j·G_c
  float* Oc;   // dC before e_i·DyS
  float* Ob;   // dB before w_j·XG
  float* S;    // S_in[c]  [Pad16(P)][Ld(N)]
  float* G;    // G_c      [Pad16(P)][Ld(N)]
  float* M1;   // C·Bᵀ (kPerHead), then M1' = CB∘E·dt_j [L][Ld(L)]
  float* M2;   // dY·Xᵀ, then M2' = DX∘E·dt_j
  float* Q;    // CB∘DX∘E
};

// One head's chunk backward from its staged rows: everything after the
// staging. On entry a barrier has made s.dt, the rows (X, dY, B, C, S, G)
// and ScanDecays<true>'s s.cs, s.e, s.w visible; with kSharedCB, cb holds
// C·Bᵀ's lower tiles (else phase A forms them in s.M1, and cb = s.M1). Writes dx, ddt and
// dad[bh, c, 0..1]; hands each (r < len, n < N) of the head's dC and dB to
// group_out(r, n, dC, dB), always on the same thread for the same (r, n).
// Ends with a barrier.
template <bool kSharedCB, class GroupOut>
__device__ __forceinline__ void HeadBackward(const HeadSmem& s, const float* cb, const ChunkIdx& k,
                                             int L, int P, int N, float Ah, float Dh,
                                             const float* __restrict__ dec, float* __restrict__ dx,
                                             float* __restrict__ ddt, double* __restrict__ dad,
                                             int64_t T, int64_t H, int64_t nc, GroupOut group_out) {
  const int64_t P64 = P;
  const int lp = static_cast<int>(Ld(P)), ln = static_cast<int>(Ld(N)),
            ll = static_cast<int>(Ld(L));
  const int Pp = static_cast<int>(Pad16(P)), Np = static_cast<int>(Pad16(N));
  double* sCs = s.cs;
  double* sExpl = s.expl;
  double* sDcs = s.dcs;
  double* sRw = s.rw;
  double* sRed = s.red;
  float* sDt = s.dt;
  float* sE = s.e;
  float* sW = s.w;
  float* sX = s.X;
  float* sDy = s.dY;
  float* sOx = s.Ox;
  float* sB = s.B;
  float* sC = s.C;
  float* sBw = s.Bw;
  float* sDyS = s.DyS;
  float* sXG = s.XG;
  float* sOc = s.Oc;
  float* sOb = s.Ob;
  float* sS = s.S;
  float* sG = s.G;
  float* sM1 = s.M1;
  float* sM2 = s.M2;
  float* sQ = s.Q;
  const int last = k.len - 1;
  const double cs_last = sCs[last];
  // w_j·B_j, read first in phase B (so no barrier of its own).
  for (int e = threadIdx.x; e < L * Np; e += blockDim.x) {
    const int j = e / Np, n = e - j * Np;
    sBw[j * ln + n] = j < k.len ? sW[j] * sB[j * ln + n] : 0.0f;
  }
  const int warp = threadIdx.x / kWarpSize, Lt = L / 16, Pt = Pp / 16, Nt = Np / 16;
  // Phase A: C·Bᵀ (unless shared) and dY·Xᵀ (their lower tiles only, so
  // every warp's turn has work), dY·S_in, X·G.
  const int tri = Lt * (Lt + 1) / 2;
  const int products = kSharedCB ? 1 : 2;  // lower-tile products: [C·Bᵀ,] dY·Xᵀ
  for (int t = warp; t < products * tri + 2 * Lt * Nt; t += kWarps) {
    Acc acc;
    wmma::fill_fragment(acc, 0.0f);
    if (t < products * tri) {
      const int r = t / tri, which = r + (kSharedCB ? 1 : 0);  // 0: C·Bᵀ, 1: dY·Xᵀ
      int tj = t - r * tri, ti = 0;  // the r-th lower tile, row by row
      while (tj > ti) tj -= ++ti;
      if (which == 0) {
        Mma3<Row, Col>(acc, sC, ln, sB, ln, ti * 16, tj * 16, 0, Np);
        wmma::store_matrix_sync(sM1 + ti * 16 * ll + tj * 16, acc, ll, wmma::mem_row_major);
      } else {
        Mma3<Row, Col>(acc, sDy, lp, sX, lp, ti * 16, tj * 16, 0, Pp);
        wmma::store_matrix_sync(sM2 + ti * 16 * ll + tj * 16, acc, ll, wmma::mem_row_major);
      }
    } else {
      const int u = t - products * tri, which = u / (Lt * Nt), r = u - which * Lt * Nt,
                ti = r / Nt, tn = r - ti * Nt;
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
        const float cbv = cb[i * ll + j], dxx = sM2[i * ll + j];
        q = cbv * dxx * E;
        m1 = cbv * E * sDt[j];
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
  for (int e = threadIdx.x; e < k.len * N; e += blockDim.x) {
    const int r = e / N, n = e - r * N;
    group_out(r, n, fmaf(sE[r], sDyS[r * ln + n], sOc[r * ln + n]),
              fmaf(sW[r], sXG[r * ln + n], sOb[r * ln + n]));
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
  GTP_DYNAMIC_SHARED_ALIGNED(double, smem_d, 128);
  const int P = static_cast<int>(P64), N = static_cast<int>(N64);
  const int lp = static_cast<int>(Ld(P)), ln = static_cast<int>(Ld(N)),
            ll = static_cast<int>(Ld(L));
  const int Pp = static_cast<int>(Pad16(P));
  HeadSmem s;
  s.cs = smem_d;
  s.expl = s.cs + L;
  s.dcs = s.expl + L;
  s.rw = s.dcs + L;
  s.red = s.rw + L;
  s.dt = reinterpret_cast<float*>(s.red + 2 * kWarps);
  s.e = s.dt + L;
  s.w = s.e + L;
  s.X = s.w + L;
  s.dY = s.X + L * lp;
  s.Ox = s.dY + L * lp;
  s.B = s.Ox + L * lp;
  s.C = s.B + L * ln;
  s.Bw = s.C + L * ln;
  s.DyS = s.Bw + L * ln;
  s.XG = s.DyS + L * ln;
  s.Oc = s.XG + L * ln;
  s.Ob = s.Oc + L * ln;
  s.S = s.Ob + L * ln;
  s.G = s.S + Pp * ln;
  s.M1 = s.G + Pp * ln;
  s.M2 = s.M1 + L * ll;
  s.Q = s.M2 + L * ll;
  const ChunkIdx k = ThisChunk(H, nc, T, L);
  const int64_t g = k.h / (H / G);
  const float Ah = A[k.h], Dh = D[k.h];
  // Every load of the chunk in flight at once (cp.async), then one wait.
  const int Np = static_cast<int>(Pad16(N));
  CopyDtAsync(dt, k, L, T, H, s.dt);
  CopyHeadRowsAsync(x, s.X, lp, k, L, T, H, P);
  CopyHeadRowsAsync(dy, s.dY, lp, k, L, T, H, P);
  CopyRowsAsync(Bm, s.B, ln, k, L, Np, T, G, g, N);
  CopyRowsAsync(Cm, s.C, ln, k, L, Np, T, G, g, N);
  const int64_t state = (k.bh * nc + k.c) * P64 * N64;
  CopyStateAsync(sin + state, s.S, ln, P, N);
  CopyStateAsync(gout + state, s.G, ln, P, N);
  CpAsyncCommit();
  CpAsyncWait<0>();
  __syncthreads();
  ScanDecays<true>(s.dt, Ah, k.len, s.cs, L, s.e, s.w);
  const bool direct = H == G;
  HeadBackward<false>(s, s.M1, k, L, P, N, Ah, Dh, dec, dx, ddt, dad, T, H, nc,
                      [=](int r, int n, float c_v, float b_v) {
                        const int64_t tt = k.b * T + k.t0 + r;
                        const int64_t at = direct ? (tt * G + g) * N64 + n : (tt * H + k.h) * N64 + n;
                        dC[at] = c_v;
                        dB[at] = b_v;
                      });
}

// cp.async copies of head k.h's rows of the chunk into one buffer set (every
// element written): dt, X, dY, S_in[c] and G_c.
__device__ __forceinline__ void PrefetchHead(const float* __restrict__ dt,
                                             const float* __restrict__ x,
                                             const float* __restrict__ dy,
                                             const float* __restrict__ sin,
                                             const float* __restrict__ gout, const ChunkIdx& k,
                                             int L, int64_t T, int64_t H, int P, int N, int64_t nc,
                                             float* sDt, float* sX, float* sDy, float* sS,
                                             float* sG) {
  const int lp = static_cast<int>(Ld(P)), ln = static_cast<int>(Ld(N));
  CopyDtAsync(dt, k, L, T, H, sDt);
  CopyHeadRowsAsync(x, sX, lp, k, L, T, H, P);
  CopyHeadRowsAsync(dy, sDy, lp, k, L, T, H, P);
  const int64_t state = (k.bh * nc + k.c) * int64_t{P} * N;
  CopyStateAsync(sin + state, sS, ln, P, N);
  CopyStateAsync(gout + state, sG, ln, P, N);
}

// Grid B·G·S·nc (block = ((b·G + g)·S + split)·nc + c): the chunk's backward
// for the hs = H/(G·S) heads g·(H/G) + split·hs + i, i = 0 … hs − 1, in
// order (see the top of the file). dB, dC of the block's heads, summed in
// head order, go to out [B, T, G·S, N] at (b·T + t, g·S + split): dB, dC
// themselves when S = 1, else split partials for SumGroupHeadsKernel.
__global__ void __launch_bounds__(kThreads)
    ChunkHeadsBackwardKernel(const float* __restrict__ dy, const float* __restrict__ x,
                             const float* __restrict__ dt, const float* __restrict__ A,
                             const float* __restrict__ Bm, const float* __restrict__ Cm,
                             const float* __restrict__ D, const float* __restrict__ sin,
                             const float* __restrict__ gout, const float* __restrict__ dec,
                             float* __restrict__ dx, float* __restrict__ ddt,
                             float* __restrict__ dB, float* __restrict__ dC,
                             double* __restrict__ dad, int64_t T, int64_t H, int64_t P64,
                             int64_t G, int64_t N64, int L, int64_t nc, int64_t S) {
  GTP_DYNAMIC_SHARED_ALIGNED(double, smem_d, 128);
  const int P = static_cast<int>(P64), N = static_cast<int>(N64);
  const int lp = static_cast<int>(Ld(P)), ln = static_cast<int>(Ld(N)),
            ll = static_cast<int>(Ld(L));
  const int Pp = static_cast<int>(Pad16(P)), Np = static_cast<int>(Pad16(N));
  // HeadsBackwardSmemBytes: the doubles; dt ×2, e, w; X ×2, dY ×2, Ox; B, C,
  // Bw, DyS, XG, Oc, Ob, AccC, AccB; S ×2, G ×2; CB, M1, M2, Q.
  HeadSmem s;
  s.cs = smem_d;
  s.expl = s.cs + L;
  s.dcs = s.expl + L;
  s.rw = s.dcs + L;
  s.red = s.rw + L;
  float* sDt2 = reinterpret_cast<float*>(s.red + 2 * kWarps);
  s.e = sDt2 + 2 * L;
  s.w = s.e + L;
  float* sX2 = s.w + L;
  float* sDy2 = sX2 + 2 * L * lp;
  s.Ox = sDy2 + 2 * L * lp;
  s.B = s.Ox + L * lp;
  s.C = s.B + L * ln;
  s.Bw = s.C + L * ln;
  s.DyS = s.Bw + L * ln;
  s.XG = s.DyS + L * ln;
  s.Oc = s.XG + L * ln;
  s.Ob = s.Oc + L * ln;
  float* sAccC = s.Ob + L * ln;
  float* sAccB = sAccC + L * ln;
  float* sS2 = sAccB + L * ln;
  float* sG2 = sS2 + 2 * Pp * ln;
  float* sCB = sG2 + 2 * Pp * ln;
  s.M1 = sCB + L * ll;
  s.M2 = s.M1 + L * ll;
  s.Q = s.M2 + L * ll;

  const HeadsChunk hc = ThisHeadsChunk(H, G, S, nc, T, L);
  ChunkIdx k = hc.k;
  const int64_t g = hc.g, split = hc.split, hs = hc.hs;
  PrefetchHead(dt, x, dy, sin, gout, k, L, T, H, P, N, nc, sDt2, sX2, sDy2, sS2, sG2);
  CopyRowsAsync(Bm, s.B, ln, k, L, Np, T, G, g, N);
  CopyRowsAsync(Cm, s.C, ln, k, L, Np, T, G, g, N);
  CpAsyncCommit();
  CpAsyncWait<0>();
  __syncthreads();  // B, C and the first head's rows staged
  LowerCB(s.C, s.B, sCB, ln, ll, L, Np);  // once for the block's heads (phase A's products)
  const int64_t GS = G * S;
  for (int64_t i = 0; i < hs; ++i) {
    const int cur = static_cast<int>(i & 1);
    CpAsyncWait<0>();
    __syncthreads();  // head i's rows landed; the previous head is done with the other set
    k.h = hc.k.h + i;  // (stepping k by NextHead cost 8 registers)
    k.bh = k.b * H + k.h;
    if (i + 1 < hs) {
      const ChunkIdx next = NextHead(k);
      const int o = cur ^ 1;
      PrefetchHead(dt, x, dy, sin, gout, next, L, T, H, P, N, nc, sDt2 + o * L,
                   sX2 + o * L * lp, sDy2 + o * L * lp, sS2 + o * Pp * ln, sG2 + o * Pp * ln);
    }
    CpAsyncCommit();
    s.dt = sDt2 + cur * L;
    s.X = sX2 + cur * L * lp;
    s.dY = sDy2 + cur * L * lp;
    s.S = sS2 + cur * Pp * ln;
    s.G = sG2 + cur * Pp * ln;
    const float Ah = A[k.h], Dh = D[k.h];
    ScanDecays<true>(s.dt, Ah, k.len, s.cs, L, s.e, s.w);
    const bool first = i == 0, only = hs == 1;
    HeadBackward<true>(s, sCB, k, L, P, N, Ah, Dh, dec, dx, ddt, dad, T, H, nc,
                       [=](int r, int n, float c_v, float b_v) {
                         if (only) {  // the value itself, as ChunkBackwardKernel writes it
                           const int64_t at = ((k.b * T + k.t0 + r) * GS + g * S + split) * N64 + n;
                           dC[at] = c_v;
                           dB[at] = b_v;
                         } else {  // SumGroupHeadsKernel's sum: from 0, in head order
                           float* ac = sAccC + r * ln + n;
                           float* ab = sAccB + r * ln + n;
                           *ac = (first ? 0.0f : *ac) + c_v;
                           *ab = (first ? 0.0f : *ab) + b_v;
                         }
                       });
  }
  if (hs > 1) {  // each thread its own (r, n), as in group_out: no barrier needed
    for (int e = threadIdx.x; e < k.len * N; e += blockDim.x) {
      const int r = e / N, n = e - r * N;
      const int64_t at = ((k.b * T + k.t0 + r) * GS + g * S + split) * N64 + n;
      dC[at] = sAccC[r * ln + n];
      dB[at] = sAccB[r * ln + n];
    }
  }
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

// About one heads block per SM of an H100/H200 (132 SMs), where shared memory
// lets one backward heads block an SM run (HeadSplits).
constexpr int64_t kHeadsBackwardBlocks = 128;

}  // namespace

void SsdChunkedBackward(const float* dy, const float* x, const float* dt, const float* A,
                        const float* Bm, const float* Cm, const float* D, float* dx, float* ddt,
                        float* dA, float* dBm, float* dCm, float* dD, float* scratch, int64_t B,
                        int64_t T, int64_t H, int64_t P, int64_t G, int64_t N, int64_t chunk,
                        cudaStream_t stream, ChunkedBlocks kernel) {
  if (B * T * H == 0) return ZeroGroupGrads(dBm, dCm, B * T * G * N, stream);
  const int L = CheckedChunkLength("SsdChunkedBackward", H, P, G, N, chunk, kernel);
  Scratch sc;
  ScratchLayout(B, T, H, P, G, N, L, /*backward=*/true, scratch, &sc);
  const int64_t nc = CeilDiv(T, L);
  chunked_internal::BackwardStates(x, dy, dt, A, Bm, Cm, sc.S, sc.Gs, sc.dec, B, T, H, P, G, N, L,
                                   stream);
  // Per-head (kPerHead) or per-split (kHeadGroups, S splits) partials of dB,
  // dC when they are not dB, dC themselves; SumGroupHeadsKernel adds the
  // `parts` of each group in order.
  int64_t parts = H / G;
  if (kernel == ChunkedBlocks::kHeadGroups) {
    const int64_t S = HeadSplits(B, nc, H, G, kHeadsBackwardBlocks);
    parts = S;
    float* dB_out = S == 1 ? dBm : sc.dB_part;
    float* dC_out = S == 1 ? dCm : sc.dC_part;
    const int64_t bytes = HeadsBackwardSmemBytes(L, P, N);
    CheckSmem(bytes);
    Launch(ChunkHeadsBackwardKernel, static_cast<unsigned>(B * G * S * nc), kThreads, bytes, stream,
           dy, x, dt, A, Bm, Cm, D, sc.S, sc.Gs, sc.dec, dx, ddt, dB_out, dC_out, sc.dad, T, H, P,
           G, N, L, nc, S);
    GTP_CU_LAUNCH_CHECK();
  } else {
    const bool direct = H == G;
    float* dB_out = direct ? dBm : sc.dB_part;
    float* dC_out = direct ? dCm : sc.dC_part;
    const int64_t bytes = BackwardSmemBytes(L, P, N);
    CheckSmem(bytes);
    Launch(ChunkBackwardKernel, static_cast<unsigned>(B * H * nc), kThreads, bytes, stream, dy, x,
           dt, A, Bm, Cm, D, sc.S, sc.Gs, sc.dec, dx, ddt, dB_out, dC_out, sc.dad, T, H, P, G, N, L,
           nc);
    GTP_CU_LAUNCH_CHECK();
  }
  const int64_t out = B * T * G * N;
  if (parts > 1 && out > 0) {
    Launch(SumGroupHeadsKernel, GridFor(out, kThreads), kThreads, 0, stream, sc.dB_part, dBm, B * T,
           G * parts, G, N);
    GTP_CU_LAUNCH_CHECK();
    Launch(SumGroupHeadsKernel, GridFor(out, kThreads), kThreads, 0, stream, sc.dC_part, dCm, B * T,
           G * parts, G, N);
    GTP_CU_LAUNCH_CHECK();
  }
  Launch(AddChunkParamsKernel, static_cast<unsigned>(CeilDiv(H, kThreads)), kThreads, 0, stream,
         sc.dad, dA, dD, B, H, nc);
  GTP_CU_LAUNCH_CHECK();
}

}  // namespace gtp::kernels::ssm::cuda
