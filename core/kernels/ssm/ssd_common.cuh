// core/kernels/ssm/ssd_common.cuh — device code both SSD scan kernel sets
// (ssd_scan.cu, the recurrence; ssd_chunked.cu, by chunks) use. Private to
// this package's .cu files; each includes its own copy (internal linkage).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/kernels/cuda/common.cuh"

namespace gtp::kernels::ssm::cuda {
namespace {

// out[r, g, n] = Σ_{k < H/G} in[r, g·(H/G) + k, n] (=), k in order: a group's
// dB / dC from per-head partials (r = b·T + t).
__global__ void SumGroupHeadsKernel(const float* __restrict__ in, float* __restrict__ out,
                                    int64_t rows, int64_t H, int64_t G, int64_t N) {
  const int64_t total = rows * G * N, hpg = H / G;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t n = i % N, g = (i / N) % G, r = i / (N * G);
    // The heads in order, 8 loads in flight (the plain loop's sum, bit for bit).
    out[i] = ::gtp::kernels::cuda::internal::InOrderSum<8>(in + ((r * H) + g * hpg) * N + n, hpg, N);
  }
}

// A backward with no (b, t, h) still writes dBm and dCm [B, T, G, N] (n
// floats each): zeros.
inline void ZeroGroupGrads(float* dBm, float* dCm, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  ::gtp::kernels::cuda::internal::ZeroAsync(dBm, sizeof(float) * n, stream);
  ::gtp::kernels::cuda::internal::ZeroAsync(dCm, sizeof(float) * n, stream);
}

}  // namespace
}  // namespace gtp::kernels::ssm::cuda
