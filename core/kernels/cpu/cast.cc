// Casts and blockwise fp8.
//   bf16 ↔ f32: round to nearest even (core/dtype.h), exact widening.
//   fp8, one f32 scale per block of kFp8BlockSize = 32 elements (the last
//   block may be shorter):
//     scale_b = amax_b / fmt_max   (1 when the block is all zero)
//     q_i     = fp8(x_i / scale_b)  (nearest even, saturating; core/dtype.h)
//     y_i     = fp8⁻¹(q_i)·scale_b
//   so each block's largest element maps to ±fmt_max and the relative error
//   of a normal value is at most half an fp8 ulp (2⁻⁴ e4m3, 2⁻³ e5m2).
//   We divide by the scale (rather than multiply by its reciprocal) so the
//   codes are exactly those of the documented formula.
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

void QuantizeFp8Blockwise(const void* x, DType x_type, uint8_t* q, float* scales, int64_t n,
                          DType fmt) {
  GTP_CHECK(n >= 0, "QuantizeFp8Blockwise: negative size");
  CheckFp8Args(x_type, fmt, "QuantizeFp8Blockwise");
  const bool e4m3 = fmt == DType::kF8E4M3;
  const float fmt_max = e4m3 ? kE4M3Max : kE5M2Max;
  for (int64_t start = 0; start < n; start += kFp8BlockSize) {
    const int64_t end = std::min<int64_t>(start + kFp8BlockSize, n);
    float amax = 0;
    for (int64_t i = start; i < end; ++i) amax = std::max(amax, std::fabs(LoadF32(x, x_type, i)));
    const float scale = amax > 0 ? amax / fmt_max : 1.0f;
    scales[start / kFp8BlockSize] = scale;
    for (int64_t i = start; i < end; ++i) {
      const float v = LoadF32(x, x_type, i) / scale;
      q[i] = e4m3 ? F32ToE4M3Bits(v) : F32ToE5M2Bits(v);
    }
  }
}

void DequantizeFp8Blockwise(const uint8_t* q, const float* scales, void* y, DType y_type, int64_t n,
                            DType fmt) {
  GTP_CHECK(n >= 0, "DequantizeFp8Blockwise: negative size");
  CheckFp8Args(y_type, fmt, "DequantizeFp8Blockwise");
  const bool e4m3 = fmt == DType::kF8E4M3;
  for (int64_t i = 0; i < n; ++i) {
    const float v = (e4m3 ? E4M3BitsToF32(q[i]) : E5M2BitsToF32(q[i])) * scales[i / kFp8BlockSize];
    if (y_type == DType::kF32) {
      static_cast<float*>(y)[i] = v;
    } else {
      static_cast<bf16*>(y)[i].bits = F32ToBF16Bits(v);
    }
  }
}

}  // namespace gtp::kernels::cpu
