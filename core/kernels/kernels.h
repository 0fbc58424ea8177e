// core/kernels/kernels.h — shared types of the numeric ops. The ops live in
// core/kernels/cpu.h and core/kernels/cuda.h with matching signatures.
//
//   namespace gtp::kernels::cpu   — host pointers, runs on the calling thread
//                                   (GEMM through OpenBLAS).
//   namespace gtp::kernels::cuda  — device pointers, enqueued on `stream`,
//                                   never blocks the host (except where noted).
//
// Conventions (llm.c's):
//   - Row-major, contiguous buffers. Shapes in comments use B, T, C, NH, HS,
//     V (vocab), N (rows = B·T), H (hidden).
//   - Activation gradients are written (=); parameter gradients accumulate
//     (+=), so micro-batches and shared weights just add up.
//   - f32 unless a dtype argument says otherwise; bf16 inputs always
//     accumulate in f32.
//   - Broken invariants (bad sizes, null pointers where data is needed) abort
//     via GTP_CHECK; no kernel returns Status.
//   - Deterministic: the same inputs give bit-identical outputs run to run on
//     one backend (no floating-point atomics in reductions).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/dtype.h"

namespace gtp::kernels {

// C = alpha · op(A) · op(B) + beta · C, row-major.
//   op(A) is [m, k]: A is stored [m, k], or [k, m] when trans_a.
//   op(B) is [k, n]: B is stored [k, n], or [n, k] when trans_b.
//   C is [m, n]. lda/ldb/ldc default (0) to the packed row length.
// A and B share `ab_type` (f32 or bf16); C is f32 or bf16 (`c_type`);
// accumulation is always f32. beta == 0 means C is not read (may hold NaN).
// `bias` (optional, n elements of c_type): C[i, j] += bias[j] after the
// product (a cuBLASLt epilogue on CUDA: no extra pass over C).
// `c_in` (optional, epilogue kNone only): where beta·C reads C from — a
// matrix like C (c_type, ldc) that is not overwritten — so the output
// C = P + beta·c_in (+ bias) is written without being read first (a
// residual added in the GEMM's epilogue into a fresh tensor). Null (or
// beta == 0): C is read in place as above.
//
// Fused epilogues (`epilogue`; cuBLASLt epilogues on CUDA, loops on the CPU).
// P = alpha·op(A)·op(B) in f32, before any rounding to c_type:
//   kNone:       C = P + beta·C (+ bias), as above; aux, bias_grad unset.
//   kGeluAux:    beta 0. P += bias[j] when bias is set; aux = P when aux is
//                set (the pre-activation, c_type, [m, n]); C = gelu(P), the
//                tanh approximation of cpu/activation.cc, from the f32 P.
//                The MLP's y = gelu(x·Wᵀ + b) with pre saved for the backward.
//   kDGeluBGrad: beta 0, alpha 1, no bias. aux is read (the saved
//                pre-activation, c_type, [m, n]); C = P ∘ gelu'(aux), and,
//                when bias_grad is set, bias_grad[j] = Σ_i C[i, j] (n
//                elements, =) over the f32 values before C is rounded to
//                c_type (cuBLASLt's DGELU_BGRAD reduces in its epilogue;
//                cuda/gemm_epilogue_gpu_test.cc checks it is these values).
//   kBGrad:      alpha 1, no bias, no aux. C = P + beta·C, and bias_grad[i] =
//                Σ_l op(A)[i, l], op(A) summed over k (m elements, =). For the
//                weight gradient dW[out, in] = dyᵀ·x (trans_a, A = dy stored
//                [N, out]) that is db[out] = Σ_N dy[N, out].
// aux has leading dimension ld_aux (0: n). bias_grad is always f32.
// CUDA also needs: ld_aux % 8 == 0 (cuBLASLt's rule for the GELU matrix),
// k > 0, and not f32 A/B with a bf16 C; otherwise it aborts saying so.
enum class GemmEpilogue { kNone, kGeluAux, kDGeluBGrad, kBGrad };

struct GemmDesc {
  bool trans_a = false;
  bool trans_b = false;
  int64_t m = 0, n = 0, k = 0;
  float alpha = 1.0f;
  float beta = 0.0f;
  DType ab_type = DType::kF32;
  DType c_type = DType::kF32;
  int64_t lda = 0, ldb = 0, ldc = 0;
  const void* bias = nullptr;
  GemmEpilogue epilogue = GemmEpilogue::kNone;
  void* aux = nullptr;         // kGeluAux: out (may be null); kDGeluBGrad: in
  int64_t ld_aux = 0;          // ≥ n; 0: n
  float* bias_grad = nullptr;  // kDGeluBGrad: [n] (may be null); kBGrad: [m]
  const void* c_in = nullptr;  // kNone: beta·C read from here (above)
};

// "none", "gelu_aux", "dgelu_bgrad", "bgrad" (for messages).
const char* GemmEpilogueName(GemmEpilogue e);
// Aborts (GTP_CHECK) unless d's epilogue fields fit the table above; both
// backends call it. m == 0 or n == 0 writes nothing, bias_grad included.
void CheckGemmEpilogue(const GemmDesc& d);

// One product of a grouped GEMM (cpu::GroupedGemm, cuda::GroupedGemm): G
// independent GEMMs in one call, as a mixture of experts runs one per expert.
// For each group, C = alpha·op(A)·op(B) + beta·C exactly as GemmDesc documents
// for a single GEMM (row-major, packed: lda/ldb/ldc are the packed row
// lengths of this group's m, n, k). The shared GemmDesc supplies trans_a,
// trans_b, alpha, beta, ab_type and c_type; its m/n/k/lda/ldb/ldc must be 0,
// bias/aux/bias_grad null and epilogue kNone. A group with m == 0 or n == 0
// writes nothing; one with k == 0 sets C = beta·C (beta 0: zeros, C not read;
// A and B not read). Types as for Gemm: f32 accumulation, A/B f32 or bf16, C
// f32 or bf16, but not f32 A/B with a bf16 C.
struct GemmGroup {
  int64_t m = 0, n = 0, k = 0;
  const void* a = nullptr;  // op(A) [m, k]: stored [m, k], or [k, m] when trans_a
  const void* b = nullptr;  // op(B) [k, n]: stored [k, n], or [n, k] when trans_b
  void* c = nullptr;        // [m, n]
};

// Aborts (GTP_CHECK) unless d and groups[0, count) fit the GemmGroup contract
// above (shared fields only in d, no epilogue, supported types, sizes ≥ 0);
// both backends call it.
void CheckGroupedGemm(const GemmDesc& d, const GemmGroup* groups, int count);

// Newton–Schulz coefficient sets (issue 2):
//   kSimple:  (a, b, c) = (3.4445, −4.7750, 2.0315) every step.
//   kQuintic: the 5-step cycle (4.0848, −6.8946, 2.9270), (3.9505, −6.3029, 2.6377),
//             (3.7418, −5.5913, 2.3037), (2.8769, −3.1427, 1.2046), (2.8366, −3.0525, 1.2012).
// ColumnSumAccumulate's summation order (sums[c] += Σ_r x[r, c]; cpu and
// cuda run it, so they agree bit for bit): the rows are cut into slabs of
// kColumnSumSlabRows; within a slab, lane l (0 ≤ l < kColumnSumLanes) adds
// the slab's rows l, l + lanes, … in increasing order in f32 from 0; the
// slab's partial is ((lane 0 + lane 1) + lane 2) + …; the total is the
// slabs' partials added in order from 0; and sums[c] = sums[c] + total
// (R = 0: sums untouched).
inline constexpr int64_t kColumnSumSlabRows = 64;
inline constexpr int kColumnSumLanes = 8;

enum class NsCoefficients { kSimple, kQuintic };

// Per-step (a, b, c) of a coefficient set: step i of the iteration.
void NsCoefficientsAt(NsCoefficients set, int step, float* a, float* b, float* c);

struct AdamWParams {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;  // decoupled: p -= lr·wd·p
  int64_t step = 1;           // 1-based, for bias correction
  float grad_scale = 1.0f;    // g ← grad_scale·g first (grad-norm clipping folded in)
  // {norm, grad scale, skip} as GradNormFinalize leaves them (device memory on
  // CUDA, host on CPU): when set, its scale replaces grad_scale and a nonzero
  // skip leaves p, m and v untouched (a NaN/Inf step), decided without the
  // host reading the norm.
  const float* device_scalars = nullptr;
  // {lr, 1 − β1^t, 1 − β2^t} (AdamWStepScalars) in device memory on CUDA
  // (host on CPU): when set, replaces lr and step — so a captured CUDA graph
  // reads each replay's values.
  const float* device_step = nullptr;
};

// {lr, 1 − β1^step, 1 − β2^step} of hp, the bias corrections in double
// rounded to f32 (what the AdamW kernels use).
void AdamWStepScalars(const AdamWParams& hp, float out[3]);

// One tensor of a multi-tensor AdamW step (AdamWMulti): n elements of p
// (f32: the param itself or its f32 master), its gradient g and moments m, v;
// when p_bf16 is set, the updated p is also written there rounded to bf16 (the
// model's bf16 param). weight_decay replaces AdamWParams::weight_decay.
struct AdamWSegment {
  float* p = nullptr;
  bf16* p_bf16 = nullptr;
  const float* g = nullptr;
  float* m = nullptr;
  float* v = nullptr;
  int64_t n = 0;
  float weight_decay = 0.0f;
};

// ---- Blockwise fp8 (MXFP8) -----------------------------------------------------------
// Elements per fp8 scale block.
inline constexpr int kFp8BlockSize = 32;
// A block's scale is one OCP MX "E8M0" byte: e means 2^(e − 127), e in 0..254;
// 255 is NaN (the block held a NaN or ±inf).
inline constexpr uint8_t kE8M0NaN = 0xff;
// The code QuantizeFp8Blockwise writes for every element of a NaN-scale block:
// NaN in both formats (e4m3fn 0x7F; e5m2 0x7D–0x7F).
inline constexpr uint8_t kFp8NaNCode = 0x7f;

// The scale exponent of a block whose largest |x| has f32 bits amax_bits
// (bits of a non-negative float, so their unsigned max orders NaN > inf >
// finite): the smallest e in 0..254 with amax ≤ fmt_max·2^(e − 127), i.e.
// 127 + ceil(log2(amax / fmt_max)) clamped below at 0 (so an all-zero or
// tiny block gets 0), computed exactly from the bits; 255 when amax is not
// finite. fmt_max is a normal f32 (kE4M3Max or kE5M2Max). Writing both as
// m·2^k with m in [1, 2): amax ≤ fmt_max·2^d ⟺ d ≥ k_a − k_f + (m_a > m_f).
// A finite amax never needs more than 247 (e4m3) or 240 (e5m2).
GTP_HD uint8_t Fp8BlockExponent(uint32_t amax_bits, float fmt_max) {
  const int ka = static_cast<int>(amax_bits >> 23);
  if (ka >= 0xff) return kE8M0NaN;
  const uint32_t f = FloatBits(fmt_max);
  const int e = 127 + ka - static_cast<int>(f >> 23) + ((amax_bits & 0x7fffffu) > (f & 0x7fffffu));
  return static_cast<uint8_t>(e < 0 ? 0 : e > 254 ? 254 : e);
}

// The scale 2^(e − 127) as f32, exact (e = 0 is the subnormal 2^-127); NaN for 255.
GTP_HD float E8M0ToF32(uint8_t e) {
  return BitsFloat(e == 0 ? 0x00400000u : e == kE8M0NaN ? 0x7fc00000u : uint32_t{e} << 23);
}

// ---- NVFP4 (issue 31: a GTP gather wire format) --------------------------------
// n values (f32 or bf16) as e2m1 codes (core/dtype.h), one e4m3 scale per
// block of 16 and one f32 scale per tensor; the receiver dequantises before
// its (Hopper: bf16/fp8) GEMMs. ops::EncodeNvfp4 / DecodeNvfp4 (CPU
// cpu/nvfp4.cc, CUDA cuda/nvfp4.cu) write the same bits: the scalar rules
// are the GTP_HD functions below, with IEEE f32 division and
// multiplication (no fast math, no FMA, subnormals kept).
//
// Wire of n elements, Nvfp4WireBytes(n) bytes:
//   [0, 4)           g, the f32 tensor scale (host byte order: little-endian)
//   [4, 4 + ⌈n/2⌉)   codes: byte i holds element 2i in its low nibble and
//                    2i + 1 in its high one (0 past n when n is odd)
//   next ⌈n/16⌉      block scale codes s_b (e4m3), block b = elements
//                    [16b, 16b + 16) (the last block may be short)
//   then zeros up to a multiple of 16 bytes (wires laid end to end keep g
//   4-byte aligned). n = 0 is 16 bytes: g = 1 and zeros.
//
// Encoding (bf16 inputs are widened exactly first):
//   A   = max_i |x_i|, the unsigned max of the bits of |x_i| (exact and
//         order-free: NaN > inf > every finite value)
//   g   = Nvfp4TensorScale: 1 if A = 0; NaN if A is NaN or ±inf; else
//         max(A / 2688, 2⁻¹²⁶) (2688 = 6·448, one f32 division; the clamp
//         only acts for A < 3.2e-35 and keeps g a normal, non-zero f32)
//   a_b = max |x_i| over block b (the same bits max)
//   s_b = e4m3((a_b / 6) / g)  two f32 divisions, then round to nearest
//         even saturating at 448 (a NaN g gives 0x7F)
//   d_b = e4m3⁻¹(s_b)·g        f32 product, the block's decoded scale
//   c_i = 0 if d_b == 0 (the whole block codes to +0), else e2m1(x_i / d_b):
//         nearest even, saturating at ±6 (a NaN d_b gives 0x7 everywhere)
// Decoding: y_i = e2m1⁻¹(c_i)·d_b (f32 product; a bf16 y is that product
//   rounded to nearest even), and NaN (0x7FC00000) wherever d_b is NaN.
//   A non-finite input therefore poisons the whole wire: g is NaN and every
//   element of every block decodes to NaN (NaN is never hidden, but NVFP4
//   cannot say which element it was).
//
// Error of one element (derivation; nvfp4_test checks it). Let t =
// (a_b/6)/g; e4m3 rounding gives |e4m3⁻¹(s_b) − t| ≤ t/16 + 2⁻¹⁰ (half an ulp
// of 3 mantissa bits, or half the subnormal spacing 2⁻⁹), so d_b lies within
// (1 ± 1/16)·a_b/6 ± 2⁻¹⁰·g. With z = x/d_b, e2m1 rounding gives |e2m1(z) − z|
// ≤ max(|z|/5, 1/4) for |z| ≤ 6 (the worst relative case is a tie such as
// 1.25 → 1; below 1 the spacing is 0.5); |z| > 6 happens only through the
// scale's rounding and saturates with an error ≤ |x|/16 + 6·2⁻¹⁰·g; when
// s_b rounds to 0 (t ≤ 2⁻¹⁰) the block decodes to zeros and loses |x| ≤ a_b
// ≤ 6·2⁻¹⁰·g. Together, f32 rounding included:
//   |y − x| ≤ kNvfp4RelativeError·|x| + kNvfp4BlockFloor·a_b + kNvfp4ScaleFloor·g
// i.e. 20 % of |x|, plus 4.4 % of the block's amax (what the smallest code
// step and rounding to 0 lose: d_b/4), plus 2.2e-6·A for an unclamped g
// (the e4m3 subnormal floor of the block scale). A bf16 y adds its own
// rounding: the bound B becomes B·(1 + 2⁻⁹) + 2⁻⁹·|x| (for |y| ≥ 2⁻¹²⁶,
// bf16's normal range). Blocks whose amax is far below A lose the
// most: their scale code is an e4m3 subnormal (a_b < A/28672) or 0.
inline constexpr int kNvfp4BlockSize = 16;
inline constexpr double kNvfp4RelativeError = 0.2 + 0x1p-20;
inline constexpr double kNvfp4BlockFloor = 17.0 / 384.0 * (1 + 0x1p-20);
inline constexpr double kNvfp4ScaleFloor = 6 * 0x1p-10 * (1 + 0x1p-10);
// The smallest tensor scale (FLT_MIN = 2⁻¹²⁶).
inline constexpr float kNvfp4MinTensorScale = 1.17549435082228750797e-38f;

// Bytes of the NVFP4 wire of n ≥ 0 elements (layout above): 4 + ⌈n/2⌉ +
// ⌈n/16⌉ rounded up to a multiple of 16.
GTP_HD constexpr int64_t Nvfp4WireBytes(int64_t n) {
  return (4 + (n + 1) / 2 + (n + kNvfp4BlockSize - 1) / kNvfp4BlockSize + 15) / 16 * 16;
}
// Byte offsets of the codes and of the block scales in the wire of n elements.
inline constexpr int64_t kNvfp4CodesOffset = 4;
GTP_HD constexpr int64_t Nvfp4ScalesOffset(int64_t n) { return kNvfp4CodesOffset + (n + 1) / 2; }

// One f32 division / product rounded to nearest, spelled out on the device
// (so no compiler may contract or approximate them).
GTP_HD float DivRn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}
GTP_HD float MulRn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

// g from the bits of A (bits of a non-negative float: NaN and inf above
// every finite value).
GTP_HD float Nvfp4TensorScale(uint32_t amax_bits) {
  if (amax_bits >= 0x7f800000u) return BitsFloat(0x7fc00000u);
  if (amax_bits == 0) return 1.0f;
  const float g = DivRn(BitsFloat(amax_bits), kE2M1Max * kE4M3Max);
  return g < kNvfp4MinTensorScale ? kNvfp4MinTensorScale : g;
}

// s_b of a block whose largest |x| has bits amax_bits, under tensor scale g.
GTP_HD uint8_t Nvfp4BlockScaleCode(uint32_t amax_bits, float g) {
  return F32ToE4M3Bits(DivRn(DivRn(BitsFloat(amax_bits), kE2M1Max), g));
}

// d_b: the f32 scale a block's codes are multiplied by.
GTP_HD float Nvfp4BlockScale(uint8_t s, float g) { return MulRn(E4M3BitsToF32(s), g); }

// c_i of x in a block of decoded scale d (a nibble).
GTP_HD uint8_t Nvfp4ElementCode(float x, float d) {
  return d == 0.0f ? uint8_t{0} : F32ToE2M1Bits(DivRn(x, d));
}

// y_i of code c (low nibble) in a block of decoded scale d.
GTP_HD float Nvfp4ElementValue(uint8_t c, float d) {
  return d != d ? BitsFloat(0x7fc00000u) : MulRn(E2M1BitsToF32(c), d);
}

}  // namespace gtp::kernels
