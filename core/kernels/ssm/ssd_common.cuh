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

// For i = threadIdx.x, + blockDim.x, … < n: store(i, value(i)), with
// kBatch of a thread's global loads issued before any is stored. A plain
// staging loop waits for each load before the next (the store needs it); the
// scan kernels stage their tiles this way (a chunked backward block spent ~18
// load round trips staging its chunk). The same values land in the same
// places.
// kBatch trades registers for loads in flight: the recurrence kernels,
// whose occupancy registers bound, take 2 (4 cost the forward a block an SM).
constexpr int kStageBatch = 4;
template <int kBatch = kStageBatch, class Value, class Store>
__device__ __forceinline__ void StageBatched(int n, Value value, Store store) {
  for (int i0 = threadIdx.x; i0 < n; i0 += kBatch * blockDim.x) {
    float v[kBatch];
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int i = i0 + u * static_cast<int>(blockDim.x);
      v[u] = i < n ? value(i) : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int i = i0 + u * static_cast<int>(blockDim.x);
      if (i < n) store(i, v[u]);
    }
  }
}

// A backward with no (b, t, h) still writes dBm and dCm [B, T, G, N] (n
// floats each): zeros.
inline void ZeroGroupGrads(float* dBm, float* dCm, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  GTP_CU_CHECK(cudaMemsetAsync(dBm, 0, sizeof(float) * n, stream));
  GTP_CU_CHECK(cudaMemsetAsync(dCm, 0, sizeof(float) * n, stream));
}

}  // namespace
}  // namespace gtp::kernels::ssm::cuda
