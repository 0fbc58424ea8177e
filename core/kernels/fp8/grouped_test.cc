// Tests of the FP8 grouped linear (grouped.h) on the CPU.
//
// 1. Each group is linear.h's function on that group's slices, bit for bit
//    (the claim grouped.h makes: each group quantised on its own). A group of
//    0 rows writes nothing in the forward and dgrad, and scales its weight
//    gradient rows by beta (0: zeroed, 1: kept, ½: halved, each exact). alpha
//    ½ gives fl(½·P + D) for the group's product P (exact ½·P, one rounding).
//    Outputs are poisoned with NaN first: an element not written fails.
// 2. Against an independent reference: the double product of the
//    unquantised inputs, group by group, with the stacked weight's rows
//    [g·N, (g+1)·N) for group g. Relative Frobenius error in [1 %, 6 %]: the
//    quantisation error of e4m3 (linear_test.cc part 2 derives the band). A
//    negative control pairs the groups with another group's weight: the
//    error is then of the order of the outputs themselves (> 50 %), so the
//    band would catch a group reading the wrong weight or rows.
// 3. Group row counts that are not multiples of 16 (cuBLASLt's FP8 rule),
//    a wrong number of weights, mismatched groups: aborts naming them.
#include "core/kernels/fp8/grouped.h"

#include <cmath>
#include <cstdint>
#include <vector>

#include "core/allocator.h"
#include "core/dtype.h"
#include "core/kernels/fp8/block_testing.h"
#include "core/kernels/fp8/linear.h"
#include "core/kernels/ops.h"
#include "core/kernels/testing/harness.h"
#include "core/tensor.h"
#include "gtest/gtest.h"

namespace gtp::kernels::fp8 {
namespace {

using testing::BlockyMatrix;
using testing::Bytes;
using testing::Floats;
using testing::MakeMatrix;
using testing::RelFrobenius;

// G = 4 groups of 48, 0, 128 and 32 rows; K = 160 (a partial K block),
// N = 144 (a partial tile).
const std::vector<int64_t> kOff = {0, 48, 48, 176, 208};
constexpr int kG = 4;
constexpr int64_t kM = 208, kK = 160, kN = 144;

class Fp8GroupedTest : public ::testing::Test {
 protected:
  void SetUp() override {
    x_ = MakeMatrix(BlockyMatrix(kM, kK, 1), kM, kK, host_, DType::kBF16);
    w_ = MakeMatrix(BlockyMatrix(kG * kN, kK, 2), kG * kN, kK, host_, DType::kBF16);
    dy_ = MakeMatrix(BlockyMatrix(kM, kN, 3), kM, kN, host_, DType::kBF16);
  }
  Tensor Poisoned(int64_t r, int64_t c, DType t) {
    return MakeMatrix(kernels::testing::NaNs(static_cast<size_t>(r * c)), r, c, host_, t);
  }
  Tensor WeightOf(int g) const { return w_.Slice(g * kN, (g + 1) * kN); }

  HeapAllocator host_;
  Exec e_ = Exec::Cpu(host_);
  Tensor x_, w_, dy_;
};

TEST_F(Fp8GroupedTest, EachGroupIsTheLinearFunctionOnItsSlices) {
  const std::vector<Fp8WeightPair> wq = QuantizeGroupedWeight(e_, w_, kG);
  Fp8GroupedInput xq(e_, x_, kOff), dyq(e_, dy_, kOff);
  for (int g = 0; g < kG; ++g) dyq.Both(g);
  Tensor y = Poisoned(kM, kN, DType::kBF16), dx = Poisoned(kM, kK, DType::kBF16);
  Fp8GroupedLinear(e_, xq, wq, y);
  Fp8GroupedLinearBackwardData(e_, dyq, wq, dx);
  Tensor dw = Poisoned(kG * kN, kK, DType::kF32);
  Fp8GroupedLinearBackwardWeight(e_, dyq, xq, 1.0f, 0.0f, dw);
  const std::vector<float> dw0 = Floats(dw);
  // beta 1 adds the product again; alpha ½ then adds half of it.
  Fp8GroupedLinearBackwardWeight(e_, dyq, xq, 1.0f, 1.0f, dw);
  const std::vector<float> dw1 = Floats(dw);
  Fp8GroupedLinearBackwardWeight(e_, dyq, xq, 0.5f, 1.0f, dw);
  const std::vector<float> dw2 = Floats(dw);
  for (int g = 0; g < kG; ++g) {
    SCOPED_TRACE(::testing::Message() << "group " << g);
    const Tensor xg = x_.Slice(kOff[g], kOff[g + 1]), dyg = dy_.Slice(kOff[g], kOff[g + 1]);
    const int64_t r = kOff[g + 1] - kOff[g];
    const int64_t w0 = g * kN * kK, w1 = (g + 1) * kN * kK;
    const std::vector<float> got0(dw0.begin() + w0, dw0.begin() + w1),
        got1(dw1.begin() + w0, dw1.begin() + w1), got2(dw2.begin() + w0, dw2.begin() + w1);
    if (r == 0) {
      for (int64_t i = 0; i < kN * kK; ++i) {
        ASSERT_EQ(got0[i], 0.0f) << "an empty group's gradient rows with beta 0 are zeroed";
        ASSERT_EQ(got1[i], 0.0f) << "beta 1 keeps them";
      }
      continue;
    }
    Tensor ref_y = e_.Empty({r, kN}, DType::kBF16), ref_dx = e_.Empty({r, kK}, DType::kBF16),
           ref_dw = e_.Empty({kN, kK}, DType::kF32);
    Fp8Linear(e_, xg, WeightOf(g), ref_y);
    Fp8LinearBackwardData(e_, dyg, WeightOf(g), ref_dx);
    Fp8LinearBackwardWeight(e_, dyg, xg, ref_dw);
    EXPECT_TRUE(Bytes(y.Slice(kOff[g], kOff[g + 1])) == Bytes(ref_y)) << "forward";
    EXPECT_TRUE(Bytes(dx.Slice(kOff[g], kOff[g + 1])) == Bytes(ref_dx)) << "dgrad";
    const std::vector<float> p = Floats(ref_dw);
    for (int64_t i = 0; i < kN * kK; ++i) {
      ASSERT_TRUE(got0[i] == p[i]) << "wgrad beta 0 at " << i << ": " << got0[i] << " vs " << p[i];
      ASSERT_TRUE(got1[i] == p[i] + p[i]) << "wgrad beta 1 at " << i;
      const float want = 0.5f * p[i] + got1[i];
      ASSERT_TRUE(got2[i] == want) << "wgrad alpha 1/2 at " << i << ": " << got2[i] << " vs "
                                   << want;
    }
  }
  // beta ½ on an empty group halves its rows (exactly): fill them first.
  Tensor empty_rows = dw.Slice(1 * kN, 2 * kN);
  ops::Fill(e_, empty_rows, 3.0f);
  Fp8GroupedLinearBackwardWeight(e_, dyq, xq, 1.0f, 0.5f, dw);
  for (float v : Floats(empty_rows)) ASSERT_EQ(v, 1.5f);
}

// BothOf(g, act, pre): each group's codes, both layouts, are those of the
// activation written by its op (ops::GeluForward / GeluBackward) and quantised
// as a grouped input, bit for bit.
TEST_F(Fp8GroupedTest, BothOfIsTheWrittenActivationQuantised) {
  Tensor gelu = e_.Empty({kM, kK}, DType::kBF16), grad = e_.Empty({kM, kK}, DType::kBF16);
  ops::GeluForward(e_, x_, gelu);
  Tensor dact = MakeMatrix(BlockyMatrix(kM, kK, 4), kM, kK, host_, DType::kBF16);
  ops::GeluBackward(e_, dact, x_, grad);
  struct Form {
    const char* what;
    Fp8InputAct act;
    Tensor in, pre, written;
  };
  for (const Form& f : {Form{"gelu", Fp8InputAct::kGelu, x_, Tensor(), gelu},
                        Form{"gelu grad", Fp8InputAct::kGeluGrad, dact, x_, grad}}) {
    SCOPED_TRACE(f.what);
    Fp8GroupedInput fused(e_, f.in, kOff), plain(e_, f.written, kOff);
    for (int g = 0; g < kG; ++g) {
      if (fused.rows(g) == 0) continue;
      fused.BothOf(g, f.act, f.pre);
      plain.Both(g);
      EXPECT_TRUE(Bytes(fused.Rows(g).q) == Bytes(plain.Rows(g).q)) << "group " << g << " rows";
      EXPECT_TRUE(Bytes(fused.Rows(g).scales) == Bytes(plain.Rows(g).scales)) << "group " << g;
      EXPECT_TRUE(Bytes(fused.Transposed(g).q) == Bytes(plain.Transposed(g).q))
          << "group " << g << " transposed";
      EXPECT_TRUE(Bytes(fused.Transposed(g).scales) == Bytes(plain.Transposed(g).scales))
          << "group " << g;
    }
  }
}

TEST_F(Fp8GroupedTest, EachGroupUsesItsOwnWeightWithinE4m3sError) {
  const std::vector<float> x = Floats(x_), w = Floats(w_), dy = Floats(dy_);
  // The double references, with group g paired with weight perm(g).
  auto references = [&](auto perm, std::vector<double>* y, std::vector<double>* dx,
                        std::vector<double>* dw) {
    y->assign(kM * kN, 0.0);
    dx->assign(kM * kK, 0.0);
    dw->assign(kG * kN * kK, 0.0);
    for (int g = 0; g < kG; ++g) {
      const int64_t wg = perm(g) * kN;  // the weight's first row
      for (int64_t m = kOff[g]; m < kOff[g + 1]; ++m) {
        for (int64_t n = 0; n < kN; ++n) {
          double s = 0;
          for (int64_t k = 0; k < kK; ++k) s += double(x[m * kK + k]) * w[(wg + n) * kK + k];
          (*y)[m * kN + n] = s;
        }
        for (int64_t k = 0; k < kK; ++k) {
          double s = 0;
          for (int64_t n = 0; n < kN; ++n) s += double(dy[m * kN + n]) * w[(wg + n) * kK + k];
          (*dx)[m * kK + k] = s;
        }
        for (int64_t n = 0; n < kN; ++n) {
          for (int64_t k = 0; k < kK; ++k) {
            (*dw)[(g * kN + n) * kK + k] += double(dy[m * kN + n]) * x[m * kK + k];
          }
        }
      }
    }
  };
  const std::vector<Fp8WeightPair> wq = QuantizeGroupedWeight(e_, w_, kG);
  Fp8GroupedInput xq(e_, x_, kOff), dyq(e_, dy_, kOff);
  Tensor y = Poisoned(kM, kN, DType::kF32), dx = Poisoned(kM, kK, DType::kF32),
         dw = Poisoned(kG * kN, kK, DType::kF32);
  Fp8GroupedLinear(e_, xq, wq, y);
  Fp8GroupedLinearBackwardData(e_, dyq, wq, dx);
  Fp8GroupedLinearBackwardWeight(e_, dyq, xq, 1.0f, 0.0f, dw);
  std::vector<double> ry, rdx, rdw;
  references([](int g) { return g; }, &ry, &rdx, &rdw);
  // The empty group's gradient rows are zero in both; the band is over the rest.
  for (const auto& [name, err] :
       {std::pair{"forward", RelFrobenius(Floats(y), ry)},
        std::pair{"dgrad", RelFrobenius(Floats(dx), rdx)},
        std::pair{"wgrad", RelFrobenius(Floats(dw), rdw)}}) {
    EXPECT_TRUE(err >= 0.01 && err <= 0.06) << name << ": relative Frobenius error " << err;
  }
  // Negative control: each group against the next group's weight.
  references([](int g) { return (g + 1) % kG; }, &ry, &rdx, &rdw);
  EXPECT_GT(RelFrobenius(Floats(y), ry), 0.5) << "forward against the wrong weights";
  EXPECT_GT(RelFrobenius(Floats(dx), rdx), 0.5) << "dgrad against the wrong weights";
}

TEST(Fp8GroupedDeathTest, RefusesGroupsNotMultiplesOf16AndMismatches) {
  HeapAllocator host;
  const Exec cpu = Exec::Cpu(host);
  const Tensor x = cpu.Empty({48, 32}), w = cpu.Empty({2 * 16, 32});
  EXPECT_DEATH(Fp8GroupedInput(cpu, x, {0, 40, 48}),
               "fp8::Fp8GroupedInput: group 0 has 40 rows; FP8 GEMMs need a multiple of 16 \\(pad "
               "each group with zero rows\\)");
  EXPECT_DEATH(Fp8GroupedInput(cpu, x, {0, 32}),
               "fp8::Fp8GroupedInput: off must have G \\+ 1 >= 2 entries from 0 to x's 48 rows");
  EXPECT_DEATH(QuantizeGroupedWeight(cpu, w, 3),
               "fp8::QuantizeGroupedWeight: 3 groups must divide w's rows");
  EXPECT_DEATH(
      {
        Fp8GroupedInput xq(cpu, x, {0, 16, 32, 48});
        Fp8GroupedLinear(cpu, xq, QuantizeGroupedWeight(cpu, w, 2), cpu.Empty({48, 16}));
      },
      "fp8::Fp8GroupedLinear: 2 weights for 3 groups");
  EXPECT_DEATH(
      {
        Fp8GroupedInput a(cpu, x, {0, 16, 48});
        Fp8GroupedInput b(cpu, x, {0, 32, 48});
        Fp8GroupedLinearBackwardWeight(cpu, a, b, 1.0f, 0.0f, cpu.Empty({64, 32}));
      },
      "fp8::Fp8GroupedLinearBackwardWeight: dy and x must have the same row groups");
}

}  // namespace
}  // namespace gtp::kernels::fp8
