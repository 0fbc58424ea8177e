// core/kernels/ssm/ssd_mma.cu — the SSD scan by chunks with a warp per
// (b, h, chunk) on the tensor cores (ssd_scan_cuda.h SsdMma*;
// SsdCudaKernel::kChunkedMma; math in ssd_scan.h). Where ssd_chunked.cu
// gives a block of 8 warps to a chunk and meets at a barrier between every
// product, here one warp holds a chunk's products in registers from one
// mma.sync to the next: the decay mask is applied to the C·Bᵀ accumulator
// and the masked matrix goes into the next product as its A operand without
// leaving the registers (the accumulator's layout is the A operand's).
// Operands are split into two bf16 terms (ssd_mma_common.cuh MmaSplit: about
// f32 accuracy); the cumulative decays and the per-step scalar gradients
// in double; no atomics, every sum in a fixed order: bit-identical run to run.
//
// Per (b, h) and chunk c of len ≤ L steps from t0 (L = 64 where the
// caller's chunk ≥ 64 and the padded width is 32, else 32: MmaChunkLength), with cs_i = Σ_{k ≤ i}
// dt_k·A (inside the chunk), E_ij = exp(cs_i − cs_j) for j ≤ i, e_i = exp(cs_i), r_j = exp(cs_last
// − cs_j), w_j = r_j·dt_j and dec_c = exp(cs_last):
//   S_c       = Σ_j w_j · x_j ⊗ B_j                        (MmaStatesKernel)
//   S_in[c+1] = dec_c·S_in[c] + S_c,  S_in[0] = 0          (ssd_pass.cuh)
//   y_i = Σ_{j ≤ i} (C_i·B_j)·E_ij·dt_j·x_j + e_i·S_in[c]·C_i + D·x_i   (MmaOutputKernel)
// The backward (ssd_mma_backward.cu) has the same states plus
// local_c = Σ_i e_i·dy_i ⊗ C_i, and G_c = ∂L/∂S_in[c+1] from the reverse
// pass G_{c−1} = local_c + dec_c·G_c, G_{nc−1} = 0; its per-chunk formulas
// are at the top of that file.
//
// Blocks: hb ∈ {4, 2, 1} warps (the largest dividing H/G), the heads
// hblk·hb … hblk·hb + hb − 1 of one group at one (b, chunk), which share
// B and C (staged once a block, with cp.async) and so C·Bᵀ: its lower tiles
// are formed once a block, shared out over the warps (FormBlockCB), and each
// warp masks them with its own head's decays.
#include <cuda_runtime.h>

#include "core/kernels/cuda/common.cuh"
#include "core/kernels/ssm/ssd_common.cuh"
#include "core/kernels/ssm/ssd_mma_common.cuh"
#include "core/kernels/ssm/ssd_pass.cuh"
#include "core/kernels/ssm/ssd_scan_cuda.h"

namespace gtp::kernels::ssm::cuda {
namespace {

// Shared memory of the states kernel (kBoth: also dy and C).
template <int kD, int kL>
int64_t StatesBytes(int hb, bool both) {
  using S = MmaShape<kD, kL>;
  const int64_t mats = (both ? 2 : 1) * int64_t{S::kL} * S::kLd;
  return int64_t{8} * hb * S::kL + 4 * (mats + hb * (mats + 3 * S::kL));
}

// Grid B·(H/hb)·nc, hb warps: S[bh, c] = Σ_j w_j·x_j ⊗ B_j [P][N], dec[bh, c]
// = exp(cs_last), and with kBoth L[bh, c] = Σ_i e_i·dy_i ⊗ C_i.
template <int kD, int kLen, bool kBoth, bool kSplit>
__global__ void MmaStatesKernel(const float* __restrict__ x, const float* __restrict__ dy,
                                const float* __restrict__ Bm, const float* __restrict__ Cm,
                                const float* __restrict__ dt, const float* __restrict__ A,
                                float* __restrict__ S, float* __restrict__ Lc,
                                float* __restrict__ dec, int64_t T, int64_t H, int P, int64_t G,
                                int N, int64_t nc, int hb) {
  using Sh = MmaShape<kD, kLen>;
  constexpr int kL = Sh::kL, kLd = Sh::kLd, kMat = kL * kLd;
  GTP_DYNAMIC_SHARED(double, smem_d);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const MmaChunk k = ThisMmaChunk<kL>(T, H, G, nc, hb);
  const int64_t b = k.b, h = k.h, g = k.g, c = k.c, t0 = k.t0;
  const int len = k.len;
  double* cs = smem_d + warp * kL;
  float* sB = reinterpret_cast<float*>(smem_d + hb * kL);
  float* sC = sB + kMat;  // kBoth only
  float* own = sB + (kBoth ? 2 : 1) * kMat + warp * ((kBoth ? 2 : 1) * kMat + 3 * kL);
  float* sX = own;
  float* sDY = own + kMat;  // kBoth only
  float* sDt = own + (kBoth ? 2 : 1) * kMat;
  float* sE = sDt + kL;
  float* sR = sE + kL;
  StageRows<kL, kD, kLd>(Bm, sB, b, T, G, g, N, t0, len, threadIdx.x, blockDim.x);
  if (kBoth) StageRows<kL, kD, kLd>(Cm, sC, b, T, G, g, N, t0, len, threadIdx.x, blockDim.x);
  StageRows<kL, kD, kLd>(x, sX, b, T, H, h, P, t0, len, lane, kWarpSize);
  if (kBoth) StageRows<kL, kD, kLd>(dy, sDY, b, T, H, h, P, t0, len, lane, kWarpSize);
  CpAsyncCommit();
  StageDt<kL>(dt, sDt, k, T, H);
  __syncwarp();
  const float d = ChunkDecays<kL>(sDt, A[h], len, cs, sE, sR);
  CpAsyncWait<0>();
  __syncthreads();
  const int64_t out = ((b * H + h) * nc + c) * P * N;
  const int gq = LaneG(), tq = LaneT();
  for (int which = 0; which < (kBoth ? 2 : 1); ++which) {
    const float* U = which == 0 ? sX : sDY;  // rows → the state's p
    const float* V = which == 0 ? sB : sC;   // rows → the state's n
    const float* wt = which == 0 ? sR : sE;  // w_j = r_j·dt_j, or e_i
    float* dst = (which == 0 ? S : Lc) + out;
    for (int pt = 0; pt < kD / 16; ++pt) {
      Acc acc[kD / 8];
      for (int nt = 0; nt < kD / 8; ++nt) Zero(acc[nt]);
      for (int kt = 0; kt < kL / 16; ++kt) {
        const int j0 = kt * 16;
        const FragA a = MakeA([&](int r, int k) {
          const float s = which == 0 ? wt[j0 + k] * sDt[j0 + k] : wt[j0 + k];
          return s * U[(j0 + k) * kLd + pt * 16 + r];
        });
        for (int nt = 0; nt < kD / 8; ++nt) {
          const FragB bf = MakeB([&](int k, int n) { return V[(j0 + k) * kLd + nt * 8 + n]; });
          MmaProd<kSplit>(acc[nt], a, bf);
        }
      }
      for (int nt = 0; nt < kD / 8; ++nt) {
        for (int q = 0; q < 4; ++q) {
          const int p = pt * 16 + gq + (q >> 1) * 8, n = nt * 8 + 2 * tq + (q & 1);
          if (p < P && n < N) dst[p * N + n] = acc[nt][q];
        }
      }
    }
  }
  if (lane == 0) dec[(b * H + h) * nc + c] = d;
}

// Shared memory of the output kernel: doubles cs [hb][kL]; floats B, C
// [kL][kLd], C·Bᵀ [kL][CbLd], per warp X [kL][kLd], S_in [kD][kLd], dt, e,
// r [kL].
template <int kD, int kL>
int64_t OutputBytes(int hb) {
  using S = MmaShape<kD, kL>;
  return int64_t{8} * hb * S::kL +
         4 * (2 * int64_t{S::kL} * S::kLd + int64_t{S::kL} * CbLd<S::kL>() +
              hb * (int64_t{S::kL} * S::kLd + kD * S::kLd + 3 * S::kL));
}

// Grid B·(H/hb)·nc, hb warps: y (=) from the entry states Sin [bh, c, P, N].
template <int kD, int kLen, bool kSplit>
__global__ void MmaOutputKernel(const float* __restrict__ x, const float* __restrict__ dt,
                                const float* __restrict__ A, const float* __restrict__ Bm,
                                const float* __restrict__ Cm, const float* __restrict__ D,
                                const float* __restrict__ Sin, float* __restrict__ y, int64_t T,
                                int64_t H, int P, int64_t G, int N, int64_t nc, int hb) {
  using Sh = MmaShape<kD, kLen>;
  constexpr int kL = Sh::kL, kLd = Sh::kLd, kMat = kL * kLd;
  GTP_DYNAMIC_SHARED(double, smem_d);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const MmaChunk k = ThisMmaChunk<kL>(T, H, G, nc, hb);
  const int64_t b = k.b, h = k.h, g = k.g, c = k.c, t0 = k.t0;
  const int len = k.len;
  double* cs = smem_d + warp * kL;
  float* sB = reinterpret_cast<float*>(smem_d + hb * kL);
  float* sC = sB + kMat;
  float* sCB = sC + kMat;
  float* sX = sCB + kL * CbLd<kL>() + warp * (kMat + kD * kLd + 3 * kL);
  float* sS = sX + kMat;
  float* sDt = sS + kD * kLd;
  float* sE = sDt + kL;
  float* sR = sE + kL;
  StageRows<kL, kD, kLd>(Bm, sB, b, T, G, g, N, t0, len, threadIdx.x, blockDim.x);
  StageRows<kL, kD, kLd>(Cm, sC, b, T, G, g, N, t0, len, threadIdx.x, blockDim.x);
  StageRows<kL, kD, kLd>(x, sX, b, T, H, h, P, t0, len, lane, kWarpSize);
  CpAsyncCommit();
  StageDt<kL>(dt, sDt, k, T, H);
  StageState<kD, kLd>(Sin + ((b * H + h) * nc + c) * P * N, sS, P, N, lane, kWarpSize);
  __syncwarp();
  ChunkDecays<kL>(sDt, A[h], len, cs, sE, sR);
  CpAsyncWait<0>();
  __syncthreads();
  FormBlockCB<kD, kL, kLd, kSplit>(sC, sB, sCB, len, warp, hb);  // the heads' common C·Bᵀ
  __syncthreads();
  const float Dh = D[h];
  const int gq = LaneG(), tq = LaneT();
  for (int it = 0; it < kL / 16; ++it) {
    const int i0 = it * 16;
    if (i0 >= len) break;
    Acc acc[kD / 8];
    for (int pt = 0; pt < kD / 8; ++pt) Zero(acc[pt]);
    for (int kt = 0; kt <= it; ++kt) {
      const int j0 = kt * 16;
      Acc cb[2];
      LoadCB<kL>(sCB, i0, j0, cb);
      // M_ij = C_i·B_j · E_ij · dt_j (0 above the diagonal).
      const TileDecays E = MakeTileDecays<true>(cs, i0, j0);
      for (int half = 0; half < 2; ++half) {
        for (int q = 0; q < 4; ++q) {
          const int j = j0 + half * 8 + 2 * tq + (q & 1);
          cb[half][q] *= E.e[half][q] * sDt[j];
        }
      }
      const FragA m = AccToA(cb[0], cb[1]);
      for (int pt = 0; pt < kD / 8; ++pt) {
        const FragB bf = MakeB([&](int k, int n) { return sX[(j0 + k) * kLd + pt * 8 + n]; });
        MmaProd<kSplit>(acc[pt], m, bf);
      }
    }
    // y_i += e_i·S_in·C_i: (e∘C) [16 × N] · S_inᵀ [N × P].
    for (int nk = 0; nk < kD / 16; ++nk) {
      const FragA a =
          MakeA([&](int r, int k) { return sE[i0 + r] * sC[(i0 + r) * kLd + nk * 16 + k]; });
      for (int pt = 0; pt < kD / 8; ++pt) {
        const FragB bf = MakeB([&](int k, int n) { return sS[(pt * 8 + n) * kLd + nk * 16 + k]; });
        MmaProd<kSplit>(acc[pt], a, bf);
      }
    }
    for (int pt = 0; pt < kD / 8; ++pt) {
      for (int q = 0; q < 4; ++q) {
        const int i = i0 + gq + (q >> 1) * 8, p = pt * 8 + 2 * tq + (q & 1);
        if (i < len && p < P) {
          y[((b * T + t0 + i) * H + h) * P + p] = acc[pt][q] + Dh * sX[i * kLd + p];
        }
      }
    }
  }
}

}  // namespace

namespace mma_internal {

// The most heads of a group a block takes: 4, 2 or 1, dividing H/G, whose
// backward block fits shared memory (at width 64 four do not). The forward
// takes the same, so that both cut the heads alike.
int HeadsPerBlock(int64_t H, int64_t G, int64_t P, int64_t N, int L) {
  const int64_t hpg = H / G;
  const int w = MmaWidth(P, N);
  for (int hb : {4, 2}) {
    const int64_t bytes = w == 64 ? BackwardBytes<64, 32>(hb)
                          : w == 32
                              ? (L == 64 ? BackwardBytes<32, 64>(hb) : BackwardBytes<32, 32>(hb))
                              : BackwardBytes<16, 32>(hb);
    if (hpg % hb == 0 && bytes <= kMaxSmemBytes) return hb;
  }
  return 1;
}

template <int kD, int kL>
void States(const float* x, const float* dy, const float* Bm, const float* Cm, const float* dt,
            const float* A, float* S, float* Lc, float* dec, int64_t B, int64_t T, int64_t H,
            int64_t P, int64_t G, int64_t N, bool split, cudaStream_t stream) {
  const int hb = HeadsPerBlock(H, G, P, N, kL);
  const int64_t nc = CeilDiv(T, kL);
  const int64_t blocks = B * (H / hb) * nc;
  const bool both = dy != nullptr;
  const int64_t bytes = StatesBytes<kD, kL>(hb, both);
  auto launch = [&](auto kernel) {
    Launch(kernel, blocks, 32 * hb, bytes, stream, x, dy, Bm, Cm, dt, A, S, Lc, dec, T, H,
           static_cast<int>(P), G, static_cast<int>(N), nc, hb);
  };
  if (both) {
    split ? launch(MmaStatesKernel<kD, kL, true, true>)
          : launch(MmaStatesKernel<kD, kL, true, false>);
  } else {
    split ? launch(MmaStatesKernel<kD, kL, false, true>)
          : launch(MmaStatesKernel<kD, kL, false, false>);
  }
  // S (and L) → the entry states S_in[c] (and G_c): ssd_pass.cuh's passes.
  const int64_t n = B * H * P * N;
  if (both) {
    Launch(ChunkPassBothKernel, GridFor(n, 256), 256, 0, stream, S, Lc,
           static_cast<const float*>(dec), B * H, P * N, nc);
  } else {
    Launch(ChunkPassKernel<false>, GridFor(n, 256), 256, 0, stream, S,
           static_cast<const float*>(dec), B * H, P * N, nc);
  }
}

template <int kD, int kL>
void Output(const float* x, const float* dt, const float* A, const float* Bm, const float* Cm,
            const float* D, const float* Sin, float* y, int64_t B, int64_t T, int64_t H, int64_t P,
            int64_t G, int64_t N, bool split, cudaStream_t stream) {
  const int hb = HeadsPerBlock(H, G, P, N, kL);
  const int64_t nc = CeilDiv(T, kL);
  Launch(split ? MmaOutputKernel<kD, kL, true> : MmaOutputKernel<kD, kL, false>, B * (H / hb) * nc,
         32 * hb, OutputBytes<kD, kL>(hb), stream, x, dt, A, Bm, Cm, D,
         static_cast<const float*>(Sin), y, T, H, static_cast<int>(P), G, static_cast<int>(N), nc,
         hb);
}

#define GTP_SSD_MMA_INSTANTIATE(kD, kL)                                                            \
  template void States<kD, kL>(const float*, const float*, const float*, const float*,             \
                               const float*, const float*, float*, float*, float*, int64_t,        \
                               int64_t, int64_t, int64_t, int64_t, int64_t, bool, cudaStream_t);   \
  template void Output<kD, kL>(const float*, const float*, const float*, const float*,             \
                               const float*, const float*, const float*, float*, int64_t, int64_t, \
                               int64_t, int64_t, int64_t, int64_t, bool, cudaStream_t);
GTP_SSD_MMA_FOR_EACH_SHAPE(GTP_SSD_MMA_INSTANTIATE)
#undef GTP_SSD_MMA_INSTANTIATE

template <int kD, int kL>
void Backward(const float* dy, const float* x, const float* dt, const float* A, const float* Bm,
              const float* Cm, const float* D, const float* Sin, const float* Gc, const float* dec,
              float* dx, float* ddt, float* dA, float* dBm, float* dCm, float* dD, double* dAp,
              double* dDp, float* dBp, float* dCp, int64_t B, int64_t T, int64_t H, int64_t P,
              int64_t G, int64_t N, bool split, cudaStream_t stream);  // ssd_mma_backward.cu

}  // namespace mma_internal

bool SsdMmaFits(int64_t P, int64_t N) { return P >= 1 && N >= 1 && MmaWidth(P, N) != 0; }

int64_t SsdMmaChunkLength(int64_t P, int64_t N, int64_t chunk) {
  return SsdMmaFits(P, N) ? MmaChunkLength(MmaWidth(P, N), chunk) : 0;
}

// Scratch (floats): the backward's dA, dD partials first (doubles, [H, B,
// nc] each), then the chunk states S [B, H, nc, P, N], the backward's L,
// dec [B, H, nc], and the backward's dB, dC partials [B, T, H/hb, N] where
// a block's heads are not all of a group's.
int64_t SsdMmaScratchFloats(int64_t B, int64_t T, int64_t H, int64_t P, int64_t G, int64_t N,
                            int64_t chunk, bool backward) {
  const int L = static_cast<int>(SsdMmaChunkLength(P, N, chunk));
  const int64_t nc = CeilDiv(T, L), states = B * H * nc * P * N;
  if (!backward) return states + B * H * nc;
  const int64_t Hp = H / mma_internal::HeadsPerBlock(H, G, P, N, L);
  return 4 * B * H * nc + 2 * states + B * H * nc + (Hp == G ? 0 : 2 * B * T * Hp * N);
}

// Runs body<kD, kL>() for P, N's width and the chunk length (MmaChunkLength).
#define GTP_SSD_MMA_DISPATCH(P, N, chunk, CALL) \
  do {                                          \
    const int w_ = MmaWidth(P, N);              \
    const int l_ = MmaChunkLength(w_, chunk);   \
    if (w_ == 16) {                             \
      CALL(16, 32);                             \
    } else if (w_ == 32 && l_ == 64) {          \
      CALL(32, 64);                             \
    } else if (w_ == 32) {                      \
      CALL(32, 32);                             \
    } else {                                    \
      CALL(64, 32);                             \
    }                                           \
  } while (0)

void SsdMmaForward(const float* x, const float* dt, const float* A, const float* Bm,
                   const float* Cm, const float* D, float* y, float* scratch, int64_t B, int64_t T,
                   int64_t H, int64_t P, int64_t G, int64_t N, int64_t chunk, bool split,
                   cudaStream_t stream) {
  GTP_CU_REQUIRE(SsdMmaFits(P, N), "SsdMmaForward: P, N in 1..64, got P = %lld, N = %lld",
                 static_cast<long long>(P), static_cast<long long>(N));
  if (B * T * H == 0) return;
  const int64_t nc = CeilDiv(T, SsdMmaChunkLength(P, N, chunk));
  float* S = scratch;
  float* dec = S + B * H * nc * P * N;
#define GTP_SSD_MMA_FORWARD(kD, kL)                                                               \
  mma_internal::States<kD, kL>(x, nullptr, Bm, nullptr, dt, A, S, nullptr, dec, B, T, H, P, G, N, \
                               split, stream);                                                    \
  mma_internal::Output<kD, kL>(x, dt, A, Bm, Cm, D, S, y, B, T, H, P, G, N, split, stream)
  GTP_SSD_MMA_DISPATCH(P, N, chunk, GTP_SSD_MMA_FORWARD);
#undef GTP_SSD_MMA_FORWARD
}

void SsdMmaBackward(const float* dy, const float* x, const float* dt, const float* A,
                    const float* Bm, const float* Cm, const float* D, float* dx, float* ddt,
                    float* dA, float* dBm, float* dCm, float* dD, float* scratch, int64_t B,
                    int64_t T, int64_t H, int64_t P, int64_t G, int64_t N, int64_t chunk,
                    bool split, cudaStream_t stream) {
  GTP_CU_REQUIRE(SsdMmaFits(P, N), "SsdMmaBackward: P, N in 1..64, got P = %lld, N = %lld",
                 static_cast<long long>(P), static_cast<long long>(N));
  if (B * T * H == 0) {
    ZeroGroupGrads(dBm, dCm, B * T * G * N, stream);
    return;
  }
  const int L = static_cast<int>(SsdMmaChunkLength(P, N, chunk));
  const int64_t nc = CeilDiv(T, L), states = B * H * nc * P * N;
  const int64_t Hp = H / mma_internal::HeadsPerBlock(H, G, P, N, L);
  double* dAp = reinterpret_cast<double*>(scratch);
  double* dDp = dAp + B * H * nc;
  float* S = scratch + 4 * B * H * nc;
  float* Lc = S + states;
  float* dec = Lc + states;
  float* dBp = dec + B * H * nc;
  float* dCp = Hp == G ? nullptr : dBp + B * T * Hp * N;
  if (Hp == G) dBp = nullptr;
#define GTP_SSD_MMA_BACKWARD(kD, kL)                                                               \
  mma_internal::States<kD, kL>(x, dy, Bm, Cm, dt, A, S, Lc, dec, B, T, H, P, G, N, split, stream); \
  mma_internal::Backward<kD, kL>(dy, x, dt, A, Bm, Cm, D, S, Lc, dec, dx, ddt, dA, dBm, dCm, dD,   \
                                 dAp, dDp, dBp, dCp, B, T, H, P, G, N, split, stream)
  GTP_SSD_MMA_DISPATCH(P, N, chunk, GTP_SSD_MMA_BACKWARD);
#undef GTP_SSD_MMA_BACKWARD
}

#undef GTP_SSD_MMA_DISPATCH

}  // namespace gtp::kernels::ssm::cuda
