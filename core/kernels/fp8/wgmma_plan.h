// core/kernels/fp8/wgmma_plan.h — how the wgmma FP8 GEMM (wgmma_gemm_cuda.h)
// runs a shape: its tiles, clusters and K splits, and the choice of them
// from the device's capacity. Host code only, so the choice is tested on
// any machine (wgmma_plan_test.cc) with the capacities of real GPUs.
#pragma once

#include <cstdint>

namespace gtp::kernels::fp8::cuda {

// How one GEMM runs (ChooseWgmmaPlan's choice; every plan gives the same
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
  // without ping_pong or bulk_store. Never chosen: slower on every shape
  // timed (1.3B forward 0.353 ms against 0.326, wgrad 0.458 against 0.451;
  // docs/PERFORMANCE.md, session 28, H100).
  bool overlap = false;
  // prefetch_y: with beta ≠ 0 (and unsplit), the producer warpgroup asks
  // L2 for each tile's old y once it has issued the tile's last loads (the
  // consumers are up to the pipeline's stages behind), so the epilogue's
  // reads of it (y f32: 64 KB a tile; the wgrad's accumulation) hit L2
  // rather than memory; the same bits. ChooseWgmmaPlan sets it (wgrad
  // 4–5 % faster, the others unchanged: docs/PERFORMANCE.md, session 28,
  // H100); false here so a plan built by hand asks for it.
  bool prefetch_y = false;
};

// What the choice needs to know of a device: its multiprocessors (one CTA
// each, 128 or 192 rows) and how many pairs of 128-row CTAs fit at once
// (cudaOccupancyMaxActiveClusters; a pair's CTAs share a GPC), 0 where
// none does.
struct WgmmaCapacity {
  int multiprocessors = 0;
  int pairs_2x1 = 0;  // clusters of two 128-row CTAs along M
  int pairs_1x2 = 0;  // along N
};

// The plan for an M × N × K GEMM (M, N, K > 0; capacity.multiprocessors >
// 0): 128-row tiles in a pair of CTAs (2 × 1, else 1 × 2) where the shape
// allows, and split-K where the units of work fill the multiprocessors
// poorly and K is long (at most 4 ranges of 2+ K blocks; a split must save
// a tenth of the waves); or unsplit 192-row tiles where their waves cost
// less (a 192-row wave counted as 1.35 of a 128-row one, fitted on six
// shapes: docs/PERFORMANCE.md, session 27, H100); y prefetched into L2
// where beta ≠ 0 (prefetch_y, always set). Aborts, naming the
// values, on an empty shape, no multiprocessors or negative pairs.
WgmmaPlan ChooseWgmmaPlan(int64_t M, int64_t N, int64_t K, const WgmmaCapacity& capacity);

}  // namespace gtp::kernels::fp8::cuda
