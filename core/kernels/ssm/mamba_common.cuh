// core/kernels/ssm/mamba_common.cuh — what the Mamba mixer's small CUDA
// kernels share (mamba_conv.cu: the causal conv1d; mamba_ops.cu: the dt
// softplus, A = −exp(A_log), the gated RMSNorm): the SiLU, the launch size,
// and the column sums (weight and bias gradients) in two fixed-order passes.
// Private to this package's .cu files (internal linkage).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/kernels/cuda/common.cuh"
#include "core/kernels/cuda/elem.cuh"

namespace gtp::kernels::ssm::cuda {
namespace {

using ::gtp::kernels::cuda::internal::BlockSum;
using ::gtp::kernels::cuda::internal::CeilDiv;
using ::gtp::kernels::cuda::internal::GridFor;
using ::gtp::kernels::cuda::internal::InOrderSum;
using ::gtp::kernels::cuda::internal::kWarpSize;
using ::gtp::kernels::cuda::internal::Launch;
using ::gtp::kernels::cuda::internal::Load;
using ::gtp::kernels::cuda::internal::Store;
using ::gtp::kernels::cuda::internal::WarpSum;

constexpr int kThreads = 256;
constexpr int kWarpsPerBlock = kThreads / kWarpSize;

__device__ __forceinline__ float Sigmoid(float v) { return 1.0f / (1.0f + expf(-v)); }
__device__ __forceinline__ float Silu(float v) { return v * Sigmoid(v); }
__device__ __forceinline__ float SiluGrad(float v) {
  const float s = Sigmoid(v);
  return s * (1.0f + v * (1.0f - s));
}

// Column sums of a [rows, cols] matrix of values in two fixed-order passes
// (one block per column over 8192 rows is serial and starves the GPU):
//   1. blocks of 32 columns × 8 row-threads each add a slab of `slab_rows`
//      rows (thread (cx, ry) takes rows ry, ry + 8, …; then the 8 in order)
//      into partial[slab, col];
//   2. out(col, Σ_slab partial[slab, col]) with the slabs in order.
// The slab size depends on rows only, so reruns give the same bits. A value
// source V gives each column's accessor once (V::Column(col)), so the index
// arithmetic that depends on the column alone (divisions by the channel
// count, the group size) is done once per thread, not once per element; the
// per-row part uses 32-bit arithmetic (ColumnReduce requires rows < 2³¹).
constexpr int kColWidth = 32, kColRowThreads = 8;

int64_t ColumnSlabRows(int64_t rows) {
  const int64_t min_rows = 256, max_slabs = 4096;
  const int64_t r = CeilDiv(rows, max_slabs);
  return r > min_rows ? r : min_rows;
}
int64_t ColumnSlabs(int64_t rows) { return rows > 0 ? CeilDiv(rows, ColumnSlabRows(rows)) : 0; }

template <class V>
__global__ void ColumnPartialKernel(V value, float* __restrict__ partial, int64_t rows,
                                    int64_t cols, int64_t slab_rows) {
  __shared__ float red[kColRowThreads][kColWidth + 1];
  const int cx = threadIdx.x, ry = threadIdx.y;
  const int64_t col = blockIdx.x * int64_t{kColWidth} + cx, slab = blockIdx.y;
  const int64_t r0 = slab * slab_rows, r1 = r0 + slab_rows < rows ? r0 + slab_rows : rows;
  float acc = 0.0f;
  if (col < cols) {
    const auto column = value.Column(col);
    // kBatch rows read before any is added (their loads in flight together),
    // then added in row order: the sums of the one-at-a-time loop.
    constexpr int kBatch = 8;
    int64_t r = r0 + ry;
    for (; r + (kBatch - 1) * kColRowThreads < r1; r += kBatch * kColRowThreads) {
      float v[kBatch];
#pragma unroll
      for (int k = 0; k < kBatch; ++k) v[k] = column(r + k * kColRowThreads);
#pragma unroll
      for (int k = 0; k < kBatch; ++k) acc += v[k];
    }
    for (; r < r1; r += kColRowThreads) acc += column(r);
  }
  red[ry][cx] = acc;
  __syncthreads();
  if (ry == 0 && col < cols) {
    float s = 0.0f;
    for (int q = 0; q < kColRowThreads; ++q) s += red[q][cx];
    partial[slab * cols + col] = s;
  }
}

template <class O>
__global__ void ColumnFinishKernel(const float* __restrict__ partial, int64_t slabs, int64_t cols,
                                   O out) {
  for (int64_t c = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; c < cols;
       c += int64_t{gridDim.x} * blockDim.x) {
    out(c, InOrderSum<8>(partial + c, slabs, cols));  // the slabs in order
  }
}

// in[r, c].
struct PlainValue {
  const float* __restrict__ in;
  int64_t cols;
  struct Col {
    const float* __restrict__ p;  // &in[0, c]
    int64_t cols;
    __device__ float operator()(int64_t r) const { return p[r * cols]; }
  };
  __device__ Col Column(int64_t c) const { return {in + c, cols}; }
};
// out[c] += s.
struct AddOut {
  float* __restrict__ out;
  __device__ void operator()(int64_t c, float s) const { out[c] += s; }
};

template <class V, class O>
void ColumnReduce(V value, O out, float* partial, int64_t rows, int64_t cols, cudaStream_t stream) {
  const int64_t slabs = ColumnSlabs(rows);
  if (cols == 0 || slabs == 0) return;  // adding nothing
  GTP_CU_REQUIRE(rows < (int64_t{1} << 31), "column sums over %lld rows (at most 2^31 - 1)",
                 static_cast<long long>(rows));
  const dim3 grid(static_cast<unsigned>(CeilDiv(cols, kColWidth)), static_cast<unsigned>(slabs));
  Launch(ColumnPartialKernel<V>, grid, dim3(kColWidth, kColRowThreads), 0, stream, value, partial,
         rows, cols, ColumnSlabRows(rows));
  GTP_CU_LAUNCH_CHECK();
  Launch(ColumnFinishKernel<O>, GridFor(cols, kThreads), kThreads, 0, stream, partial, slabs, cols,
         out);
  GTP_CU_LAUNCH_CHECK();
}

}  // namespace
}  // namespace gtp::kernels::ssm::cuda
