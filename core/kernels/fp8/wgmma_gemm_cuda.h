// core/kernels/fp8/wgmma_gemm_cuda.h — the launcher of our own block-scaled
// FP8 GEMM for Hopper (wgmma_gemm.cu; private to this package: call
// fp8::BlockScaledGemm with Fp8GemmEngine::kWgmma). Raw device pointers,
// row-major contiguous, as block_quant_cuda.h's.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/kernels/fp8/wgmma_plan.h"

namespace gtp::kernels::fp8::cuda {

// Whether the kernel runs on this device: compute capability 9.0 exactly
// (it is compiled for sm_90a, whose wgmma no other architecture has).
bool WgmmaGemmSupported(int device);

// How many clusters of that shape (1 or 2 each; CTAs of tile_m-row tiles,
// 192 only with cluster_m 1) run at once on the current device (one CTA a
// multiprocessor; a cluster's CTAs share a GPC).
int WgmmaMaxClusters(int cluster_m, int cluster_n, int tile_m = 128);

// The plan for an M × N × K GEMM on the current device: ChooseWgmmaPlan
// (wgmma_plan.h) for this device's multiprocessors and the pairs of CTAs
// that fit. The splits depend on the device's multiprocessors, so a shape
// gives the same bits only on devices with the same number.
WgmmaPlan WgmmaGemmPlan(int64_t M, int64_t N, int64_t K);

// y [M, N] = dequant(qa, sa) [M, K] · dequant(qb, sb) [N, K]ᵀ (+ bias) + beta·y,
// f32 accumulation promoted per 128-wide K block (block_gemm.h's sum).
// sa: [M, ceil(K/128)] (a_tiles false, 1×128) or [ceil(M/128), ceil(K/128)]
// (a_tiles true, 128×128); sb the same for N. y f32, or bf16 (y_bf16); bias
// [N] in y's dtype or null (then beta must be 0). Requires (the caller
// checks): qa, qb 16-byte aligned; K a positive multiple of 16; N even; y 8-byte
// aligned. Enqueues on stream; deterministic (no atomics, one order).
// partial: f32 [plan.splits, M, N] on the device where plan.splits > 1
// (else unused). Aborts, naming it, on a plan the shape does not allow.
void WgmmaBlockScaledGemm(const uint8_t* qa, const float* sa, bool a_tiles, const uint8_t* qb,
                          const float* sb, bool b_tiles, int64_t M, int64_t N, int64_t K, void* y,
                          bool y_bf16, float beta, const void* bias, const WgmmaPlan& plan,
                          float* partial, cudaStream_t stream);

}  // namespace gtp::kernels::fp8::cuda
