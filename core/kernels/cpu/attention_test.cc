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
  size_t att() const { return B * NH * T * T; }
};

// Single token, MHA, GQA (2 and 3 heads per kv head) and MQA, odd T and HS.
const Shape kShapes[] = {
    {1, 1, 1, 1, 1}, {2, 3, 2, 2, 5}, {1, 17, 4, 2, 8}, {2, 9, 6, 2, 3}, {1, 33, 3, 1, 16}};

std::string Describe(const Shape& s) {
  return absl::StrCat("B=", s.B, " T=", s.T, " NH=", s.NH, " NKV=", s.NKV, " HS=", s.HS);
}

TEST(AttentionForward, MatchesReference) {
  Rng rng(51);
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(Describe(s));
    std::vector<float> q = rng.Normal(s.q()), k = rng.Normal(s.kv()), v = rng.Normal(s.kv());
    // NaN-filled: the upper triangle of att must be written as 0.
    std::vector<float> out = NaNs(s.q()), att = NaNs(s.att());
    cpu::AttentionForward(q.data(), k.data(), v.data(), out.data(), att.data(), s.B, s.T, s.NH,
                          s.NKV, s.HS);
    std::vector<double> ref_att;
    std::vector<double> ref =
        RefAttention(ToDouble(q), ToDouble(k), ToDouble(v), s.B, s.T, s.NH, s.NKV, s.HS, &ref_att);
    EXPECT_TRUE(RelClose(out, ref, 1e-5));
    EXPECT_TRUE(RelClose(att, ref_att, 1e-5));
    // Closed form: each causal row of probabilities sums to 1 and the rest is exactly 0.
    for (int64_t r = 0; r < s.B * s.NH * s.T; ++r) {
      const int64_t t = r % s.T;
      double sum = 0;
      for (int64_t j = 0; j < s.T; ++j) {
        if (j <= t) {
          sum += att[r * s.T + j];
        } else {
          ASSERT_EQ(att[r * s.T + j], 0.0f) << "row " << r << " col " << j;
        }
      }
      EXPECT_NEAR(sum, 1.0, 1e-5) << "row " << r;
    }
  }
}

TEST(AttentionBackward, MatchesFiniteDifferences) {
  Rng rng(52);
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(Describe(s));
    std::vector<float> q = rng.Normal(s.q()), k = rng.Normal(s.kv()), v = rng.Normal(s.kv()),
                       dout = rng.Normal(s.q());
    std::vector<float> out(s.q()), att(s.att());
    cpu::AttentionForward(q.data(), k.data(), v.data(), out.data(), att.data(), s.B, s.T, s.NH,
                          s.NKV, s.HS);
    // Outputs start as NaN (they are written, not accumulated); scratch is
    // exactly the documented size, guarded.
    std::vector<float> dq = NaNs(s.q()), dk = NaNs(s.kv()), dv = NaNs(s.kv());
    GuardedBuffer scratch(s.att());
    cpu::AttentionBackward(dout.data(), q.data(), k.data(), v.data(), att.data(), dq.data(),
                           dk.data(), dv.data(), scratch.data(), s.B, s.T, s.NH, s.NKV, s.HS);
    EXPECT_TRUE(scratch.GuardIntact());

    std::vector<double> qd = ToDouble(q), kd = ToDouble(k), vd = ToDouble(v), w = ToDouble(dout);
    auto fd = [&](int which) {
      return FiniteDifferenceGradient(
          [&](const std::vector<double>& x) {
            return RefAttention(which == 0 ? x : qd, which == 1 ? x : kd, which == 2 ? x : vd, s.B,
                                s.T, s.NH, s.NKV, s.HS);
          },
          which == 0   ? qd
          : which == 1 ? kd
                       : vd,
          w);
    };
    // T = 1: dq and dk are exactly 0 (one key, probability 1); compared absolutely.
    EXPECT_TRUE(RelClose(dq, fd(0), 1e-4)) << "dq";
    EXPECT_TRUE(RelClose(dk, fd(1), 1e-4)) << "dk";
    EXPECT_TRUE(RelClose(dv, fd(2), 1e-5)) << "dv";
  }
}

// ---- Bidirectional (causal = false) -------------------------------------------------

// The causal shapes plus T past a 64-row tile (65) and GQA with 4 query heads
// per kv head.
const Shape kBidirShapes[] = {{1, 1, 1, 1, 1}, {2, 3, 2, 2, 5},   {1, 17, 4, 2, 8},
                              {2, 9, 6, 2, 3}, {1, 33, 3, 1, 16}, {1, 65, 4, 1, 4}};

// The reference itself is bidirectional: with q = 0 every key gets probability
// 1/T, so every row of out is the mean of v over all T positions.
TEST(RefAttention, BidirectionalIsTheMeanOfValuesWhenScoresAreEqual) {
  Rng rng(53);
  const Shape s{2, 7, 4, 2, 3};
  const std::vector<double> q(s.q(), 0.0), k = ToDouble(rng.Normal(s.kv())),
                                           v = ToDouble(rng.Normal(s.kv()));
  const std::vector<double> out = RefAttention(q, k, v, s.B, s.T, s.NH, s.NKV, s.HS, nullptr,
                                               /*causal=*/false);
  for (int64_t b = 0; b < s.B; ++b) {
    for (int64_t t = 0; t < s.T; ++t) {
      for (int64_t h = 0; h < s.NH; ++h) {
        for (int64_t d = 0; d < s.HS; ++d) {
          double mean = 0;
          for (int64_t j = 0; j < s.T; ++j) mean += v[((b * s.T + j) * s.NKV + h / 2) * s.HS + d];
          mean /= s.T;
          EXPECT_NEAR(out[((b * s.T + t) * s.NH + h) * s.HS + d], mean, 1e-12);
        }
      }
    }
  }
}

TEST(AttentionForward, BidirectionalMatchesReference) {
  Rng rng(54);
  for (const Shape& s : kBidirShapes) {
    SCOPED_TRACE(Describe(s));
    std::vector<float> q = rng.Normal(s.q()), k = rng.Normal(s.kv()), v = rng.Normal(s.kv());
    std::vector<float> out = NaNs(s.q()), att = NaNs(s.att());
    cpu::AttentionForward(q.data(), k.data(), v.data(), out.data(), att.data(), s.B, s.T, s.NH,
                          s.NKV, s.HS, /*causal=*/false);
    std::vector<double> ref_att;
    const std::vector<double> ref = RefAttention(ToDouble(q), ToDouble(k), ToDouble(v), s.B, s.T,
                                                 s.NH, s.NKV, s.HS, &ref_att, /*causal=*/false);
    EXPECT_TRUE(RelClose(out, ref, 1e-5));
    EXPECT_TRUE(RelClose(att, ref_att, 1e-5));
    // Every row covers all T keys: positive everywhere, summing to 1.
    for (int64_t r = 0; r < s.B * s.NH * s.T; ++r) {
      double sum = 0;
      for (int64_t j = 0; j < s.T; ++j) {
        ASSERT_GT(att[r * s.T + j], 0.0f) << "row " << r << " col " << j;
        sum += att[r * s.T + j];
      }
      EXPECT_NEAR(sum, 1.0, 1e-5) << "row " << r;
    }
  }
}

TEST(AttentionBackward, BidirectionalMatchesFiniteDifferences) {
  Rng rng(55);
  for (const Shape& s : kBidirShapes) {
    SCOPED_TRACE(Describe(s));
    std::vector<float> q = rng.Normal(s.q()), k = rng.Normal(s.kv()), v = rng.Normal(s.kv()),
                       dout = rng.Normal(s.q());
    std::vector<float> out(s.q()), att(s.att());
    cpu::AttentionForward(q.data(), k.data(), v.data(), out.data(), att.data(), s.B, s.T, s.NH,
                          s.NKV, s.HS, /*causal=*/false);
    std::vector<float> dq = NaNs(s.q()), dk = NaNs(s.kv()), dv = NaNs(s.kv());
    GuardedBuffer scratch(s.att());
    cpu::AttentionBackward(dout.data(), q.data(), k.data(), v.data(), att.data(), dq.data(),
                           dk.data(), dv.data(), scratch.data(), s.B, s.T, s.NH, s.NKV, s.HS,
                           /*causal=*/false);
    EXPECT_TRUE(scratch.GuardIntact());
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

}  // namespace
}  // namespace gtp::kernels::testing
