// The GELU kernels (core/kernels/cuda/activation.cu, bf16: the σ form of
// cuda/gelu.cuh) run on the CPU by the warp emulator, against GELU and its
// derivative in double (testing/reference.h): each output rounded once to
// bf16 (RoundedOnce) and within bf16's rounding (RelClose). And the σ form's
// f32 values themselves against double: to 2⁻¹⁹ relative against the tanh
// form where that keeps its digits, and everywhere against the σ form in
// double (the tail, where ½(1 + tanh u) cancels even in double). The host's __expf is the exact
// exp (warp_emulator.h): the device's approximation (relative error about 1e-5 at worst here) is
// left to activation_gpu_test, which holds the same kernels to the same reference on a GPU. The
// emulator before the kernel source:
// clang-format off
#define GTP_CUDA_HOST_EMULATION
#include "core/kernels/cuda/testing/warp_emulator.h"
#include "core/kernels/cuda/activation.cu"
// clang-format on

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <utility>
#include <vector>

#include "core/kernels/testing/harness.h"
#include "core/kernels/testing/reference.h"
#include "gtest/gtest.h"

namespace gtp::kernels::cuda {
namespace {

using testing::RefGelu;
using testing::RefGeluBackward;

// x from −12 to 12 in steps of 1/64 (both tails, the curved middle, 0).
std::vector<float> Grid() {
  std::vector<float> x;
  for (int i = -768; i <= 768; ++i) x.push_back(static_cast<float>(i) / 64.0f);
  return x;
}

std::vector<double> Doubles(const std::vector<float>& v) { return {v.begin(), v.end()}; }

// GELU (grad false) or dy·GELU' (grad true) in double through σ (x·σ(2u),
// no cancellation): the reference for the tail, where testing::RefGelu's
// 1 + tanh u loses every digit (double cancels below 1 + tanh u ≈ 1e-16,
// x < −7). *scale: the value's magnitude, for the derivative that of its
// two terms, |dy|·(p + |2·x·p·q·du|) — they cancel near its root
// (x ≈ −0.75), so its error is measured against them.
double SigmaGelu(double x, double dy, bool grad, double* scale) {
  const double s = std::sqrt(2.0 / M_PI), k = 0.044715, u = s * (x + k * x * x * x);
  const double p = 1.0 / (1.0 + std::exp(-2.0 * u)), q = 1.0 / (1.0 + std::exp(2.0 * u));
  const double t = 2.0 * x * p * q * s * (1.0 + 3.0 * k * x * x);
  *scale = grad ? std::abs(dy) * (p + std::abs(t)) : std::abs(x * p);
  return grad ? dy * (p + t) : x * p;
}

TEST(GeluSigmaForm, F32ValuesMatchDoubleEverywhere) {
  const std::vector<float> x = Grid();
  std::vector<float> dy(x.size());
  for (size_t i = 0; i < x.size(); ++i) dy[i] = 1.0f - 0.001f * static_cast<float>(i % 7);
  const std::vector<double> y = RefGelu(Doubles(x)), dx = RefGeluBackward(Doubles(dy), Doubles(x));
  double worst = 0, worst_tail = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double xi = x[i];
    const double gy = internal::GeluBf16(x[i]), gdx = internal::GeluGradBf16(dy[i], x[i]);
    ASSERT_TRUE(std::isfinite(gy) && std::isfinite(gdx)) << "x = " << xi;
    // f32 computes v = −2|u| with a few roundings (relative ~4·2⁻²⁴), so
    // exp(v) carries |v|·4·2⁻²⁴ beyond the 2⁻¹⁹ the other roundings stay
    // within (a few 2⁻²⁴ each; a hundred times below bf16's half unit, 2⁻⁹).
    const double s = std::sqrt(2.0 / M_PI), v = 2.0 * std::abs(s * (xi + 0.044715 * xi * xi * xi));
    const double tol = std::ldexp(1.0, -19) + v * std::ldexp(4.0, -24);
    for (const bool grad : {false, true}) {
      double scale = 0;
      const double ref = SigmaGelu(xi, dy[i], grad, &scale), got = grad ? gdx : gy;
      const char* what = grad ? "GeluGradBf16" : "GeluBf16";
      // Against the σ form in double everywhere; below 1e-30, where exp(v)
      // underflows in f32 (x < −8.3), ±0 is allowed.
      EXPECT_LE(std::abs(got - ref), std::max(1e-30, tol * scale)) << what << " at x = " << xi;
      if (scale > 1e-30) worst_tail = std::max(worst_tail, std::abs(got - ref) / scale);
      // Against RefGelu (the tanh form: the same function written the
      // other way) where it keeps its digits (x ≥ −5: 1 + tanh u ≥ 1e-8).
      if (xi >= -5.0) {
        const double tanh_ref = grad ? dx[i] : y[i];
        EXPECT_LE(std::abs(got - tanh_ref), tol * scale) << what << " at x = " << xi;
        worst = std::max(worst, std::abs(got - tanh_ref) / scale);
      }
    }
  }
  std::printf(
      "σ form in f32, worst error relative to the value's scale: %.3g against RefGelu "
      "(x ≥ −5), %.3g against the σ form in double (scale > 1e-30)\n",
      worst, worst_tail);
  EXPECT_TRUE(std::isnan(internal::GeluBf16(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_EQ(internal::GeluBf16(std::numeric_limits<float>::infinity()),
            std::numeric_limits<float>::infinity());
}

TEST(GeluKernelsBf16, RoundOnceFromTheDoubleReference) {
  const std::vector<float> xf = Grid();
  const int64_t n = static_cast<int64_t>(xf.size());
  std::vector<bf16> x(n), dy(n), y(n), dx(n);
  for (int64_t i = 0; i < n; ++i) {
    x[i] = ToBF16(xf[i]);
    dy[i] = ToBF16(1.0f - 0.01f * static_cast<float>(i % 13));
  }
  std::vector<double> xd(n), dyd(n);
  for (int64_t i = 0; i < n; ++i) xd[i] = ToF32(x[i]), dyd[i] = ToF32(dy[i]);
  GeluForward(x.data(), y.data(), n, nullptr);
  GeluBackward(dy.data(), x.data(), dx.data(), n, nullptr);
  const std::vector<double> ry = RefGelu(xd), rdx = RefGeluBackward(dyd, xd);
  EXPECT_TRUE(testing::RoundedOnce(y, ry));
  EXPECT_TRUE(testing::RoundedOnce(dx, rdx));
  EXPECT_TRUE(testing::RelClose(y, ry, 5e-3));
  EXPECT_TRUE(testing::RelClose(dx, rdx, 5e-3));
}

}  // namespace
}  // namespace gtp::kernels::cuda
