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
};

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
};

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

// Elements per fp8 scale block.
inline constexpr int kFp8BlockSize = 32;

}  // namespace gtp::kernels
