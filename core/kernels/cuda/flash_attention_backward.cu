// core/kernels/cuda/flash_attention_backward.cu — the fused attention's
// backward (FlashAttention-2 scheme; the math, the layout and the work split are
// at the top of flash_attention_common.cuh; the forward is flash_attention.cu).
#include "core/kernels/cuda/flash_attention_common.cuh"

namespace gtp::kernels::cuda {
namespace {

// ---- Backward ----------------------------------------------------------------------------

// D[b, h, t] = Σ_d dout·out over row (b, t, h); one warp per row, fixed order.
__global__ void FlashBwdDotKernel(const uint16_t* __restrict__ dout,
                                  const uint16_t* __restrict__ out, float* __restrict__ Dsum,
                                  int64_t rows, int T, int NH, int HS) {
  const int lane = threadIdx.x % kWarpSize;
  const int64_t warps = int64_t{gridDim.x} * blockDim.x / kWarpSize;
  for (int64_t r = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) / kWarpSize; r < rows;
       r += warps) {
    const uint32_t* a = reinterpret_cast<const uint32_t*>(dout + r * HS);
    const uint32_t* c = reinterpret_cast<const uint32_t*>(out + r * HS);
    float acc = 0.0f;
    for (int i = lane; i < HS / 2; i += kWarpSize) {
      const uint32_t x = a[i], y = c[i];
      acc = fmaf(__uint_as_float(x << 16), __uint_as_float(y << 16), acc);
      acc = fmaf(__uint_as_float(x & 0xffff0000u), __uint_as_float(y & 0xffff0000u), acc);
    }
    acc = WarpSum(acc);
    if (lane == 0) {
      const int64_t h = r % NH, bt = r / NH, tt = bt % T, b = bt / T;
      Dsum[(b * NH + h) * T + tt] = acc;
    }
  }
}

template <int HS, int kBlockN, int kBlockM>
struct DkDvCfg {
  static constexpr int kThreads = kBlockN / 16 * kWarpSize;
  static constexpr int kS = HS + kPad;
  static constexpr size_t kSmem = size_t(2 * kBlockN + 4 * kBlockM) * kS * sizeof(uint16_t) +
                                  4 * kBlockM * sizeof(float);
};

// One block per (b·NKV + g, kBlockN-key tile) = (bx, by); each warp owns 16
// keys and computes the transposed tiles Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ (16 × kBlockM).
template <int HS, int kBlockN, int kBlockM, bool kCausal>
__device__ __forceinline__ void DkDvBody(
    const uint16_t* __restrict__ dout, const uint16_t* __restrict__ q,
    const uint16_t* __restrict__ k, const uint16_t* __restrict__ v, const float* __restrict__ lse,
    const float* __restrict__ Dsum, uint16_t* __restrict__ dk, uint16_t* __restrict__ dv, int T,
    int NH, int NKV, float scale, int bx, int by) {
  using Cfg = DkDvCfg<HS, kBlockN, kBlockM>;
  constexpr int kS = Cfg::kS, kThreads = Cfg::kThreads;
  GTP_DYNAMIC_SHARED(unsigned char, smem);
  uint16_t* sK = reinterpret_cast<uint16_t*>(smem);  // [kBlockN][kS]
  uint16_t* sV = sK + kBlockN * kS;                   // [kBlockN][kS]
  uint16_t* sQ = sV + kBlockN * kS;                   // [2][kBlockM][kS]
  uint16_t* sdO = sQ + 2 * kBlockM * kS;              // [2][kBlockM][kS]
  float* sL = reinterpret_cast<float*>(sdO + 2 * kBlockM * kS);  // [2][kBlockM] lse·log2e
  float* sD = sL + 2 * kBlockM;                                   // [2][kBlockM]

  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  const int g = lane >> 2, t = lane & 3;
  const int b = bx / NKV, hk = bx % NKV, G = NH / NKV;
  const int k0 = by * kBlockN;
  const int64_t ldq = int64_t{NH} * HS, ldk = int64_t{NKV} * HS;
  const int64_t kv_off = (int64_t{b} * T + k0) * ldk + int64_t{hk} * HS;
  const int qt0 = kCausal ? k0 / kBlockM : 0;  // first query tile holding a query ≥ k0
  const int per_head = (T + kBlockM - 1) / kBlockM - qt0;
  const int n_iter = G * per_head;

  LoadTile<HS, kBlockN, kThreads>(sK, k + kv_off, ldk, T - k0);
  LoadTile<HS, kBlockN, kThreads>(sV, v + kv_off, ldk, T - k0);
  // Step it: query head hk·G + it / per_head, query tile qt0 + it % per_head.
  auto load_step = [&](int it, int buf) {
    const int h = hk * G + it / per_head, q0 = (qt0 + it % per_head) * kBlockM;
    const int64_t off = (int64_t{b} * T + q0) * ldq + int64_t{h} * HS;
    LoadTile<HS, kBlockM, kThreads>(sQ + buf * kBlockM * kS, q + off, ldq, T - q0);
    LoadTile<HS, kBlockM, kThreads>(sdO + buf * kBlockM * kS, dout + off, ldq, T - q0);
    const int64_t row_off = (int64_t{b} * NH + h) * T + q0;
    for (int i = threadIdx.x; i < kBlockM; i += kThreads) {
      const bool ok = q0 + i < T;
      sL[buf * kBlockM + i] = ok ? lse[row_off + i] * kLog2e : 0.0f;
      sD[buf * kBlockM + i] = ok ? Dsum[row_off + i] : 0.0f;
    }
  };
  load_step(0, 0);
  CpAsyncCommit();

  float dka[HS / 8][4], dva[HS / 8][4];
#pragma unroll
  for (int d = 0; d < HS / 8; ++d) {
#pragma unroll
    for (int e = 0; e < 4; ++e) dka[d][e] = dva[d][e] = 0.0f;
  }
  const float sl2 = scale * kLog2e;
  const int wkey = k0 + warp * 16;  // this warp's first key
  // HS 64: this warp's K and V A-fragments stay in registers; HS 128 re-reads
  // them from shared memory (registers are needed for the accumulators).
  constexpr bool kKVInRegs = HS <= 64;
  uint32_t kf[kKVInRegs ? HS / 16 : 1][4], vf[kKVInRegs ? HS / 16 : 1][4];

  for (int it = 0; it < n_iter; ++it) {
    const int buf = it & 1;
    if (it + 1 < n_iter) {
      load_step(it + 1, buf ^ 1);
      CpAsyncCommit();
      CpAsyncWait<1>();
    } else {
      CpAsyncWait<0>();
    }
    __syncthreads();
    if constexpr (kKVInRegs) {
      if (it == 0) {
#pragma unroll
        for (int kk = 0; kk < HS / 16; ++kk) {
          Ldsm4(kf[kk], AddrA<kS>(sK, warp * 16, kk * 16, lane));
          Ldsm4(vf[kk], AddrA<kS>(sV, warp * 16, kk * 16, lane));
        }
      }
    }
    const int q0 = (qt0 + it % per_head) * kBlockM;
    const uint16_t* cQ = sQ + buf * kBlockM * kS;
    const uint16_t* cdO = sdO + buf * kBlockM * kS;
    const float* cL = sL + buf * kBlockM;
    const float* cD = sD + buf * kBlockM;

    // Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ: rows = this warp's keys, cols = queries.
    float st[kBlockM / 8][4], dpt[kBlockM / 8][4];
#pragma unroll
    for (int n = 0; n < kBlockM / 8; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) st[n][e] = dpt[n][e] = 0.0f;
    }
#pragma unroll
    for (int kk = 0; kk < HS / 16; ++kk) {
      uint32_t ka[4], va[4];
      if constexpr (kKVInRegs) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          ka[i] = kf[kk][i];
          va[i] = vf[kk][i];
        }
      } else {
        Ldsm4(ka, AddrA<kS>(sK, warp * 16, kk * 16, lane));
        Ldsm4(va, AddrA<kS>(sV, warp * 16, kk * 16, lane));
      }
#pragma unroll
      for (int nn = 0; nn < kBlockM / 16; ++nn) {
        uint32_t bq[4], bo[4];
        Ldsm4(bq, AddrBnk<kS>(cQ, nn * 16, kk * 16, lane));
        Mma(st[2 * nn], ka, bq[0], bq[1]);
        Mma(st[2 * nn + 1], ka, bq[2], bq[3]);
        Ldsm4(bo, AddrBnk<kS>(cdO, nn * 16, kk * 16, lane));
        Mma(dpt[2 * nn], va, bo[0], bo[1]);
        Mma(dpt[2 * nn + 1], va, bo[2], bo[3]);
      }
    }
    // Pᵀ = exp(scale·s − lse), 0 where query < key (causal) or query ≥ T;
    // dSᵀ = Pᵀ·(dPᵀ − D).
    const bool need_mask = (kCausal && q0 < wkey + 15) || q0 + kBlockM > T;  // warp-uniform
#pragma unroll
    for (int n = 0; n < kBlockM / 8; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int qi = n * 8 + 2 * t + (e & 1);
        float p = Exp2(fmaf(st[n][e], sl2, -cL[qi]));
        if (need_mask) {
          const int query = q0 + qi, key = wkey + g + (e >> 1) * 8;
          if ((kCausal && query < key) || query >= T) p = 0.0f;
        }
        st[n][e] = p;
        dpt[n][e] = p * (dpt[n][e] - cD[qi]);
      }
    }
    // dV += Pᵀ·dO, dK += dSᵀ·Q (k = queries).
#pragma unroll
    for (int kk = 0; kk < kBlockM / 16; ++kk) {
      uint32_t pa[4];
      PackAFragment(st, kk, pa);
      uint32_t da[4];
      PackAFragment(dpt, kk, da);
#pragma unroll
      for (int dn = 0; dn < HS / 16; ++dn) {
        uint32_t bo[4], bq[4];
        Ldsm4T(bo, AddrBkn<kS>(cdO, kk * 16, dn * 16, lane));
        Mma(dva[2 * dn], pa, bo[0], bo[1]);
        Mma(dva[2 * dn + 1], pa, bo[2], bo[3]);
        Ldsm4T(bq, AddrBkn<kS>(cQ, kk * 16, dn * 16, lane));
        Mma(dka[2 * dn], da, bq[0], bq[1]);
        Mma(dka[2 * dn + 1], da, bq[2], bq[3]);
      }
    }
    __syncthreads();
  }
  CpAsyncWait<0>();  // n_iter == 0 never happens (k0 < T), but keep the groups drained

  // Only this warp read its 16 rows of sK and sV: stage the gradients there.
  uint16_t* sdk = sK + warp * 16 * kS;
  uint16_t* sdv = sV + warp * 16 * kS;
  StageAcc<HS>(sdk, dka, scale, scale, lane);
  StageAcc<HS>(sdv, dva, 1.0f, 1.0f, lane);
  __syncwarp();
  const int64_t base = int64_t{b} * T * ldk + int64_t{hk} * HS;
  StoreRows<HS>(sdk, dk + base, ldk, wkey, T, lane);
  StoreRows<HS>(sdv, dv + base, ldk, wkey, T, lane);
}

template <int HS, int kBlockN, int kBlockM, bool kCausal>
__global__ void __launch_bounds__(DkDvCfg<HS, kBlockN, kBlockM>::kThreads, 1)
    FlashBwdDkDvKernel(const uint16_t* __restrict__ dout, const uint16_t* __restrict__ q,
                       const uint16_t* __restrict__ k, const uint16_t* __restrict__ v,
                       const float* __restrict__ lse, const float* __restrict__ Dsum,
                       uint16_t* __restrict__ dk, uint16_t* __restrict__ dv, int T, int NH, int NKV,
                       float scale) {
  DkDvBody<HS, kBlockN, kBlockM, kCausal>(dout, q, k, v, lse, Dsum, dk, dv, T, NH, NKV, scale,
                                          blockIdx.x, blockIdx.y);
}

template <int HS, int kBlockM, int kBlockN>
struct DqCfg {
  static constexpr int kThreads = kBlockM / 16 * kWarpSize;
  static constexpr int kS = HS + kPad;
  static constexpr size_t kSmem = size_t(2 * kBlockM + 4 * kBlockN) * kS * sizeof(uint16_t);
};

// One block per (b·NH + h, kBlockM-query tile): dQ = scale·Σ_j dS·K over the
// key tiles up to the diagonal.
template <int HS, int kBlockM, int kBlockN, bool kCausal>
__device__ __forceinline__ void DqBody(const uint16_t* __restrict__ dout,
                                       const uint16_t* __restrict__ q,
                                       const uint16_t* __restrict__ k,
                                       const uint16_t* __restrict__ v,
                                       const float* __restrict__ lse,
                                       const float* __restrict__ Dsum, uint16_t* __restrict__ dq,
                                       int T, int NH, int NKV, float scale, int bh0, int qtile) {
  using Cfg = DqCfg<HS, kBlockM, kBlockN>;
  constexpr int kS = Cfg::kS, kThreads = Cfg::kThreads;
  GTP_DYNAMIC_SHARED(unsigned char, smem);
  uint16_t* sQ = reinterpret_cast<uint16_t*>(smem);  // [kBlockM][kS]
  uint16_t* sdO = sQ + kBlockM * kS;                  // [kBlockM][kS]
  uint16_t* sK = sdO + kBlockM * kS;                  // [2][kBlockN][kS]
  uint16_t* sV = sK + 2 * kBlockN * kS;               // [2][kBlockN][kS]

  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  const int g = lane >> 2, t = lane & 3;
  const int bh = bh0, b = bh / NH, h = bh % NH, hk = h / (NH / NKV);
  const int q0 = qtile * kBlockM;
  const int64_t ldq = int64_t{NH} * HS, ldk = int64_t{NKV} * HS;
  const int64_t q_off = (int64_t{b} * T + q0) * ldq + int64_t{h} * HS;
  const uint16_t* kg = k + int64_t{b} * T * ldk + int64_t{hk} * HS;
  const uint16_t* vg = v + int64_t{b} * T * ldk + int64_t{hk} * HS;
  const int n_tiles = ((kCausal ? min(q0 + kBlockM, T) : T) + kBlockN - 1) / kBlockN;

  LoadTile<HS, kBlockM, kThreads>(sQ, q + q_off, ldq, T - q0);
  LoadTile<HS, kBlockM, kThreads>(sdO, dout + q_off, ldq, T - q0);
  LoadTile<HS, kBlockN, kThreads>(sK, kg, ldk, T);
  LoadTile<HS, kBlockN, kThreads>(sV, vg, ldk, T);
  CpAsyncCommit();

  const int wrow = q0 + warp * 16;
  float lse2[2], Dr[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = wrow + g + 8 * r;
    lse2[r] = row < T ? lse[int64_t{bh} * T + row] * kLog2e : 0.0f;
    Dr[r] = row < T ? Dsum[int64_t{bh} * T + row] : 0.0f;
  }
  uint32_t qf[HS / 16][4], of[HS / 16][4];
  float dqa[HS / 8][4];
#pragma unroll
  for (int d = 0; d < HS / 8; ++d) dqa[d][0] = dqa[d][1] = dqa[d][2] = dqa[d][3] = 0.0f;
  const float sl2 = scale * kLog2e;

  for (int j = 0; j < n_tiles; ++j) {
    const int buf = j & 1;
    if (j + 1 < n_tiles) {
      const int k1 = (j + 1) * kBlockN;
      LoadTile<HS, kBlockN, kThreads>(sK + (buf ^ 1) * kBlockN * kS, kg + k1 * ldk, ldk, T - k1);
      LoadTile<HS, kBlockN, kThreads>(sV + (buf ^ 1) * kBlockN * kS, vg + k1 * ldk, ldk, T - k1);
      CpAsyncCommit();
      CpAsyncWait<1>();
    } else {
      CpAsyncWait<0>();
    }
    __syncthreads();
    if (j == 0) {
#pragma unroll
      for (int kk = 0; kk < HS / 16; ++kk) {
        Ldsm4(qf[kk], AddrA<kS>(sQ, warp * 16, kk * 16, lane));
        Ldsm4(of[kk], AddrA<kS>(sdO, warp * 16, kk * 16, lane));
      }
    }
    const uint16_t* cK = sK + buf * kBlockN * kS;
    const uint16_t* cV = sV + buf * kBlockN * kS;

    float s[kBlockN / 8][4], dp[kBlockN / 8][4];
#pragma unroll
    for (int n = 0; n < kBlockN / 8; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) s[n][e] = dp[n][e] = 0.0f;
    }
#pragma unroll
    for (int kk = 0; kk < HS / 16; ++kk) {
#pragma unroll
      for (int nn = 0; nn < kBlockN / 16; ++nn) {
        uint32_t bk[4], bv[4];
        Ldsm4(bk, AddrBnk<kS>(cK, nn * 16, kk * 16, lane));
        Mma(s[2 * nn], qf[kk], bk[0], bk[1]);
        Mma(s[2 * nn + 1], qf[kk], bk[2], bk[3]);
        Ldsm4(bv, AddrBnk<kS>(cV, nn * 16, kk * 16, lane));
        Mma(dp[2 * nn], of[kk], bv[0], bv[1]);
        Mma(dp[2 * nn + 1], of[kk], bv[2], bv[3]);
      }
    }
    const int k0 = j * kBlockN;
    const bool need_mask =
        (kCausal && k0 + kBlockN - 1 > wrow) || k0 + kBlockN > T;  // warp-uniform
#pragma unroll
    for (int n = 0; n < kBlockN / 8; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = e >> 1;
        float p = Exp2(fmaf(s[n][e], sl2, -lse2[r]));
        if (need_mask) {
          const int key = k0 + n * 8 + 2 * t + (e & 1), row = wrow + g + 8 * r;
          if ((kCausal && key > row) || key >= T) p = 0.0f;
        }
        dp[n][e] = p * (dp[n][e] - Dr[r]);
      }
    }
    // dQ += dS·K (k = keys).
#pragma unroll
    for (int kk = 0; kk < kBlockN / 16; ++kk) {
      uint32_t da[4];
      PackAFragment(dp, kk, da);
#pragma unroll
      for (int dn = 0; dn < HS / 16; ++dn) {
        uint32_t bk[4];
        Ldsm4T(bk, AddrBkn<kS>(cK, kk * 16, dn * 16, lane));
        Mma(dqa[2 * dn], da, bk[0], bk[1]);
        Mma(dqa[2 * dn + 1], da, bk[2], bk[3]);
      }
    }
    __syncthreads();
  }

  uint16_t* sdq = sQ + warp * 16 * kS;  // read only by this warp, at j == 0
  StageAcc<HS>(sdq, dqa, scale, scale, lane);
  __syncwarp();
  StoreRows<HS>(sdq, dq + int64_t{b} * T * ldq + int64_t{h} * HS, ldq, wrow, T, lane);
}

template <int HS, int kBlockM, int kBlockN, bool kCausal>
__global__ void __launch_bounds__(DqCfg<HS, kBlockM, kBlockN>::kThreads)
    FlashBwdDqKernel(const uint16_t* __restrict__ dout, const uint16_t* __restrict__ q,
                     const uint16_t* __restrict__ k, const uint16_t* __restrict__ v,
                     const float* __restrict__ lse, const float* __restrict__ Dsum,
                     uint16_t* __restrict__ dq, int T, int NH, int NKV, float scale) {
  // Longest rows first: the last query tiles see the most keys.
  DqBody<HS, kBlockM, kBlockN, kCausal>(dout, q, k, v, lse, Dsum, dq, T, NH, NKV, scale, blockIdx.x,
                                        gridDim.y - 1 - blockIdx.y);
}

// dk/dv and dq blocks in one launch (1-D grid), in rounds of decreasing work:
// round r = the dk/dv blocks of key tile r (B·NKV of them) then the dq blocks
// of query tile n − 1 − r (B·NH), so the dq blocks fill the dk/dv tail. Both
// roles are the separate kernels' bodies (no inter-block dependences).
template <int HS, int kDkDvN, int kDkDvM, int kDqM, int kDqN, int kMinBlocks, bool kCausal>
__global__ void __launch_bounds__(DkDvCfg<HS, kDkDvN, kDkDvM>::kThreads, kMinBlocks)
    FlashBwdMergedKernel(const uint16_t* __restrict__ dout, const uint16_t* __restrict__ q,
                         const uint16_t* __restrict__ k, const uint16_t* __restrict__ v,
                         const float* __restrict__ lse, const float* __restrict__ Dsum,
                         uint16_t* __restrict__ dq, uint16_t* __restrict__ dk,
                         uint16_t* __restrict__ dv, int T, int NH, int NKV, int B, float scale) {
  static_assert(DkDvCfg<HS, kDkDvN, kDkDvM>::kThreads == DqCfg<HS, kDqM, kDqN>::kThreads,
                "one block size for both roles");
  static_assert(kDkDvN == kDqM, "as many key tiles as query tiles");
  const int nkv = B * NKV, nq = B * NH, per_round = nkv + nq;
  const int r = blockIdx.x / per_round, rem = blockIdx.x % per_round;
  const int n = (T + kDqM - 1) / kDqM;
  if (rem < nkv) {
    DkDvBody<HS, kDkDvN, kDkDvM, kCausal>(dout, q, k, v, lse, Dsum, dk, dv, T, NH, NKV, scale, rem,
                                          r);
  } else {
    DqBody<HS, kDqM, kDqN, kCausal>(dout, q, k, v, lse, Dsum, dq, T, NH, NKV, scale, rem - nkv,
                                    n - 1 - r);
  }
}

// ---- Launchers ---------------------------------------------------------------------------

template <int HS>
constexpr int DkDvBlockM() {
  return HS <= 64 ? 64 : 32;  // HS 128: fewer queries per step keeps dk/dv in registers
}
template <int HS>
constexpr int DqBlockN() {
  return HS <= 64 ? 64 : 32;
}
constexpr int kDkDvBlockN = 64, kDqBlockM = 64;

// kMerged: D, then the dk/dv and dq blocks in one launch (≤168 registers, 3
// blocks/SM); otherwise three kernels (D, dk/dv, dq).
template <int HS, bool kMerged, bool kCausal>
void LaunchBackward(const uint16_t* dout, const uint16_t* q, const uint16_t* k, const uint16_t* v,
                    const uint16_t* out, const float* lse, uint16_t* dq, uint16_t* dk, uint16_t* dv,
                    void* scratch, int64_t B, int64_t T, int64_t NH, int64_t NKV,
                    cudaStream_t stream) {
  const float scale = 1.0f / sqrtf(static_cast<float>(HS));
  const int Ti = static_cast<int>(T), NHi = static_cast<int>(NH), NKVi = static_cast<int>(NKV);
  float* Dsum = static_cast<float*>(scratch);
  {
    constexpr int kThreads = 256;
    const int64_t rows = B * T * NH;
    const int64_t blocks = std::min<int64_t>(CeilDiv(rows, kThreads / kWarpSize), 1 << 16);
    internal::Launch(FlashBwdDotKernel, static_cast<unsigned>(blocks), kThreads, 0, stream, dout,
                     out, Dsum, rows, Ti, NHi, HS);
    GTP_CU_LAUNCH_CHECK();
  }
  if constexpr (kMerged) {
    constexpr int kM = DkDvBlockM<HS>(), kN = DqBlockN<HS>();
    using DkDv = DkDvCfg<HS, kDkDvBlockN, kM>;
    auto kernel = FlashBwdMergedKernel<HS, kDkDvBlockN, kM, kDqBlockM, kN, 3, kCausal>;
    constexpr size_t smem = std::max(DkDv::kSmem, DqCfg<HS, kDqBlockM, kN>::kSmem);
    const int64_t blocks = CeilDiv(T, int64_t{kDkDvBlockN}) * (B * NKV + B * NH);
    internal::Launch(kernel, static_cast<unsigned>(blocks), DkDv::kThreads, smem, stream, dout, q,
                     k, v, lse, Dsum, dq, dk, dv, Ti, NHi, NKVi, static_cast<int>(B), scale);
    GTP_CU_LAUNCH_CHECK();
  } else {
    {
      constexpr int kBlockM = DkDvBlockM<HS>();
      using Cfg = DkDvCfg<HS, kDkDvBlockN, kBlockM>;
      auto kernel = FlashBwdDkDvKernel<HS, kDkDvBlockN, kBlockM, kCausal>;
      const dim3 grid(static_cast<unsigned>(B * NKV),
                      static_cast<unsigned>(CeilDiv(T, kDkDvBlockN)));
      internal::Launch(kernel, grid, Cfg::kThreads, Cfg::kSmem, stream, dout, q, k, v, lse, Dsum,
                       dk, dv, Ti, NHi, NKVi, scale);
      GTP_CU_LAUNCH_CHECK();
    }
    {
      constexpr int kBlockN = DqBlockN<HS>();
      using Cfg = DqCfg<HS, kDqBlockM, kBlockN>;
      auto kernel = FlashBwdDqKernel<HS, kDqBlockM, kBlockN, kCausal>;
      const dim3 grid(static_cast<unsigned>(B * NH), static_cast<unsigned>(CeilDiv(T, kDqBlockM)));
      internal::Launch(kernel, grid, Cfg::kThreads, Cfg::kSmem, stream, dout, q, k, v, lse, Dsum,
                       dq, Ti, NHi, NKVi, scale);
      GTP_CU_LAUNCH_CHECK();
    }
  }
}

}  // namespace

// D[B, NH, T] f32.
int64_t FlashAttentionBackwardScratchBytes(int64_t B, int64_t T, int64_t NH, int64_t /*NKV*/,
                                           int64_t /*HS*/) {
  return B * NH * T * static_cast<int64_t>(sizeof(float));  // D[B, NH, T]
}

void FlashAttentionBackward(const bf16* dout, const bf16* q, const bf16* k, const bf16* v,
                            const bf16* out, const float* lse, bf16* dq, bf16* dk, bf16* dv,
                            void* scratch, int64_t B, int64_t T, int64_t NH, int64_t NKV,
                            int64_t HS, cudaStream_t stream, bool causal) {
  if (B == 0 || T == 0) return;
  const void* bf[] = {dout, q, k, v, out, dq, dk, dv};
  const void* f32[] = {lse, scratch};
  CheckArgs("FlashAttentionBackward", bf, 8, f32, 2, B, T, NH, NKV, HS);
  // HS 64: dk/dv and dq blocks in one launch, ≤168 registers (3 blocks/SM);
  // HS 128: the dk/dv kernel, then the dq kernel.
  auto launch =
      HS == 64 ? (causal ? LaunchBackward<64, true, true> : LaunchBackward<64, true, false>)
               : (causal ? LaunchBackward<128, false, true> : LaunchBackward<128, false, false>);
  launch(U(dout), U(q), U(k), U(v), U(out), lse, U(dq), U(dk), U(dv), scratch, B, T, NH, NKV,
         stream);
}

// The previous backward (separate dq pass, three kernels) for any supported HS,
// kept for side-by-side timing in dev/flash_attention (declared in
// dev/flash_attention/variants.h, not in cuda.h). Needs
// FlashAttentionBackwardScratchBytes. Causal only.
void FlashAttentionBackwardSeparateDq(const bf16* dout, const bf16* q, const bf16* k,
                                      const bf16* v, const bf16* out, const float* lse, bf16* dq,
                                      bf16* dk, bf16* dv, void* scratch, int64_t B, int64_t T,
                                      int64_t NH, int64_t NKV, int64_t HS, cudaStream_t stream) {
  if (B == 0 || T == 0) return;
  const void* bf[] = {dout, q, k, v, out, dq, dk, dv};
  const void* f32[] = {lse, scratch};
  CheckArgs("FlashAttentionBackwardSeparateDq", bf, 8, f32, 2, B, T, NH, NKV, HS);
  if (HS == 64) {
    LaunchBackward<64, false, true>(U(dout), U(q), U(k), U(v), U(out), lse, U(dq), U(dk), U(dv),
                                    scratch, B, T, NH, NKV, stream);
  } else {
    LaunchBackward<128, false, true>(U(dout), U(q), U(k), U(v), U(out), lse, U(dq), U(dk), U(dv),
                                     scratch, B, T, NH, NKV, stream);
  }
}

}  // namespace gtp::kernels::cuda
