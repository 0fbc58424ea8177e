// core/kernels/fp8/block_quant.h — block-scaled FP8 (e4m3) quantisation of
// matrices: 1×128 blocks for activations and gradients, 128×128 tiles for
// weights, and the transposed layouts the backward needs. The formats, the
// scale rule and the error bound are in block_scale.h (the design note).
//
// Conventions (core/kernels/kernels.h): tensors are 2-D, row-major and
// contiguous on exec's device; outputs are written (=) and must not alias
// inputs. Data x / y are f32 or bf16; codes q are one byte per element
// (DType::kF8E4M3 or kU8); scales are f32. Bad shapes, dtypes or devices
// abort (GTP_CHECK). Deterministic.
//
// CPU and CUDA: on a CUDA Exec (tensors on its device) the kernels of
// block_quant.cu run on e.stream (enqueued, no host sync) and write the same
// bits as the CPU paths: codes, scales and dequantised values (a NaN's
// payload aside; same scalar rules, block_scale.h; block_quant_gpu_test.cc
// compares them). RequantizeRowsTransposed takes an R × C f32 scratch from
// e.Empty. The GEMM (block_gemm.h) runs on either device too (cuBLASLt on
// CUDA).
//
//   Exec e = Exec::Cpu(host);
//   fp8::QuantizeBlocks(e, x, fp8::Fp8Layout::kRow1x128, xq, xs);     // xs [N, ceil(in/128)]
//   fp8::QuantizeBlocks(e, w, fp8::Fp8Layout::kTile128x128, wq, ws);  // ws [ceil(out/128), ceil(in/128)]
//   fp8::BlockScaledGemm(e, {xq, xs, kRow1x128}, {wq, ws, kTile128x128}, y);  // block_gemm.h
#pragma once

#include <cstdint>

#include "core/kernels/fp8/block_scale.h"
#include "core/kernels/ops.h"
#include "core/shape.h"
#include "core/tensor.h"

namespace gtp::kernels::fp8 {

// How a matrix's elements share scales (block_scale.h).
enum class Fp8Layout {
  kRow1x128,     // one scale per row and 128 columns: scales [R, ceil(C/128)]
  kTile128x128,  // one scale per 128×128 tile: scales [ceil(R/128), ceil(C/128)]
};

// "row1x128" / "tile128x128" (for messages).
const char* Fp8LayoutName(Fp8Layout l);

// The scales' shape for a [rows, cols] matrix in layout l.
Shape Fp8ScaleShape(int64_t rows, int64_t cols, Fp8Layout l);

// Every quantiser can also write its scales a second time into lt_scales
// (optional; f32 [LtScaleCount(l == kTile128x128, rows, K)] for the output
// operand [rows, K]): the layout cuBLASLt's block-scaled GEMM reads
// (lt_scale_layout.h; a tile operand's padding entries NaN bytes), so the
// GEMM takes them as they are (Fp8Matrix::lt_scales) instead of rewriting
// the table on every call.

// x [R, C] (f32 or bf16) → codes q [R, C] and scales [Fp8ScaleShape(R, C, l)].
void QuantizeBlocks(const Exec& e, const Tensor& x, Fp8Layout l, const Tensor& q,
                    const Tensor& scales, const Tensor& lt_scales = Tensor());

// y [R, C] (f32 or bf16) ← e4m3⁻¹(q)·scale of each element's block (the f32
// product; rounded to nearest even for a bf16 y). NaN-scale blocks give NaN.
void DequantizeBlocks(const Exec& e, const Tensor& q, const Tensor& scales, Fp8Layout l,
                      const Tensor& y);

// The 1×128 quantisation of xᵀ, read from x [R, C] (f32 or bf16): codes
// qt [C, R] and scales_t [C, ceil(R/128)], blocks of 128 consecutive rows of
// x. Bit-identical to QuantizeBlocks(xᵀ, kRow1x128) (a fused transpose +
// quantise: the weight-gradient GEMM's operand from the high-precision x).
void QuantizeRowsTransposed(const Exec& e, const Tensor& x, const Tensor& qt,
                            const Tensor& scales_t, const Tensor& lt_scales = Tensor());

// Both 1×128 quantisations of x [R, C] (f32 or bf16) from one read of it:
// q [R, C], scales [R, ceil(C/128)] as QuantizeBlocks(x, kRow1x128), and
// qt [C, R], scales_t [C, ceil(R/128)] as QuantizeRowsTransposed(x), bit for
// bit (a gradient dy is both the dgrad's and the wgrad's operand). lt_scales
// / lt_scales_t: the optional cuBLASLt copies of scales / scales_t.
// column_sums (optional, f32 or bf16 [C]): += each column's sum over the
// rows, from the same read (a linear's bias gradient). The order is fixed,
// the same bits on CPU and CUDA: per 128-row block, partial sums
// p_l = ((x[l] + x[l+32]) + x[l+64]) + x[l+96] for l < 32 (rows past R as
// +0), then a butterfly p_l ← p_l + p_{l xor o} for o = 16, 8, 4, 2, 1
// (every p_l ends equal); the blocks' sums added in ascending order to an
// f32 +0, that total added to column_sums in f32 (rounded once for bf16).
void QuantizeRowsAndTransposed(const Exec& e, const Tensor& x, const Tensor& q,
                               const Tensor& scales, const Tensor& qt, const Tensor& scales_t,
                               const Tensor& lt_scales = Tensor(),
                               const Tensor& lt_scales_t = Tensor(),
                               const Tensor& column_sums = Tensor());

// What QuantizeActRowsAndTransposed applies to x before quantising it.
enum class Fp8InputAct {
  kGelu,      // a = GELU(x), as ops::GeluForward(x, a) writes it
  kGeluGrad,  // a = GELU'(pre)·x, as ops::GeluBackward(x, pre, a) writes it
};

// QuantizeRowsAndTransposed(a) for a = act(x) (pre: GELU's input, x's shape
// and dtype, for kGeluGrad; undefined for kGelu), a never written: the same
// codes, scales and column sums, bit for bit, as writing a in x's dtype with
// that op and quantising it — which is what runs where the fused CUDA kernel
// does not apply (the CPU, f32, C % 8 != 0, unaligned buffers). An MLP's
// second linear reads GELU's output this way in the forward, its first the
// gradient through GELU in the backward.
void QuantizeActRowsAndTransposed(const Exec& e, Fp8InputAct act, const Tensor& x,
                                  const Tensor& pre, const Tensor& q, const Tensor& scales,
                                  const Tensor& qt, const Tensor& scales_t,
                                  const Tensor& lt_scales = Tensor(),
                                  const Tensor& lt_scales_t = Tensor(),
                                  const Tensor& column_sums = Tensor());

// The same from x's forward codes (q [R, C], scales [R, ceil(C/128)], 1×128
// along C) when the high-precision x is gone: each element's f32 value
// e4m3⁻¹(q)·scale (as DequantizeBlocks), transposed, quantised again 1×128
// along R into qt [C, R], scales_t [C, ceil(R/128)]. Bit-identical to
// QuantizeBlocks(DequantizeBlocks(q)ᵀ, kRow1x128); a second rounding, so in
// general not the codes QuantizeRowsTransposed(x) gives (block_scale.h).
void RequantizeRowsTransposed(const Exec& e, const Tensor& q, const Tensor& scales,
                              const Tensor& qt, const Tensor& scales_t);

// Wᵀ of a 128×128-quantised W (q [R, C], scales [ceil(R/128), ceil(C/128)]):
// qt [C, R] = qᵀ, scales_t [ceil(C/128), ceil(R/128)] = scalesᵀ. Lossless:
// a tile of Wᵀ holds the elements of one tile of W, so these are exactly the
// codes and scales QuantizeBlocks(Wᵀ, kTile128x128) gives (the dgrad GEMM's
// operand, no requantisation).
void TransposeTiles(const Exec& e, const Tensor& q, const Tensor& scales, const Tensor& qt,
                    const Tensor& scales_t, const Tensor& lt_scales = Tensor());

// A weight's two GEMM operands in one pass over x [R, C] (f32 or bf16):
// its 128×128 quantisation q [R, C], scales [ceil(R/128), ceil(C/128)] (as
// QuantizeBlocks(x, kTile128x128)) and that of xᵀ, qt [C, R], scales_t
// [ceil(C/128), ceil(R/128)] (as TransposeTiles of those), bit for bit.
void QuantizeTilesAndTransposed(const Exec& e, const Tensor& x, const Tensor& q,
                                const Tensor& scales, const Tensor& qt, const Tensor& scales_t,
                                const Tensor& lt_scales = Tensor(),
                                const Tensor& lt_scales_t = Tensor());

}  // namespace gtp::kernels::fp8
