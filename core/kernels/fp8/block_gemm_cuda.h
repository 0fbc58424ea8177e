// core/kernels/fp8/block_gemm_cuda.h — the CUDA path of BlockScaledGemm
// (block_gemm.h) through cuBLASLt's block-scaled FP8 GEMM (private to this
// package; block_gemm.cc calls it after its argument checks).
#pragma once

#include "core/kernels/fp8/block_gemm.h"
#include "core/kernels/ops.h"
#include "core/tensor.h"

namespace gtp::kernels::fp8::internal {

// y [M, N] (f32 or bf16) = dequant(a)·dequant(b)ᵀ + beta·y on e.stream with
// e.blas's cuBLASLt handle and workspace. a, b and y have passed
// BlockScaledGemm's checks (on e's device, codes and scales of matching
// shapes); this checks what cuBLASLt adds (block_gemm.h) and aborts, naming
// the scale modes and the shape, where cuBLASLt finds no algorithm.
void BlockScaledGemmCuda(const Exec& e, const Fp8Matrix& a, const Fp8Matrix& b, const Tensor& y,
                         float beta, const Tensor& bias);

}  // namespace gtp::kernels::fp8::internal
