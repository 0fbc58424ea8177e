// core/kernels/fp8/block_scale.h — the scalar rules of FP8 training with
// block scaling (DeepSeek-V3's recipe; issue 31). Host and device (GTP_HD):
// the CUDA quantisers (block_quant.cu) include this header and call these
// functions, so their codes and scales are bit-identical to the CPU
// reference (block_quant.h, block_gemm.h).
//
// Design note (what every implementation, CPU or CUDA, follows):
//
// Element format: OCP FP8 E4M3FN (core/dtype.h F32ToE4M3Bits /
//   E4M3BitsToF32, the project's one e4m3 codec): 1 sign, 4 exponent bits
//   (bias 7), 3 mantissa bits; no inf; NaN = 0x7F / 0xFF; largest finite
//   ±448 (0x7E / 0xFE); smallest normal 2⁻⁶, subnormals k·2⁻⁹ (k = 1..7).
//   Encoding rounds the f32 value to the nearest e4m3, ties to the even code,
//   saturating (anything above 448, inf included, gives ±448); NaN → 0x7F.
//
// Blocks: kFp8Block = 128.
//   1×128 ("row blocks"; activations and gradients): a matrix [R, C] has one
//     f32 scale per row and 128 consecutive columns, scales [R, ceil(C/128)]
//     row-major; the last block of a row may be shorter.
//   128×128 ("tiles"; weights): one f32 scale per 128×128 tile, scales
//     [ceil(R/128), ceil(C/128)] row-major; edge tiles may be smaller.
//   Codes are [R, C] row-major, one byte each (kF8E4M3 or kU8), the same
//   layout as the f32 matrix. The K (contraction) dimension of a GEMM
//   operand is always its last, contiguous one (Hopper's FP8 tensor-core
//   GEMMs read both operands K-major: cuBLASLt's "TN" in its column-major
//   terms, i.e. y = a·bᵀ here, the layout of ops::Linear).
//
// Scale of a block (Fp8BlockScale), from amax = max |x| over the block's
//   f32 values (bf16 inputs are widened exactly first):
//     amax NaN or ±inf somewhere   → scale NaN, every code 0x7F (the block
//                                    dequantises to NaN; NaN is never hidden)
//     amax == 0                    → scale 1 (codes ±0: 0x00 / 0x80)
//     otherwise                    → scale = max(amax / 448, 2⁻¹²⁶)
//   amax / 448 is one f32 division, IEEE round to nearest (CUDA: `/` without
//   fast math, or __fdiv_rn; not a multiply by a reciprocal). The clamp at
//   2⁻¹²⁶ (FLT_MIN) only acts for amax < 448·2⁻¹²⁶ ≈ 5.3e-36 and keeps the
//   scale a normal, non-zero f32 (no division by zero, no subnormal scale).
//   Not a power of two (unlike MXFP8's E8M0 scales, kernels.h): the block's
//   largest element lands on ±448 (up to f32 rounding of the quotient).
// Code of an element: e4m3(x / scale), one f32 division (round to nearest)
//   then the e4m3 encoder above. |x / scale| ≤ 448·(1 + 2⁻²³), so nothing
//   saturates by more than f32 rounding.
// Value of a code: e4m3⁻¹(code)·scale. Where a dequantised tensor is
//   materialised it is that f32 product (fl(c·s), DequantizeBlocks); the
//   GEMM never forms it (below).
//
// Error of one element (derivation; the tests assert it): with z = fl(x/s)
//   = (x/s)(1 + ε), |ε| ≤ u = 2⁻²⁴, the code value c = e4m3(z) satisfies
//   |c − z| ≤ 2⁻⁴·|z| when |z| ≥ 2⁻⁶ (half an ulp of 3 mantissa bits;
//   saturation only trims ≤ 2⁻²³·448) and |c − z| ≤ 2⁻¹⁰ below (half the
//   subnormal spacing 2⁻⁹). So c·s − x = s(c − z) + x·ε:
//     |c·s − x| ≤ (2⁻⁴ + 2⁻²⁰)·|x| + 2⁻¹⁰·s      (kE4M3RelativeError, below)
//   The relative part is attained up to a factor 1 + 2⁻⁴ (values just above
//   a power of two lose 2⁻⁴/(1 + 2⁻⁴) ≈ 5.9 %).
//
// GEMM (block_gemm.h): y[m, n] = Σ_k a[m, k]·b[n, k] over the dequantised
//   operands, computed per 128-wide K block kb:
//     P[kb]  = Σ_{k in kb} e4m3⁻¹(qa[m, k])·e4m3⁻¹(qb[n, k])   (f32, k ascending;
//              each product is exact in f32: 4 × 4 significant bits)
//     y     += P[kb]·(sa[m, kb]·sb[n, kb])                     (f32, kb ascending)
//   where sa/sb is the scale of the block holding (m, kb) resp. (n, kb) in
//   that operand's blocking. This is the per-K-block promotion of DeepSeek-V3
//   and cuBLASLt's VEC128_32F / BLK128x128_32F modes: the tensor cores'
//   partial sum over one K block is scaled and added in f32. A CUDA kernel
//   (or cuBLASLt) will not round in this order; it is compared with a
//   tolerance, never bit for bit (block_gemm_test.cc derives it).
//
// What the backward needs (block_quant.h):
//   forward  y[N, out]  = x[N, in]·W[out, in]ᵀ      a = x   (1×128 along in)
//                                                   b = W   (128×128)
//   dgrad    dx[N, in]  = dy[N, out]·W              a = dy  (1×128 along out)
//                                                   b = Wᵀ  (128×128, TransposeTiles:
//                                                   lossless, the same bits as
//                                                   quantising Wᵀ)
//   wgrad    dW[out, in] = dyᵀ·x                    a = dyᵀ (1×128 along N)
//                                                   b = xᵀ  (1×128 along N)
//   The 1×128 blocks of x run along `in`; wgrad needs them along N, so x is
//   quantised again: from the high-precision x (QuantizeRowsTransposed, a
//   fused transpose + quantise) or, when only the FP8 copy of x was kept for
//   the backward, from its codes (RequantizeRowsTransposed: dequantise,
//   transpose, quantise again — DeepSeek-V3's procedure, one more rounding).
#pragma once

#include <cmath>
#include <cstdint>

#include "core/dtype.h"

namespace gtp::kernels::fp8 {

// Elements per block side (1×128 and 128×128).
inline constexpr int64_t kFp8Block = 128;
// The smallest scale (FLT_MIN = 2⁻¹²⁶): tiny blocks are not scaled further up.
inline constexpr float kMinBlockScale = 1.17549435082228750797e-38f;
// The code every element of a NaN-scale block gets.
inline constexpr uint8_t kE4M3NaNCode = 0x7f;
// Relative and absolute parts of the per-element error bound above:
// |dequant − x| ≤ kE4M3RelativeError·|x| + kE4M3SubnormalError·scale.
inline constexpr double kE4M3RelativeError = 0.0625 + 0x1p-20;
inline constexpr double kE4M3SubnormalError = 0x1p-10;

// Blocks along a dimension of n elements.
GTP_HD int64_t Fp8NumBlocks(int64_t n) { return (n + kFp8Block - 1) / kFp8Block; }

// The scale of a block whose largest |x| has f32 bits amax_bits (bits of a
// non-negative float: their unsigned max over a block orders NaN > inf >
// finite, so a max over FloatBits(x) & 0x7fffffff finds amax and any NaN).
GTP_HD float Fp8BlockScale(uint32_t amax_bits) {
  if (amax_bits >= 0x7f800000u) return BitsFloat(0x7fc00000u);
  if (amax_bits == 0) return 1.0f;
  const float s = BitsFloat(amax_bits) / kE4M3Max;
  return s < kMinBlockScale ? kMinBlockScale : s;
}

// The e4m3 code of x in a block of the given scale (kE4M3NaNCode for a NaN
// scale).
GTP_HD uint8_t Fp8BlockEncode(float x, float scale) {
  return scale != scale ? kE4M3NaNCode : F32ToE4M3Bits(x / scale);
}

// x / s correctly rounded (the division Fp8BlockEncode does) without a
// division per element, from r = RN(1/s) (one IEEE division per block):
// q = RN(x·r), the remainder x − q·s is exact by FMA, and q + remainder·r
// rounded once is RN(x/s). q itself can be more than an ulp from x/s (about
// 1 % of random pairs), so this is not Markstein's theorem as usually
// stated (it assumes a faithful q); the argument: near a rounding midpoint
// m of x/s, q two floats away would need |x·r − x/s| ≥ an ulp, i.e.
// |r·s − 1| > 2⁻²⁴, which RN(1/s) cannot be, so there q is a neighbour and
// the faithful case applies; away from midpoints the corrected value is
// within about 1.5·2⁻²⁴ ulp of x/s, far less than its distance to one. That
// needs the remainder not to underflow and a normal quotient: s ≥
// kFp8FastDivMinScale, |x| ≥ 2⁻¹⁰⁰ and |x/s| ≥ 2⁻¹²⁶. Otherwise (a smaller
// x has |x/s| < 2⁻⁴⁰) the result may differ in its last bits but keeps x's
// sign, and the e4m3 code of either is the same ±0 (e4m3's smallest
// subnormal is 2⁻⁹).
// A zero remainder keeps q as it is (x = −0 stays −0). The CUDA quantisers
// use it for s ≥ kFp8FastDivMinScale and divide otherwise. e4m3_test.cc
// checks it against the division, bit for bit: every bf16 x against scales
// of every bf16 mantissa, pairs whose quotient lies next to a midpoint, and
// random f32 pairs.
inline constexpr float kFp8FastDivMinScale = 0x1p-60f;
GTP_HD float Fp8Quotient(float x, float s, float r) {
#if defined(__CUDA_ARCH__)
  const float q = __fmul_rn(x, r);  // never contracted into an FMA
#else
  const float q = x * r;
#endif
  const float e = fmaf(-q, s, x);
  const float corrected = fmaf(e, r, q);
  return e == 0.0f ? q : corrected;  // a select, not a branch, in the CUDA quantisers' loops
}

// The f32 value of a code in a block of the given scale.
GTP_HD float Fp8BlockDecode(uint8_t code, float scale) { return E4M3BitsToF32(code) * scale; }

}  // namespace gtp::kernels::fp8
