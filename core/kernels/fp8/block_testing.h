// core/kernels/fp8/block_testing.h — what the block-quantisation and GEMM
// tests share: host tensors from vectors and back, test matrices whose 128
// blocks span many magnitudes, and a block quantiser written from the
// design note (block_scale.h) in double precision, using e4m3_reference.h
// instead of the code under test.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "core/allocator.h"
#include "core/kernels/fp8/block_quant.h"
#include "core/kernels/fp8/block_reference.h"
#include "core/kernels/fp8/e4m3_reference.h"
#include "core/kernels/testing/harness.h"
#include "core/tensor.h"

namespace gtp::kernels::fp8::testing {

// f32 [R, C] (or bf16, rounded to nearest even) holding x.
inline Tensor MakeMatrix(const std::vector<float>& x, int64_t R, int64_t C, Allocator& a,
                         DType t = DType::kF32) {
  Tensor m = Tensor::Empty({R, C}, t, a);
  const std::vector<uint8_t> bytes = kernels::testing::StoreAs(x, t);
  if (!bytes.empty()) std::memcpy(m.raw_data(), bytes.data(), bytes.size());
  return m;
}

inline std::vector<uint8_t> Bytes(const Tensor& t) {
  std::vector<uint8_t> v(static_cast<size_t>(t.nbytes()));
  if (!v.empty()) std::memcpy(v.data(), t.raw_data(), v.size());
  return v;
}

// The f32 values of an f32 or bf16 tensor.
inline std::vector<float> Floats(const Tensor& t) { return kernels::testing::LoadAs(Bytes(t), t.dtype()); }

// xᵀ [C, R] of x [R, C] (any element type).
template <typename T>
std::vector<T> Transpose(const std::vector<T>& x, int64_t R, int64_t C) {
  std::vector<T> t(x.size());
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c) t[c * R + r] = x[r * C + c];
  return t;
}

// R × C normal values, each 128×128 tile (and within it each row's 128
// block, for 1×128) multiplied by its own power of two in [2⁻²⁰, 2²⁰], so a
// scale applied to the wrong block is off by orders of magnitude.
inline std::vector<float> BlockyMatrix(int64_t R, int64_t C, uint64_t seed) {
  kernels::testing::Rng rng(seed);
  std::vector<float> x = rng.Normal(static_cast<size_t>(R * C));
  const int64_t rb = (R + 127) / 128, cb = (C + 127) / 128;
  const std::vector<int32_t> tile = rng.Ints(static_cast<size_t>(rb * cb), -20, 20);
  const std::vector<int32_t> row = rng.Ints(static_cast<size_t>(R * cb), -6, 6);
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c)
      x[r * C + c] = std::ldexp(x[r * C + c], tile[(r / 128) * cb + c / 128] + row[r * cb + c / 128]);
  return x;
}

// Codes and scales in a layout (block_reference.h's quantiser).
using RefQuantized = reference::RefBlocks;
inline RefQuantized RefQuantize(const std::vector<float>& x, int64_t R, int64_t C, Fp8Layout l) {
  return reference::RefQuantizeBlocks(x, R, C, l == Fp8Layout::kRow1x128 ? 1 : 128);
}

// The exact value e4m3⁻¹(code)·scale of every element (double: 4 + 24
// significant bits, exact), with the scale of its block in layout l.
inline std::vector<double> RefDequantize(const std::vector<uint8_t>& q,
                                         const std::vector<float>& scales, int64_t R, int64_t C,
                                         Fp8Layout l) {
  const int64_t cb = (C + 127) / 128;
  std::vector<double> d(q.size());
  for (int64_t r = 0; r < R; ++r) {
    const int64_t sr = l == Fp8Layout::kRow1x128 ? r : r / 128;
    for (int64_t c = 0; c < C; ++c)
      d[r * C + c] = reference::E4M3Decode(q[r * C + c]) * scales[sr * cb + c / 128];
  }
  return d;
}

// v [R, C] through the reference quantiser in layout l, dequantised exactly.
inline std::vector<double> RefRoundTrip(const std::vector<float>& v, int64_t R, int64_t C,
                                        Fp8Layout l) {
  const RefQuantized q = RefQuantize(v, R, C, l);
  return RefDequantize(q.q, q.scales, R, C, l);
}

// The summation-order part of the GEMM's error bound, as a multiple γ of
// S = Σ_k |da_k·db_k| (dequantised values; block_gemm_test.cc derives it):
// |y − y_deq| ≤ γ·S with γ = L·u_block + (nb + 2)·2⁻²⁴ + K·2⁻⁵², for
// L = min(K, 128) terms per K block summed with unit roundoff u_block (2⁻²⁴:
// f32), the 2 roundings of scaling a block's partial sum, nb = ceil(K/128)
// partials added in f32, and the double reference's own rounding. (To first
// order: L·u_block bounds γ_{L−1} of a partial sum for the CPU's sequential
// order and for any summation tree of depth < L alike.)
inline double GemmRoundingGamma(int64_t K, double u_block = 0x1p-24) {
  const double L = static_cast<double>(std::min<int64_t>(K, 128));
  const double nb = static_cast<double>((K + 127) / 128);
  return L * u_block + (nb + 2) * 0x1p-24 + static_cast<double>(K) * 0x1p-52;
}

// The scale of element (r, c)'s block.
inline float ScaleOf(const std::vector<float>& scales, int64_t r, int64_t c, int64_t C,
                     Fp8Layout l) {
  const int64_t cb = (C + 127) / 128;
  return scales[(l == Fp8Layout::kRow1x128 ? r : r / 128) * cb + c / 128];
}

// ‖got − want‖ / ‖want‖ over all elements (NaN if got holds NaN): the
// relative Frobenius error the tests' quantisation-error bands use.
inline double RelFrobenius(const std::vector<float>& got, const std::vector<double>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = got[i] - want[i];
    num += d * d;
    den += want[i] * want[i];
  }
  return std::sqrt(num / den);
}

}  // namespace gtp::kernels::fp8::testing
