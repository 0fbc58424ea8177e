// core/kernels/fp8/lt_scales.cu — our scale tables → cuBLASLt's scale
// buffers (lt_scales_cuda.h). The layout is lt_scale_layout.h's
// LtScaleOffset, nothing else: the buffer is filled with NaN bytes (padding),
// then one thread per table entry copies it to its offset.
#include <cuda_runtime.h>

#include <cstdint>

#include "core/kernels/cuda/common.cuh"
#include "core/kernels/fp8/block_scale.h"
#include "core/kernels/fp8/lt_scale_layout.h"
#include "core/kernels/fp8/lt_scales_cuda.h"

namespace gtp::kernels::fp8::cuda {
namespace {

using ::gtp::kernels::cuda::internal::GridFor;

constexpr int kThreads = 256;

// Entry e = i·L + j of our [table_rows, L] table to LtScaleOffset(i, j).
__global__ void __launch_bounds__(kThreads)
    ToLtScalesKernel(const float* __restrict__ scales, bool tiles, int64_t rows, int64_t K,
                     int64_t table_rows, float* __restrict__ lt) {
  const int64_t L = Fp8NumBlocks(K), n = table_rows * L;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < n;
       e += int64_t{gridDim.x} * blockDim.x)
    lt[LtScaleOffset(tiles, rows, K, e / L, e % L)] = scales[e];
}

}  // namespace

void ToLtScales(const float* scales, bool tiles, int64_t rows, int64_t K, float* lt,
                cudaStream_t stream) {
  GTP_CU_REQUIRE(rows >= 0 && K >= 0, "fp8::cuda::ToLtScales: negative shape %lld x %lld",
                 static_cast<long long>(rows), static_cast<long long>(K));
  if (rows == 0 || K == 0) return;
  const int64_t count = LtScaleCount(tiles, rows, K);
  GTP_CU_CHECK(cudaMemsetAsync(lt, 0xff, static_cast<size_t>(count) * sizeof(float), stream));
  const int64_t table_rows = tiles ? Fp8NumBlocks(rows) : rows;
  ToLtScalesKernel<<<GridFor(table_rows * Fp8NumBlocks(K), kThreads), kThreads, 0, stream>>>(
      scales, tiles, rows, K, table_rows, lt);
  GTP_CU_LAUNCH_CHECK();
}

}  // namespace gtp::kernels::fp8::cuda
