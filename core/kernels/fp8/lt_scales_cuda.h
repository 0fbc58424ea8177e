// core/kernels/fp8/lt_scales_cuda.h — the CUDA launcher that rewrites a scale
// table of ours into cuBLASLt's layout (lt_scale_layout.h) for the
// block-scaled GEMM (private to this package: BlockScaledGemm calls it).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace gtp::kernels::fp8::cuda {

// scales: our table of an operand [rows, K] (tiles: [ceil(rows/128),
// ceil(K/128)], else [rows, ceil(K/128)], row-major f32) → lt:
// LtScaleCount(tiles, rows, K) floats, entry (i, j) at LtScaleOffset(tiles,
// rows, K, i, j); the padding entries (BLK128x128's K blocks beyond K) are
// NaN, so a read of one shows in the GEMM's output. Enqueued on `stream`
// (never synchronises); nothing when rows·K = 0; aborts with file:line on a
// bad launch.
void ToLtScales(const float* scales, bool tiles, int64_t rows, int64_t K, float* lt,
                cudaStream_t stream);

}  // namespace gtp::kernels::fp8::cuda
