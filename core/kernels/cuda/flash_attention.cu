// core/kernels/cuda/flash_attention.cu — the fused attention's forward
// (FlashAttention-2 scheme; the math, the layout and the work split are at the
// top of flash_attention_common.cuh; the backward is flash_attention_backward.cu).
#include "core/kernels/cuda/flash_attention_common.cuh"

namespace gtp::kernels::cuda {
namespace {

// ---- Forward -----------------------------------------------------------------------------

template <int HS, int kBlockM, int kBlockN>
struct FwdCfg {
  static constexpr int kThreads = kBlockM / 16 * kWarpSize;
  static constexpr int kS = HS + kPad;
  static constexpr size_t kSmem = size_t(kBlockM + 4 * kBlockN) * kS * sizeof(uint16_t);
};

template <int HS, int kBlockM, int kBlockN, bool kCausal>
__global__ void __launch_bounds__(FwdCfg<HS, kBlockM, kBlockN>::kThreads)
    FlashFwdKernel(const uint16_t* __restrict__ q, const uint16_t* __restrict__ k,
                   const uint16_t* __restrict__ v, uint16_t* __restrict__ out,
                   float* __restrict__ lse, int T, int NH, int NKV, float scale) {
  using Cfg = FwdCfg<HS, kBlockM, kBlockN>;
  constexpr int kS = Cfg::kS, kThreads = Cfg::kThreads;
  GTP_DYNAMIC_SHARED(unsigned char, smem);
  uint16_t* sQ = reinterpret_cast<uint16_t*>(smem);  // [kBlockM][kS]
  uint16_t* sK = sQ + kBlockM * kS;                   // [2][kBlockN][kS]
  uint16_t* sV = sK + 2 * kBlockN * kS;               // [2][kBlockN][kS]

  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  const int g = lane >> 2, t = lane & 3;
  const int bh = blockIdx.x, b = bh / NH, h = bh % NH, hk = h / (NH / NKV);
  // Longest rows first: the last query tiles see the most keys.
  const int q0 = (gridDim.y - 1 - blockIdx.y) * kBlockM;
  const int64_t ldq = int64_t{NH} * HS, ldk = int64_t{NKV} * HS;
  const uint16_t* qg = q + (int64_t{b} * T + q0) * ldq + int64_t{h} * HS;
  const uint16_t* kg = k + int64_t{b} * T * ldk + int64_t{hk} * HS;
  const uint16_t* vg = v + int64_t{b} * T * ldk + int64_t{hk} * HS;
  const int n_tiles = ((kCausal ? min(q0 + kBlockM, T) : T) + kBlockN - 1) / kBlockN;

  LoadTile<HS, kBlockM, kThreads>(sQ, qg, ldq, T - q0);
  LoadTile<HS, kBlockN, kThreads>(sK, kg, ldk, T);
  LoadTile<HS, kBlockN, kThreads>(sV, vg, ldk, T);
  CpAsyncCommit();

  uint32_t qf[HS / 16][4];
  float o[HS / 8][4];
#pragma unroll
  for (int d = 0; d < HS / 8; ++d) o[d][0] = o[d][1] = o[d][2] = o[d][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  const float sl2 = scale * kLog2e;
  const int wrow = q0 + warp * 16;  // this warp's first query

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
      for (int kk = 0; kk < HS / 16; ++kk) Ldsm4(qf[kk], AddrA<kS>(sQ, warp * 16, kk * 16, lane));
    }
    const uint16_t* cK = sK + buf * kBlockN * kS;
    const uint16_t* cV = sV + buf * kBlockN * kS;

    // S = Q·Kᵀ (raw dot products), 16 × kBlockN per warp.
    float s[kBlockN / 8][4];
#pragma unroll
    for (int n = 0; n < kBlockN / 8; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < HS / 16; ++kk) {
#pragma unroll
      for (int nn = 0; nn < kBlockN / 16; ++nn) {
        uint32_t bk[4];
        Ldsm4(bk, AddrBnk<kS>(cK, nn * 16, kk * 16, lane));
        Mma(s[2 * nn], qf[kk], bk[0], bk[1]);
        Mma(s[2 * nn + 1], qf[kk], bk[2], bk[3]);
      }
    }
    const int k0 = j * kBlockN;
    // Diagonal or tail tile (warp-uniform).
    if ((kCausal && k0 + kBlockN - 1 > wrow) || k0 + kBlockN > T) {
#pragma unroll
      for (int n = 0; n < kBlockN / 8; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = k0 + n * 8 + 2 * t + (e & 1), row = wrow + g + (e >> 1) * 8;
          if ((kCausal && key > row) || key >= T) s[n][e] = -INFINITY;
        }
      }
    }
    // Online softmax on rows g (r = 0) and g + 8 (r = 1); a row spans the 4 lanes of a quad.
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float mx = -INFINITY;
#pragma unroll
      for (int n = 0; n < kBlockN / 8; ++n) mx = fmaxf(mx, fmaxf(s[n][2 * r], s[n][2 * r + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(internal::kFullMask, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(internal::kFullMask, mx, 2));
      const float m_new = fmaxf(m[r], mx);
      const float m_sub = m_new == -INFINITY ? 0.0f : m_new * sl2;
      const float alpha = Exp2(m[r] * sl2 - m_sub);
      m[r] = m_new;
      float sum = 0.0f;
#pragma unroll
      for (int n = 0; n < kBlockN / 8; ++n) {
#pragma unroll
        for (int e = 2 * r; e < 2 * r + 2; ++e) {
          const float p = Exp2(fmaf(s[n][e], sl2, -m_sub));
          s[n][e] = p;
          sum += p;
        }
      }
      l[r] = l[r] * alpha + sum;
#pragma unroll
      for (int d = 0; d < HS / 8; ++d) {
        o[d][2 * r] *= alpha;
        o[d][2 * r + 1] *= alpha;
      }
    }
    // O += P·V; P's C fragments are reused as A fragments (bf16).
#pragma unroll
    for (int kk = 0; kk < kBlockN / 16; ++kk) {
      uint32_t pa[4];
      PackAFragment(s, kk, pa);
#pragma unroll
      for (int dn = 0; dn < HS / 16; ++dn) {
        uint32_t bv[4];
        Ldsm4T(bv, AddrBkn<kS>(cV, kk * 16, dn * 16, lane));
        Mma(o[2 * dn], pa, bv[0], bv[1]);
        Mma(o[2 * dn + 1], pa, bv[2], bv[3]);
      }
    }
    __syncthreads();  // this tile's buffers are refilled in the next iteration
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(internal::kFullMask, l[r], 1);
    l[r] += __shfl_xor_sync(internal::kFullMask, l[r], 2);
  }
  if (t == 0) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = wrow + g + 8 * r;
      if (row < T) lse[int64_t{bh} * T + row] = m[r] * scale + logf(l[r]);
    }
  }
  // Only this warp read its 16 rows of sQ (at j == 0): stage the output there.
  uint16_t* sO = sQ + warp * 16 * kS;
  StageAcc<HS>(sO, o, 1.0f / l[0], 1.0f / l[1], lane);
  __syncwarp();
  StoreRows<HS>(sO, out + int64_t{b} * T * ldq + int64_t{h} * HS, ldq, wrow, T, lane);
}

// ---- Launcher ----------------------------------------------------------------------------

constexpr int kFwdBlockM = 64, kFwdBlockN = 64;

template <int HS, bool kCausal>
void LaunchForward(const uint16_t* q, const uint16_t* k, const uint16_t* v, uint16_t* out,
                   float* lse, int64_t B, int64_t T, int64_t NH, int64_t NKV, cudaStream_t stream) {
  using Cfg = FwdCfg<HS, kFwdBlockM, kFwdBlockN>;
  auto kernel = FlashFwdKernel<HS, kFwdBlockM, kFwdBlockN, kCausal>;
  const dim3 grid(static_cast<unsigned>(B * NH), static_cast<unsigned>(CeilDiv(T, kFwdBlockM)));
  internal::Launch(kernel, grid, Cfg::kThreads, Cfg::kSmem, stream, q, k, v, out, lse,
                   static_cast<int>(T), static_cast<int>(NH), static_cast<int>(NKV),
                   1.0f / sqrtf(static_cast<float>(HS)));
  GTP_CU_LAUNCH_CHECK();
}

}  // namespace

void FlashAttentionForward(const bf16* q, const bf16* k, const bf16* v, bf16* out, float* lse,
                           int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS,
                           cudaStream_t stream, bool causal) {
  if (B == 0 || T == 0) return;
  const void* bf[] = {q, k, v, out};
  const void* f32[] = {lse};
  CheckArgs("FlashAttentionForward", bf, 4, f32, 1, B, T, NH, NKV, HS);
  auto launch = HS == 64 ? (causal ? LaunchForward<64, true> : LaunchForward<64, false>)
                         : (causal ? LaunchForward<128, true> : LaunchForward<128, false>);
  launch(U(q), U(k), U(v), U(out), lse, B, T, NH, NKV, stream);
}

}  // namespace gtp::kernels::cuda
