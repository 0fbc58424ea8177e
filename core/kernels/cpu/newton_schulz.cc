// Newton–Schulz orthogonalisation (Muon's), G[M, N] → X[M, N]:
//   X ← G / (‖G‖_F + 1e-7)                 (all singular values ≤ 1; G = 0 gives 0)
//   if M > N: X ← Xᵀ                       (A below is then the small Gram, R = min(M, N))
//   repeat `steps` times, (a, b, c) = NsCoefficientsAt(coeffs, i):
//     A ← X·Xᵀ;  X ← a·X + (b·A + c·A²)·X   (each singular value σ ↦ aσ + bσ³ + cσ⁵)
//   if M > N: X ← Xᵀ
// The products go through cpu::Gemm (OpenBLAS). Scratch (2·R² + 2·M·N floats):
// the working X and the next X [R, max(M, N)] each, A and P = bA + cA² [R, R].
#include <cmath>
#include <cstring>
#include <utility>

#include "core/kernels/cpu.h"
#include "core/status.h"

namespace gtp::kernels::cpu {

void NewtonSchulz(const float* G, float* X, float* scratch, int64_t M, int64_t N, int steps,
                  NsCoefficients coeffs) {
  GTP_CHECK(M >= 0 && N >= 0 && steps >= 0, "NewtonSchulz: bad args M=", M, " N=", N,
            " steps=", steps);
  if (M == 0 || N == 0) return;
  const bool transposed = M > N;
  const int64_t R = transposed ? N : M;  // rows of the working matrix
  const int64_t K = transposed ? M : N;  // its columns
  const size_t mn = static_cast<size_t>(M) * N;
  float* x = scratch;
  float* x_next = x + mn;
  float* A = x_next + mn;
  float* P = A + static_cast<size_t>(R) * R;

  double sq = 0;  // double: the sum of M·N squares would lose bits in f32
  for (size_t i = 0; i < mn; ++i) sq += static_cast<double>(G[i]) * G[i];
  const float denom = static_cast<float>(std::sqrt(sq) + 1e-7);
  if (transposed) {
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) x[j * M + i] = G[i * N + j] / denom;
  } else {
    for (size_t i = 0; i < mn; ++i) x[i] = G[i] / denom;
  }

  for (int s = 0; s < steps; ++s) {
    float a, b, c;
    NsCoefficientsAt(coeffs, s, &a, &b, &c);
    GemmDesc gram;  // A = X·Xᵀ
    gram.trans_b = true;
    gram.m = R, gram.n = R, gram.k = K;
    Gemm(gram, x, x, A);
    GemmDesc poly;  // P = c·A·A + b·A
    poly.m = R, poly.n = R, poly.k = R;
    poly.alpha = c, poly.beta = b;
    std::memcpy(P, A, sizeof(float) * R * R);
    Gemm(poly, A, A, P);
    GemmDesc update;  // X' = P·X + a·X
    update.m = R, update.n = K, update.k = R;
    update.beta = a;
    std::memcpy(x_next, x, sizeof(float) * mn);
    Gemm(update, P, x, x_next);
    std::swap(x, x_next);
  }

  if (transposed) {
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) X[i * N + j] = x[j * M + i];
  } else {
    std::memcpy(X, x, sizeof(float) * mn);
  }
}

}  // namespace gtp::kernels::cpu
