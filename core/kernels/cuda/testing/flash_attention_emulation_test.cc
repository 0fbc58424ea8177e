// The fused attention's CUDA kernels (core/kernels/cuda/flash_attention.cu,
// flash_attention_backward.cu: the forward, the D pass, and the dk/dv and dq blocks, merged for HS 64 and
// separate for HS 128; ldmatrix and mma.sync through the emulator) run on the
// CPU by the warp emulator (core/kernels/cuda/testing/warp_emulator.h), in
// three orders of each block's threads, against attention and its gradients
// in double. flash_attention_gpu_test runs the same kernels on a GPU.
// The emulator before the kernel source:
// clang-format off
#define GTP_CUDA_HOST_EMULATION
#include "core/kernels/cuda/testing/warp_emulator.h"
#include "core/kernels/cuda/flash_attention.cu"
#include "core/kernels/cuda/flash_attention_backward.cu"
// clang-format on
// (its launchers now run the grids on the host, synchronously)

#include <cmath>
#include <cstdint>
#include <vector>

#include "core/kernels/cuda/testing/emulation_checks.h"
#include "gtest/gtest.h"

namespace gtp::kernels::cuda {
namespace {

alignas(16) double smem[200 * 1024 / 8];  // the blocks' dynamic shared memory

using FVec = std::vector<float>;
using DVec = std::vector<double>;

struct Case {
  int64_t B, T, NH, NKV, HS;
  bool causal;
};

// Attention and its gradients in double from the bf16 inputs' values:
// s = q·kᵀ/√HS (masked above the diagonal when causal), p = softmax(s), out =
// p·v, lse = log Σ exp(s); dp = dout·vᵀ, ds = p∘(dp − Σ_j p·dp), dq = ds·k/√HS,
// dk = dsᵀ·q/√HS, dv = pᵀ·dout (dk, dv summed over a kv head's query heads).
struct Reference {
  DVec out, lse, dq, dk, dv;
};
Reference Attention(const Case& c, const FVec& q, const FVec& k, const FVec& v, const FVec& dout) {
  const int64_t B = c.B, T = c.T, NH = c.NH, NKV = c.NKV, HS = c.HS, rep = NH / NKV;
  const double scale = 1.0 / std::sqrt(static_cast<double>(HS));
  Reference r{DVec(B * T * NH * HS), DVec(B * NH * T), DVec(B * T * NH * HS),
              DVec(B * T * NKV * HS, 0.0), DVec(B * T * NKV * HS, 0.0)};
  auto Q = [&](int64_t b, int64_t t, int64_t h) { return &q[((b * T + t) * NH + h) * HS]; };
  auto K = [&](int64_t b, int64_t t, int64_t g) { return &k[((b * T + t) * NKV + g) * HS]; };
  auto V = [&](int64_t b, int64_t t, int64_t g) { return &v[((b * T + t) * NKV + g) * HS]; };
  auto dO = [&](int64_t b, int64_t t, int64_t h) { return &dout[((b * T + t) * NH + h) * HS]; };
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < NH; ++h) {
      const int64_t g = h / rep;
      for (int64_t i = 0; i < T; ++i) {
        const int64_t jn = c.causal ? i + 1 : T;
        DVec s(jn), p(jn), dp(jn);
        double mx = -INFINITY;
        for (int64_t j = 0; j < jn; ++j) {
          double d = 0;
          for (int64_t e = 0; e < HS; ++e) d += double{Q(b, i, h)[e]} * K(b, j, g)[e];
          s[j] = d * scale;
          mx = std::fmax(mx, s[j]);
        }
        double se = 0;
        for (int64_t j = 0; j < jn; ++j) se += std::exp(s[j] - mx);
        r.lse[(b * NH + h) * T + i] = mx + std::log(se);
        double dsum = 0;
        for (int64_t j = 0; j < jn; ++j) {
          p[j] = std::exp(s[j] - mx) / se;
          double d = 0;
          for (int64_t e = 0; e < HS; ++e) d += double{dO(b, i, h)[e]} * V(b, j, g)[e];
          dp[j] = d;
          dsum += p[j] * dp[j];
        }
        for (int64_t e = 0; e < HS; ++e) {
          double o = 0, dq = 0;
          for (int64_t j = 0; j < jn; ++j) {
            o += p[j] * V(b, j, g)[e];
            dq += p[j] * (dp[j] - dsum) * K(b, j, g)[e] * scale;
          }
          r.out[((b * T + i) * NH + h) * HS + e] = o;
          r.dq[((b * T + i) * NH + h) * HS + e] = dq;
        }
        for (int64_t j = 0; j < jn; ++j) {
          const double ds = p[j] * (dp[j] - dsum);
          for (int64_t e = 0; e < HS; ++e) {
            r.dk[((b * T + j) * NKV + g) * HS + e] += ds * Q(b, i, h)[e] * scale;
            r.dv[((b * T + j) * NKV + g) * HS + e] += p[j] * dO(b, i, h)[e];
          }
        }
      }
    }
  }
  return r;
}

// bf16 operands, P and dS staged as bf16 for the tensor cores, bf16 outputs:
// each output is within a few 2⁻⁹ of its scale (measured ≤ 4.9e-3 of the
// largest value, 2026-12-05); 2e-2 bounds that with room, and a wrong tile,
// mask or fragment is O(1). lse is f32 from f32 sums of exps (the host's
// exp2 here, ex2.approx on the GPU): 1e-5 (measured 1e-7).
constexpr double kTol = 2e-2;

class FlashAttentionEmulationTest : public ::testing::TestWithParam<Case> {};

TEST_P(FlashAttentionEmulationTest, MatchesAttentionInDouble) {
  const Case c = GetParam();
  gtp::emu::SetShared(smem, sizeof(smem));
  const int64_t nq = c.B * c.T * c.NH * c.HS, nk = c.B * c.T * c.NKV * c.HS;
  const std::vector<bf16> q = gtp::emu::Converted<bf16>(gtp::emu::RandomNormal(nq, 1)),
                          k = gtp::emu::Converted<bf16>(gtp::emu::RandomNormal(nk, 2)),
                          v = gtp::emu::Converted<bf16>(gtp::emu::RandomNormal(nk, 3)),
                          dout = gtp::emu::Converted<bf16>(gtp::emu::RandomNormal(nq, 4));
  const Reference ref = Attention(c, gtp::emu::Widened(q), gtp::emu::Widened(k),
                                  gtp::emu::Widened(v), gtp::emu::Widened(dout));
  const auto out = gtp::emu::InEverySchedule(
      [&] {
        std::vector<bf16> o(nq, gtp::ToBF16(NAN)), dq(nq, gtp::ToBF16(NAN)),
            dk(nk, gtp::ToBF16(NAN)), dv(nk, gtp::ToBF16(NAN));
        FVec lse(c.B * c.NH * c.T, NAN);
        std::vector<char> scratch(FlashAttentionBackwardScratchBytes(c.B, c.T, c.NH, c.NKV, c.HS) +
                                  16);
        void* scratch16 =
            reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(scratch.data()) + 15) / 16 * 16);
        FlashAttentionForward(q.data(), k.data(), v.data(), o.data(), lse.data(), c.B, c.T, c.NH,
                              c.NKV, c.HS, nullptr, c.causal);
        FlashAttentionBackward(dout.data(), q.data(), k.data(), v.data(), o.data(), lse.data(),
                               dq.data(), dk.data(), dv.data(), scratch16, c.B, c.T, c.NH, c.NKV,
                               c.HS, nullptr, c.causal);
        return std::vector<FVec>{gtp::emu::Widened(o), lse, gtp::emu::Widened(dq),
                                 gtp::emu::Widened(dk), gtp::emu::Widened(dv)};
      },
      29);
  EXPECT_TRUE(gtp::emu::Near(out[0], ref.out, kTol, "out"));
  EXPECT_TRUE(gtp::emu::Near(out[1], ref.lse, 1e-5, "lse"));
  EXPECT_TRUE(gtp::emu::Near(out[2], ref.dq, kTol, "dq"));
  EXPECT_TRUE(gtp::emu::Near(out[3], ref.dk, kTol, "dk"));
  EXPECT_TRUE(gtp::emu::Near(out[4], ref.dv, kTol, "dv"));
}

// HS 64 (the merged dk/dv + dq backward) and 128 (two backward kernels);
// causal and not; T not a multiple of the 64-row tiles; two query heads a
// kv head.
INSTANTIATE_TEST_SUITE_P(Shapes, FlashAttentionEmulationTest,
                         ::testing::Values(Case{1, 70, 2, 1, 64, true},
                                           Case{1, 40, 2, 2, 64, false},
                                           Case{1, 70, 2, 1, 128, true},
                                           Case{1, 33, 1, 1, 128, false}));

}  // namespace
}  // namespace gtp::kernels::cuda
