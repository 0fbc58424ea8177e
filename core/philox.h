// core/philox.h — Philox-4x32-10 counter-based random numbers, bit-identical
// on CPU and GPU.
//
// A stream is a 64-bit key; element i of a stream is a pure function of
// (key, i), so any rank can draw any slice of a global tensor without drawing
// the rest (topology-invariant initialisation, DESIGN.md §4):
//
//   float u = PhiloxUniform(key, i);    // [0, 1), 24-bit resolution
//   float z = PhiloxNormal(key, i);     // N(0, 1)
//
// Only integer arithmetic and correctly rounded float +,-,*,/, sqrt are used,
// with contraction into FMA disabled on the device, so host and device agree
// bit for bit. Keys for named parameters come from KeyFromName().
#pragma once

#include <cstdint>
#include <string_view>

#include "core/dtype.h"  // GTP_HD

namespace gtp {

struct Philox4 {
  uint32_t v[4];
};

// Philox-4x32 with 10 rounds: counter (c0..c3), key (k0, k1).
GTP_HD Philox4 Philox4x32_10(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, uint32_t k0,
                             uint32_t k1) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int r = 0; r < 10; ++r) {
    uint64_t p0 = static_cast<uint64_t>(kM0) * c0;
    uint64_t p1 = static_cast<uint64_t>(kM1) * c2;
    uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    uint32_t n0 = hi1 ^ c1 ^ k0, n1 = lo1, n2 = hi0 ^ c3 ^ k1, n3 = lo0;
    c0 = n0; c1 = n1; c2 = n2; c3 = n3;
    k0 += kW0;
    k1 += kW1;
  }
  return Philox4{{c0, c1, c2, c3}};
}

// Four raw 32-bit words for element `index` of stream `key`, with a
// sub-stream selector `sub` (e.g. 0 for uniform, 1 for the normal's pair).
GTP_HD Philox4 PhiloxRaw(uint64_t key, uint64_t index, uint32_t sub = 0) {
  return Philox4x32_10(static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32), sub, 0u,
                       static_cast<uint32_t>(key), static_cast<uint32_t>(key >> 32));
}

namespace philox_internal {
GTP_HD float Mul(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
GTP_HD float Add(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
GTP_HD float Sqrt(float a) {
#if defined(__CUDA_ARCH__)
  return __fsqrt_rn(a);
#else
  return __builtin_sqrtf(a);
#endif
}
GTP_HD float Div(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}
// Natural log for x in (0, 1]; |rel err| ~1e-7. x = m·2^e with m in [√½, √2).
GTP_HD float Log(float x) {
  uint32_t u = FloatBits(x);
  int e = static_cast<int>((u >> 23) & 0xff) - 127;
  float m = BitsFloat((u & 0x7fffffu) | 0x3f800000u);  // [1, 2)
  if (m > 1.41421356f) { m = Mul(m, 0.5f); e += 1; }
  // log(m) = 2·atanh(s), s = (m-1)/(m+1), |s| <= 0.1716
  float s = Div(Add(m, -1.0f), Add(m, 1.0f));
  float s2 = Mul(s, s);
  float p = 1.0f / 13;
  p = Add(Mul(p, s2), 1.0f / 11);
  p = Add(Mul(p, s2), 1.0f / 9);
  p = Add(Mul(p, s2), 1.0f / 7);
  p = Add(Mul(p, s2), 1.0f / 5);
  p = Add(Mul(p, s2), 1.0f / 3);
  p = Add(Mul(p, s2), 1.0f);
  return Add(Mul(static_cast<float>(e), 0.693147180559945f), Mul(Mul(2.0f, s), p));
}
// sin(2π·t) and cos(2π·t) for t in [0, 1) by quadrant reduction (t·4 exact).
GTP_HD void SinCos2Pi(float t, float* sn, float* cs) {
  float q4 = Mul(t, 4.0f);
  int q = static_cast<int>(q4);
  float r = Add(q4, -static_cast<float>(q));   // [0, 1): exact
  float x = Mul(r, 1.57079632679f);            // [0, π/2)
  float x2 = Mul(x, x);
  // Taylor to x^13 / x^12: error < 1e-7 on [0, π/2).
  float sp = 1.0f / 6227020800.0f;
  sp = Add(Mul(sp, x2), -1.0f / 39916800.0f);
  sp = Add(Mul(sp, x2), 1.0f / 362880.0f);
  sp = Add(Mul(sp, x2), -1.0f / 5040.0f);
  sp = Add(Mul(sp, x2), 1.0f / 120.0f);
  sp = Add(Mul(sp, x2), -1.0f / 6.0f);
  sp = Add(Mul(sp, x2), 1.0f);
  float s = Mul(sp, x);
  float cp = 1.0f / 479001600.0f;
  cp = Add(Mul(cp, x2), -1.0f / 3628800.0f);
  cp = Add(Mul(cp, x2), 1.0f / 40320.0f);
  cp = Add(Mul(cp, x2), -1.0f / 720.0f);
  cp = Add(Mul(cp, x2), 1.0f / 24.0f);
  cp = Add(Mul(cp, x2), -0.5f);
  cp = Add(Mul(cp, x2), 1.0f);
  float c = cp;
  switch (q & 3) {
    case 0: *sn = s; *cs = c; break;
    case 1: *sn = c; *cs = -s; break;
    case 2: *sn = -s; *cs = -c; break;
    default: *sn = -c; *cs = s; break;
  }
}
}  // namespace philox_internal

// Uniform float in [0, 1) with 24 random bits.
GTP_HD float PhiloxUniform(uint64_t key, uint64_t index) {
  return static_cast<float>(PhiloxRaw(key, index, 0).v[0] >> 8) * (1.0f / 16777216.0f);
}

// Standard normal by Box–Muller on two uniforms of (key, index).
GTP_HD float PhiloxNormal(uint64_t key, uint64_t index) {
  using namespace philox_internal;
  Philox4 r = PhiloxRaw(key, index, 1);
  // u1 in (0, 1]: never log(0).
  float u1 = static_cast<float>((r.v[0] >> 8) + 1u) * (1.0f / 16777216.0f);
  float u2 = static_cast<float>(r.v[1] >> 8) * (1.0f / 16777216.0f);
  float rad = Sqrt(Mul(-2.0f, Log(u1)));
  float sn, cs;
  SinCos2Pi(u2, &sn, &cs);
  return Mul(rad, cs);
}

// 64-bit FNV-1a of a name, for per-parameter streams ("layers.3.mlp.fc1.weight").
constexpr uint64_t KeyFromName(std::string_view name, uint64_t seed = 0) {
  uint64_t h = 0xcbf29ce484222325ull ^ (seed * 0x9E3779B97F4A7C15ull);
  for (char c : name) {
    h ^= static_cast<uint8_t>(c);
    h *= 0x100000001b3ull;
  }
  return h;
}

// Mixes a key with extra coordinates (e.g. a step or an axis coordinate).
GTP_HD uint64_t MixKey(uint64_t key, uint64_t v) {
  uint64_t z = key ^ (v + 0x9E3779B97F4A7C15ull + (key << 6) + (key >> 2));
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace gtp
