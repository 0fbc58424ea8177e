// core/kernels/fp8/block_quant_cuda.h — CUDA launchers behind block_quant.h
// (private to this package: call the Tensor-level functions). Raw device
// pointers, row-major contiguous; codes one byte each, scales f32 in the
// layouts of block_scale.h. Every launcher only enqueues on `stream` (never
// synchronises the host), does nothing when R·C = 0, and aborts with
// file:line on a bad launch. Codes, scales and dequantised values are
// bit-identical to the CPU paths (block_quant.cc): the same scalar rules
// (block_scale.h), amax as an unsigned max of the |x| bits (exact and
// order-independent), no fast math. Deterministic, no atomics.
//
// `lt` (may be null): a second copy of the scales in cuBLASLt's layout for
// the operand (lt_scale_layout.h: LtScaleCount floats; a tile operand's
// padding entries NaN bytes), written beside `scales` so the GEMM needs no
// rewrite (block_gemm_cuda.cc).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/dtype.h"

namespace gtp::kernels::fp8::cuda {

// x [R, C] → q [R, C], scales [R, ceil(C/128)] (1×128 blocks along C).
void QuantizeRow1x128(const float* x, int64_t R, int64_t C, uint8_t* q, float* scales, float* lt,
                      cudaStream_t stream);
void QuantizeRow1x128(const bf16* x, int64_t R, int64_t C, uint8_t* q, float* scales, float* lt,
                      cudaStream_t stream);

// x [R, C] → q [R, C], scales [ceil(R/128), ceil(C/128)] (128×128 tiles).
void QuantizeTile128x128(const float* x, int64_t R, int64_t C, uint8_t* q, float* scales,
                         float* lt, cudaStream_t stream);
void QuantizeTile128x128(const bf16* x, int64_t R, int64_t C, uint8_t* q, float* scales,
                         float* lt, cudaStream_t stream);

// y [R, C] = e4m3⁻¹(q)·scale (f32 product; bf16: rounded to nearest even).
// scales [R, ceil(C/128)] (tiles = false) or [ceil(R/128), ceil(C/128)]
// (tiles = true).
void DequantizeBlocks(const uint8_t* q, const float* scales, bool tiles, int64_t R, int64_t C,
                      float* y, cudaStream_t stream);
void DequantizeBlocks(const uint8_t* q, const float* scales, bool tiles, int64_t R, int64_t C,
                      bf16* y, cudaStream_t stream);

// x [R, C] → qt [C, R], scales_t [C, ceil(R/128)]: the 1×128 quantisation of
// xᵀ (blocks of 128 consecutive rows of x), a fused transpose + quantise.
void QuantizeRowsTransposed(const float* x, int64_t R, int64_t C, uint8_t* qt, float* scales_t,
                            float* lt, cudaStream_t stream);
void QuantizeRowsTransposed(const bf16* x, int64_t R, int64_t C, uint8_t* qt, float* scales_t,
                            float* lt, cudaStream_t stream);

// Both of the above from one read of x: q, scales (lt) of x and qt,
// scales_t (lt_t) of xᵀ (a fused kernel for bf16 x; the two kernels else);
// with col_partial (may be null; f32 [ceil(R/128), C]) also each column's
// sum over each 128-row block, in block_quant.h's order.
void QuantizeRowsAndTransposed(const float* x, int64_t R, int64_t C, uint8_t* q, float* scales,
                               float* lt, uint8_t* qt, float* scales_t, float* lt_t,
                               float* col_partial, cudaStream_t stream);
void QuantizeRowsAndTransposed(const bf16* x, int64_t R, int64_t C, uint8_t* q, float* scales,
                               float* lt, uint8_t* qt, float* scales_t, float* lt_t,
                               float* col_partial, cudaStream_t stream);
// The same for a = GELU(x) (Gelu) or a = GeluGrad(dy, pre) (GeluGrad: dy the
// gradient at GELU's output, pre its input), a made as x is read and never
// written: the bits of cuda::GeluForward / GeluBackward (bf16) followed by
// QuantizeRowsAndTransposed(a). Returns false, launching nothing, where the
// fused kernel does not apply (C % 8 != 0, or x, dy, pre not 16-byte or q
// not 8-byte aligned): the caller then writes a and quantises it.
bool QuantizeGeluRowsAndTransposed(const bf16* x, int64_t R, int64_t C, uint8_t* q, float* scales,
                                   float* lt, uint8_t* qt, float* scales_t, float* lt_t,
                                   float* col_partial, cudaStream_t stream);
bool QuantizeGeluGradRowsAndTransposed(const bf16* dy, const bf16* pre, int64_t R, int64_t C,
                                       uint8_t* q, float* scales, float* lt, uint8_t* qt,
                                       float* scales_t, float* lt_t, float* col_partial,
                                       cudaStream_t stream);
// sums [C] += the partials [nbr, C] added over nbr in ascending order (f32;
// rounded once into a bf16 sums).
void AddColumnPartials(const float* col_partial, int64_t nbr, int64_t C, float* sums,
                       cudaStream_t stream);
void AddColumnPartials(const float* col_partial, int64_t nbr, int64_t C, bf16* sums,
                       cudaStream_t stream);

// x [R, C] → its 128×128 quantisation (q, scales, lt) and xᵀ's (qt,
// scales_t, lt_t; what TransposeTiles makes of q) in one pass over x.
void QuantizeTileAndTranspose(const float* x, int64_t R, int64_t C, uint8_t* q, float* scales,
                              float* lt, uint8_t* qt, float* scales_t, float* lt_t,
                              cudaStream_t stream);
void QuantizeTileAndTranspose(const bf16* x, int64_t R, int64_t C, uint8_t* q, float* scales,
                              float* lt, uint8_t* qt, float* scales_t, float* lt_t,
                              cudaStream_t stream);

// q [R, C] → qt [C, R] = qᵀ; scales [ceil(R/128), ceil(C/128)] →
// scales_t [ceil(C/128), ceil(R/128)] = scalesᵀ.
void TransposeTiles(const uint8_t* q, const float* scales, int64_t R, int64_t C, uint8_t* qt,
                    float* scales_t, float* lt, cudaStream_t stream);

}  // namespace gtp::kernels::fp8::cuda
