// core/kernels/testing/reference.h — double-precision reference forwards of
// the ops in core/kernels/cpu.h, written for clarity, not speed. They are the
// ground truth of the kernel tests: forwards are compared against them, and
// backwards against finite differences of them (testing/harness.h).
//
// Shapes and layouts are the ops' own (see core/kernels/cpu.h); buffers are
// packed row-major std::vector<double>. All functions are pure.
#pragma once

#include <cstdint>
#include <vector>

#include "core/kernels/kernels.h"

namespace gtp::kernels::testing {

// C = alpha·op(A)·op(B) + beta·C with GemmDesc's storage rules (lda/ldb/ldc
// of 0 mean packed; only d.m/n/k/trans/alpha/beta/ld are read). C is read only
// when beta != 0.
void RefGemm(const GemmDesc& d, const std::vector<double>& A, const std::vector<double>& B,
             std::vector<double>* C);

// out[N, C]: table row idx[n] − vocab_start, or 0 when outside [0, V).
std::vector<double> RefEmbedding(const std::vector<int32_t>& idx, const std::vector<double>& table,
                                 int64_t V, int64_t C, int64_t vocab_start);

// y[N, C] = (x − mean)/√(var + eps)·w + b (b may be empty); mean/rstd[N] if non-null.
std::vector<double> RefLayerNorm(const std::vector<double>& x, const std::vector<double>& w,
                                 const std::vector<double>& b, int64_t N, int64_t C, double eps,
                                 std::vector<double>* mean = nullptr,
                                 std::vector<double>* rstd = nullptr);
// y[N, C] = x/√(mean(x²) + eps)·w; rstd[N] if non-null.
std::vector<double> RefRMSNorm(const std::vector<double>& x, const std::vector<double>& w,
                               int64_t N, int64_t C, double eps,
                               std::vector<double>* rstd = nullptr);

// Elementwise tanh-approximate GELU.
std::vector<double> RefGelu(const std::vector<double>& x);
// x[N, 2H] = [gate | up] → y[N, H] = gate·σ(gate)·up.
std::vector<double> RefSwiGlu(const std::vector<double>& x, int64_t N, int64_t H);

// Row softmax of x[N, C].
std::vector<double> RefSoftmax(const std::vector<double>& x, int64_t N, int64_t C);

// Causal GQA attention: returns out[B, T, NH, HS]; att[B, NH, T, T] if non-null
// (zeros above the diagonal).
std::vector<double> RefAttention(const std::vector<double>& q, const std::vector<double>& k,
                                 const std::vector<double>& v, int64_t B, int64_t T, int64_t NH,
                                 int64_t NKV, int64_t HS, std::vector<double>* att = nullptr);

// loss[N] = logsumexp(logits[n, :]) − logits[n, target] over the full vocabulary
// V; 0 where target < 0.
std::vector<double> RefCrossEntropy(const std::vector<double>& logits,
                                    const std::vector<int32_t>& targets, int64_t N, int64_t V);

// One AdamW step on doubles, same formula as cpu::AdamW.
void RefAdamW(std::vector<double>* p, const std::vector<double>& g, std::vector<double>* m,
              std::vector<double>* v, const AdamWParams& hp);

// Newton–Schulz in double: G[M, N] → X[M, N] exactly as cpu::NewtonSchulz
// describes (Frobenius normalisation + 1e-7, transpose when M > N), but written
// on the un-transposed matrix: for M > N the iteration X ← aX + X(bA + cA²),
// A = XᵀX is the transpose of the documented one.
std::vector<double> RefNewtonSchulz(const std::vector<double>& G, int64_t M, int64_t N, int steps,
                                    NsCoefficients coeffs);

// Eigenvalues of the symmetric n×n matrix A (cyclic Jacobi), ascending.
std::vector<double> SymmetricEigenvalues(std::vector<double> A, int64_t n);

}  // namespace gtp::kernels::testing
