// core/kernels/cuda/grad_norm.cu — grad-norm bookkeeping on the device (the
// math is in core/kernels/cpu/grad_norm.cc). Single-thread kernels: a few
// dozen doubles, in a fixed order (the same bits as the CPU).
#include <cuda_runtime.h>

#include "core/kernels/cuda.h"
#include "core/kernels/cuda/common.cuh"

namespace gtp::kernels::cuda {
namespace {

__global__ void GradNormWordsKernel(const double* __restrict__ ss, int n_count, int n,
                                    float* __restrict__ words) {
  double local = 0.0;
  for (int i = 0; i < n; ++i) local += i < n_count ? ss[i] : 0.0 * ss[i];
  const float hi = static_cast<float>(local);
  words[0] = hi;
  words[1] = isfinite(local) ? static_cast<float>(local - hi) : 0.0f;
}

__global__ void GradNormFinalizeKernel(const float* __restrict__ words, int num_buffers,
                                       double max_norm, float* __restrict__ out) {
  double total = 0.0;
  for (int b = 0; b < num_buffers; ++b) {
    total += static_cast<double>(words[2 * b]) + static_cast<double>(words[2 * b + 1]);
  }
  const double norm = sqrt(total);
  const bool skip = !isfinite(norm);
  out[0] = static_cast<float>(norm);
  out[1] = !skip && max_norm > 0 && norm > max_norm ? static_cast<float>(max_norm / (norm + 1e-6))
                                                    : 1.0f;
  out[2] = skip ? 1.0f : 0.0f;
}

}  // namespace

void GradNormWords(const double* ss, int n_count, int n, float* words, cudaStream_t stream) {
  GTP_CU_REQUIRE(0 <= n_count && n_count <= n, "GradNormWords: n_count=%d n=%d", n_count, n);
  GradNormWordsKernel<<<1, 1, 0, stream>>>(ss, n_count, n, words);
  GTP_CU_LAUNCH_CHECK();
}

void GradNormFinalize(const float* words, int num_buffers, double max_norm, float* out,
                      cudaStream_t stream) {
  GradNormFinalizeKernel<<<1, 1, 0, stream>>>(words, num_buffers, max_norm, out);
  GTP_CU_LAUNCH_CHECK();
}

}  // namespace gtp::kernels::cuda
