// core/kernels/fp8/block_gemm.h — the reference block-scaled FP8 GEMM
// (CPU): y = a·bᵀ over block-quantised e4m3 operands, f32 accumulation per
// 128-wide K block (block_scale.h's design note gives the exact order).
//
//   y[m, n] = Σ_kb (sa(m, kb)·sb(n, kb)) · Σ_{k in kb} e4m3⁻¹(qa[m, k])·e4m3⁻¹(qb[n, k])
//
// a [M, K] and b [N, K] are both K-contiguous (ops::Linear's y = x·Wᵀ: a = x,
// b = W [out, in]; Hopper's FP8 GEMMs take only this layout). Each operand
// carries its own blocking: 1×128 (scales [rows, ceil(K/128)]) or 128×128
// (scales [ceil(rows/128), ceil(K/128)]); both block K the same way, so a
// K block kb has one scale per row of a and per row of b.
//
// y is f32 [M, N], written (=). A NaN scale (a block that held NaN or inf)
// makes every y it touches NaN. CPU only: aborts on a CUDA Exec (the CUDA
// path, cuBLASLt's CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F /
// BLK128x128_32F, is the next step and is compared with this one within
// the tolerance block_gemm_test.cc derives, not bit for bit).
//
//   fp8::BlockScaledGemm(e, {xq, xs, Fp8Layout::kRow1x128},
//                        {wq, ws, Fp8Layout::kTile128x128}, y);   // y = x·Wᵀ
#pragma once

#include "core/kernels/fp8/block_quant.h"
#include "core/kernels/ops.h"
#include "core/tensor.h"

namespace gtp::kernels::fp8 {

// A block-quantised matrix [rows, cols]: its codes, scales and blocking.
struct Fp8Matrix {
  Tensor q;       // [rows, cols], fp8_e4m3 or u8
  Tensor scales;  // f32 [Fp8ScaleShape(rows, cols, layout)]
  Fp8Layout layout = Fp8Layout::kRow1x128;
};

// y [M, N] (f32, =) = dequant(a) [M, K] · dequant(b) [N, K]ᵀ, as above.
void BlockScaledGemm(const Exec& e, const Fp8Matrix& a, const Fp8Matrix& b, const Tensor& y);

}  // namespace gtp::kernels::fp8
