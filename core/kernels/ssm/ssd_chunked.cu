// core/kernels/ssm/ssd_chunked.cu — the SSD scan by chunks on CUDA
// (ssd_scan_cuda.h SsdChunked*; math in ssd_scan.h). The recurrence kernels
// (ssd_scan.cu) are serial in T per state element; here the sequence is cut
// into chunks of L = 16, 32 or 64 steps and everything but a short pass over
// the chunks runs parallel over (b, h, chunk). f32 data; the chunk products
// on the tensor cores as 3×TF32 with f32 accumulation (ssd_chunked_common.cuh
// Mma3), the chunk states on CUDA cores; the cumulative decays and the
// per-step scalar gradients in double; no atomics, every sum in a fixed
// order: bit-identical run to run.
//
// Per (b, h) and chunk c of len ≤ L steps from t0, with cs_i = Σ_{k ≤ i} dt_k·A
// (inside the chunk), E_ij = exp(cs_i − cs_j) for j ≤ i, e_i = exp(cs_i),
// w_j = exp(cs_last − cs_j)·dt_j and dec_c = exp(cs_last):
//   S_c       = Σ_j w_j · x_j ⊗ B_j                        (ChunkOuterKernel)
//   S_in[c+1] = dec_c·S_in[c] + S_c,  S_in[0] = 0          (ChunkPassKernel, forward)
//   y_i = Σ_{j ≤ i} (C_i·B_j)·E_ij·dt_j·x_j + e_i·S_in[c]·C_i + D·x_i   (ChunkOutputKernel)
// Backward, with dy given and G_c = ∂L/∂S_in[c+1]:
//   local_c = Σ_i e_i · dy_i ⊗ C_i                          (ChunkStatesKernel)
//   ∂L/∂S_in[c] = local_c + dec_c·G_c,  G_{nc−1} = 0          (ChunkPassBothKernel, reverse)
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
// Nothing is saved by the forward: the backward recomputes S_in (with the
// dy ⊗ C sums, ChunkStatesKernel and ChunkPassBothKernel). Shared memory bounds the shapes: ChunkLength
// takes the largest of 64, 32, 16 not above max(chunk, 16) whose blocks fit;
// a shape none fits (P·N beyond ~14k) is refused (SsdChunkedFits), and
// ssd_scan.cc's kAuto runs the recurrence kernels for it. Which kernel is
// faster for which shape: ssd_scan.h (SsdAutoKernel).
//
// This file: the chunk states (EntryStates; BackwardStates: the backward's
// two outer sums in one kernel, ChunkStatesKernel, and its two passes in
// another) and the forward's chunk kernels, a block per (b, h, chunk) or, for
// kHeadGroups, per (b, chunk, heads of a group). The backward's chunk kernels are in
// ssd_chunked_backward.cu; what both files share in ssd_chunked_common.cuh.
#include <cuda_runtime.h>
#include <mma.h>

#include "core/kernels/cuda/common.cuh"
#include "core/kernels/ssm/ssd_chunked_common.cuh"
#include "core/kernels/ssm/ssd_pass.cuh"
#include "core/kernels/ssm/ssd_scan_cuda.h"

namespace gtp::kernels::ssm::cuda {
namespace {

// ------------------------------------------------------------ kernels

// o[p·N + n] = Σ_{j < len} sW[j]·sU[j][p]·sV[j][n], j in order (a thread
// per (p, n)).
__device__ __forceinline__ void OuterAccumulate(const float* sW, const float* sU, const float* sV,
                                                int len, int P, int N, float* __restrict__ o) {
  for (int e = threadIdx.x; e < P * N; e += blockDim.x) {
    const int p = e / N, n = e - p * N;
    float acc = 0.0f;
    for (int j = 0; j < len; ++j) acc = fmaf(sW[j] * sU[j * P + p], sV[j * N + n], acc);
    o[e] = acc;
  }
}

// Grid B·H·nc (the forward's chunk sums): out[bh, c] = Σ_j w_j·x_j ⊗ B_j,
// dec[bh, c] = exp(cs_last). (u = x's rows [T, H, P], v = B's group rows
// [T, G, N].)
__global__ void __launch_bounds__(kThreads)
    ChunkOuterKernel(const float* __restrict__ u, const float* __restrict__ v,
                     const float* __restrict__ dt, const float* __restrict__ A,
                     float* __restrict__ out, float* __restrict__ dec, int64_t T, int64_t H,
                     int64_t P64, int64_t G, int64_t N64, int L, int64_t nc) {
  const int P = static_cast<int>(P64), N = static_cast<int>(N64);  // < 2^31: they fit shared memory
  GTP_DYNAMIC_SHARED_ALIGNED(double, smem_d, 128);  // one symbol a file, one alignment
  double* sCs = smem_d;
  float* sDt = reinterpret_cast<float*>(sCs + L);
  float* sW = sDt + L;
  float* sU = sW + L;
  float* sV = sU + L * P;
  const ChunkIdx k = ThisChunk(H, nc, T, L);
  const int64_t g = k.h / (H / G);
  // Every load of the chunk in flight at once (cp.async), then one wait.
  CopyDtAsync(dt, k, L, T, H, sDt);
  CopyRowsAsync(u, sU, P, k, k.len, P, T, H, k.h, P);
  CopyRowsAsync(v, sV, N, k, k.len, N, T, G, g, N);
  CpAsyncCommit();
  CpAsyncWait<0>();
  __syncthreads();
  ScanDecays(sDt, A[k.h], k.len, sCs);
  const double last = sCs[k.len - 1];
  for (int i = threadIdx.x; i < k.len; i += blockDim.x) {
    sW[i] = static_cast<float>(exp(last - sCs[i])) * sDt[i];
  }
  __syncthreads();
  OuterAccumulate(sW, sU, sV, k.len, P, N, out + (k.bh * nc + k.c) * P * N);
  if (threadIdx.x == 0) dec[k.bh * nc + k.c] = static_cast<float>(exp(last));
}

// Grid B·H·nc: the backward's two chunk sums in one pass over the chunk's
// decays, bit for bit what ChunkOuterKernel and the same loop over dy, C and
// e_i = exp(cs_i) give:
// S[bh, c] = Σ_j w_j·x_j ⊗ B_j, dec[bh, c] = exp(cs_last), Gs[bh, c] =
// Σ_i e_i·dy_i ⊗ C_i. Shared memory (StatesSmemBytes): doubles cs [L];
// floats dt, w, e [L], X, dY [L][P], B, C [L][N] (rows < len copied).
__global__ void __launch_bounds__(kThreads)
    ChunkStatesKernel(const float* __restrict__ x, const float* __restrict__ dy,
                      const float* __restrict__ Bm, const float* __restrict__ Cm,
                      const float* __restrict__ dt, const float* __restrict__ A,
                      float* __restrict__ S, float* __restrict__ Gs, float* __restrict__ dec,
                      int64_t T, int64_t H, int64_t P64, int64_t G, int64_t N64, int L,
                      int64_t nc) {
  const int P = static_cast<int>(P64), N = static_cast<int>(N64);
  GTP_DYNAMIC_SHARED_ALIGNED(double, smem_d, 128);  // one symbol a file, one alignment
  double* sCs = smem_d;
  float* sDt = reinterpret_cast<float*>(sCs + L);
  float* sW = sDt + L;
  float* sE = sW + L;
  float* sX = sE + L;
  float* sDy = sX + L * P;
  float* sB = sDy + L * P;
  float* sC = sB + L * N;
  const ChunkIdx k = ThisChunk(H, nc, T, L);
  const int64_t g = k.h / (H / G);
  // Every load of the chunk in flight at once (cp.async), then one wait.
  CopyDtAsync(dt, k, L, T, H, sDt);
  CopyRowsAsync(x, sX, P, k, k.len, P, T, H, k.h, P);
  CopyRowsAsync(dy, sDy, P, k, k.len, P, T, H, k.h, P);
  CopyRowsAsync(Bm, sB, N, k, k.len, N, T, G, g, N);
  CopyRowsAsync(Cm, sC, N, k, k.len, N, T, G, g, N);
  CpAsyncCommit();
  CpAsyncWait<0>();
  __syncthreads();
  ScanDecays(sDt, A[k.h], k.len, sCs);
  const double last = sCs[k.len - 1];
  for (int i = threadIdx.x; i < k.len; i += blockDim.x) {
    sW[i] = static_cast<float>(exp(last - sCs[i])) * sDt[i];
    sE[i] = static_cast<float>(exp(sCs[i]));
  }
  __syncthreads();
  const int64_t at = (k.bh * nc + k.c) * P64 * N64;
  OuterAccumulate(sW, sX, sB, k.len, P, N, S + at);
  OuterAccumulate(sE, sDy, sC, k.len, P, N, Gs + at);
  if (threadIdx.x == 0) dec[k.bh * nc + k.c] = static_cast<float>(exp(last));
}

// The forward's shared memory for one head: doubles cs [L]; floats dt [L],
// X, Y [L][Ld(P)], B, C, Ce [L][Ld(N)], S [Pad16(P)][Ld(N)], M [L][Ld(L)]
// (OutputSmemBytes; the heads kernel's layout is its own).
struct HeadOutSmem {
  double* cs;
  float *dt, *X, *Y, *B, *C, *Ce, *S, *M;
};

// One head's y for the chunk from its staged rows: everything after the
// staging. On entry a barrier has made cs, dt and the rows (X, B, C, S)
// visible; with kSharedCB, cb holds C·Bᵀ's lower tiles (else they are formed
// here in s.M, and cb = s.M). Ends after its last barrier with the y stores.
template <bool kSharedCB>
__device__ __forceinline__ void HeadOutput(const HeadOutSmem& s, const float* cb, const ChunkIdx& k,
                                           int L, int P, int N, float Dh, float* __restrict__ y,
                                           int64_t T, int64_t H) {
  const int64_t P64 = P;
  const int lp = static_cast<int>(Ld(P)), ln = static_cast<int>(Ld(N)),
            ll = static_cast<int>(Ld(L));
  const int Pp = static_cast<int>(Pad16(P)), Np = static_cast<int>(Pad16(N));
  const double* sCs = s.cs;
  const float* sDt = s.dt;
  float* sX = s.X;
  float* sY = s.Y;
  float* sB = s.B;
  float* sC = s.C;
  float* sCe = s.Ce;
  float* sS = s.S;
  float* sM = s.M;
  for (int e = threadIdx.x; e < L * Np; e += blockDim.x) {
    const int i = e / Np, n = e - i * Np;
    sCe[i * ln + n] = i < k.len ? expf(static_cast<float>(sCs[i])) * sC[i * ln + n] : 0.0f;
  }
  const int warp = threadIdx.x / kWarpSize, Lt = L / 16;
  if (!kSharedCB) {  // C·Bᵀ, lower tiles.
    for (int t = warp; t < Lt * Lt; t += kWarps) {
      const int ti = t / Lt, tj = t - ti * Lt;
      if (tj > ti) continue;
      Acc acc;
      wmma::fill_fragment(acc, 0.0f);
      Mma3<Row, Col>(acc, sC, ln, sB, ln, ti * 16, tj * 16, 0, Np);
      wmma::store_matrix_sync(sM + ti * 16 * ll + tj * 16, acc, ll, wmma::mem_row_major);
    }
  }
  __syncthreads();
  for (int e = threadIdx.x; e < L * L; e += blockDim.x) {
    const int i = e / L, j = e - i * L;
    float m = 0.0f;
    if (i < k.len && j <= i)
      m = cb[i * ll + j] * expf(static_cast<float>(sCs[i] - sCs[j])) * sDt[j];
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
  for (int e = threadIdx.x; e < k.len * P; e += blockDim.x) {
    const int i = e / P, p = e - i * P;
    y[((k.b * T + k.t0 + i) * H + k.h) * P64 + p] = fmaf(Dh, sX[i * lp + p], sY[i * lp + p]);
  }
}

// Grid B·H·nc: y of the chunk (see the top of the file). sin = S_in [BH, nc, P, N].
__global__ void __launch_bounds__(kThreads)
    ChunkOutputKernel(const float* __restrict__ x, const float* __restrict__ dt,
                      const float* __restrict__ A, const float* __restrict__ Bm,
                      const float* __restrict__ Cm, const float* __restrict__ D,
                      const float* __restrict__ sin, float* __restrict__ y, int64_t T, int64_t H,
                      int64_t P64, int64_t G, int64_t N64, int L, int64_t nc) {
  GTP_DYNAMIC_SHARED_ALIGNED(double, smem_d, 128);
  const int P = static_cast<int>(P64), N = static_cast<int>(N64);
  const int lp = static_cast<int>(Ld(P)), ln = static_cast<int>(Ld(N));
  const int Pp = static_cast<int>(Pad16(P));
  HeadOutSmem s;
  s.cs = smem_d;
  s.dt = reinterpret_cast<float*>(s.cs + L);
  s.X = s.dt + L;
  s.Y = s.X + L * lp;
  s.B = s.Y + L * lp;
  s.C = s.B + L * ln;
  s.Ce = s.C + L * ln;
  s.S = s.Ce + L * ln;
  s.M = s.S + Pp * ln;
  const ChunkIdx k = ThisChunk(H, nc, T, L);
  const int64_t g = k.h / (H / G);
  // Every load of the chunk in flight at once (cp.async), then one wait.
  const int Np = static_cast<int>(Pad16(N));
  CopyDtAsync(dt, k, L, T, H, s.dt);
  CopyHeadRowsAsync(x, s.X, lp, k, L, T, H, P);
  CopyRowsAsync(Bm, s.B, ln, k, L, Np, T, G, g, N);
  CopyRowsAsync(Cm, s.C, ln, k, L, Np, T, G, g, N);
  CopyStateAsync(sin + (k.bh * nc + k.c) * P64 * N64, s.S, ln, P, N);
  CpAsyncCommit();
  CpAsyncWait<0>();
  __syncthreads();
  ScanDecays(s.dt, A[k.h], k.len, s.cs);
  HeadOutput<false>(s, s.M, k, L, P, N, D[k.h], y, T, H);
}

// Grid B·G·S·nc (block = ((b·G + g)·S + split)·nc + c): y of the chunk for
// the hs = H/(G·S) heads g·(H/G) + split·hs + i, in order, through
// HeadOutput (so ChunkOutputKernel's bits for any S): B, C and C·Bᵀ staged
// and formed once, the next head's dt, X and S_in[c] copied in (cp.async)
// while one head computes. Shared memory (HeadsOutputSmemBytes): doubles cs
// [L]; floats dt ×2 [L], X ×2, Y [L][Ld(P)], B, C, Ce [L][Ld(N)], S ×2
// [Pad16(P)][Ld(N)], CB, M [L][Ld(L)].
__global__ void __launch_bounds__(kThreads)
    ChunkHeadsOutputKernel(const float* __restrict__ x, const float* __restrict__ dt,
                           const float* __restrict__ A, const float* __restrict__ Bm,
                           const float* __restrict__ Cm, const float* __restrict__ D,
                           const float* __restrict__ sin, float* __restrict__ y, int64_t T,
                           int64_t H, int64_t P64, int64_t G, int64_t N64, int L, int64_t nc,
                           int64_t S) {
  GTP_DYNAMIC_SHARED_ALIGNED(double, smem_d, 128);
  const int P = static_cast<int>(P64), N = static_cast<int>(N64);
  const int lp = static_cast<int>(Ld(P)), ln = static_cast<int>(Ld(N)),
            ll = static_cast<int>(Ld(L));
  const int Pp = static_cast<int>(Pad16(P)), Np = static_cast<int>(Pad16(N));
  HeadOutSmem s;
  s.cs = smem_d;
  float* sDt2 = reinterpret_cast<float*>(s.cs + L);
  float* sX2 = sDt2 + 2 * L;
  s.Y = sX2 + 2 * L * lp;
  s.B = s.Y + L * lp;
  s.C = s.B + L * ln;
  s.Ce = s.C + L * ln;
  float* sS2 = s.Ce + L * ln;
  float* sCB = sS2 + 2 * Pp * ln;
  s.M = sCB + L * ll;

  const HeadsChunk hc = ThisHeadsChunk(H, G, S, nc, T, L);
  ChunkIdx k = hc.k;
  const int64_t g = hc.g;
  const int64_t PN = P64 * N64;
  CopyDtAsync(dt, k, L, T, H, sDt2);
  CopyHeadRowsAsync(x, sX2, lp, k, L, T, H, P);
  CopyStateAsync(sin + (k.bh * nc + k.c) * PN, sS2, ln, P, N);
  CopyRowsAsync(Bm, s.B, ln, k, L, Np, T, G, g, N);
  CopyRowsAsync(Cm, s.C, ln, k, L, Np, T, G, g, N);
  CpAsyncCommit();
  CpAsyncWait<0>();
  __syncthreads();  // B, C and the first head's rows staged
  LowerCB(s.C, s.B, sCB, ln, ll, L, Np);  // once for the block's heads
  for (int64_t i = 0; i < hc.hs; ++i) {
    const int cur = static_cast<int>(i & 1);
    CpAsyncWait<0>();
    __syncthreads();  // head i's rows landed; the previous head is done with the other set
    k.h = hc.k.h + i;  // (stepping k by NextHead cost 8 registers)
    k.bh = k.b * H + k.h;
    if (i + 1 < hc.hs) {
      const ChunkIdx next = NextHead(k);
      const int o = cur ^ 1;
      CopyDtAsync(dt, next, L, T, H, sDt2 + o * L);
      CopyHeadRowsAsync(x, sX2 + o * L * lp, lp, next, L, T, H, P);
      CopyStateAsync(sin + (next.bh * nc + next.c) * PN, sS2 + o * Pp * ln, ln, P, N);
    }
    CpAsyncCommit();
    s.dt = sDt2 + cur * L;
    s.X = sX2 + cur * L * lp;
    s.S = sS2 + cur * Pp * ln;
    ScanDecays(s.dt, A[k.h], k.len, s.cs);
    HeadOutput<true>(s, sCB, k, L, P, N, D[k.h], y, T, H);
  }
}

// About three forward heads blocks per SM of an H100/H200 (132 SMs; at
// P = N = 16 a block takes about 68 KB of shared memory). The splits do not
// change y's bits (no sum crosses heads).
constexpr int64_t kHeadsOutputBlocks = 384;

}  // namespace

namespace chunked_internal {

// S ← S_in [BH, nc, P, N] and dec, from the inputs (the forward's first two kernels).
void EntryStates(const float* x, const float* dt, const float* A, const float* Bm, float* S,
                 float* dec, int64_t B, int64_t T, int64_t H, int64_t P, int64_t G, int64_t N,
                 int L, cudaStream_t stream) {
  const int64_t nc = CeilDiv(T, L);
  const unsigned blocks = static_cast<unsigned>(B * H * nc);
  const int64_t outer = OuterSmemBytes(L, P, N);
  CheckSmem(outer);
  Launch(ChunkOuterKernel, blocks, kThreads, outer, stream, x, Bm, dt, A, S, dec, T, H, P, G, N, L,
         nc);
  GTP_CU_LAUNCH_CHECK();
  if (P * N > 0) {
    Launch(ChunkPassKernel<false>, GridFor(B * H * P * N, kThreads), kThreads, 0, stream, S, dec,
           B * H, P * N, nc);
    GTP_CU_LAUNCH_CHECK();
  }
}

void BackwardStates(const float* x, const float* dy, const float* dt, const float* A,
                    const float* Bm, const float* Cm, float* S, float* Gs, float* dec, int64_t B,
                    int64_t T, int64_t H, int64_t P, int64_t G, int64_t N, int L,
                    cudaStream_t stream) {
  const int64_t nc = CeilDiv(T, L);
  const int64_t bytes = StatesSmemBytes(L, P, N);
  CheckSmem(bytes);
  Launch(ChunkStatesKernel, static_cast<unsigned>(B * H * nc), kThreads, bytes, stream, x, dy, Bm,
         Cm, dt, A, S, Gs, dec, T, H, P, G, N, L, nc);
  GTP_CU_LAUNCH_CHECK();
  if (P * N > 0) {
    Launch(ChunkPassBothKernel, GridFor(B * H * P * N, kThreads), kThreads, 0, stream, S, Gs, dec,
           B * H, P * N, nc);
    GTP_CU_LAUNCH_CHECK();
  }
}

}  // namespace chunked_internal

bool SsdChunkedFits(int64_t P, int64_t N, int64_t chunk, ChunkedBlocks kernel) {
  return ChunkLength(P, N, chunk, kernel) > 0;
}

int SsdChunkedLength(int64_t P, int64_t N, int64_t chunk, ChunkedBlocks kernel) {
  return ChunkLength(P, N, chunk, kernel);
}

int64_t SsdChunkedScratchFloats(int64_t B, int64_t T, int64_t H, int64_t P, int64_t G, int64_t N,
                                int64_t chunk, bool backward, ChunkedBlocks kernel) {
  const int L = ChunkLength(P, N, chunk, backward ? kernel : ChunkedBlocks::kPerHead);
  GTP_CU_REQUIRE(L > 0, "SsdChunked (CUDA): P = %lld, N = %lld do not fit a chunk block",
                 static_cast<long long>(P), static_cast<long long>(N));
  return ScratchLayout(B, T, H, P, G, N, L, backward, nullptr, nullptr);
}

void SsdChunkedForward(const float* x, const float* dt, const float* A, const float* Bm,
                       const float* Cm, const float* D, float* y, float* scratch, int64_t B,
                       int64_t T, int64_t H, int64_t P, int64_t G, int64_t N, int64_t chunk,
                       cudaStream_t stream, ChunkedBlocks kernel) {
  if (B * T * H == 0) return;
  // kPerHead's chunk length either way (the heads block is smaller than the
  // per-head backward block, which that length fits), so y has its bits.
  const int L = CheckedChunkLength("SsdChunkedForward", H, P, G, N, chunk);
  Scratch sc;
  ScratchLayout(B, T, H, P, G, N, L, /*backward=*/false, scratch, &sc);
  chunked_internal::EntryStates(x, dt, A, Bm, sc.S, sc.dec, B, T, H, P, G, N, L, stream);
  const int64_t nc = CeilDiv(T, L);
  if (kernel == ChunkedBlocks::kHeadGroups) {
    const int64_t S = HeadSplits(B, nc, H, G, kHeadsOutputBlocks);
    const int64_t bytes = HeadsOutputSmemBytes(L, P, N);
    CheckSmem(bytes);
    Launch(ChunkHeadsOutputKernel, static_cast<unsigned>(B * G * S * nc), kThreads, bytes, stream,
           x, dt, A, Bm, Cm, D, sc.S, y, T, H, P, G, N, L, nc, S);
    GTP_CU_LAUNCH_CHECK();
    return;
  }
  const int64_t bytes = OutputSmemBytes(L, P, N);
  CheckSmem(bytes);
  Launch(ChunkOutputKernel, static_cast<unsigned>(B * H * nc), kThreads, bytes, stream, x, dt, A,
         Bm, Cm, D, sc.S, y, T, H, P, G, N, L, nc);
  GTP_CU_LAUNCH_CHECK();
}

}  // namespace gtp::kernels::ssm::cuda
