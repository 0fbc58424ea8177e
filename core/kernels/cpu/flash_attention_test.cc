// Tests of cpu::FlashAttentionForward/Backward (the fused-attention contract:
// out + lse, gradients from out and lse) against the double references, and of
// the analytic reference gradient itself against finite differences.
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/kernels/cpu.h"
#include "core/kernels/testing/harness.h"
#include "core/kernels/testing/reference.h"
#include "gtest/gtest.h"

namespace gtp::kernels::testing {
namespace {

struct Shape {
  int64_t B, T, NH, NKV, HS;
  size_t q() const { return B * T * NH * HS; }
  size_t kv() const { return B * T * NKV * HS; }
  size_t rows() const { return B * NH * T; }
};

// Single token, MHA, GQA (2 and 3 heads per kv head), MQA, odd T and HS.
const Shape kShapes[] = {{1, 1, 1, 1, 1},  {2, 3, 2, 2, 5},   {1, 17, 4, 2, 8},
                         {2, 9, 6, 2, 3},  {1, 33, 3, 1, 16}, {1, 20, 2, 2, 64}};

std::string Describe(const Shape& s) {
  return absl::StrCat("B=", s.B, " T=", s.T, " NH=", s.NH, " NKV=", s.NKV, " HS=", s.HS);
}

TEST(FlashAttentionForward, MatchesReference) {
  Rng rng(61);
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(Describe(s));
    std::vector<float> q = rng.Normal(s.q()), k = rng.Normal(s.kv()), v = rng.Normal(s.kv());
    std::vector<float> out = NaNs(s.q()), lse = NaNs(s.rows());
    cpu::FlashAttentionForward(q.data(), k.data(), v.data(), out.data(), lse.data(), s.B, s.T,
                               s.NH, s.NKV, s.HS);
    const std::vector<double> qd = ToDouble(q), kd = ToDouble(k), vd = ToDouble(v);
    EXPECT_TRUE(RelClose(out, RefAttention(qd, kd, vd, s.B, s.T, s.NH, s.NKV, s.HS), 1e-6));
    EXPECT_TRUE(RelClose(lse, RefAttentionLse(qd, kd, s.B, s.T, s.NH, s.NKV, s.HS), 1e-6));
  }
}

TEST(FlashAttentionForward, BF16MatchesReferenceOnRoundedInputs) {
  Rng rng(62);
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(Describe(s));
    const std::vector<float> q = RoundToBF16(rng.Normal(s.q())), k = RoundToBF16(rng.Normal(s.kv())),
                             v = RoundToBF16(rng.Normal(s.kv()));
    const std::vector<bf16> qb = ToBF16(q), kb = ToBF16(k), vb = ToBF16(v);
    std::vector<bf16> out = ToBF16(NaNs(s.q()));
    std::vector<float> lse = NaNs(s.rows());
    cpu::FlashAttentionForward(qb.data(), kb.data(), vb.data(), out.data(), lse.data(), s.B, s.T,
                               s.NH, s.NKV, s.HS);
    const std::vector<double> qd = ToDouble(q), kd = ToDouble(k), vd = ToDouble(v);
    // Only the output rounding to bf16 (relative 2⁻⁹ per element) separates them.
    EXPECT_TRUE(RelClose(ToFloat(out), RefAttention(qd, kd, vd, s.B, s.T, s.NH, s.NKV, s.HS), 4e-3));
    EXPECT_TRUE(RelClose(lse, RefAttentionLse(qd, kd, s.B, s.T, s.NH, s.NKV, s.HS), 1e-6));
  }
}

// The analytic reference gradient (used by the GPU tests at sizes where finite
// differences are too slow) agrees with finite differences of RefAttention.
TEST(RefAttentionBackward, MatchesFiniteDifferences) {
  Rng rng(63);
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(Describe(s));
    const std::vector<double> qd = ToDouble(rng.Normal(s.q())), kd = ToDouble(rng.Normal(s.kv())),
                              vd = ToDouble(rng.Normal(s.kv())), w = ToDouble(rng.Normal(s.q()));
    std::vector<double> dq, dk, dv;
    RefAttentionBackward(qd, kd, vd, w, s.B, s.T, s.NH, s.NKV, s.HS, &dq, &dk, &dv);
    auto fd = [&](int which) {
      return FiniteDifferenceGradient(
          [&](const std::vector<double>& x) {
            return RefAttention(which == 0 ? x : qd, which == 1 ? x : kd, which == 2 ? x : vd, s.B,
                                s.T, s.NH, s.NKV, s.HS);
          },
          which == 0 ? qd : which == 1 ? kd : vd, w);
    };
    std::vector<float> dqf(dq.begin(), dq.end()), dkf(dk.begin(), dk.end()),
        dvf(dv.begin(), dv.end());
    EXPECT_TRUE(RelClose(dqf, fd(0), 1e-6)) << "dq";
    EXPECT_TRUE(RelClose(dkf, fd(1), 1e-6)) << "dk";
    EXPECT_TRUE(RelClose(dvf, fd(2), 1e-6)) << "dv";
  }
}

TEST(FlashAttentionBackward, MatchesFiniteDifferences) {
  Rng rng(64);
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(Describe(s));
    std::vector<float> q = rng.Normal(s.q()), k = rng.Normal(s.kv()), v = rng.Normal(s.kv()),
                       dout = rng.Normal(s.q());
    std::vector<float> out(s.q()), lse(s.rows());
    cpu::FlashAttentionForward(q.data(), k.data(), v.data(), out.data(), lse.data(), s.B, s.T,
                               s.NH, s.NKV, s.HS);
    // Written, not accumulated: the outputs start as NaN.
    std::vector<float> dq = NaNs(s.q()), dk = NaNs(s.kv()), dv = NaNs(s.kv());
    cpu::FlashAttentionBackward(dout.data(), q.data(), k.data(), v.data(), out.data(), lse.data(),
                                dq.data(), dk.data(), dv.data(), s.B, s.T, s.NH, s.NKV, s.HS);
    const std::vector<double> qd = ToDouble(q), kd = ToDouble(k), vd = ToDouble(v),
                              w = ToDouble(dout);
    auto fd = [&](int which) {
      return FiniteDifferenceGradient(
          [&](const std::vector<double>& x) {
            return RefAttention(which == 0 ? x : qd, which == 1 ? x : kd, which == 2 ? x : vd, s.B,
                                s.T, s.NH, s.NKV, s.HS);
          },
          which == 0 ? qd : which == 1 ? kd : vd, w);
    };
    // f32 out and lse feed D and P, so agreement is at f32 level.
    EXPECT_TRUE(RelClose(dq, fd(0), 1e-4)) << "dq";
    EXPECT_TRUE(RelClose(dk, fd(1), 1e-4)) << "dk";
    EXPECT_TRUE(RelClose(dv, fd(2), 1e-5)) << "dv";
  }
}

TEST(FlashAttentionBackward, BF16MatchesReferenceOnRoundedInputs) {
  Rng rng(65);
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(Describe(s));
    const std::vector<float> q = RoundToBF16(rng.Normal(s.q())), k = RoundToBF16(rng.Normal(s.kv())),
                             v = RoundToBF16(rng.Normal(s.kv())),
                             dout = RoundToBF16(rng.Normal(s.q()));
    const std::vector<bf16> qb = ToBF16(q), kb = ToBF16(k), vb = ToBF16(v), gb = ToBF16(dout);
    std::vector<bf16> out(s.q());
    std::vector<float> lse(s.rows());
    cpu::FlashAttentionForward(qb.data(), kb.data(), vb.data(), out.data(), lse.data(), s.B, s.T,
                               s.NH, s.NKV, s.HS);
    std::vector<bf16> dq = ToBF16(NaNs(s.q())), dk = ToBF16(NaNs(s.kv())), dv = ToBF16(NaNs(s.kv()));
    cpu::FlashAttentionBackward(gb.data(), qb.data(), kb.data(), vb.data(), out.data(), lse.data(),
                                dq.data(), dk.data(), dv.data(), s.B, s.T, s.NH, s.NKV, s.HS);
    std::vector<double> rq, rk, rv;
    RefAttentionBackward(ToDouble(q), ToDouble(k), ToDouble(v), ToDouble(dout), s.B, s.T, s.NH,
                         s.NKV, s.HS, &rq, &rk, &rv);
    // The bf16 out (through D) and the bf16 gradients themselves.
    EXPECT_TRUE(RelClose(ToFloat(dq), rq, 1e-2)) << "dq";
    EXPECT_TRUE(RelClose(ToFloat(dk), rk, 1e-2)) << "dk";
    EXPECT_TRUE(RelClose(ToFloat(dv), rv, 1e-2)) << "dv";
  }
}

// ---- Bidirectional (causal = false) -------------------------------------------------

// T = 1, odd T, T past and short of a 64-row flash tile (65, 70), MHA, GQA
// (2, 3 and 4 query heads per kv head), MQA.
const Shape kBidirShapes[] = {{1, 1, 1, 1, 1}, {2, 3, 2, 2, 5},   {1, 17, 4, 2, 8},
                              {2, 9, 6, 2, 3}, {1, 33, 3, 1, 16}, {1, 65, 4, 1, 4},
                              {1, 70, 2, 1, 6}};

TEST(FlashAttentionForward, BidirectionalMatchesReference) {
  Rng rng(66);
  for (const Shape& s : kBidirShapes) {
    SCOPED_TRACE(Describe(s));
    std::vector<float> q = rng.Normal(s.q()), k = rng.Normal(s.kv()), v = rng.Normal(s.kv());
    std::vector<float> out = NaNs(s.q()), lse = NaNs(s.rows());
    cpu::FlashAttentionForward(q.data(), k.data(), v.data(), out.data(), lse.data(), s.B, s.T, s.NH,
                               s.NKV, s.HS, /*causal=*/false);
    const std::vector<double> qd = ToDouble(q), kd = ToDouble(k), vd = ToDouble(v);
    EXPECT_TRUE(RelClose(
        out, RefAttention(qd, kd, vd, s.B, s.T, s.NH, s.NKV, s.HS, nullptr, /*causal=*/false),
        1e-6));
    EXPECT_TRUE(RelClose(
        lse, RefAttentionLse(qd, kd, s.B, s.T, s.NH, s.NKV, s.HS, /*causal=*/false), 1e-6));
  }
}

TEST(FlashAttentionForward, BidirectionalBF16MatchesReferenceOnRoundedInputs) {
  Rng rng(67);
  for (const Shape& s : kBidirShapes) {
    SCOPED_TRACE(Describe(s));
    const std::vector<float> q = RoundToBF16(rng.Normal(s.q())),
                             k = RoundToBF16(rng.Normal(s.kv())),
                             v = RoundToBF16(rng.Normal(s.kv()));
    const std::vector<bf16> qb = ToBF16(q), kb = ToBF16(k), vb = ToBF16(v);
    std::vector<bf16> out = ToBF16(NaNs(s.q()));
    std::vector<float> lse = NaNs(s.rows());
    cpu::FlashAttentionForward(qb.data(), kb.data(), vb.data(), out.data(), lse.data(), s.B, s.T,
                               s.NH, s.NKV, s.HS, /*causal=*/false);
    const std::vector<double> qd = ToDouble(q), kd = ToDouble(k), vd = ToDouble(v);
    EXPECT_TRUE(RelClose(
        ToFloat(out),
        RefAttention(qd, kd, vd, s.B, s.T, s.NH, s.NKV, s.HS, nullptr, /*causal=*/false), 4e-3));
    EXPECT_TRUE(RelClose(
        lse, RefAttentionLse(qd, kd, s.B, s.T, s.NH, s.NKV, s.HS, /*causal=*/false), 1e-6));
  }
}

TEST(RefAttentionBackward, BidirectionalMatchesFiniteDifferences) {
  Rng rng(68);
  for (const Shape& s : kBidirShapes) {
    SCOPED_TRACE(Describe(s));
    const std::vector<double> qd = ToDouble(rng.Normal(s.q())), kd = ToDouble(rng.Normal(s.kv())),
                              vd = ToDouble(rng.Normal(s.kv())), w = ToDouble(rng.Normal(s.q()));
    std::vector<double> dq, dk, dv;
    RefAttentionBackward(qd, kd, vd, w, s.B, s.T, s.NH, s.NKV, s.HS, &dq, &dk, &dv,
                         /*causal=*/false);
    auto fd = [&](int which) {
      return FiniteDifferenceGradient(
          [&](const std::vector<double>& x) {
            return RefAttention(which == 0 ? x : qd, which == 1 ? x : kd, which == 2 ? x : vd, s.B,
                                s.T, s.NH, s.NKV, s.HS, nullptr, /*causal=*/false);
          },
          which == 0   ? qd
          : which == 1 ? kd
                       : vd,
          w);
    };
    std::vector<float> dqf(dq.begin(), dq.end()), dkf(dk.begin(), dk.end()),
        dvf(dv.begin(), dv.end());
    EXPECT_TRUE(RelClose(dqf, fd(0), 1e-6)) << "dq";
    EXPECT_TRUE(RelClose(dkf, fd(1), 1e-6)) << "dk";
    EXPECT_TRUE(RelClose(dvf, fd(2), 1e-6)) << "dv";
  }
}

TEST(FlashAttentionBackward, BidirectionalMatchesFiniteDifferences) {
  Rng rng(69);
  for (const Shape& s : kBidirShapes) {
    SCOPED_TRACE(Describe(s));
    std::vector<float> q = rng.Normal(s.q()), k = rng.Normal(s.kv()), v = rng.Normal(s.kv()),
                       dout = rng.Normal(s.q());
    std::vector<float> out(s.q()), lse(s.rows());
    cpu::FlashAttentionForward(q.data(), k.data(), v.data(), out.data(), lse.data(), s.B, s.T, s.NH,
                               s.NKV, s.HS, /*causal=*/false);
    std::vector<float> dq = NaNs(s.q()), dk = NaNs(s.kv()), dv = NaNs(s.kv());
    cpu::FlashAttentionBackward(dout.data(), q.data(), k.data(), v.data(), out.data(), lse.data(),
                                dq.data(), dk.data(), dv.data(), s.B, s.T, s.NH, s.NKV, s.HS,
                                /*causal=*/false);
    const std::vector<double> qd = ToDouble(q), kd = ToDouble(k), vd = ToDouble(v),
                              w = ToDouble(dout);
    auto fd = [&](int which) {
      return FiniteDifferenceGradient(
          [&](const std::vector<double>& x) {
            return RefAttention(which == 0 ? x : qd, which == 1 ? x : kd, which == 2 ? x : vd, s.B,
                                s.T, s.NH, s.NKV, s.HS, nullptr, /*causal=*/false);
          },
          which == 0   ? qd
          : which == 1 ? kd
                       : vd,
          w);
    };
    EXPECT_TRUE(RelClose(dq, fd(0), 1e-4)) << "dq";
    EXPECT_TRUE(RelClose(dk, fd(1), 1e-4)) << "dk";
    EXPECT_TRUE(RelClose(dv, fd(2), 1e-5)) << "dv";
  }
}

TEST(FlashAttentionBackward, BidirectionalBF16MatchesReferenceOnRoundedInputs) {
  Rng rng(70);
  for (const Shape& s : kBidirShapes) {
    SCOPED_TRACE(Describe(s));
    const std::vector<float> q = RoundToBF16(rng.Normal(s.q())),
                             k = RoundToBF16(rng.Normal(s.kv())),
                             v = RoundToBF16(rng.Normal(s.kv())),
                             dout = RoundToBF16(rng.Normal(s.q()));
    const std::vector<bf16> qb = ToBF16(q), kb = ToBF16(k), vb = ToBF16(v), gb = ToBF16(dout);
    std::vector<bf16> out(s.q());
    std::vector<float> lse(s.rows());
    cpu::FlashAttentionForward(qb.data(), kb.data(), vb.data(), out.data(), lse.data(), s.B, s.T,
                               s.NH, s.NKV, s.HS, /*causal=*/false);
    std::vector<bf16> dq = ToBF16(NaNs(s.q())), dk = ToBF16(NaNs(s.kv())),
                      dv = ToBF16(NaNs(s.kv()));
    cpu::FlashAttentionBackward(gb.data(), qb.data(), kb.data(), vb.data(), out.data(), lse.data(),
                                dq.data(), dk.data(), dv.data(), s.B, s.T, s.NH, s.NKV, s.HS,
                                /*causal=*/false);
    std::vector<double> rq, rk, rv;
    RefAttentionBackward(ToDouble(q), ToDouble(k), ToDouble(v), ToDouble(dout), s.B, s.T, s.NH,
                         s.NKV, s.HS, &rq, &rk, &rv, /*causal=*/false);
    EXPECT_TRUE(RelClose(ToFloat(dq), rq, 1e-2)) << "dq";
    EXPECT_TRUE(RelClose(ToFloat(dk), rk, 1e-2)) << "dk";
    EXPECT_TRUE(RelClose(ToFloat(dv), rv, 1e-2)) << "dv";
  }
}

}  // namespace
}  // namespace gtp::kernels::testing
