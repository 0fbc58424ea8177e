// The block-scaled FP8 GEMM on Hopper through our own kernel (wgmma_gemm_cuda.h):
// TMA loads, wgmma on e4m3, and the f32 promotion per 128-wide K block on
// CUDA cores (the DeepSeek-V3 recipe, as block_gemm.h's reference sums it).
//
// A persistent grid (one CTA an SM; clusters of 1, 2 or 4 CTAs, each
// cluster taking units of work cluster, + clusters, ...) computes y's
// 128×128 tiles (or 192×128 with WgmmaPlan::tile_m: the Cta struct), each
// CTA with 384 threads (512):
//   - warpgroup 0 (the producer): per tile and K block kb, thread 0
//     issues two TMA loads (a's 128×128 codes at (kb·128, m0), b's at
//     (kb·128, n0); in a cluster, its CTA's slices of them, multicast) into
//     the next of kStages shared-memory stages, 128-byte swizzled; thread p
//     copies that block's scale of row p of a's and of b's tile into the
//     stage by cp.async, one f32 per row (a 128×128 operand's one tile
//     scale repeated), so the consumers read both layouts alike; the
//     stage's full barrier waits for those copies too.
//     Rows past M or N read as scale 0 and TMA fills codes past M, N or K
//     with zeros.
//   - warpgroups 1 and 2 (the consumers): rows 0–63 and 64–127 of the tile
//     (and warpgroup 3 rows 128–191 of a 192-row tile, which gives the
//     tensor cores two warpgroups' blocks to run while one promotes; its
//     512 threads start at 128 registers, so the producer gives back 96
//     with setmaxnreg and the consumers take 160).
//     Per K block: four wgmma.m64n128k32 (e4m3 × e4m3 → f32, the first with
//     scale-d 0) into a temporary, waited for, then acc += tmp·(sa[row]·sb[col])
//     in f32 — the promotion that keeps the sum out of the tensor core's
//     narrower accumulator (about 14 bits, block_gemm_gpu_test.cc) beyond
//     one block. Each warp releases the stage (an mbarrier of 8 arrivals
//     per CTA of the cluster) once its wgmma and its scale reads are done.
//     The stages and their barriers' phases run on across a CTA's tiles, so
//     the producer loads the next tile while the consumers write this one.
//     With WgmmaPlan::ping_pong the two take turns issuing (Consume); with
//     WgmmaPlan::overlap each issues block kb + 1 into a second temporary
//     before it promotes block kb (Consume).
//   - epilogue: acc (+ bias[col]) (+ beta·y) in f32, rounded once to y's
//     dtype, staged through shared memory and stored in 16-byte runs of a
//     row (StoreTile; rows past M skipped).
//   - clusters (WgmmaPlan, WgmmaGemmKernel's comment): two CTAs whose tiles
//     share b's columns (or a's rows) each load half of that operand's
//     stage tile and multicast it to both; a stage is released to the
//     producers only when every consumer warp of the cluster is done with
//     it (each warp arrives on every CTA's empty barrier, lane r on CTA r's).
//     A cluster's CTAs run the same units' K blocks in the same order, and
//     each sums its own tile as without a cluster: the same bits.
//   - split-K (WgmmaGemmPlan: where the tiles fill the multiprocessors
//     poorly and K is long): a unit of work is a tile and one of `splits`
//     consecutive K ranges; its f32 sum goes to a partial buffer, and
//     SplitSumKernel adds the ranges in order (deterministic) and finishes
//     as the epilogue above.
//
// Shared memory: kStages × (16 KB a + 16 KB b + 1 KB scales) + barriers +
// the epilogue's staging (20 KB; a 192-row tile: 4 stages of 24 + 16 KB,
// 30 KB of staging), 1024-byte aligned tiles (the 128-byte swizzle's pattern repeats
// every 1024 bytes, and wgmma's descriptors assume it starts at such a boundary). The wgmma
// descriptors: K-major, 128-byte swizzle (mode 1 in bits 62–63), stride byte offset 1024 (8 rows of
// 128 bytes), leading byte offset unused (1, as CUTLASS sets it); the k-th 32-byte step within the
// 128-byte row is the start address + 32·k, as the swizzle is applied to address bits.
//
// Accumulator fragment of wgmma .m64nN f32 (PTX ISA, "Matrix fragment for
// D"): thread t of the warpgroup, warp w = t/32, lane l; register i holds
// row 16w + l/4 + 8·((i%4)/2), column 8·(i/4) + 2·(l%4) + i%2.
//
// Compiled for sm_90a only (wgmma is not in sm_90's base set); the launcher refuses another device.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "core/kernels/cuda/common.cuh"
#include "core/kernels/fp8/wgmma_epilogue.cuh"
#include "core/kernels/fp8/wgmma_gemm_cuda.h"
#include "core/kernels/fp8/wgmma_ptx.cuh"

namespace gtp::kernels::fp8::cuda {
namespace {

// A CTA's tile: kBM (128, or 192 with WgmmaPlan::tile_m) rows by kBlockN
// columns, K blocks of kBlockK; the scales' tiles are 128 × 128 (kScaleTile).
constexpr int kBlockN = 128, kBlockK = 128, kScaleTile = 128;
constexpr int kProducerThreads = 128;  // the full barriers' arrival count
// The kernel's kMode, bits: the consumer warpgroups taking turns
// (ping_pong), the epilogue's rows stored by bulk copies (bulk_store), 192
// rows a CTA (tile_m), the next block issued before this one's promotion
// (overlap; 128 rows, alone).
constexpr int kPlainMode = 0, kPingPongMode = 1, kBulkStoreMode = 2, kTallMode = 4,
              kOverlapMode = 8;
constexpr int RowsOf(int mode) { return (mode & kTallMode) != 0 ? 192 : 128; }

// A CTA of kBM rows: its threads (a producer warpgroup and kBM / 64
// consumer warpgroups, one per 64 rows), its stages, and its shared memory.
template <int kBM>
struct Cta {
  static_assert(kBM == 128 || kBM == 192, "a CTA's tile is 128 or 192 rows");
  static constexpr int kConsumerGroups = kBM / 64;
  static constexpr int kThreads = 128 * (1 + kConsumerGroups);
  static constexpr int kConsumerWarps = 4 * kConsumerGroups;  // the empty barriers' arrivals
  // As many as fit beside the epilogue's staging: 6 of 33 KB, or 4 of 41 KB.
  static constexpr int kStages = kBM == 128 ? 6 : 4;
  static constexpr uint32_t kTileBytesA = kBM * kBlockK;  // codes are bytes
  static constexpr uint32_t kTileBytesB = kBlockN * kBlockK;
  // Byte offsets from the 1024-aligned base.
  static constexpr uint32_t kA = 0;
  static constexpr uint32_t kB = kStages * kTileBytesA;
  static constexpr uint32_t kScaleA = kB + kStages * kTileBytesB;     // f32 [kStages][kBM]
  static constexpr uint32_t kScaleB = kScaleA + kStages * kBM * 4;    // f32 [kStages][128]
  static constexpr uint32_t kFull = kScaleB + kStages * kBlockN * 4;  // u64 [kStages]
  static constexpr uint32_t kEmpty = kFull + kStages * 8;             // u64 [kStages]
  // The epilogue's staging (StoreTile), one region a consumer warp.
  static constexpr uint32_t kEpilogue = (kEmpty + kStages * 8 + 15) / 16 * 16;
  static constexpr uint32_t kEnd = kEpilogue + kConsumerWarps * kEpilogueWarpBytes;
  static constexpr uint32_t kSmemBytes = kEnd + 1024;  // + the alignment slack
  static_assert(kSmemBytes <= 227 * 1024, "over sm_90's 227 KB of shared memory a block");
};

// Where row r's scales of an operand start (its K blocks follow, one f32
// each), or null past the operand's rows (their scale is 0).
__device__ __forceinline__ const float* ScaleRow(const float* scales, bool tiles, int64_t rows,
                                                 int64_t r, int kbs) {
  if (r >= rows) return nullptr;
  return scales + (tiles ? r / kScaleTile : r) * kbs;
}

// The promotion of a block's f32 sums d (the wgmma fragment: d[4j + i] is
// row row0 + 8·(i / 2), column 8j + col0 + i % 2 of the tile) into acc:
// acc += d·(sa[row]·sb[col]). kBRows: b's scales per column (sbs[col]);
// else one per tile (sbs[0]).
template <bool kBRows>
__device__ __forceinline__ void Promote(const float* d, float* acc, const float* sbs, float sa0,
                                        float sa1, int col0) {
#pragma unroll
  for (int j = 0; j < 16; ++j) {
    if constexpr (kBRows) {
      const float2 sb = *reinterpret_cast<const float2*>(sbs + 8 * j + col0);
      acc[4 * j + 0] = fmaf(d[4 * j + 0], __fmul_rn(sa0, sb.x), acc[4 * j + 0]);
      acc[4 * j + 1] = fmaf(d[4 * j + 1], __fmul_rn(sa0, sb.y), acc[4 * j + 1]);
      acc[4 * j + 2] = fmaf(d[4 * j + 2], __fmul_rn(sa1, sb.x), acc[4 * j + 2]);
      acc[4 * j + 3] = fmaf(d[4 * j + 3], __fmul_rn(sa1, sb.y), acc[4 * j + 3]);
    } else {
      const float s0 = __fmul_rn(sa0, sbs[0]), s1 = __fmul_rn(sa1, sbs[0]);
      acc[4 * j + 0] = fmaf(d[4 * j + 0], s0, acc[4 * j + 0]);
      acc[4 * j + 1] = fmaf(d[4 * j + 1], s0, acc[4 * j + 1]);
      acc[4 * j + 2] = fmaf(d[4 * j + 2], s1, acc[4 * j + 2]);
      acc[4 * j + 3] = fmaf(d[4 * j + 3], s1, acc[4 * j + 3]);
    }
  }
}

// Done with stage s (the warp's wgmma reads and scale reads complete): one
// arrival on the stage's empty barrier in every CTA of the cluster, lane r
// on CTA r's, so the cluster's arrivals go out at once.
template <int kBM, int kCluster>
__device__ __forceinline__ void ReleaseStage(uint32_t base, int s) {
  __syncwarp();
  const uint32_t empty = base + Cta<kBM>::kEmpty + 8u * s;
  const uint32_t lane = threadIdx.x % 32;
  if constexpr (kCluster == 1) {
    if (lane == 0) MbarArrive(empty);
  } else {
    if (lane < kCluster) MbarArriveCluster(empty, lane);
  }
}

// The consumers (warpgroups 1 .. kBM / 64) of WgmmaGemmKernel, over the
// units the producer loads, in the same order; consumer c sums rows 64c ..
// 64c + 63 of the tile. kPingPong: the warpgroups take turns issuing their
// K block's wgmmas (consumer c waits on named barrier 1 + c and hands on at
// the next one's, 256 threads a barrier: one waiter, one arriver), so the
// tensor cores run one warpgroup's block while the others promote their
// own on the CUDA cores; without it all may issue at once, wait at once and
// promote at once, the tensor cores idle meanwhile (the measured reason to
// try it: docs/PERFORMANCE.md, twenty-fifth session). Each warpgroup's sum
// is the same either way, and whichever warpgroup sums a row: the same bits.
// kBulk: the epilogue's rows go out as bulk copies (StoreTile).
// kOverlap: a warpgroup issues block kb + 1's wgmmas (into a second
// temporary) before it waits for block kb's and promotes them, so the
// tensor cores have its next block queued while it promotes; the blocks
// are promoted in the same order: the same bits. Its three 64-float
// arrays need the registers setmaxnreg gives the consumers (232).
template <typename Y, bool kBRows, int kBM, int kCluster, bool kPingPong, bool kBulk, bool kOverlap,
          typename TileOf>
__device__ __forceinline__ void Consume(const Args& args, uint32_t base, const float* scale_a,
                                        const float* scale_b, uint8_t* epilogue, int units,
                                        int cluster, int clusters, int kbs, const TileOf& tile_of) {
  using L = Cta<kBM>;
  constexpr int kGroups = L::kConsumerGroups;
  auto full = [&](int s) { return base + L::kFull + 8u * s; };
  auto release = [&](int s) { ReleaseStage<kBM, kCluster>(base, s); };
  const int c = threadIdx.x / 128 - 1;  // rows 64c .. 64c + 63 of the tile
  const int t = threadIdx.x % 128, warp = t / 32, lane = t % 32;
  const int row0 = 64 * c + 16 * warp + lane / 4;  // and row0 + 8
  const int col0 = 2 * (lane % 4);                 // + 8j, + 1
  float acc[64], tmp[64], tmp2[64];                // tmp2: kOverlap only
#pragma unroll
  for (int i = 0; i < 64; ++i) tmp[i] = 0.0f;
  int it = 0;  // as the producer's
  // Warpgroup c's turn comes on barrier 1 + c, and it hands the turn on at
  // the next one's (the last to consumer 0's, 1); consumer 0 takes the first
  // turn without waiting.
  auto wait_turn = [&] {
    if (kPingPong && (c > 0 || it > 0)) asm volatile("bar.sync %0, 256;" ::"r"(1 + c) : "memory");
  };
  auto pass_turn = [&] {
    if (kPingPong) {
      asm volatile("bar.arrive %0, 256;" ::"r"(c + 1 == kGroups ? 1 : c + 2) : "memory");
    }
  };
  // Stage s's block into d: its four wgmmas (this warpgroup's 64 rows of
  // a's tile, b's tile), committed as one group.
  auto issue_block = [&](float(&d)[64], int s) {
    const uint64_t a_desc = Descriptor(base + L::kA + s * L::kTileBytesA + c * 64 * kBlockK);
    const uint64_t b_desc = Descriptor(base + L::kB + s * L::kTileBytesB);
#pragma unroll
    for (int i = 0; i < 64; ++i) FenceOperand(d[i]);
    WgmmaFence();
#pragma unroll
    for (int k = 0; k < kBlockK / 32; ++k) {
      // + 32 bytes a step: 2 in the descriptor's 16-byte units.
      Wgmma64x128x32(d, a_desc + 2 * k, b_desc + 2 * k, k > 0);
    }
    WgmmaCommit();
  };
  for (int unit = cluster; unit < units; unit += clusters) {
    int64_t m0, n0;
    int split;
    tile_of(unit, m0, n0, split);
    const int kb_end = (split + 1) * kbs / args.splits;
#pragma unroll
    for (int i = 0; i < 64; ++i) acc[i] = 0.0f;
    if constexpr (kOverlap) {
      // Pipeline iteration j (the producer's count) into d: wait for its
      // stage, issue its block.
      auto issue = [&](float(&d)[64], int j) {
        const int s = j % L::kStages;
        MbarWait(full(s), static_cast<uint32_t>(j / L::kStages) & 1);
        issue_block(d, s);
      };
      // Iteration j's sums in d (waited for): its scales, the stage
      // released, the promotion (as below).
      auto finish = [&](float(&d)[64], int j) {
        const int s = j % L::kStages;
#pragma unroll
        for (int i = 0; i < 64; ++i) FenceOperand(d[i]);
        const float* sas = scale_a + s * kBM;
        const float* sbs = scale_b + s * kBlockN;
        const float sa0 = sas[row0], sa1 = sas[row0 + 8];
        const float sb_tile = kBRows ? 0.0f : sbs[0];
        if constexpr (!kBRows) release(s);
        Promote<kBRows>(d, acc, kBRows ? sbs : &sb_tile, sa0, sa1, col0);
        if constexpr (kBRows) release(s);
      };
      // Blocks i (even) in tmp, i + 1 in tmp2; wait_group 1 leaves only the
      // block just issued in flight.
      const int n = kb_end - split * kbs / args.splits;
      if (n > 0) issue(tmp, it);
      for (int i = 0; i < n; i += 2) {
        if (i + 1 < n) {
          issue(tmp2, it + i + 1);
          WgmmaWait<1>();
        } else {
          WgmmaWait<0>();
        }
        finish(tmp, it + i);
        if (i + 1 < n) {
          if (i + 2 < n) {
            issue(tmp, it + i + 2);
            WgmmaWait<1>();
          } else {
            WgmmaWait<0>();
          }
          finish(tmp2, it + i + 1);
        }
      }
      it += n;
    } else {
      for (int kb = split * kbs / args.splits; kb < kb_end; ++kb, ++it) {
        const int s = it % L::kStages;
        MbarWait(full(s), static_cast<uint32_t>(it / L::kStages) & 1);
        wait_turn();
        issue_block(tmp, s);
        pass_turn();
        // a's scales (and a tile b's one scale) while the tensor cores work.
        const float* sas = scale_a + s * kBM;
        const float* sbs = scale_b + s * kBlockN;
        const float sa0 = sas[row0], sa1 = sas[row0 + 8];
        const float sb_tile = kBRows ? 0.0f : sbs[0];
        WgmmaWaitAll();
#pragma unroll
        for (int i = 0; i < 64; ++i) FenceOperand(tmp[i]);
        if constexpr (!kBRows) {
          // Done with the stage: the tensor cores' reads are complete.
          release(s);
        }
        // b's per-column scales are read inside (not held across the wait:
        // registers); a tile b's one scale was read before it.
        Promote<kBRows>(tmp, acc, kBRows ? sbs : &sb_tile, sa0, sa1, col0);
        if constexpr (kBRows) {
          release(s);
        }
      }
    }

    StoreTile<Y, kBulk>(args, acc, m0, n0, split, row0, col0,
                        epilogue + (t / 32 + 4 * c) * kEpilogueWarpBytes);
  }
  // The last tile's copies have read their shared memory before the CTA
  // (and its shared memory) ends.
  if (kBulk && lane < 16) BulkWaitRead<0>();
  // The last consumer handed the turn on after its last block; consumer 0
  // takes it, so no named barrier is left half arrived.
  if (kPingPong && c == 0 && it > 0) asm volatile("bar.sync 1, 256;" ::: "memory");
}

// kMode: the consumers' mode and the CTA's rows (RowsOf).
// kCM × kCN: the thread-block cluster's shape in tiles (each 1 or 2). CTA
// (i, j) of a cluster (rank i + kCM·j) takes tile (kCM·p + i, kCN·q + j) of
// the cluster's unit (p, q); the kCN CTAs of one i share a's rows, each TMA
// loading 1/kCN of a's stage tile and multicasting it to the others, and the
// kCM CTAs of one j share b's the same way — each CTA then reads
// 1/kCN + 1/kCM of a stage from L2. The launcher uses kCM = 2 only where M
// is a multiple of 2·kBM (kCN: N a multiple of 256), so no CTA's tile is
// past the edge.
template <typename Y, bool kBRows, int kCM, int kCN, int kMode>
__global__ void __launch_bounds__(Cta<RowsOf(kMode)>::kThreads, 1)
    WgmmaGemmKernel(const __grid_constant__ CUtensorMap map_a,
                    const __grid_constant__ CUtensorMap map_b, const Args args) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int kBM = RowsOf(kMode);
  using L = Cta<kBM>;
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  const uint32_t raw = SmemAddress(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;
  uint8_t* const smem = smem_raw + (base - raw);
  float* const scale_a = reinterpret_cast<float*>(smem + L::kScaleA);
  float* const scale_b = reinterpret_cast<float*>(smem + L::kScaleB);
  auto full = [&](int s) { return base + L::kFull + 8u * s; };
  auto empty = [&](int s) { return base + L::kEmpty + 8u * s; };

  const int kbs = static_cast<int>((args.K + kBlockK - 1) / kBlockK);
  // Persistent: this CTA's cluster takes units cluster, + clusters, ...
  // (row-major over the units' grid, so the CTAs at work at one time share
  // a's rows and all of b through L2); k-block iterations count on across
  // units, so the producer fills the next unit's stages during this one's
  // epilogue.
  constexpr int kCluster = kCM * kCN;
  const uint32_t rank = kCluster > 1 ? ClusterRank() : 0;
  const int rank_m = static_cast<int>(rank) % kCM, rank_n = static_cast<int>(rank) / kCM;
  const int cluster = blockIdx.x / kCluster, clusters = gridDim.x / kCluster;
  // A unit of work: the cluster's kCM × kCN tiles and one of `splits` K ranges.
  const int units_n = static_cast<int>((args.N + kCN * kBlockN - 1) / (kCN * kBlockN));
  const int units =
      static_cast<int>((args.M + kCM * kBM - 1) / (kCM * kBM)) * units_n * args.splits;
  auto tile_of = [&](int unit, int64_t& m0, int64_t& n0, int& split) {
    const int u = unit / args.splits;
    split = unit % args.splits;
    m0 = (int64_t{u / units_n} * kCM + rank_m) * kBM;
    n0 = (int64_t{u % units_n} * kCN + rank_n) * kBlockN;
  };
  const int warpgroup = threadIdx.x / 128;

  if (threadIdx.x == 0) {
    for (int s = 0; s < L::kStages; ++s) {
      MbarInit(full(s), kProducerThreads);
      // Every consumer warp of the cluster releases every CTA's stage: a
      // stage is written by the cluster's producers (multicast), so each
      // waits until all its destinations are done with it.
      MbarInit(empty(s), L::kConsumerWarps * kCluster);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  }
  if constexpr (kCluster > 1) {
    ClusterSync();
  } else {
    __syncthreads();
  }

  if (warpgroup == 0) {
    // The producer warpgroup: thread p copies row p's scales of a's (and in
    // a 192-row tile row p + 128's, p < 64) and of b's tile for each K
    // block; thread 0 also issues the TMA loads. (A
    // single warp doing all 256 copies was the kernel's bottleneck: some
    // 190 dependent instructions a block, longer than the block's wgmmas;
    // docs/PERFORMANCE.md, twenty-sixth session.) (No setmaxnreg: the
    // consumers fit the 168 registers of 384 threads, 160 without spills.
    // With producer 40 and consumers 232 the kernel also compiles without
    // spills: room for wider tiles, PERFORMANCE.md says how it was checked.)
    // A 192-row tile's 512 threads start at 128 registers each: the producer
    // gives 96 of them back so the consumers may use 160.
    if constexpr (kBM == 192) asm volatile("setmaxnreg.dec.sync.aligned.u32 32;" ::: "memory");
    // Overlapped consumers hold three 64-float arrays: 232 registers
    // (128 · 40 + 256 · 232 of the 384 · 168 the CTA starts with).
    if constexpr ((kMode & kOverlapMode) != 0)
      asm volatile("setmaxnreg.dec.sync.aligned.u32 40;" ::: "memory");
    const int p = threadIdx.x;
    if (p == 0) {
      asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(&map_a)) : "memory");
      asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(&map_b)) : "memory");
    }
    // This CTA's slices of the shared tiles: a's rows rank_n·kBM/kCN on,
    // sent to the CTAs of its cluster row (ranks rank_m + kCM·j); b's rows
    // rank_m·128/kCM on, to those of its column (i + kCM·rank_n).
    constexpr int kSliceA = kBM / kCN, kSliceB = kBlockN / kCM;
    uint16_t mask_a = 0, mask_b = 0;
#pragma unroll
    for (int j = 0; j < kCN; ++j) mask_a |= uint16_t(1u << (rank_m + kCM * j));
#pragma unroll
    for (int i = 0; i < kCM; ++i) mask_b |= uint16_t(1u << (i + kCM * rank_n));
    int it = 0;  // k-block iterations so far, over all of this CTA's units
    for (int unit = cluster; unit < units; unit += clusters) {
      int64_t m0, n0;
      int split;
      tile_of(unit, m0, n0, split);
      // Row p's scales over the K blocks are contiguous in global memory:
      // block kb's is at row + kb (rows past M or N copy zeros).
      const float* const row_a = ScaleRow(args.sa, args.a_tiles, args.M, m0 + p, kbs);
      const float* const row_b = ScaleRow(args.sb, args.b_tiles, args.N, n0 + p, kbs);
      const uint32_t sa_dst = base + L::kScaleA + 4u * p;
      const uint32_t sb_dst = base + L::kScaleB + 4u * p;
      // A 192-row tile's rows 128 .. 191 (threads 0 .. 63).
      constexpr int kExtra = kBM - 128;
      const float* const row_a2 = kExtra > 0 && p < kExtra
                                      ? ScaleRow(args.sa, args.a_tiles, args.M, m0 + 128 + p, kbs)
                                      : nullptr;
      const int kb_end = (split + 1) * kbs / args.splits;
      for (int kb = split * kbs / args.splits; kb < kb_end; ++kb, ++it) {
        const int s = it % L::kStages;
        const uint32_t round = static_cast<uint32_t>(it / L::kStages);
        if (round > 0) MbarWait(empty(s), (round - 1) & 1);
        // By cp.async, which the stage's full barrier also waits for: the
        // producer never waits on their latency itself.
        CpAsync4(sa_dst + s * kBM * 4, row_a != nullptr ? row_a + kb : args.sa, row_a != nullptr);
        if constexpr (kExtra > 0) {
          if (p < kExtra) {
            CpAsync4(sa_dst + (s * kBM + 128) * 4, row_a2 != nullptr ? row_a2 + kb : args.sa,
                     row_a2 != nullptr);
          }
        }
        CpAsync4(sb_dst + s * kBlockN * 4, row_b != nullptr ? row_b + kb : args.sb,
                 row_b != nullptr);
        CpAsyncMbarArrive(full(s));
        if (p == 0) {
          // The stage's whole tiles land here, whichever CTA sends them.
          MbarArriveExpectTx(full(s), L::kTileBytesA + L::kTileBytesB);
          const int k = kb * kBlockK;
          const uint32_t a_dst = base + L::kA + s * L::kTileBytesA;
          const uint32_t b_dst = base + L::kB + s * L::kTileBytesB;
          if constexpr (kCN == 1) {
            TmaLoad(a_dst, &map_a, full(s), k, static_cast<int>(m0));
          } else {
            TmaLoadMulticast(a_dst + rank_n * kSliceA * kBlockK, &map_a, full(s), k,
                             static_cast<int>(m0) + rank_n * kSliceA, mask_a);
          }
          if constexpr (kCM == 1) {
            TmaLoad(b_dst, &map_b, full(s), k, static_cast<int>(n0));
          } else {
            TmaLoadMulticast(b_dst + rank_m * kSliceB * kBlockK, &map_b, full(s), k,
                             static_cast<int>(n0) + rank_m * kSliceB, mask_b);
          }
        } else {
          MbarArrive(full(s));
        }
      }
      // The old y this tile's epilogue reads (beta ≠ 0, unsplit;
      // WgmmaPlan::prefetch_y), asked into L2 once its last block is on its
      // way: the consumers are up to kStages blocks behind.
      if (args.prefetch_y && args.beta != 0.0f && args.splits == 1)
        PrefetchTile<Y, 128>(args, m0, n0, kBM, p);
    }
  } else {
    if constexpr (kBM == 192) asm volatile("setmaxnreg.inc.sync.aligned.u32 160;" ::: "memory");
    if constexpr ((kMode & kOverlapMode) != 0)
      asm volatile("setmaxnreg.inc.sync.aligned.u32 232;" ::: "memory");
    Consume<Y, kBRows, kBM, kCluster, (kMode & kPingPongMode) != 0, (kMode & kBulkStoreMode) != 0,
            (kMode & kOverlapMode) != 0>(args, base, scale_a, scale_b, smem + L::kEpilogue, units,
                                         cluster, clusters, kbs, tile_of);
  }
  // No CTA of a cluster leaves while its peers may still arrive on its barriers.
  if constexpr (kCluster > 1) ClusterSync();
#endif
}

int Multiprocessors() {
  int device = 0, sms = 0;
  GTP_CU_CHECK(cudaGetDevice(&device));
  GTP_CU_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  return sms;
}

PFN_cuTensorMapEncodeTiled_v12000 EncodeTiled() {
  // Looked up once through the runtime (no libcuda link); immutable after.
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult found{};
    GTP_CU_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000,
                                                  cudaEnableDefault, &found));
    if (found != cudaDriverEntryPointSuccess || p == nullptr) {
      ::gtp::kernels::cuda::internal::Die(
          __FILE__, __LINE__, "cuTensorMapEncodeTiled",
          "the driver does not export it (CUDA 12 or newer needed)");
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
  }();
  return fn;
}

// The TMA map of a row-major [rows, K] byte matrix, boxes of box_rows × 128
// (a stage tile, or the slice of it one CTA of a cluster loads), 128-byte
// swizzle, zeros past its edges.
CUtensorMap CodesMap(const uint8_t* q, int64_t rows, int64_t K, int box_rows) {
  CUtensorMap map;
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(K), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(K)};  // bytes, of dimension 1
  const cuuint32_t box[2] = {kBlockK, static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t element_strides[2] = {1, 1};
  const CUresult r =
      EncodeTiled()(&map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, const_cast<uint8_t*>(q), dims, strides,
                    box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                    CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    ::gtp::kernels::cuda::internal::Die(
        __FILE__, __LINE__, "cuTensorMapEncodeTiled",
        "refused the codes' map (16-byte aligned codes and K a multiple of 16 needed)");
  }
  return map;
}

template <typename Y, bool kBRows, int kCM, int kCN, int kMode>
void ConfigureOnce() {
  static const bool configured = [] {
    GTP_CU_CHECK(cudaFuncSetAttribute(WgmmaGemmKernel<Y, kBRows, kCM, kCN, kMode>,
                                      cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      Cta<RowsOf(kMode)>::kSmemBytes));
    return true;
  }();
  (void)configured;
}

template <int kCM, int kCN, int kBM>
cudaLaunchConfig_t LaunchConfig(int grid, cudaStream_t stream, cudaLaunchAttribute* cluster) {
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(grid);
  config.blockDim = dim3(Cta<kBM>::kThreads);
  config.dynamicSmemBytes = Cta<kBM>::kSmemBytes;
  config.stream = stream;
  cluster->id = cudaLaunchAttributeClusterDimension;
  cluster->val.clusterDim.x = kCM * kCN;
  cluster->val.clusterDim.y = 1;
  cluster->val.clusterDim.z = 1;
  config.attrs = cluster;
  config.numAttrs = 1;
  return config;
}

// How many kCM × kCN clusters of the kernel (CTAs of kBM rows) run at once
// on the current device (one CTA a multiprocessor; a cluster's CTAs share a
// GPC, so fewer than SMs / cluster size where GPCs do not divide). Asked
// once a shape and process: a process drives GPUs of one kind.
template <int kCM, int kCN, int kBM = 128>
int MaxClusters() {
  if constexpr (kCM * kCN == 1) {
    return Multiprocessors();
  } else {
    static const int clusters = [] {
      constexpr int kMode = kBM == 128 ? kPlainMode : kTallMode;
      ConfigureOnce<float, false, kCM, kCN, kMode>();
      cudaLaunchAttribute attr;
      const cudaLaunchConfig_t config = LaunchConfig<kCM, kCN, kBM>(kCM * kCN, nullptr, &attr);
      int n = 0;
      GTP_CU_CHECK(cudaOccupancyMaxActiveClusters(
          &n, reinterpret_cast<const void*>(WgmmaGemmKernel<float, false, kCM, kCN, kMode>),
          &config));
      return n;
    }();
    return clusters;
  }
}

template <typename Y, bool kBRows, int kCM, int kCN, int kMode>
void Launch(const uint8_t* qa, const uint8_t* qb, const Args& args, cudaStream_t stream) {
  constexpr int kBM = RowsOf(kMode);
  ConfigureOnce<Y, kBRows, kCM, kCN, kMode>();
  const CUtensorMap map_a = CodesMap(qa, args.M, args.K, kBM / kCN);
  const CUtensorMap map_b = CodesMap(qb, args.N, args.K, kBlockN / kCM);
  const int64_t units = ((args.M + kCM * kBM - 1) / (kCM * kBM)) *
                        ((args.N + kCN * kBlockN - 1) / (kCN * kBlockN)) * args.splits;
  const int max_clusters = MaxClusters<kCM, kCN, kBM>();
  if (max_clusters < 1) {
    ::gtp::kernels::cuda::internal::Die(__FILE__, __LINE__, "WgmmaBlockScaledGemm",
                                        "no cluster of this shape fits the device");
  }
  const int clusters = static_cast<int>(std::min<int64_t>(units, max_clusters));
  cudaLaunchAttribute attr;
  const cudaLaunchConfig_t config =
      LaunchConfig<kCM, kCN, kBM>(clusters * kCM * kCN, stream, &attr);
  GTP_CU_CHECK(
      cudaLaunchKernelEx(&config, WgmmaGemmKernel<Y, kBRows, kCM, kCN, kMode>, map_a, map_b, args));
  GTP_CU_LAUNCH_CHECK();
  if (args.splits > 1) {
    const int64_t pairs = args.M * args.N / 2;
    const int blocks =
        static_cast<int>(std::min<int64_t>((pairs + 255) / 256, 8 * int64_t{Multiprocessors()}));
    SplitSumKernel<Y><<<blocks, 256, 0, stream>>>(args.partial, args.splits, args.M, args.N,
                                                  static_cast<Y*>(args.y), args.beta,
                                                  static_cast<const Y*>(args.bias));
    GTP_CU_LAUNCH_CHECK();
  }
}

template <int kCM, int kCN, int kMode>
void LaunchFor(const uint8_t* qa, const uint8_t* qb, const Args& args, bool y_bf16,
               cudaStream_t stream) {
  // b's scales per row (1×128) vary along y's columns; per tile they are one
  // value for the CTA's 128 columns.
  if (y_bf16) {
    args.b_tiles ? Launch<__nv_bfloat16, false, kCM, kCN, kMode>(qa, qb, args, stream)
                 : Launch<__nv_bfloat16, true, kCM, kCN, kMode>(qa, qb, args, stream);
  } else {
    args.b_tiles ? Launch<float, false, kCM, kCN, kMode>(qa, qb, args, stream)
                 : Launch<float, true, kCM, kCN, kMode>(qa, qb, args, stream);
  }
}

template <int kCM, int kCN, int kRows>
void LaunchFor(const uint8_t* qa, const uint8_t* qb, const Args& args, bool y_bf16,
               const WgmmaPlan& plan, cudaStream_t stream) {
  if constexpr (kRows == 0) {
    if (plan.overlap) return LaunchFor<kCM, kCN, kOverlapMode>(qa, qb, args, y_bf16, stream);
  }
  if (plan.ping_pong && plan.bulk_store) {
    LaunchFor<kCM, kCN, kRows | kPingPongMode | kBulkStoreMode>(qa, qb, args, y_bf16, stream);
  } else if (plan.ping_pong) {
    LaunchFor<kCM, kCN, kRows | kPingPongMode>(qa, qb, args, y_bf16, stream);
  } else if (plan.bulk_store) {
    LaunchFor<kCM, kCN, kRows | kBulkStoreMode>(qa, qb, args, y_bf16, stream);
  } else {
    LaunchFor<kCM, kCN, kRows | kPlainMode>(qa, qb, args, y_bf16, stream);
  }
}

// 192-row tiles only without a cluster along M (WgmmaBlockScaledGemm
// refuses the pair): no kernel is built for it.
template <int kCM, int kCN>
void LaunchFor(const uint8_t* qa, const uint8_t* qb, const Args& args, bool y_bf16,
               const WgmmaPlan& plan, cudaStream_t stream) {
  if constexpr (kCM == 1) {
    if (plan.tile_m == 192)
      return LaunchFor<kCM, kCN, kTallMode>(qa, qb, args, y_bf16, plan, stream);
  }
  LaunchFor<kCM, kCN, 0>(qa, qb, args, y_bf16, plan, stream);
}

}  // namespace

bool WgmmaGemmSupported(int device) {
  int major = 0, minor = 0;
  GTP_CU_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  GTP_CU_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  return major == 9 && minor == 0;
}

int WgmmaMaxClusters(int cluster_m, int cluster_n, int tile_m) {
  const bool ok = (cluster_m == 1 || cluster_m == 2) && (cluster_n == 1 || cluster_n == 2) &&
                  (tile_m == 128 || (tile_m == 192 && cluster_m == 1));
  if (!ok) {
    ::gtp::kernels::cuda::internal::Die(__FILE__, __LINE__, "WgmmaMaxClusters",
                                        "cluster dimensions must be 1 or 2 and tile_m 128, or "
                                        "192 with cluster_m 1");
  }
  if (tile_m == 192) return cluster_n == 2 ? MaxClusters<1, 2, 192>() : MaxClusters<1, 1, 192>();
  if (cluster_m == 2 && cluster_n == 2) return MaxClusters<2, 2>();
  if (cluster_m == 2) return MaxClusters<2, 1>();
  if (cluster_n == 2) return MaxClusters<1, 2>();
  return MaxClusters<1, 1>();
}

WgmmaPlan WgmmaGemmPlan(int64_t M, int64_t N, int64_t K) {
  WgmmaCapacity capacity;
  capacity.multiprocessors = Multiprocessors();
  capacity.pairs_2x1 = WgmmaMaxClusters(2, 1);
  capacity.pairs_1x2 = WgmmaMaxClusters(1, 2);
  return ChooseWgmmaPlan(M, N, K, capacity);
}

void WgmmaBlockScaledGemm(const uint8_t* qa, const float* sa, bool a_tiles, const uint8_t* qb,
                          const float* sb, bool b_tiles, int64_t M, int64_t N, int64_t K, void* y,
                          bool y_bf16, float beta, const void* bias, const WgmmaPlan& plan,
                          float* partial, cudaStream_t stream) {
  if (M == 0 || N == 0) return;
  if (plan.splits < 1 || (plan.splits > 1 && partial == nullptr)) {
    ::gtp::kernels::cuda::internal::Die(__FILE__, __LINE__, "WgmmaBlockScaledGemm",
                                        "splits must be >= 1, with a partial buffer above 1");
  }
  if (plan.tile_m != 128 && plan.tile_m != 192) {
    ::gtp::kernels::cuda::internal::Die(__FILE__, __LINE__, "WgmmaBlockScaledGemm",
                                        "tile_m must be 128 or 192");
  }
  if (plan.overlap && (plan.tile_m != 128 || plan.ping_pong || plan.bulk_store)) {
    ::gtp::kernels::cuda::internal::Die(__FILE__, __LINE__, "WgmmaBlockScaledGemm",
                                        "overlap runs alone, with 128-row tiles (no ping_pong, "
                                        "no bulk_store)");
  }
  const bool cm_ok = plan.cluster_m == 1 ||
                     (plan.cluster_m == 2 && plan.tile_m == 128 && M % (2 * plan.tile_m) == 0);
  const bool cn_ok = plan.cluster_n == 1 || (plan.cluster_n == 2 && N % (2 * kBlockN) == 0);
  if (!cm_ok || !cn_ok) {
    ::gtp::kernels::cuda::internal::Die(__FILE__, __LINE__, "WgmmaBlockScaledGemm",
                                        "a cluster dimension must be 1, or 2 with M (N) a "
                                        "multiple of 256 (cluster_m 2: tile_m 128 only)");
  }
  const Args args{sa,      sb,          y,       bias,           M, N, K, beta, a_tiles,
                  b_tiles, plan.splits, partial, plan.prefetch_y};
  if (plan.cluster_m == 2 && plan.cluster_n == 2) {
    LaunchFor<2, 2>(qa, qb, args, y_bf16, plan, stream);
  } else if (plan.cluster_m == 2) {
    LaunchFor<2, 1>(qa, qb, args, y_bf16, plan, stream);
  } else if (plan.cluster_n == 2) {
    LaunchFor<1, 2>(qa, qb, args, y_bf16, plan, stream);
  } else {
    LaunchFor<1, 1>(qa, qb, args, y_bf16, plan, stream);
  }
}

}  // namespace gtp::kernels::fp8::cuda
