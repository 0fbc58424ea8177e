// comm/nccl/accumulate_kernels.h — the element-wise kernels the NCCL backend
// wraps around NCCL calls so that reductions follow the project's numerics
// (comm/internal/ops.h): bf16/f16 widen to f32, reduce in f32 and round once;
// kMean is a sum followed by one division by the group size.
//
// Every launcher enqueues on `stream` and returns at once (never blocks);
// it returns the launch error (cudaErrorInvalidValue for an unsupported
// dtype). Thread-safe. (No abseil here: this header is compiled by nvcc.)
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/dtype.h"

namespace gtp::comm::nccl_internal {

// dst_f32[i] = widen(src[i]) for dtype bf16 or f16.
cudaError_t LaunchWiden(DType dtype, const void* src, float* dst_f32, int64_t n,
                         cudaStream_t stream);
// dst[i] = narrow(src_f32[i] / divisor) for dtype bf16, f16 or f32
// (divisor 1 skips the division).
cudaError_t LaunchNarrow(DType dtype, const float* src_f32, void* dst, int64_t n, int divisor,
                          cudaStream_t stream);
// buf[i] /= divisor (truncating for integers) for f32, i32, i64.
cudaError_t LaunchDivide(DType dtype, void* buf, int64_t n, int divisor, cudaStream_t stream);

}  // namespace gtp::comm::nccl_internal
