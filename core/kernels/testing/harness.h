// core/kernels/testing/harness.h — the op-test harness shared by the CPU and
// CUDA kernel tests.
//
// Every op is tested the same way:
//   1. forward: random inputs → op (f32/bf16) vs. a double-precision reference
//      (core/kernels/testing/reference.h), compared by relative error
//      ‖out − ref‖ / ‖ref‖ (RelClose), which fails on any NaN;
//   2. backward: the op's gradient vs. central finite differences of the double
//      reference on the scalar loss L = Σ w·f(x) with random weights w
//      (FiniteDifferenceGradient); the backward op gets dy = w.
//
// Usage:
//   Rng rng(42);
//   std::vector<float> x = rng.Normal(n), w = rng.Uniform(n);
//   cpu::GeluForward(x.data(), y.data(), n);
//   EXPECT_TRUE(RelClose(y, RefGelu(ToDouble(x)), 1e-5));
//   cpu::GeluBackward(w.data(), x.data(), dx.data(), n);
//   EXPECT_TRUE(RelClose(dx, FiniteDifferenceGradient(RefGelu, ToDouble(x), ToDouble(w)), 1e-4));
//
// Everything here is deterministic for a given seed and runs on the host.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <type_traits>
#include <vector>

#include "core/dtype.h"
#include "gtest/gtest.h"

namespace gtp::kernels::testing {

// Seeded random data (std::mt19937_64: the same values on every platform we
// build with).
class Rng {
 public:
  explicit Rng(uint64_t seed) : gen_(seed) {}

  // n values uniform in [lo, hi).
  std::vector<float> Uniform(size_t n, float lo = -1.0f, float hi = 1.0f);
  // n values from N(mean, stddev²).
  std::vector<float> Normal(size_t n, float mean = 0.0f, float stddev = 1.0f);
  // n integers uniform in [lo, hi] (inclusive).
  std::vector<int32_t> Ints(size_t n, int32_t lo, int32_t hi);

 private:
  std::mt19937_64 gen_;
};

std::vector<double> ToDouble(const std::vector<float>& x);
std::vector<double> ToDouble(const std::vector<bf16>& x);
std::vector<float> ToFloat(const std::vector<bf16>& x);
std::vector<bf16> ToBF16(const std::vector<float>& x);
// Rounds every element to bf16 and back, so f32 and bf16 paths see the same values.
std::vector<float> RoundToBF16(const std::vector<float>& x);
// n quiet NaNs: fill outputs with these to prove an op writes (=) every element.
std::vector<float> NaNs(size_t n);
// f32 values stored as the bytes of dtype `t` (f32, or bf16 rounded to
// nearest even), and bytes of `t` read back as f32; bf16 bytes as bf16.
std::vector<uint8_t> StoreAs(const std::vector<float>& v, DType t);
std::vector<float> LoadAs(const std::vector<uint8_t>& bytes, DType t);
std::vector<bf16> BytesAsBF16(const std::vector<uint8_t>& bytes);

// ‖out − ref‖₂ / ‖ref‖₂, or ‖out − ref‖₂ when ref is all zero. NaN when any
// element of out or ref is NaN or infinite (so NaN never passes a `<= tol`).
double RelativeError(const float* out, const double* ref, size_t n);

// Passes when out and ref have the same length and RelativeError ≤ tol; the
// failure message shows the error and the worst element.
::testing::AssertionResult RelClose(const float* out, const double* ref, size_t n, double tol);
::testing::AssertionResult RelClose(const std::vector<float>& out, const std::vector<double>& ref,
                                    double tol);
// bf16 outputs, compared after exact widening to f32. (A template so that a
// braced list still means std::vector<float>.)
template <typename T, typename = std::enable_if_t<std::is_same_v<T, bf16>>>
::testing::AssertionResult RelClose(const std::vector<T>& out, const std::vector<double>& ref,
                                    double tol) {
  return RelClose(ToFloat(out), ref, tol);
}

// bf16 outputs that a kernel computes in f32 and rounds once: passes when at
// most max_fraction·n + 1 of the significant elements (|ref| ≥ 1e-3·max|ref|)
// differ from the reference rounded to bf16 (nearest even). A correct kernel
// differs only where its f32 error crosses a rounding boundary (about 0.1% of
// elements); truncating, rounding twice or rounding an intermediate differs on
// a large fraction, which a norm-wise tolerance of ~2⁻⁸ cannot see. Tiny
// elements (where f32 formulas such as 1 + tanh u cancel) are left to RelClose.
// NaN never matches.
::testing::AssertionResult RoundedOnce(const std::vector<bf16>& out, const std::vector<double>& ref,
                                       double max_fraction = 0.02);

// a and b hold the same bytes (bit-identical results; NaN payloads included).
template <typename T>
bool SameBytes(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

// f: x → y (any length), all in double.
using VectorFn = std::function<std::vector<double>(const std::vector<double>& x)>;

// ∂L/∂x for L(x) = Σ_i w_i·f(x)_i by central differences
//   (L(x + h·e_j) − L(x − h·e_j)) / 2h,  h = eps·max(1, |x_j|),
// evaluated in double. Costs 2·x.size() calls of f. The truncation error is
// O(h²·f'''), so eps = 1e-5 on a smooth double reference gives about 1e-9.
std::vector<double> FiniteDifferenceGradient(const VectorFn& f, const std::vector<double>& x,
                                             const std::vector<double>& w, double eps = 1e-5);

// A float buffer of `n` elements followed by a guard zone of NaN sentinels
// with a fixed bit pattern: hand data() to an op as scratch or output, then
// EXPECT_TRUE(buf.GuardIntact()) proves the op stayed within n elements.
class GuardedBuffer {
 public:
  explicit GuardedBuffer(size_t n, size_t guard = 64);
  float* data() { return buf_.data(); }
  size_t size() const { return n_; }
  ::testing::AssertionResult GuardIntact() const;

 private:
  size_t n_;
  std::vector<float> buf_;
};

}  // namespace gtp::kernels::testing
