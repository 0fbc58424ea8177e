// core/kernels/fp8/block_gemm_cuda.h — the CUDA paths of BlockScaledGemm
// (block_gemm.h): cuBLASLt's block-scaled FP8 GEMM and our own (private to
// this package; block_gemm.cc calls them after its argument checks).
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

// The same through our own Hopper kernel (Fp8GemmEngine::kWgmma,
// wgmma_gemm_cuda.h): checks its requirements (compute capability 9.0, the
// shape and alignment rules), naming them, then enqueues on e.stream.
void BlockScaledGemmWgmma(const Exec& e, const Fp8Matrix& a, const Fp8Matrix& b, const Tensor& y,
                          float beta, const Tensor& bias);

}  // namespace gtp::kernels::fp8::internal
