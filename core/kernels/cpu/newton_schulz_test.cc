#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/kernels/cpu.h"
#include "core/kernels/testing/harness.h"
#include "core/kernels/testing/reference.h"
#include "gtest/gtest.h"

namespace gtp::kernels::testing {
namespace {

// The coefficient sets as kernels.h documents them, typed in again so the
// reference does not share NsCoefficientsAt with the code under test.
std::vector<std::array<double, 3>> Coefficients(NsCoefficients set, int steps) {
  static constexpr double kQuintic[5][3] = {{4.0848, -6.8946, 2.9270},
                                            {3.9505, -6.3029, 2.6377},
                                            {3.7418, -5.5913, 2.3037},
                                            {2.8769, -3.1427, 1.2046},
                                            {2.8366, -3.0525, 1.2012}};
  std::vector<std::array<double, 3>> abc;
  for (int i = 0; i < steps; ++i) {
    if (set == NsCoefficients::kSimple) {
      abc.push_back({3.4445, -4.7750, 2.0315});
    } else {
      abc.push_back({kQuintic[i % 5][0], kQuintic[i % 5][1], kQuintic[i % 5][2]});
    }
  }
  return abc;
}

size_t ScratchSize(int64_t M, int64_t N) {
  const int64_t R = std::min(M, N);
  return 2 * R * R + 2 * M * N;
}

// Runs the op with exactly the documented scratch, checking it stays inside.
std::vector<float> Orthogonalise(const std::vector<float>& G, int64_t M, int64_t N, int steps,
                                 NsCoefficients set) {
  std::vector<float> X = NaNs(M * N);
  GuardedBuffer scratch(ScratchSize(M, N));
  cpu::NewtonSchulz(G.data(), X.data(), scratch.data(), M, N, steps, set);
  EXPECT_TRUE(scratch.GuardIntact());
  return X;
}

struct Shape {
  int64_t M, N;
};

TEST(NewtonSchulz, MatchesDoubleReimplementation) {
  Rng rng(91);
  // Wide, tall (the transposed path), square, and vectors.
  for (const Shape& s : {Shape{1, 1}, Shape{3, 5}, Shape{5, 3}, Shape{1, 7}, Shape{7, 1},
                         Shape{16, 33}, Shape{33, 16}, Shape{48, 48}}) {
    for (NsCoefficients set : {NsCoefficients::kQuintic, NsCoefficients::kSimple}) {
      for (int steps : {0, 1, 5, 7}) {  // 7 wraps the quintic cycle
        SCOPED_TRACE(absl::StrCat("M=", s.M, " N=", s.N, " steps=", steps,
                                  set == NsCoefficients::kSimple ? " simple" : " quintic"));
        // Unnormalised input: the op must scale by the Frobenius norm itself.
        std::vector<float> G = rng.Normal(s.M * s.N, 0.0f, 30.0f);
        std::vector<float> X = Orthogonalise(G, s.M, s.N, steps, set);
        // f32 rounding is amplified about 2× per step where σ ≈ 1 meets the
        // first quintic step (|p'(1)| ≈ 2); the worst case seen is 8e-6 after 7 steps.
        EXPECT_TRUE(
            RelClose(X, RefNewtonSchulz(ToDouble(G), s.M, s.N, Coefficients(set, steps)), 3e-5));
      }
    }
  }
}

// σ_i(X) = √eig(X·Xᵀ) (or XᵀX for tall X, the smaller Gram).
std::vector<double> SingularValues(const std::vector<float>& X, int64_t M, int64_t N) {
  const bool wide = M <= N;
  const int64_t R = wide ? M : N;
  std::vector<double> gram(R * R, 0.0);
  for (int64_t i = 0; i < R; ++i) {
    for (int64_t j = 0; j < R; ++j) {
      double acc = 0;
      for (int64_t p = 0; p < (wide ? N : M); ++p) {
        acc += wide ? static_cast<double>(X[i * N + p]) * X[j * N + p]
                    : static_cast<double>(X[p * N + i]) * X[p * N + j];
      }
      gram[i * R + j] = acc;
    }
  }
  std::vector<double> sv = SymmetricEigenvalues(gram, R);
  for (double& v : sv) v = std::sqrt(std::max(v, 0.0));
  return sv;
}

// A Gaussian 24×64 matrix has σ_max/σ_min ≈ (8 + 4.9)/(8 − 4.9) ≈ 4: well
// conditioned, so after Frobenius normalisation every σ sits in about
// [0.05, 0.4]. Five quintic steps map all of [0.01, 1] into [0.977, 1.032];
// the simple set oscillates within [0.68, 1.14]. Beyond those bands, each
// step maps every singular value through p(σ) = aσ + bσ³ + cσ⁵ on its own,
// so the output spectrum is the input's pushed through the scalar polynomials.
TEST(NewtonSchulz, OrthogonalisesWellConditionedInput) {
  Rng rng(92);
  for (const Shape& s : {Shape{24, 64}, Shape{64, 24}}) {
    std::vector<float> G = rng.Normal(s.M * s.N);
    std::vector<double> before = SingularValues(G, s.M, s.N);
    ASSERT_LT(before.back() / before.front(), 10.0) << "input is not well conditioned";
    double frob = 0;
    for (float g : G) frob += static_cast<double>(g) * g;
    frob = std::sqrt(frob);
    for (NsCoefficients set : {NsCoefficients::kQuintic, NsCoefficients::kSimple}) {
      const bool quintic = set == NsCoefficients::kQuintic;
      SCOPED_TRACE(absl::StrCat("M=", s.M, " N=", s.N, quintic ? " quintic" : " simple"));
      std::vector<double> sv = SingularValues(Orthogonalise(G, s.M, s.N, 5, set), s.M, s.N);
      EXPECT_GE(sv.front(), quintic ? 0.97 : 0.65);
      EXPECT_LE(sv.back(), quintic ? 1.04 : 1.15);

      std::vector<double> mapped = before;
      for (double& x : mapped) {
        x /= frob;
        for (const auto& [a, b, c] : Coefficients(set, 5))
          x = a * x + b * x * x * x + c * std::pow(x, 5);
      }
      std::sort(mapped.begin(), mapped.end());
      for (size_t i = 0; i < sv.size(); ++i) EXPECT_NEAR(sv[i], mapped[i], 1e-5) << "σ_" << i;
    }
  }
}

// The +1e-7 in the normalisation keeps an all-zero gradient finite: X = 0.
TEST(NewtonSchulz, ZeroInputGivesZero) {
  for (const Shape& s : {Shape{4, 6}, Shape{6, 4}}) {
    std::vector<float> X =
        Orthogonalise(std::vector<float>(s.M * s.N, 0.0f), s.M, s.N, 5, NsCoefficients::kQuintic);
    EXPECT_EQ(X, std::vector<float>(s.M * s.N, 0.0f));
  }
}

}  // namespace
}  // namespace gtp::kernels::testing
