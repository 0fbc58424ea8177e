// core/kernels/fp8/lt_scale_layout.h — where cuBLASLt's block-scaled FP8
// GEMM reads a block's scale: the one function that maps this package's
// scale tables (block_scale.h) to cuBLASLt's scale buffers. Host and device
// (the conversion kernel in lt_scales.cu and the tests call it).
//
// Verified on an H200 (CUDA 13.0, 2026-12-04): block_gemm_gpu_test.cc's
// layout probe found every output using the scales this mapping names, on
// all eight layout pairs it tries. The probe runs first in that test; when a
// cuBLASLt version reads another layout it prints which of our table entries
// cuBLASLt really applied to each output: fix the mapping here (and only
// here) from that report.
//
// Ours (block_scale.h), an operand [rows, K], L = ceil(K/128):
//   kRow1x128     scales [rows, L] row-major: entry (r, j) at r·L + j
//   kTile128x128  scales [ceil(rows/128), L] row-major: entry (i, j) at i·L + j
// cuBLASLt's (our reading; the operand is K-major, "TN", so its K blocks run
// along the operand's contiguous dimension):
//   CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F (for kRow1x128): [L, rows],
//     "outer-dim-major": entry (r, j) at j·rows + r.
//   CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F (for kTile128x128):
//     [ceil(rows/128), L4] with L4 = L rounded up to a multiple of 4 (16-byte
//     rows of K blocks): entry (i, j) at i·L4 + j; entries j ≥ L are padding.
// Sources (public, none of them cuBLAS' own text, which was not available
// here):
//   - PyTorch aten/src/ATen/native/cuda/ScaledBlas.cpp (is_blockwise_1x128_scaling,
//     is_blockwise_128x128_scaling and the "Invalid scaling configuration" message:
//     1x128 scales "(rows, ceil(K/128)) ... outer-dim-major", i.e. strides
//     (1, rows); 128x128 scales "near-inner-dim-major (with 16-byte aligned
//     strides)"), and test/test_scaled_matmul_cuda.py (_pad_128x128_scales:
//     "L = ceil_div(K, 128), L4 = round_up(L, 4) ... scale: [L4,
//     ceil_div({M,N}, 128)] and K/L/L4-major in memory", citing cuBLAS' section
//     "128-element 1D and 128x128 2D block scaling for FP8 data types"; the
//     1x128 scales are x_scales.t().contiguous().t(), strides (1, rows)).
//   - NVIDIA CUDALibrarySamples cuBLASLt/Common/helpers.h getScaleTensorSize
//     (inner = K for a transposed A): VEC128_32F ceil(K/128)·outer floats,
//     BLK128x128_32F round_up(ceil(K/128), 4)·ceil(outer/128) floats — the
//     sizes of the two layouts above (the sample fills every scale with one
//     value, so it does not pin the order).
//   - TransformerEngine pytorch/csrc/quantizer.cpp Float8BlockQuantizer::
//     get_scale_shape ("GEMM_READY"): 1D [ceil(K/128), round_up(rows, 4)],
//     2D [ceil(rows/128), round_up(ceil(K/128), 4)]. TE pads the 1D rows to a
//     multiple of 4 where PyTorch does not; BlockScaledGemm requires rows to be
//     multiples of 16 (block_gemm.h), so both readings agree on every shape we
//     accept.
#pragma once

#include <cstdint>

#include "core/kernels/fp8/block_scale.h"

namespace gtp::kernels::fp8 {

// Floats in cuBLASLt's scale buffer of an operand [rows, K] (tiles: 128×128
// blocks, else 1×128).
GTP_HD int64_t LtScaleCount(bool tiles, int64_t rows, int64_t K) {
  const int64_t L = Fp8NumBlocks(K);
  return tiles ? Fp8NumBlocks(rows) * ((L + 3) / 4 * 4) : L * rows;
}

// The offset in that buffer of our scale table's entry (i, j): row i of the
// table (a row of the operand, or a 128-row tile), K block j.
GTP_HD int64_t LtScaleOffset(bool tiles, int64_t rows, int64_t K, int64_t i, int64_t j) {
  const int64_t L = Fp8NumBlocks(K);
  return tiles ? i * ((L + 3) / 4 * 4) + j : j * rows + i;
}

}  // namespace gtp::kernels::fp8
