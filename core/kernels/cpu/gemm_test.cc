#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/kernels/cpu.h"
#include "core/kernels/testing/harness.h"
#include "core/kernels/testing/reference.h"
#include "gtest/gtest.h"

namespace gtp::kernels::testing {
namespace {

struct Shape {
  int64_t m, n, k;
};

// Odd and degenerate shapes; 257 crosses every blocking boundary of OpenBLAS' kernels.
const Shape kShapes[] = {{1, 1, 1},   {3, 5, 7},   {257, 3, 33},
                         {2, 257, 1}, {1, 1, 257}, {64, 48, 32}};

std::string Describe(const GemmDesc& d) {
  return absl::StrCat("m=", d.m, " n=", d.n, " k=", d.k, " ta=", d.trans_a, " tb=", d.trans_b,
                      " lda=", d.lda, " ldb=", d.ldb, " ldc=", d.ldc, " alpha=", d.alpha,
                      " beta=", d.beta);
}

// Stored element counts of A, B, C under d (with its leading dimensions).
size_t SizeA(const GemmDesc& d) {
  return (d.trans_a ? d.k : d.m) * (d.lda ? d.lda : (d.trans_a ? d.m : d.k));
}
size_t SizeB(const GemmDesc& d) {
  return (d.trans_b ? d.n : d.k) * (d.ldb ? d.ldb : (d.trans_b ? d.k : d.n));
}
size_t SizeC(const GemmDesc& d) { return d.m * (d.ldc ? d.ldc : d.n); }

std::vector<double> Reference(const GemmDesc& d, const std::vector<float>& A,
                              const std::vector<float>& B, const std::vector<float>& C) {
  std::vector<double> ref = ToDouble(C);
  RefGemm(d.trans_a, d.trans_b, d.m, d.n, d.k, d.alpha, ToDouble(A), d.lda, ToDouble(B), d.ldb,
          d.beta, &ref, d.ldc);
  return ref;
}

TEST(Gemm, F32MatchesReferenceForAllTransposes) {
  Rng rng(1);
  for (const Shape& s : kShapes) {
    for (int t = 0; t < 4; ++t) {
      GemmDesc d;
      d.trans_a = t & 1;
      d.trans_b = t & 2;
      d.m = s.m, d.n = s.n, d.k = s.k;
      d.alpha = 0.75f;
      d.beta = -0.5f;
      SCOPED_TRACE(Describe(d));
      std::vector<float> A = rng.Uniform(SizeA(d)), B = rng.Uniform(SizeB(d)),
                         C = rng.Uniform(SizeC(d));
      std::vector<double> ref = Reference(d, A, B, C);
      cpu::Gemm(d, A.data(), B.data(), C.data());
      // 3e-5, not 1e-5: with m = n = 1 the whole check is one length-257 dot
      // product, whose f32 error relative to a cancelled sum reaches ~1e-5.
      EXPECT_TRUE(RelClose(C, ref, 3e-5));
    }
  }
}

TEST(Gemm, HonoursLeadingDimensions) {
  Rng rng(2);
  for (int t = 0; t < 4; ++t) {
    GemmDesc d;
    d.trans_a = t & 1;
    d.trans_b = t & 2;
    d.m = 5, d.n = 7, d.k = 3;
    d.lda = (d.trans_a ? d.m : d.k) + 3;
    d.ldb = (d.trans_b ? d.k : d.n) + 1;
    d.ldc = d.n + 2;
    d.beta = 1.0f;
    SCOPED_TRACE(Describe(d));
    std::vector<float> A = rng.Uniform(SizeA(d)), B = rng.Uniform(SizeB(d)),
                       C = rng.Uniform(SizeC(d));
    // NaN in the padding of A and B: reading it would poison C.
    const int64_t a_cols = d.trans_a ? d.m : d.k, b_cols = d.trans_b ? d.k : d.n;
    for (size_t i = 0; i < A.size(); ++i) {
      if (static_cast<int64_t>(i % d.lda) >= a_cols) A[i] = NAN;
    }
    for (size_t i = 0; i < B.size(); ++i) {
      if (static_cast<int64_t>(i % d.ldb) >= b_cols) B[i] = NAN;
    }
    std::vector<double> ref = Reference(d, A, B, C);
    cpu::Gemm(d, A.data(), B.data(), C.data());
    // The reference leaves C's padding as it was, so this also checks the pad is untouched.
    EXPECT_TRUE(RelClose(C, ref, 1e-5));
  }
}

TEST(Gemm, BetaZeroDoesNotReadC) {
  Rng rng(3);
  for (DType c_type : {DType::kF32, DType::kBF16}) {
    GemmDesc d;
    d.m = 9, d.n = 4, d.k = 6;
    d.alpha = 2.0f;
    d.c_type = c_type;
    std::vector<float> A = rng.Uniform(SizeA(d)), B = rng.Uniform(SizeB(d)), C = NaNs(SizeC(d));
    std::vector<double> ref = Reference(d, A, B, C);
    if (c_type == DType::kF32) {
      cpu::Gemm(d, A.data(), B.data(), C.data());
      EXPECT_TRUE(RelClose(C, ref, 1e-5));
    } else {
      std::vector<bf16> Cb = ToBF16(C);
      cpu::Gemm(d, A.data(), B.data(), Cb.data());
      EXPECT_TRUE(RelClose(ToFloat(Cb), ref, 1e-2));
    }
  }
}

// GemmDesc::c_in: beta·C read from another matrix and C written without
// being read (NaN before), against the double reference alpha·op(A)·op(B) +
// beta·c_in (+ bias); c_in and C's padding left as they were. f32 within
// 1e-5 (sums of ≤ 33 products); a bf16 output is one rounding (≤ 2⁻⁹
// relative) of the f32 sum: 1e-2 norm-wise.
TEST(Gemm, ReadsBetaCFromCIn) {
  Rng rng(7);
  for (DType c_type : {DType::kF32, DType::kBF16}) {
    for (const Shape& s : {Shape{5, 7, 3}, Shape{257, 3, 33}, Shape{4, 6, 0}}) {
      for (bool with_bias : {false, true}) {
        if (with_bias && s.k == 0) continue;
        GemmDesc d;
        d.trans_b = true;
        d.m = s.m, d.n = s.n, d.k = s.k;
        d.ldc = d.n + 2;
        d.alpha = 0.75f;
        d.beta = -0.5f;
        d.c_type = c_type;
        SCOPED_TRACE(absl::StrCat(Describe(d), " c=", DTypeName(c_type), " bias=", with_bias));
        const std::vector<float> A = rng.Uniform(SizeA(d)), B = rng.Uniform(SizeB(d));
        std::vector<float> cin = rng.Uniform(SizeC(d)), bias = rng.Uniform(d.n);
        std::vector<float> c0(SizeC(d), NAN);
        for (int64_t r = 0; r < d.m; ++r) {
          for (int64_t c = d.n; c < d.ldc; ++c) c0[r * d.ldc + c] = 7.0f;  // padding
        }
        if (c_type == DType::kBF16) {  // the values the bf16 buffers hold
          cin = ToFloat(ToBF16(cin));
          bias = ToFloat(ToBF16(bias));
        }
        std::vector<double> ref = Reference(d, A, B, cin);
        for (int64_t r = 0; r < d.m; ++r) {
          for (int64_t c = 0; c < d.ldc; ++c) {
            double& v = ref[r * d.ldc + c];
            v = c >= d.n ? 7.0 : v + (with_bias ? bias[c] : 0.0);
          }
        }
        if (c_type == DType::kF32) {
          const std::vector<float> cin_before = cin;
          d.c_in = cin.data();
          if (with_bias) d.bias = bias.data();
          cpu::Gemm(d, A.data(), B.data(), c0.data());
          EXPECT_TRUE(RelClose(c0, ref, 1e-5));
          EXPECT_EQ(cin, cin_before);
        } else {
          std::vector<bf16> cb = ToBF16(c0), cinb = ToBF16(cin), biasb = ToBF16(bias);
          d.c_in = cinb.data();
          if (with_bias) d.bias = biasb.data();
          cpu::Gemm(d, A.data(), B.data(), cb.data());
          EXPECT_TRUE(RelClose(ToFloat(cb), ref, 1e-2));
          EXPECT_EQ(ToFloat(cinb), cin);
        }
      }
    }
  }
}

TEST(Gemm, HandlesEmptyDimensions) {
  Rng rng(4);
  // k = 0: C = beta·C, or 0 when beta == 0 even if C held NaN. A and B are never read.
  GemmDesc d;
  d.m = 3, d.n = 4, d.k = 0;
  d.beta = 0.5f;
  std::vector<float> C = rng.Uniform(12);
  std::vector<float> expect = C;
  for (float& v : expect) v *= 0.5f;
  cpu::Gemm(d, nullptr, nullptr, C.data());
  EXPECT_EQ(C, expect);
  d.beta = 0.0f;
  C = NaNs(12);
  cpu::Gemm(d, nullptr, nullptr, C.data());
  EXPECT_EQ(C, std::vector<float>(12, 0.0f));

  // m = 0 or n = 0: nothing to compute, nothing written.
  for (const Shape& s : {Shape{0, 4, 5}, Shape{4, 0, 5}}) {
    GemmDesc e;
    e.m = s.m, e.n = s.n, e.k = s.k;
    GuardedBuffer out(0);
    std::vector<float> A = rng.Uniform(20), B = rng.Uniform(20);
    cpu::Gemm(e, A.data(), B.data(), out.data());
    EXPECT_TRUE(out.GuardIntact());
  }
}

TEST(Gemm, BF16InputsAccumulateInF32) {
  Rng rng(5);
  for (const Shape& s : kShapes) {
    for (int t = 0; t < 4; ++t) {
      GemmDesc d;
      d.trans_a = t & 1;
      d.trans_b = t & 2;
      d.m = s.m, d.n = s.n, d.k = s.k;
      d.ab_type = DType::kBF16;
      d.lda = (d.trans_a ? d.m : d.k) + (t == 3);  // one strided case per shape
      d.beta = 0.25f;
      SCOPED_TRACE(Describe(d));
      // The reference sees the bf16 values exactly, so only f32 accumulation error remains.
      std::vector<float> A = RoundToBF16(rng.Uniform(SizeA(d))),
                         B = RoundToBF16(rng.Uniform(SizeB(d))), C = rng.Uniform(SizeC(d));
      std::vector<double> ref = Reference(d, A, B, C);
      std::vector<bf16> Ab = ToBF16(A), Bb = ToBF16(B);
      cpu::Gemm(d, Ab.data(), Bb.data(), C.data());
      EXPECT_TRUE(RelClose(C, ref, 1e-5));
    }
  }
}

TEST(Gemm, BF16OutputIsRoundedOnceFromF32) {
  Rng rng(6);
  for (const Shape& s : kShapes) {
    for (DType ab_type : {DType::kF32, DType::kBF16}) {
      GemmDesc d;
      d.trans_b = true;
      d.m = s.m, d.n = s.n, d.k = s.k;
      d.alpha = 1.5f;
      d.beta = -1.0f;
      d.ab_type = ab_type;
      SCOPED_TRACE(Describe(d));
      std::vector<float> A = RoundToBF16(rng.Uniform(SizeA(d))),
                         B = RoundToBF16(rng.Uniform(SizeB(d))),
                         C = RoundToBF16(rng.Uniform(SizeC(d)));
      std::vector<double> ref = Reference(d, A, B, C);
      std::vector<bf16> Ab = ToBF16(A), Bb = ToBF16(B), Cb = ToBF16(C);
      const void* a = ab_type == DType::kBF16 ? static_cast<const void*>(Ab.data()) : A.data();
      const void* b = ab_type == DType::kBF16 ? static_cast<const void*>(Bb.data()) : B.data();
      // f32 C holding the same values: the bf16 result must be exactly its rounding.
      cpu::Gemm(d, a, b, C.data());
      d.c_type = DType::kBF16;
      cpu::Gemm(d, a, b, Cb.data());
      for (size_t i = 0; i < C.size(); ++i) {
        ASSERT_EQ(Cb[i].bits, F32ToBF16Bits(C[i])) << "element " << i;
      }
      EXPECT_TRUE(RelClose(ToFloat(Cb), ref, 1e-2));
    }
  }
}

// A linear layer y[N, O] = x[N, I]·Wᵀ built from Gemm, with its backward from
// the transposed variants: dx = dy·W (=) and dW += dyᵀ·x (beta = 1).
TEST(Gemm, LinearBackwardMatchesFiniteDifferences) {
  Rng rng(7);
  for (const Shape& s : {Shape{1, 1, 1}, Shape{3, 5, 7}, Shape{17, 4, 9}}) {
    const int64_t N = s.m, O = s.n, I = s.k;
    SCOPED_TRACE(absl::StrCat("N=", N, " O=", O, " I=", I));
    std::vector<float> x = rng.Uniform(N * I), W = rng.Uniform(O * I), dy = rng.Uniform(N * O);
    auto forward = [&](const std::vector<double>& xd, const std::vector<double>& Wd) {
      std::vector<double> y(N * O);
      RefGemm(false, true, N, O, I, 1.0, xd, 0, Wd, 0, 0.0, &y, 0);
      return y;
    };
    std::vector<double> fd_x = FiniteDifferenceGradient(
        [&](const std::vector<double>& xd) { return forward(xd, ToDouble(W)); }, ToDouble(x),
        ToDouble(dy));
    std::vector<double> fd_W = FiniteDifferenceGradient(
        [&](const std::vector<double>& Wd) { return forward(ToDouble(x), Wd); }, ToDouble(W),
        ToDouble(dy));

    std::vector<float> dx = NaNs(N * I);
    GemmDesc dgrad;
    dgrad.m = N, dgrad.n = I, dgrad.k = O;
    cpu::Gemm(dgrad, dy.data(), W.data(), dx.data());
    EXPECT_TRUE(RelClose(dx, fd_x, 1e-5));

    std::vector<float> dW0 = rng.Uniform(O * I), dW = dW0;
    GemmDesc wgrad;
    wgrad.trans_a = true;
    wgrad.m = O, wgrad.n = I, wgrad.k = N;
    wgrad.beta = 1.0f;
    cpu::Gemm(wgrad, dy.data(), x.data(), dW.data());
    for (size_t i = 0; i < dW.size(); ++i) fd_W[i] += dW0[i];
    EXPECT_TRUE(RelClose(dW, fd_W, 1e-5));
  }
}

}  // namespace
}  // namespace gtp::kernels::testing
