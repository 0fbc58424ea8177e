// core/kernels/ssm/ssd_pass.cuh — the pass over the chunks that both chunked
// SSD scans (ssd_chunked.cu, ssd_mma.cu) run between their chunk kernels:
// the chunk sums [bh, c, P·N] become the chunk-entry states S_in[c]
// (forward) or the state gradients G_c (reverse), in place. Private to this
// package's .cu files (internal linkage).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace gtp::kernels::ssm::cuda {
namespace {

// s[bh, c] for c in order (kReverse: from the last): each ← the carry, and
// carry ← dec[bh, c]·carry + its old value, from 0. The loads of 8 chunks
// are issued before their stores and fmas (they do not depend on the carry;
// one at a time made as many serial round trips as there are chunks); the
// carry runs through the same fmas in the same order.
template <bool kReverse>
__device__ __forceinline__ void PassChain(float* __restrict__ s, const float* __restrict__ dec,
                                          int64_t bh, int64_t e, int64_t PN, int64_t nc) {
  constexpr int kBatch = 8;
  // Step step0 + u's element is at[u·ds], its decay dc[u·dd]; the pointers
  // step a batch at a time, and only to steps inside the range.
  const int64_t first = kReverse ? nc - 1 : 0;
  float* at = s + (bh * nc + first) * PN + e;
  const float* dc = dec + bh * nc + first;
  const int64_t ds = kReverse ? -PN : PN, dd = kReverse ? -1 : 1;
  float carry = 0.0f;
  for (int64_t step0 = 0; step0 < nc; step0 += kBatch) {
    if (step0 > 0) {
      at += kBatch * ds;
      dc += kBatch * dd;
    }
    float here[kBatch], d[kBatch];
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      here[u] = step0 + u < nc ? at[u * ds] : 0.0f;
      d[u] = step0 + u < nc ? dc[u * dd] : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      if (step0 + u < nc) {
        at[u * ds] = carry;
        carry = fmaf(d[u], carry, here[u]);
      }
    }
  }
}

// One thread per (b, h, p, n). Forward: s[bh, c] ← S_in[c] (from S_c, in
// place). Reverse: s[bh, c] ← G_c = ∂L/∂S_in[c+1] (from local_c, in place).
template <bool kReverse>
__global__ void ChunkPassKernel(float* __restrict__ s, const float* __restrict__ dec, int64_t BH,
                                int64_t PN, int64_t nc) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < BH * PN;
       i += int64_t{gridDim.x} * blockDim.x) {
    PassChain<kReverse>(s, dec, i / PN, i % PN, PN, nc);
  }
}

// Both passes of the backward in one launch: S forward, Gs reverse (the two
// ChunkPassKernels' values bit for bit).
__global__ void ChunkPassBothKernel(float* __restrict__ S, float* __restrict__ Gs,
                                    const float* __restrict__ dec, int64_t BH, int64_t PN,
                                    int64_t nc) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < BH * PN;
       i += int64_t{gridDim.x} * blockDim.x) {
    PassChain<false>(S, dec, i / PN, i % PN, PN, nc);
    PassChain<true>(Gs, dec, i / PN, i % PN, PN, nc);
  }
}

}  // namespace
}  // namespace gtp::kernels::ssm::cuda
