// core/dtype.h — element types and their bit-exact conversions.
//
// DType names the storage type of a tensor. The scalar conversions below are
// `GTP_HD` (host and device) so CPU and CUDA code round identically:
//   - f32 -> bf16 / f16: round to nearest, ties to even; NaN stays NaN.
//   - f32 -> fp8 e4m3 (OCP "e4m3fn": no inf, max 448): round to nearest even,
//     saturating to ±448; NaN -> 0x7F.
//   - f32 -> fp8 e5m2 (IEEE-like, max 57344, has inf): round to nearest even,
//     saturating finite values to ±57344; inf stays inf; NaN -> 0x7F.
//   - f32 -> fp4 e2m1 (OCP MX "FP4": no inf, no NaN, max 6): round to
//     nearest even, saturating to ±6 (inf included); NaN -> 0x7 (+6: the
//     format cannot carry NaN, NVFP4 carries it in its scales).
// All functions here are pure and thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

#if defined(__CUDACC__)
#define GTP_HD __host__ __device__ __forceinline__
#else
#define GTP_HD inline
#endif

namespace gtp {

// Floating types for math; integer types for indices, counts and raw bytes.
enum class DType : uint8_t {
  kF32 = 0,
  kBF16 = 1,
  kF16 = 2,
  kF8E4M3 = 3,
  kF8E5M2 = 4,
  kI32 = 5,
  kI64 = 6,
  kU8 = 7,
};

// Bytes per element.
constexpr size_t SizeOf(DType t) {
  switch (t) {
    case DType::kF32: case DType::kI32: return 4;
    case DType::kI64: return 8;
    case DType::kBF16: case DType::kF16: return 2;
    default: return 1;
  }
}

// "f32", "bf16", "f16", "fp8_e4m3", "fp8_e5m2", "i32", "i64", "u8".
const char* DTypeName(DType t);

// Storage wrappers: plain bit containers, so they are trivially copyable and
// the same in host and device code.
struct bf16 { uint16_t bits; };
struct f16 { uint16_t bits; };
struct fp8_e4m3 { uint8_t bits; };
struct fp8_e5m2 { uint8_t bits; };

GTP_HD uint32_t FloatBits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}

GTP_HD float BitsFloat(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

// ---- bf16 ------------------------------------------------------------------
GTP_HD uint16_t F32ToBF16Bits(float f) {
  uint32_t u = FloatBits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);  // quiet NaN
  uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>((u + rounding) >> 16);
}
GTP_HD float BF16BitsToF32(uint16_t b) { return BitsFloat(static_cast<uint32_t>(b) << 16); }
GTP_HD bf16 ToBF16(float f) { return bf16{F32ToBF16Bits(f)}; }
GTP_HD float ToF32(bf16 v) { return BF16BitsToF32(v.bits); }

// ---- generic small-float encoder ----------------------------------------------
// Encodes |f| (finite, not NaN) into a format with `EB` exponent bits, `MB`
// mantissa bits and exponent bias `BIAS`, rounding to nearest even, and
// returning the magnitude code (sign not included). `max_code` is the largest
// finite magnitude code; values above it saturate to it.
GTP_HD uint32_t EncodeSmallFloatMagnitude(float af, int MB, int BIAS, uint32_t max_code) {
  uint32_t u = FloatBits(af);
  int exp = static_cast<int>((u >> 23) & 0xff) - 127;  // unbiased
  uint32_t mant = u & 0x7fffffu;
  if (((u >> 23) & 0xff) == 0) return 0;  // f32 subnormals are far below any small-float subnormal
  int e = exp + BIAS;  // biased target exponent
  uint32_t full = mant | 0x800000u;  // 24-bit significand with hidden 1
  uint32_t code;
  if (e >= 1) {
    // Normal: keep MB mantissa bits.
    int shift = 23 - MB;
    uint32_t kept = full >> shift;
    uint32_t rem = full & ((1u << shift) - 1);
    uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (kept & 1u))) kept++;
    // kept includes the hidden bit at position MB; carry may bump the exponent.
    code = (static_cast<uint32_t>(e) << MB) + (kept - (1u << MB));
  } else {
    // Subnormal in the target: value = full * 2^(exp-23); unit = 2^(1-BIAS-MB).
    int shift = (23 - MB) + (1 - e);
    if (shift > 31) return 0;
    uint32_t kept = full >> shift;
    uint32_t rem = full & ((1u << shift) - 1);
    uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (kept & 1u))) kept++;
    code = kept;  // may round up into the smallest normal: encoding stays right
  }
  return code > max_code ? max_code : code;
}

GTP_HD float DecodeSmallFloatMagnitude(uint32_t code, int MB, int BIAS) {
  uint32_t e = code >> MB;
  uint32_t m = code & ((1u << MB) - 1);
  if (e == 0) {
    // subnormal: m * 2^(1-BIAS-MB)
    return static_cast<float>(m) * BitsFloat(static_cast<uint32_t>(127 + 1 - BIAS - MB) << 23);
  }
  return BitsFloat((static_cast<uint32_t>(static_cast<int>(e) - BIAS + 127) << 23) | (m << (23 - MB)));
}

// ---- f16 (IEEE half) ----------------------------------------------------------
GTP_HD uint16_t F32ToF16Bits(float f) {
  uint32_t u = FloatBits(f);
  uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7e00u;  // NaN
  if (a >= 0x477ff000u) return sign | 0x7c00u;  // rounds to >= 65520: inf
  return sign | static_cast<uint16_t>(EncodeSmallFloatMagnitude(BitsFloat(a), 10, 15, 0x7bffu));
}
GTP_HD float F16BitsToF32(uint16_t h) {
  uint32_t sign = (static_cast<uint32_t>(h) & 0x8000u) << 16;
  uint32_t code = h & 0x7fffu;
  if ((code >> 10) == 0x1f) return BitsFloat(sign | 0x7f800000u | (static_cast<uint32_t>(code & 0x3ff) << 13));
  return BitsFloat(sign | FloatBits(DecodeSmallFloatMagnitude(code, 10, 15)));
}
GTP_HD f16 ToF16(float f) { return f16{F32ToF16Bits(f)}; }
GTP_HD float ToF32(f16 v) { return F16BitsToF32(v.bits); }

// ---- fp8 e4m3 (e4m3fn: bias 7, max 448 = code 0x7E, NaN = 0x7F) ---------------
GTP_HD uint8_t F32ToE4M3Bits(float f) {
  uint32_t u = FloatBits(f);
  uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return 0x7f;
  if (a == 0x7f800000u) return sign | 0x7e;  // saturate inf
  return sign | static_cast<uint8_t>(EncodeSmallFloatMagnitude(BitsFloat(a), 3, 7, 0x7eu));
}
GTP_HD float E4M3BitsToF32(uint8_t b) {
  uint32_t sign = (static_cast<uint32_t>(b) & 0x80u) << 24;
  uint32_t code = b & 0x7fu;
  if (code == 0x7f) return BitsFloat(0x7fc00000u);
  return BitsFloat(sign | FloatBits(DecodeSmallFloatMagnitude(code, 3, 7)));
}
GTP_HD fp8_e4m3 ToE4M3(float f) { return fp8_e4m3{F32ToE4M3Bits(f)}; }
GTP_HD float ToF32(fp8_e4m3 v) { return E4M3BitsToF32(v.bits); }

// ---- fp8 e5m2 (bias 15, max 57344 = code 0x7B, inf 0x7C, NaN 0x7F) ------------
GTP_HD uint8_t F32ToE5M2Bits(float f) {
  uint32_t u = FloatBits(f);
  uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return 0x7f;
  if (a == 0x7f800000u) return sign | 0x7c;
  return sign | static_cast<uint8_t>(EncodeSmallFloatMagnitude(BitsFloat(a), 2, 15, 0x7bu));
}
GTP_HD float E5M2BitsToF32(uint8_t b) {
  uint32_t sign = (static_cast<uint32_t>(b) & 0x80u) << 24;
  uint32_t code = b & 0x7fu;
  if ((code >> 2) == 0x1f) return BitsFloat(sign | ((code & 3) ? 0x7fc00000u : 0x7f800000u));
  return BitsFloat(sign | FloatBits(DecodeSmallFloatMagnitude(code, 2, 15)));
}
GTP_HD fp8_e5m2 ToE5M2(float f) { return fp8_e5m2{F32ToE5M2Bits(f)}; }
GTP_HD float ToF32(fp8_e5m2 v) { return E5M2BitsToF32(v.bits); }

// ---- fp4 e2m1 (bias 1, 1 mantissa bit; max 6 = code 0x7; no inf, no NaN) -------
// A code is a nibble: sign 0x8, magnitude codes 0..7 = {0, 0.5, 1, 1.5, 2, 3,
// 4, 6}; 0x8 is −0. Two codes share a byte in packed formats (NVFP4,
// core/kernels/kernels.h); these functions take and return one nibble (the
// decoder ignores the high nibble of its argument).
GTP_HD uint8_t F32ToE2M1Bits(float f) {
  uint32_t u = FloatBits(f);
  uint8_t sign = static_cast<uint8_t>((u >> 28) & 0x8u);
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return 0x7;  // NaN: no code for it
  // inf saturates through the encoder (its exponent is far above 6's).
  return sign | static_cast<uint8_t>(EncodeSmallFloatMagnitude(BitsFloat(a), 1, 1, 0x7u));
}
GTP_HD float E2M1BitsToF32(uint8_t b) {
  uint32_t sign = (static_cast<uint32_t>(b) & 0x8u) << 28;
  return BitsFloat(sign | FloatBits(DecodeSmallFloatMagnitude(b & 0x7u, 1, 1)));
}

// Largest finite magnitudes.
inline constexpr float kE4M3Max = 448.0f;
inline constexpr float kE5M2Max = 57344.0f;
inline constexpr float kE2M1Max = 6.0f;

// Compile-time DType of a C++ element type.
template <typename T> struct DTypeOf;
template <> struct DTypeOf<float> { static constexpr DType value = DType::kF32; };
template <> struct DTypeOf<bf16> { static constexpr DType value = DType::kBF16; };
template <> struct DTypeOf<f16> { static constexpr DType value = DType::kF16; };
template <> struct DTypeOf<fp8_e4m3> { static constexpr DType value = DType::kF8E4M3; };
template <> struct DTypeOf<fp8_e5m2> { static constexpr DType value = DType::kF8E5M2; };
template <> struct DTypeOf<int32_t> { static constexpr DType value = DType::kI32; };
template <> struct DTypeOf<int64_t> { static constexpr DType value = DType::kI64; };
template <> struct DTypeOf<uint8_t> { static constexpr DType value = DType::kU8; };

}  // namespace gtp
