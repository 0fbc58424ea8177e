// GEMM on the CPU: C = alpha·op(A)·op(B) + beta·C, row-major (see GemmDesc in
// core/kernels/kernels.h).
//   op(A)[m, k]: A stored [m, k] (lda ≥ k) or, trans_a, [k, m] (lda ≥ m).
//   op(B)[k, n]: B stored [k, n] (ldb ≥ n) or, trans_b, [n, k] (ldb ≥ k).
//   C[m, n], ldc ≥ n.
// f32 operands go straight to OpenBLAS' cblas_sgemm. bf16 operands are widened
// to packed f32 copies first; a bf16 C is computed in an f32 copy and rounded
// once at the end. beta == 0 never reads C (BLAS semantics); with c_in set,
// beta·C is read from c_in (copied into C, or widened, first).
//
// Epilogues (GemmDesc::epilogue) run as loops over the f32 product after the
// sgemm, before that rounding, with the formulas of cpu/activation.cc
// (s = √(2/π), u = s·(x + 0.044715·x³)):
//   gelu(x)  = ½·x·(1 + tanh u)
//   gelu'(x) = ½·(1 + tanh u) + ½·x·(1 − tanh² u)·s·(1 + 3·0.044715·x²)
// Bias gradients are f32 sums in row order (deterministic).
#include <cblas.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <vector>

#include "core/kernels/cpu.h"
#include "core/status.h"

namespace gtp::kernels::cpu {
namespace {

// Widens a rows × cols bf16 matrix with leading dimension ld into packed f32.
std::vector<float> WidenBF16(const bf16* src, int64_t rows, int64_t cols, int64_t ld) {
  std::vector<float> out(static_cast<size_t>(rows) * cols);
  for (int64_t r = 0; r < rows; ++r) {
    const bf16* in = src + r * ld;
    float* o = out.data() + r * cols;
    for (int64_t c = 0; c < cols; ++c) o[c] = BF16BitsToF32(in[c].bits);
  }
  return out;
}

constexpr float kGeluS = 0.7978845608028654f;  // √(2/π)
constexpr float kGeluC = 0.044715f;

inline float Gelu(float x) {
  return 0.5f * x * (1.0f + std::tanh(kGeluS * (x + kGeluC * x * x * x)));
}

inline float GeluGrad(float x) {
  const float t = std::tanh(kGeluS * (x + kGeluC * x * x * x));
  const float du = kGeluS * (1.0f + 3.0f * kGeluC * x * x);
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du;
}

// The epilogue on the f32 product c[m, n] (ld ldc), in place; a is op(A)'s
// storage as f32 (ld lda), for kBGrad.
void Epilogue(const GemmDesc& d, const float* a, int64_t lda, float* c, int64_t ldc) {
  const bool c_bf16 = d.c_type == DType::kBF16;
  const int64_t ld_aux = d.ld_aux > 0 ? d.ld_aux : d.n;
  switch (d.epilogue) {
    case GemmEpilogue::kNone:
      return;
    case GemmEpilogue::kGeluAux:
      for (int64_t i = 0; i < d.m; ++i) {
        float* ci = c + i * ldc;
        for (int64_t j = 0; j < d.n; ++j) {
          if (d.aux != nullptr) {
            const int64_t at = i * ld_aux + j;
            if (c_bf16) {
              static_cast<bf16*>(d.aux)[at].bits = F32ToBF16Bits(ci[j]);
            } else {
              static_cast<float*>(d.aux)[at] = ci[j];
            }
          }
          ci[j] = Gelu(ci[j]);
        }
      }
      return;
    case GemmEpilogue::kDGeluBGrad:
      if (d.bias_grad != nullptr) std::fill(d.bias_grad, d.bias_grad + d.n, 0.0f);
      for (int64_t i = 0; i < d.m; ++i) {
        float* ci = c + i * ldc;
        for (int64_t j = 0; j < d.n; ++j) {
          const int64_t at = i * ld_aux + j;
          const float x = c_bf16 ? BF16BitsToF32(static_cast<const bf16*>(d.aux)[at].bits)
                                 : static_cast<const float*>(d.aux)[at];
          ci[j] *= GeluGrad(x);
          if (d.bias_grad != nullptr) d.bias_grad[j] += ci[j];
        }
      }
      return;
    case GemmEpilogue::kBGrad:
      // op(A)[i, l] is a[l·lda + i] when trans_a, else a[i·lda + l]; either
      // way each sum runs over l in order.
      std::fill(d.bias_grad, d.bias_grad + d.m, 0.0f);
      if (d.trans_a) {
        for (int64_t l = 0; l < d.k; ++l) {
          for (int64_t i = 0; i < d.m; ++i) d.bias_grad[i] += a[l * lda + i];
        }
      } else {
        for (int64_t i = 0; i < d.m; ++i) {
          for (int64_t l = 0; l < d.k; ++l) d.bias_grad[i] += a[i * lda + l];
        }
      }
      return;
  }
}

}  // namespace

void Gemm(const GemmDesc& d, const void* A, const void* B, void* C) {
  GTP_CHECK(d.m >= 0 && d.n >= 0 && d.k >= 0, "Gemm: negative size m=", d.m, " n=", d.n,
            " k=", d.k);
  GTP_CHECK(d.ab_type == DType::kF32 || d.ab_type == DType::kBF16,
            "Gemm: ab_type must be f32 or bf16, got ", DTypeName(d.ab_type));
  GTP_CHECK(d.c_type == DType::kF32 || d.c_type == DType::kBF16,
            "Gemm: c_type must be f32 or bf16, got ", DTypeName(d.c_type));
  // cblas takes int sizes.
  GTP_CHECK(d.m <= INT_MAX && d.n <= INT_MAX && d.k <= INT_MAX, "Gemm: size exceeds int");

  // Stored shapes of A and B.
  const int64_t a_rows = d.trans_a ? d.k : d.m, a_cols = d.trans_a ? d.m : d.k;
  const int64_t b_rows = d.trans_b ? d.n : d.k, b_cols = d.trans_b ? d.k : d.n;
  const int64_t lda = d.lda ? d.lda : a_cols;
  const int64_t ldb = d.ldb ? d.ldb : b_cols;
  const int64_t ldc = d.ldc ? d.ldc : d.n;
  GTP_CHECK(lda >= a_cols && ldb >= b_cols && ldc >= d.n,
            "Gemm: leading dimension too small (lda=", lda, " < ", a_cols, " or ldb=", ldb, " < ",
            b_cols, " or ldc=", ldc, " < ", d.n, ")");
  GTP_CHECK(lda <= INT_MAX && ldb <= INT_MAX && ldc <= INT_MAX,
            "Gemm: leading dimension exceeds int");
  CheckGemmEpilogue(d);
  if (d.m == 0 || d.n == 0) return;
  GTP_CHECK(C != nullptr, "Gemm: null C");
  GTP_CHECK(d.k == 0 || (A != nullptr && B != nullptr), "Gemm: null A or B");

  const float* a = static_cast<const float*>(A);
  const float* b = static_cast<const float*>(B);
  std::vector<float> a32, b32;
  int64_t lda32 = lda, ldb32 = ldb;
  if (d.ab_type == DType::kBF16 && d.k > 0) {
    a32 = WidenBF16(static_cast<const bf16*>(A), a_rows, a_cols, lda);
    b32 = WidenBF16(static_cast<const bf16*>(B), b_rows, b_cols, ldb);
    a = a32.data();
    b = b32.data();
    lda32 = a_cols;
    ldb32 = b_cols;
  }

  // beta·C reads c_in when it is set (GemmDesc::c_in), else C in place.
  const void* c_read = d.c_in != nullptr ? d.c_in : C;
  float* c = static_cast<float*>(C);
  std::vector<float> c32;
  int64_t ldc32 = ldc;
  if (d.c_type == DType::kBF16) {
    c32 = d.beta != 0 ? WidenBF16(static_cast<const bf16*>(c_read), d.m, d.n, ldc)
                      : std::vector<float>(static_cast<size_t>(d.m) * d.n);
    c = c32.data();
    ldc32 = d.n;
  } else if (d.beta != 0 && c_read != C) {
    for (int64_t i = 0; i < d.m; ++i) {
      std::copy_n(static_cast<const float*>(c_read) + i * ldc, d.n, c + i * ldc);
    }
  }

  // BLAS requires ld ≥ max(1, cols) even where the matrix is empty (k == 0).
  cblas_sgemm(CblasRowMajor, d.trans_a ? CblasTrans : CblasNoTrans,
              d.trans_b ? CblasTrans : CblasNoTrans, static_cast<int>(d.m), static_cast<int>(d.n),
              static_cast<int>(d.k), d.alpha, a, static_cast<int>(std::max<int64_t>(lda32, 1)), b,
              static_cast<int>(std::max<int64_t>(ldb32, 1)), d.beta, c,
              static_cast<int>(std::max<int64_t>(ldc32, 1)));

  if (d.bias != nullptr) {
    for (int64_t i = 0; i < d.m; ++i) {
      for (int64_t j = 0; j < d.n; ++j) {
        c[i * ldc32 + j] += d.c_type == DType::kBF16
                                ? BF16BitsToF32(static_cast<const bf16*>(d.bias)[j].bits)
                                : static_cast<const float*>(d.bias)[j];
      }
    }
  }
  Epilogue(d, a, lda32, c, ldc32);

  if (d.c_type == DType::kBF16) {
    bf16* out = static_cast<bf16*>(C);
    for (int64_t i = 0; i < d.m; ++i) {
      for (int64_t j = 0; j < d.n; ++j) out[i * ldc + j].bits = F32ToBF16Bits(c32[i * d.n + j]);
    }
  }
}

void SetGemmThreads(int n) { openblas_set_num_threads(n < 1 ? 1 : n); }

}  // namespace gtp::kernels::cpu
