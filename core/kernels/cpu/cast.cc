// Casts and blockwise fp8.
//   bf16 ↔ f32: round to nearest even (core/dtype.h), exact widening.
//   MXFP8: fp8 codes with one E8M0 (power-of-two) scale byte per block of
//   kFp8BlockSize = 32 elements (the last block may be shorter):
//     e_b = Fp8BlockExponent(amax_b)  the smallest e in 0..254 with
//                                     amax_b ≤ fmt_max·2^(e − 127) (kernels.h);
//                                     0 for an all-zero block
//     s_b = 2^(e_b − 127)
//     q_i = fp8(x_i / s_b)            nearest even, saturating (core/dtype.h)
//     y_i = fp8⁻¹(q_i)·s_b
//   The division by a power of two is exact (a quotient below f32's normal
//   range is far below fp8's smallest subnormal, so it encodes as 0 either
//   way) and so is the multiply (q has at most 4 significant bits, none below
//   2⁻¹⁴³; only magnitudes within half an fp8 ulp of 2¹²⁸ round up to ±inf),
//   so the codes are those of x_i / s_b rounded once and any backend
//   dequantises them to the same bits. The block's largest element lands in
//   (fmt_max/2, fmt_max]: the relative error of an fp8-normal value is at
//   most half an fp8 ulp (2⁻⁴ e4m3, 2⁻³ e5m2), as with an f32 scale, and
//   small elements lose up to one more bit to the subnormal range.
//   A NaN or ±inf anywhere in a block gives it the NaN scale (255) and
//   kFp8NaNCode for every code: the whole block dequantises to NaN.
#include <algorithm>
#include <cmath>

#include "core/kernels/cpu.h"
#include "core/status.h"

namespace gtp::kernels::cpu {
namespace {

inline float LoadF32(const void* x, DType t, int64_t i) {
  return t == DType::kF32 ? static_cast<const float*>(x)[i]
                          : BF16BitsToF32(static_cast<const bf16*>(x)[i].bits);
}

void CheckFp8Args(DType data_type, DType fmt, const char* op) {
  GTP_CHECK(data_type == DType::kF32 || data_type == DType::kBF16, op,
            ": data must be f32 or bf16, got ", DTypeName(data_type));
  GTP_CHECK(fmt == DType::kF8E4M3 || fmt == DType::kF8E5M2, op,
            ": fmt must be fp8_e4m3 or fp8_e5m2, got ", DTypeName(fmt));
}

}  // namespace

void CastF32ToBF16(const float* x, bf16* y, int64_t n) {
  GTP_CHECK(n >= 0, "CastF32ToBF16: negative size");
  for (int64_t i = 0; i < n; ++i) y[i].bits = F32ToBF16Bits(x[i]);
}

void CastBF16ToF32(const bf16* x, float* y, int64_t n) {
  GTP_CHECK(n >= 0, "CastBF16ToF32: negative size");
  for (int64_t i = 0; i < n; ++i) y[i] = BF16BitsToF32(x[i].bits);
}

void QuantizeFp8Blockwise(const void* x, DType x_type, uint8_t* q, uint8_t* scales, int64_t n,
                          DType fmt) {
  GTP_CHECK(n >= 0, "QuantizeFp8Blockwise: negative size");
  CheckFp8Args(x_type, fmt, "QuantizeFp8Blockwise");
  const bool e4m3 = fmt == DType::kF8E4M3;
  for (int64_t start = 0; start < n; start += kFp8BlockSize) {
    const int64_t end = std::min<int64_t>(start + kFp8BlockSize, n);
    uint32_t amax_bits = 0;  // of |x|: NaN and inf compare above every finite value
    for (int64_t i = start; i < end; ++i) {
      amax_bits = std::max(amax_bits, FloatBits(LoadF32(x, x_type, i)) & 0x7fffffffu);
    }
    const uint8_t e = Fp8BlockExponent(amax_bits, e4m3 ? kE4M3Max : kE5M2Max);
    scales[start / kFp8BlockSize] = e;
    const float s = E8M0ToF32(e);
    for (int64_t i = start; i < end; ++i) {
      const float v = LoadF32(x, x_type, i) / s;
      q[i] = e == kE8M0NaN ? kFp8NaNCode : e4m3 ? F32ToE4M3Bits(v) : F32ToE5M2Bits(v);
    }
  }
}

void DequantizeFp8Blockwise(const uint8_t* q, const uint8_t* scales, void* y, DType y_type,
                            int64_t n, DType fmt) {
  GTP_CHECK(n >= 0, "DequantizeFp8Blockwise: negative size");
  CheckFp8Args(y_type, fmt, "DequantizeFp8Blockwise");
  const bool e4m3 = fmt == DType::kF8E4M3;
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t e = scales[i / kFp8BlockSize];
    const float v = e == kE8M0NaN
                        ? BitsFloat(0x7fc00000u)
                        : (e4m3 ? E4M3BitsToF32(q[i]) : E5M2BitsToF32(q[i])) * E8M0ToF32(e);
    if (y_type == DType::kF32) {
      static_cast<float*>(y)[i] = v;
    } else {
      static_cast<bf16*>(y)[i].bits = F32ToBF16Bits(v);
    }
  }
}

}  // namespace gtp::kernels::cpu
