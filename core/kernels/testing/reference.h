// core/kernels/testing/reference.h — double-precision reference forwards of
// the ops in core/kernels/cpu.h, written for clarity, not speed. They are the
// ground truth of the kernel tests: forwards are compared against them, and
// backwards against finite differences of them (testing/harness.h).
//
// Shapes and layouts are the ops' own (see core/kernels/cpu.h); buffers are
// packed row-major std::vector<double>. All functions are pure.
//
// This target sees only //core, not core/kernels/kernels.h, so the op
// parameters (GemmDesc, AdamWParams, Newton–Schulz coefficients) are spelled
// out as plain arguments.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

namespace gtp::kernels::testing {

// C[m, n] = alpha·op(A)·op(B) + beta·C with GemmDesc's storage rules: A is
// [m, k] (or [k, m] when trans_a), B is [k, n] (or [n, k] when trans_b), and a
// leading dimension of 0 means packed. C is read only when beta != 0.
void RefGemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha,
             const std::vector<double>& A, int64_t lda, const std::vector<double>& B, int64_t ldb,
             double beta, std::vector<double>* C, int64_t ldc);

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

// GQA attention, causal (query t sees keys s ≤ t) or bidirectional (every
// key): returns out[B, T, NH, HS]; att[B, NH, T, T] if non-null (zeros above
// the diagonal when causal).
std::vector<double> RefAttention(const std::vector<double>& q, const std::vector<double>& k,
                                 const std::vector<double>& v, int64_t B, int64_t T, int64_t NH,
                                 int64_t NKV, int64_t HS, std::vector<double>* att = nullptr,
                                 bool causal = true);

// lse[B, NH, T] of GQA attention: log Σ_s exp(q_t·k_s/√HS) over s ≤ t (causal)
// or every s.
std::vector<double> RefAttentionLse(const std::vector<double>& q, const std::vector<double>& k,
                                    int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS,
                                    bool causal = true);

// Analytic gradients of Σ dout·RefAttention(q, k, v) (softmax backward written
// as ds = p·(dp − Σ_s p·dp), independent of the flash D = dout·out form), for
// shapes too large for finite differences. dq like q; dk, dv like k.
void RefAttentionBackward(const std::vector<double>& q, const std::vector<double>& k,
                          const std::vector<double>& v, const std::vector<double>& dout, int64_t B,
                          int64_t T, int64_t NH, int64_t NKV, int64_t HS, std::vector<double>* dq,
                          std::vector<double>* dk, std::vector<double>* dv, bool causal = true);

// loss[N] = logsumexp(logits[n, :]) − logits[n, target] over the full vocabulary
// V; 0 where target < 0.
std::vector<double> RefCrossEntropy(const std::vector<double>& logits,
                                    const std::vector<int32_t>& targets, int64_t N, int64_t V);

// Analytic backwards in double, for shapes too large for finite differences
// (the kernel tests check each against FiniteDifferenceGradient of the forward
// above on small shapes). Every output is written (=), never accumulated.
// LayerNorm (b does not enter the gradient); dx[N, C], dw[C], db[C].
void RefLayerNormBackward(const std::vector<double>& dy, const std::vector<double>& x,
                          const std::vector<double>& w, int64_t N, int64_t C, double eps,
                          std::vector<double>* dx, std::vector<double>* dw,
                          std::vector<double>* db);
// RMSNorm; dx[N, C], dw[C].
void RefRMSNormBackward(const std::vector<double>& dy, const std::vector<double>& x,
                        const std::vector<double>& w, int64_t N, int64_t C, double eps,
                        std::vector<double>* dx, std::vector<double>* dw);
// dx = dy·gelu'(x).
std::vector<double> RefGeluBackward(const std::vector<double>& dy, const std::vector<double>& x);
// dx[N, 2H] = [dgate | dup] of RefSwiGlu for dy[N, H].
std::vector<double> RefSwiGluBackward(const std::vector<double>& dy, const std::vector<double>& x,
                                      int64_t N, int64_t H);
// dlogits[N, V] = dloss[n]·(softmax(logits[n, :]) − onehot(target)); 0 rows where target < 0.
std::vector<double> RefCrossEntropyBackward(const std::vector<double>& logits,
                                            const std::vector<int32_t>& targets,
                                            const std::vector<double>& dloss, int64_t N, int64_t V);
// RoPE of x[B, T, NH, HS] ("rotate half", position t, f_d = theta^(−2d/HS)):
// sign = +1 is the forward, −1 the backward.
std::vector<double> RefRope(const std::vector<double>& x, int64_t B, int64_t T, int64_t NH,
                            int64_t HS, double theta, double sign);

// One AdamW step on doubles, the formula of cpu::AdamW (step is 1-based).
void RefAdamW(std::vector<double>* p, const std::vector<double>& g, std::vector<double>* m,
              std::vector<double>* v, double lr, double beta1, double beta2, double eps,
              double weight_decay, int64_t step);

// Newton–Schulz in double: G[M, N] → X[M, N] as cpu::NewtonSchulz describes
// (Frobenius normalisation + 1e-7, then step i applies abc[i] = (a, b, c)),
// but written on the un-transposed matrix: for M > N the iteration
// X ← aX + X(bA + cA²), A = XᵀX, is the transpose of the documented one.
std::vector<double> RefNewtonSchulz(const std::vector<double>& G, int64_t M, int64_t N,
                                    const std::vector<std::array<double, 3>>& abc);

// Eigenvalues of the symmetric n×n matrix A (cyclic Jacobi), ascending.
std::vector<double> SymmetricEigenvalues(std::vector<double> A, int64_t n);

}  // namespace gtp::kernels::testing
