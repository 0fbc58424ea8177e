// core/kernels/fp8/wgmma_gemm_cuda.h — the launcher of our own block-scaled
// FP8 GEMM for Hopper (wgmma_gemm.cu; private to this package: call
// fp8::BlockScaledGemm with Fp8GemmEngine::kWgmma). Raw device pointers,
// row-major contiguous, as block_quant_cuda.h's.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace gtp::kernels::fp8::cuda {

// Whether the kernel runs on this device: compute capability 9.0 exactly
// (it is compiled for sm_90a, whose wgmma no other architecture has).
bool WgmmaGemmSupported(int device);

// y [M, N] = dequant(qa, sa) [M, K] · dequant(qb, sb) [N, K]ᵀ (+ bias) + beta·y,
// f32 accumulation promoted per 128-wide K block (block_gemm.h's sum).
// sa: [M, ceil(K/128)] (a_tiles false, 1×128) or [ceil(M/128), ceil(K/128)]
// (a_tiles true, 128×128); sb the same for N. y f32, or bf16 (y_bf16); bias
// [N] in y's dtype or null (then beta must be 0). Requires (the caller
// checks): qa, qb 16-byte aligned; K a positive multiple of 16; N even; y 8-byte
// aligned. Enqueues on stream; deterministic (no atomics, one order).
// splits (≥ 1, WgmmaGemmSplits's choice): each tile's K blocks in that many
// ranges, their f32 sums in partial [splits, M, N] (f32, device; unused at
// 1), added in range order by a second kernel. The result depends on splits
// (another summation order), so a shape gives the same bits only on devices
// with the same number of multiprocessors.
void WgmmaBlockScaledGemm(const uint8_t* qa, const float* sa, bool a_tiles, const uint8_t* qb,
                          const float* sb, bool b_tiles, int64_t M, int64_t N, int64_t K, void* y,
                          bool y_bf16, float beta, const void* bias, int splits, float* partial,
                          cudaStream_t stream);

// How many K ranges WgmmaBlockScaledGemm should split an M × N × K GEMM into
// on the current device: 1 unless the 128×128 tiles fill its multiprocessors
// poorly and K is long (at most 4 ranges of 2+ K blocks each).
int WgmmaGemmSplits(int64_t M, int64_t N, int64_t K);

}  // namespace gtp::kernels::fp8::cuda
