// core/kernels/cuda/newton_schulz.cc — Newton–Schulz orthogonalisation
// (Muon's) on the GPU, the algorithm of cpu::NewtonSchulz:
//   X ← G / (‖G‖_F + 1e-7)                 (norm summed in double)
//   if M > N: X ← Xᵀ                       (R = min(M, N) rows, K = max(M, N) columns)
//   repeat `steps` times, (a, b, c) = NsCoefficientsAt(coeffs, i):
//     A ← X·Xᵀ;  P ← c·A·A + b·A;  X ← P·X + a·X
//   if M > N: X ← Xᵀ
// The products are cuda::Gemm calls in plain f32 (never TF32); the b·A and a·X
// terms ride in the GEMMs' beta after a device copy. Everything is enqueued on
// `stream`; nothing blocks the host.
//
// Scratch (2·R² + 2·M·N + 1 floats): x and x_next [R, K], A and P [R, R], and
// the norm's denominator in the last float. The norm's double partial sums
// borrow the start of the scratch before x is written.
#include <cstdint>
#include <utility>

#include "core/cuda_runtime.h"
#include "core/kernels/cuda.h"
#include "core/status.h"

namespace gtp::kernels::cuda {

namespace internal {
// Defined in newton_schulz_util.cu.
int64_t NormPartials(int64_t n);
void FrobeniusDenominator(const float* x, int64_t n, double* partials, float* denom,
                          cudaStream_t stream);
void ScaleCopy(const float* src, float* dst, int64_t rows, int64_t cols, bool transpose,
               const float* denom, cudaStream_t stream);
}  // namespace internal

void NewtonSchulz(BlasContext& ctx, const float* G, float* X, float* scratch, int64_t M, int64_t N,
                  int steps, NsCoefficients coeffs, cudaStream_t stream) {
  GTP_CHECK(M >= 0 && N >= 0 && steps >= 0, "NewtonSchulz: bad args M=", M, " N=", N,
            " steps=", steps);
  if (M == 0 || N == 0) return;
  const bool transposed = M > N;
  const int64_t R = transposed ? N : M;
  const int64_t K = transposed ? M : N;
  const int64_t mn = M * N;
  float* x = scratch;
  float* x_next = x + mn;
  float* A = x_next + mn;
  float* P = A + R * R;
  float* denom = P + R * R;

  // Double partials at the first 8-byte boundary of the scratch; they are
  // consumed before x is written (stream order).
  uintptr_t at = reinterpret_cast<uintptr_t>(scratch);
  at = (at + 7) & ~uintptr_t{7};
  double* partials = reinterpret_cast<double*>(at);
  GTP_CHECK(reinterpret_cast<float*>(partials + internal::NormPartials(mn)) <= denom,
            "NewtonSchulz: scratch too small for the norm partials");
  internal::FrobeniusDenominator(G, mn, partials, denom, stream);
  internal::ScaleCopy(G, x, M, N, transposed, denom, stream);

  for (int s = 0; s < steps; ++s) {
    float a, b, c;
    NsCoefficientsAt(coeffs, s, &a, &b, &c);
    GemmDesc gram;  // A = X·Xᵀ
    gram.trans_b = true;
    gram.m = R, gram.n = R, gram.k = K;
    Gemm(ctx, gram, x, x, A, stream);
    GemmDesc poly;  // P = c·A·A + b·A
    poly.m = R, poly.n = R, poly.k = R;
    poly.alpha = c, poly.beta = b;
    GTP_CUDA_CHECK(cudaMemcpyAsync(P, A, sizeof(float) * R * R, cudaMemcpyDeviceToDevice, stream));
    Gemm(ctx, poly, A, A, P, stream);
    GemmDesc update;  // X' = P·X + a·X
    update.m = R, update.n = K, update.k = R;
    update.beta = a;
    GTP_CUDA_CHECK(
        cudaMemcpyAsync(x_next, x, sizeof(float) * mn, cudaMemcpyDeviceToDevice, stream));
    Gemm(ctx, update, P, x, x_next, stream);
    std::swap(x, x_next);
  }

  // x is [R, K]; transposing it back gives X[M, N].
  internal::ScaleCopy(x, X, R, K, transposed, /*denom=*/nullptr, stream);
}

}  // namespace gtp::kernels::cuda
