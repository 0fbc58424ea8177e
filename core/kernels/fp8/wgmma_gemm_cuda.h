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

// How one GEMM runs (WgmmaGemmPlan's choice; every plan gives the same
// bits for the same splits).
struct WgmmaPlan {
  // The thread-block cluster, in 128×128 tiles: 2 along M shares b's stage
  // tiles between two CTAs through TMA multicast (2 along N: a's), halving
  // their reads from L2. 2 only where M (N) is a multiple of 256.
  int cluster_m = 1, cluster_n = 1;
  // Split-K: each tile's K blocks in that many consecutive ranges (≤ 4),
  // their f32 sums added in range order by a second kernel.
  int splits = 1;
  // ping_pong: the two consumer warpgroups take turns issuing their K
  // block's wgmmas, so one promotes while the other's run (wgmma_gemm.cu's
  // Consume); the same bits either way.
  bool ping_pong = false;
  // bulk_store: the epilogue's rows (staged in shared memory) go to y as
  // bulk asynchronous copies the consumers do not wait for, so the next
  // tile's wgmmas start while they drain (wgmma_gemm.cu's StoreTile); the
  // same bits. Never chosen: slower on every shape timed (docs/PERFORMANCE.md,
  // session 27: 1.3B forward 0.392 ms against 0.326, H100).
  bool bulk_store = false;
  // tile_m: a CTA's rows, 128 (two consumer warpgroups) or 192 (three, so
  // two others' blocks queue on the tensor cores while one promotes; 4
  // stages instead of 6; no cluster along M). WgmmaGemmPlan picks 192
  // where its tiles round to whole waves no worse (1.3B forward 11 %
  // faster, session 27, H100).
  int tile_m = 128;
  // overlap: each consumer warpgroup issues its next K block's wgmmas
  // before it promotes this one's (two temporaries; setmaxnreg gives the
  // consumers 232 registers), so its own next block is queued on the
  // tensor cores while it promotes; the same bits. 128-row tiles only,
  // without ping_pong or bulk_store. Off by default: not yet timed.
  bool overlap = false;
  // prefetch_y: with beta ≠ 0 (and unsplit), the producer warpgroup asks
  // L2 for each tile's old y once it has issued the tile's last loads (the
  // consumers are up to the pipeline's stages behind), so the epilogue's
  // reads of it (y f32: 64 KB a tile; the wgrad's accumulation) hit L2
  // rather than memory; the same bits. Off by default: not yet timed.
  bool prefetch_y = false;
};

// How many clusters of that shape (1 or 2 each; CTAs of tile_m-row tiles,
// 192 only with cluster_m 1) run at once on the current device (one CTA a
// multiprocessor; a cluster's CTAs share a GPC).
int WgmmaMaxClusters(int cluster_m, int cluster_n, int tile_m = 128);

// The plan for an M × N × K GEMM on the current device: 128-row tiles in a
// pair of CTAs (2 × 1, else 1 × 2) where the shape allows, and split-K where
// the units of work fill the multiprocessors poorly and K is long (at most 4
// ranges of 2+ K blocks); or unsplit 192-row tiles where their waves cost
// less (a 192-row wave counted as 1.35 of a 128-row one, as measured).
// The splits depend on the device's multiprocessors, so a shape gives the
// same bits only on devices with the same number.
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
