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

}  // namespace gtp::kernels
