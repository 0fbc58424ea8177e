// core/kernels/fp8/e4m3_reference.h — an OCP FP8 E4M3FN reference for the
// tests, written from the format's definition in double precision and
// independent of core/dtype.h's bit manipulation:
//   code = s eeee mmm; e = 0: (−1)^s·m·2⁻⁹ (subnormal); e > 0:
//   (−1)^s·(1 + m/8)·2^(e − 7); s 1111 111 (0x7F, 0xFF) is NaN; no inf.
// Encoding: the nearest finite value by search over all 127 magnitudes,
// ties to the even code (mantissa LSB 0), |x| ≥ 448 saturating to 448.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

namespace gtp::kernels::fp8::reference {

inline bool E4M3IsNaN(uint8_t code) { return (code & 0x7f) == 0x7f; }

// The value of a code (NaN for 0x7F / 0xFF).
inline double E4M3Decode(uint8_t code) {
  if (E4M3IsNaN(code)) return std::numeric_limits<double>::quiet_NaN();
  const int e = (code >> 3) & 0xf, m = code & 7;
  const double mag = e == 0 ? std::ldexp(m, -9) : std::ldexp(1.0 + m / 8.0, e - 7);
  return (code & 0x80) ? -mag : mag;
}

// The code of x: round to nearest, ties to even, saturating at ±448; NaN →
// 0x7F. The sign of x (of −0 too) is kept.
inline uint8_t E4M3Encode(double x) {
  if (std::isnan(x)) return 0x7f;
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  const double a = std::fabs(x);
  uint8_t best = 0;
  double best_err = std::numeric_limits<double>::infinity();
  for (int c = 0; c <= 0x7e; ++c) {  // magnitudes ascend with the code
    const double err = std::fabs(E4M3Decode(static_cast<uint8_t>(c)) - a);
    if (err < best_err || (err == best_err && (c & 1) == 0)) {
      best = static_cast<uint8_t>(c);
      best_err = err;
    }
  }
  return sign | best;  // a ≥ 448: 0x7E is the nearest finite magnitude
}

}  // namespace gtp::kernels::fp8::reference
