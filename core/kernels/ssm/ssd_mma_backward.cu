// core/kernels/ssm/ssd_mma_backward.cu — the backward of the warp-level
// chunked SSD scan (ssd_mma.cu has the forward, the states and the math).
// Per (b, h) and chunk c, with S = S_in[c], G = G_c = ∂L/∂S_in[c+1] (from
// ssd_mma.cu's States), CB_ij = C_i·B_j, DX_ij = dy_i·x_j, Q = CB∘DX∘E
// (zero above the diagonal), R_j = x_jᵀ·G·B_j and O_i = dy_iᵀ·S·C_i:
//   dx_j = Σ_{i ≥ j} dt_j·CB_ij·E_ij·dy_i + w_j·G·B_j + D·dy_j
//   dB_j = Σ_{i ≥ j} dt_j·DX_ij·E_ij·C_i + w_j·Gᵀ·x_j          (summed over the group's heads)
//   dC_i = Σ_{j ≤ i} DX_ij·E_ij·dt_j·B_j + e_i·Sᵀ·dy_i          (likewise)
//   ∂L/∂dt_j (explicit) = Σ_{i ≥ j} Q_ij + R_j·r_j
//   ∂L/∂cs_t = Σ_{j ≤ t} Q_tj·dt_j − dt_t·Σ_{i ≥ t} Q_it + e_t·O_t − R_t·w_t
//              + [t = last]·(Σ_j R_j·w_j + dec_c·⟨G, S⟩)
//   ∂L/∂a_k = Σ_{t ≥ k} ∂L/∂cs_t (inside the chunk, a_k = dt_k·A):
//   ddt_k = explicit_k + A·∂L/∂a_k, dA += Σ_k dt_k·∂L/∂a_k, dD += Σ dy·x.
// A warp forms the chunk's tiles twice: with j as rows (dx, dB and the
// column sums of Q: B·Cᵀ and X·dYᵀ) and with i as rows (dC and the row sums:
// dY·Xᵀ and C·Bᵀ), so each product's masked accumulator is the next
// product's A operand in place. C·Bᵀ is the block's heads' common matrix,
// formed once a block (FormBlockCB) and read in either orientation. The block's warps (heads of one
// group) add their dB and dC tiles in shared memory in head order; blocks of other heads of the
// group write partials that SumGroupHeadsKernel adds in order. dA and dD: per-(b, chunk) doubles,
// added per head in order by MmaScalarsKernel.
#include <cuda_runtime.h>

#include "core/kernels/cuda/common.cuh"
#include "core/kernels/ssm/ssd_common.cuh"
#include "core/kernels/ssm/ssd_mma_common.cuh"
#include "core/kernels/ssm/ssd_scan_cuda.h"

namespace gtp::kernels::ssm::cuda {
namespace {

// The block's dB or dC rows j0..j0+15 from each warp's accumulator tiles
// (rows = the tile's, columns n): slot[warp] ← tiles, then the heads in
// order into out[((b·T + t)·Hp + hblk)·N + n] for t < len. Two barriers.
template <int kD, int kLd>
__device__ __forceinline__ void HeadSum(const Acc (&tile)[kD / 8], float* slots, int hb, int N,
                                        int64_t b, int64_t T, int64_t t0, int r0, int len,
                                        int64_t Hp, int64_t hblk, float* __restrict__ out) {
  const int warp = threadIdx.x >> 5, gq = LaneG(), tq = LaneT();
  float* mine = slots + warp * 16 * kLd;
  for (int nt = 0; nt < kD / 8; ++nt) {
    for (int q = 0; q < 4; ++q) {
      mine[(gq + (q >> 1) * 8) * kLd + nt * 8 + 2 * tq + (q & 1)] = tile[nt][q];
    }
  }
  __syncthreads();
  for (int e = threadIdx.x; e < 16 * N; e += blockDim.x) {
    const int r = e / N, n = e - r * N;
    if (r0 + r >= len) continue;
    float s = slots[r * kLd + n];
    for (int w = 1; w < hb; ++w) s += slots[w * 16 * kLd + r * kLd + n];
    out[((b * T + t0 + r0 + r) * Hp + hblk) * N + n] = s;
  }
  __syncthreads();
}

// Grid B·(H/hb)·nc, hb warps. Sin, Gc: [bh, c, P, N]; dBp, dCp: [B, T,
// H/hb, N] (the group's sums when H/hb = G); dAp, dDp: [h, b, c].
template <int kD, int kLen, bool kSplit>
__global__ void MmaBackwardKernel(const float* __restrict__ dy, const float* __restrict__ x,
                                  const float* __restrict__ dt, const float* __restrict__ A,
                                  const float* __restrict__ Bm, const float* __restrict__ Cm,
                                  const float* __restrict__ D, const float* __restrict__ Sin,
                                  const float* __restrict__ Gc, const float* __restrict__ dec,
                                  float* __restrict__ dx, float* __restrict__ ddt,
                                  float* __restrict__ dBp, float* __restrict__ dCp,
                                  double* __restrict__ dAp, double* __restrict__ dDp, int64_t Bsz,
                                  int64_t T, int64_t H, int P, int64_t G, int N, int64_t nc,
                                  int hb) {
  using Sh = MmaShape<kD, kLen>;
  constexpr int kL = Sh::kL, kLd = Sh::kLd, kMat = kL * kLd;
  GTP_DYNAMIC_SHARED(double, smem_d);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const MmaChunk k = ThisMmaChunk<kL>(T, H, G, nc, hb);
  const int64_t b = k.b, h = k.h, g = k.g, c = k.c, t0 = k.t0;
  const int len = k.len;
  const int64_t Hp = H / hb, hblk = k.hblk;
  double* cs = smem_d + warp * kL;
  double* colQ = smem_d + (hb + warp) * kL;
  double* rowQ = smem_d + (2 * hb + warp) * kL;
  double* Rs = smem_d + (3 * hb + warp) * kL;
  double* Os = smem_d + (4 * hb + warp) * kL;
  float* sB = reinterpret_cast<float*>(smem_d + 5 * hb * kL);
  float* sC = sB + kMat;
  float* sCB = sC + kMat;
  float* slots = sCB + kL * CbLd<kL>();
  float* sX = slots + hb * 16 * kLd + warp * (2 * kMat + 2 * kD * kLd + 3 * kL);
  float* sDY = sX + kMat;
  float* sS = sDY + kMat;
  float* sG = sS + kD * kLd;
  float* sDt = sG + kD * kLd;
  float* sE = sDt + kL;
  float* sR = sE + kL;
  StageRows<kL, kD, kLd>(Bm, sB, b, T, G, g, N, t0, len, threadIdx.x, blockDim.x);
  StageRows<kL, kD, kLd>(Cm, sC, b, T, G, g, N, t0, len, threadIdx.x, blockDim.x);
  StageRows<kL, kD, kLd>(x, sX, b, T, H, h, P, t0, len, lane, kWarpSize);
  StageRows<kL, kD, kLd>(dy, sDY, b, T, H, h, P, t0, len, lane, kWarpSize);
  CpAsyncCommit();
  StageDt<kL>(dt, sDt, k, T, H);
  const int64_t state = ((b * H + h) * nc + c) * P * N;
  StageState<kD, kLd>(Sin + state, sS, P, N, lane, kWarpSize);
  StageState<kD, kLd>(Gc + state, sG, P, N, lane, kWarpSize);
  __syncwarp();
  ChunkDecays<kL>(sDt, A[h], len, cs, sE, sR);
  const float dec_c = dec[(b * H + h) * nc + c];
  CpAsyncWait<0>();
  __syncthreads();
  FormBlockCB<kD, kL, kLd, kSplit>(sC, sB, sCB, len, warp, hb);  // the heads' common C·Bᵀ
  __syncthreads();
  const float Dh = D[h];
  const int gq = LaneG(), tq = LaneT();

  // ---- j as rows: dx, dB, Σ_{i ≥ j} Q_ij, R_j.
  for (int jt = 0; jt < kL / 16; ++jt) {
    const int j0 = jt * 16;
    if (j0 >= len) break;  // the same for the whole block
    Acc dxa[kD / 8], dba[kD / 8];
    for (int k = 0; k < kD / 8; ++k) {
      Zero(dxa[k]);
      Zero(dba[k]);
    }
    double cq[2] = {0.0, 0.0};
    const RowFrags<kD, kLd> fb(sB, j0), fx(sX, j0);  // B and X rows j
    for (int it = jt; it < kL / 16; ++it) {
      const int i0 = it * 16;
      if (i0 >= len) break;
      Acc bc[2], xd[2];
      LoadBC<kL>(sCB, j0, i0, bc);
      Zero(xd[0]);
      Zero(xd[1]);
#pragma unroll
      for (int kk = 0; kk < kD / 16; ++kk) {
        const FragA ax = fx[kk];
        for (int half = 0; half < 2; ++half) {
          const int n0 = i0 + half * 8;
          MmaProd<kSplit>(xd[half], ax,
                          MakeB([&](int k, int n) { return sDY[(n0 + n) * kLd + kk * 16 + k]; }));
        }
      }
      // Q's terms summed in f32 over the tile's 4 columns a lane, then in
      // double over the tiles.
      const TileDecays E = MakeTileDecays<false>(cs, j0, i0);
      float cqt[2] = {0.0f, 0.0f};
      for (int half = 0; half < 2; ++half) {
        for (int q = 0; q < 4; ++q) {
          const int j = j0 + gq + (q >> 1) * 8;
          cqt[q >> 1] += bc[half][q] * xd[half][q] * E.e[half][q];
          bc[half][q] *= E.e[half][q] * sDt[j];
          xd[half][q] *= E.e[half][q] * sDt[j];
        }
      }
      cq[0] += static_cast<double>(cqt[0]);
      cq[1] += static_cast<double>(cqt[1]);
      const FragA m1 = AccToA(bc[0], bc[1]), m2 = AccToA(xd[0], xd[1]);
      for (int nt = 0; nt < kD / 8; ++nt) {
        MmaProd<kSplit>(dxa[nt], m1,
                        MakeB([&](int k, int n) { return sDY[(i0 + k) * kLd + nt * 8 + n]; }));
        MmaProd<kSplit>(dba[nt], m2,
                        MakeB([&](int k, int n) { return sC[(i0 + k) * kLd + nt * 8 + n]; }));
      }
    }
    // U = B·Gᵀ [j × p] and XG = X·G [j × n].
    Acc u[kD / 8], xg[kD / 8];
    for (int k = 0; k < kD / 8; ++k) {
      Zero(u[k]);
      Zero(xg[k]);
    }
#pragma unroll
    for (int kk = 0; kk < kD / 16; ++kk) {
      const FragA ab = fb[kk], ax = fx[kk];
      for (int nt = 0; nt < kD / 8; ++nt) {
        MmaProd<kSplit>(u[nt], ab,
                        MakeB([&](int k, int n) { return sG[(nt * 8 + n) * kLd + kk * 16 + k]; }));
        MmaProd<kSplit>(xg[nt], ax,
                        MakeB([&](int k, int n) { return sG[(kk * 16 + k) * kLd + nt * 8 + n]; }));
      }
    }
    double rs[2] = {0.0, 0.0};
    for (int nt = 0; nt < kD / 8; ++nt) {
      for (int q = 0; q < 4; ++q) {
        const int j = j0 + gq + (q >> 1) * 8, p = nt * 8 + 2 * tq + (q & 1);
        const float w = sR[j] * sDt[j];
        rs[q >> 1] += static_cast<double>(u[nt][q] * sX[j * kLd + p]);
        const float v = dxa[nt][q] + w * u[nt][q] + Dh * sDY[j * kLd + p];
        if (j < len && p < P) dx[((b * T + t0 + j) * H + h) * P + p] = v;
        dba[nt][q] += w * xg[nt][q];
      }
    }
    for (int half = 0; half < 2; ++half) {
      const double q = QuadSum(cq[half]), r = QuadSum(rs[half]);
      if (tq == 0) {
        colQ[j0 + gq + half * 8] = q;
        Rs[j0 + gq + half * 8] = r;
      }
    }
    HeadSum<kD, kLd>(dba, slots, hb, N, b, T, t0, j0, len, Hp, hblk, dBp);
  }

  // ---- i as rows: dC, Σ_{j ≤ i} Q_ij·dt_j, O_i.
  for (int it = 0; it < kL / 16; ++it) {
    const int i0 = it * 16;
    if (i0 >= len) break;
    Acc dca[kD / 8];
    for (int k = 0; k < kD / 8; ++k) Zero(dca[k]);
    double rq[2] = {0.0, 0.0};
    const RowFrags<kD, kLd> fd(sDY, i0), fc(sC, i0);  // dY and C rows i
    for (int jt = 0; jt <= it; ++jt) {
      const int j0 = jt * 16;
      Acc dm[2], cb[2];
      LoadCB<kL>(sCB, i0, j0, cb);
      Zero(dm[0]);
      Zero(dm[1]);
#pragma unroll
      for (int kk = 0; kk < kD / 16; ++kk) {
        const FragA ad = fd[kk];
        for (int half = 0; half < 2; ++half) {
          const int n0 = j0 + half * 8;
          MmaProd<kSplit>(dm[half], ad,
                          MakeB([&](int k, int n) { return sX[(n0 + n) * kLd + kk * 16 + k]; }));
        }
      }
      const TileDecays E = MakeTileDecays<true>(cs, i0, j0);
      float rqt[2] = {0.0f, 0.0f};
      for (int half = 0; half < 2; ++half) {
        for (int q = 0; q < 4; ++q) {
          const int j = j0 + half * 8 + 2 * tq + (q & 1);
          dm[half][q] *= E.e[half][q] * sDt[j];
          rqt[q >> 1] += cb[half][q] * dm[half][q];
        }
      }
      rq[0] += static_cast<double>(rqt[0]);
      rq[1] += static_cast<double>(rqt[1]);
      const FragA m = AccToA(dm[0], dm[1]);
      for (int nt = 0; nt < kD / 8; ++nt) {
        MmaProd<kSplit>(dca[nt], m,
                        MakeB([&](int k, int n) { return sB[(j0 + k) * kLd + nt * 8 + n]; }));
      }
    }
    // V = C·Sᵀ [i × p] and W = dY·S [i × n].
    Acc v[kD / 8], wv[kD / 8];
    for (int k = 0; k < kD / 8; ++k) {
      Zero(v[k]);
      Zero(wv[k]);
    }
#pragma unroll
    for (int kk = 0; kk < kD / 16; ++kk) {
      const FragA ac = fc[kk], ad = fd[kk];
      for (int nt = 0; nt < kD / 8; ++nt) {
        MmaProd<kSplit>(v[nt], ac,
                        MakeB([&](int k, int n) { return sS[(nt * 8 + n) * kLd + kk * 16 + k]; }));
        MmaProd<kSplit>(wv[nt], ad,
                        MakeB([&](int k, int n) { return sS[(kk * 16 + k) * kLd + nt * 8 + n]; }));
      }
    }
    double os[2] = {0.0, 0.0};
    for (int nt = 0; nt < kD / 8; ++nt) {
      for (int q = 0; q < 4; ++q) {
        const int i = i0 + gq + (q >> 1) * 8, p = nt * 8 + 2 * tq + (q & 1);
        os[q >> 1] += static_cast<double>(v[nt][q] * sDY[i * kLd + p]);
        dca[nt][q] += sE[i] * wv[nt][q];
      }
    }
    for (int half = 0; half < 2; ++half) {
      const double q = QuadSum(rq[half]), o = QuadSum(os[half]);
      if (tq == 0) {
        rowQ[i0 + gq + half * 8] = q;
        Os[i0 + gq + half * 8] = o;
      }
    }
    HeadSum<kD, kLd>(dca, slots, hb, N, b, T, t0, i0, len, Hp, hblk, dCp);
  }
  __syncwarp();

  // ---- the per-step scalars (lane l: steps 2l, 2l + 1).
  double gs = 0.0, dd = 0.0;
  for (int e = lane; e < kD * kD; e += kWarpSize) {
    const int p = e / kD, n = e - p * kD;
    gs += static_cast<double>(sG[p * kLd + n]) * sS[p * kLd + n];
  }
  for (int e = lane; e < kL * kD; e += kWarpSize) {
    const int t = e / kD, p = e - t * kD;
    dd += static_cast<double>(sDY[t * kLd + p]) * sX[t * kLd + p];
  }
  const int last = len - 1;
  double dcs[2], expl[2], rw = 0.0;
  for (int s = 0; s < 2; ++s) {
    const int t = 2 * lane + s;
    dcs[s] = expl[s] = 0.0;
    if (t < len) {
      const double w = static_cast<double>(sR[t]) * sDt[t];
      dcs[s] = rowQ[t] - static_cast<double>(sDt[t]) * colQ[t] +
               static_cast<double>(sE[t]) * Os[t] - Rs[t] * w;
      expl[s] = colQ[t] + Rs[t] * sR[t];
      rw += Rs[t] * w;
    }
  }
  for (int o = kWarpSize / 2; o > 0; o >>= 1) {
    gs += __shfl_xor_sync(kFullMask, gs, o);
    dd += __shfl_xor_sync(kFullMask, dd, o);
    rw += __shfl_xor_sync(kFullMask, rw, o);
  }
  for (int s = 0; s < 2; ++s) {
    if (2 * lane + s == last) dcs[s] += rw + static_cast<double>(dec_c) * gs;
  }
  // Suffix sums of dcs over the chunk's steps (lanes in reverse order).
  const double pair = dcs[0] + dcs[1];
  double incl = pair;  // Σ over lanes ≥ this one's
  for (int o = 1; o < kWarpSize; o <<= 1) {
    const double dn = __shfl_down_sync(kFullMask, incl, o);
    if (lane + o < kWarpSize) incl += dn;
  }
  const double da1 = incl - dcs[0];  // ∂L/∂a at step 2l + 1
  const double da0 = incl;           // at step 2l
  const float Ah = A[h];
  double dA = 0.0;
  for (int s = 0; s < 2; ++s) {
    const int t = 2 * lane + s;
    const double da = s == 0 ? da0 : da1;
    if (t < len) {
      ddt[(b * T + t0 + t) * H + h] = static_cast<float>(expl[s] + Ah * da);
      dA += static_cast<double>(sDt[t]) * da;
    }
  }
  for (int o = kWarpSize / 2; o > 0; o >>= 1) dA += __shfl_xor_sync(kFullMask, dA, o);
  if (lane == 0) {
    dAp[(h * Bsz + b) * nc + c] = dA;
    dDp[(h * Bsz + b) * nc + c] = dd;
  }
}

// Thread per head: dA[h] += Σ_{b, c} dAp[h, b, c], dD likewise, in order.
__global__ void MmaScalarsKernel(const double* __restrict__ dAp, const double* __restrict__ dDp,
                                 float* __restrict__ dA, float* __restrict__ dD, int64_t H,
                                 int64_t n) {
  const int64_t h = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (h >= H) return;
  double a = 0.0, d = 0.0;
  for (int64_t k = 0; k < n; ++k) {
    a += dAp[h * n + k];
    d += dDp[h * n + k];
  }
  dA[h] += static_cast<float>(a);
  dD[h] += static_cast<float>(d);
}

}  // namespace

namespace mma_internal {

int HeadsPerBlock(int64_t H, int64_t G, int64_t P, int64_t N, int L);

template <int kD, int kL>
void Backward(const float* dy, const float* x, const float* dt, const float* A, const float* Bm,
              const float* Cm, const float* D, const float* Sin, const float* Gc, const float* dec,
              float* dx, float* ddt, float* dA, float* dBm, float* dCm, float* dD, double* dAp,
              double* dDp, float* dBp, float* dCp, int64_t B, int64_t T, int64_t H, int64_t P,
              int64_t G, int64_t N, bool split, cudaStream_t stream) {
  const int hb = HeadsPerBlock(H, G, P, N, kL);
  const int64_t nc = CeilDiv(T, kL), Hp = H / hb;
  const bool direct = Hp == G;  // the block's heads are the group's
  float* outB = direct ? dBm : dBp;
  float* outC = direct ? dCm : dCp;
  Launch(split ? MmaBackwardKernel<kD, kL, true> : MmaBackwardKernel<kD, kL, false>, B * Hp * nc,
         32 * hb, BackwardBytes<kD, kL>(hb), stream, dy, x, dt, A, Bm, Cm, D, Sin, Gc, dec, dx, ddt,
         outB, outC, dAp, dDp, B, T, H, static_cast<int>(P), G, static_cast<int>(N), nc, hb);
  if (!direct) {
    const int64_t n = B * T * G * N;
    Launch(SumGroupHeadsKernel, GridFor(n, 256), 256, 0, stream, static_cast<const float*>(dBp),
           dBm, B * T, Hp, G, N);
    Launch(SumGroupHeadsKernel, GridFor(n, 256), 256, 0, stream, static_cast<const float*>(dCp),
           dCm, B * T, Hp, G, N);
  }
  Launch(MmaScalarsKernel, CeilDiv(H, 128), 128, 0, stream, static_cast<const double*>(dAp),
         static_cast<const double*>(dDp), dA, dD, H, B * nc);
}

#define GTP_SSD_MMA_INSTANTIATE(kD, kL)                                                      \
  template void Backward<kD, kL>(const float*, const float*, const float*, const float*,     \
                                 const float*, const float*, const float*, const float*,     \
                                 const float*, const float*, float*, float*, float*, float*, \
                                 float*, float*, double*, double*, float*, float*, int64_t,  \
                                 int64_t, int64_t, int64_t, int64_t, int64_t, bool, cudaStream_t);
GTP_SSD_MMA_FOR_EACH_SHAPE(GTP_SSD_MMA_INSTANTIATE)
#undef GTP_SSD_MMA_INSTANTIATE

}  // namespace mma_internal
}  // namespace gtp::kernels::ssm::cuda
