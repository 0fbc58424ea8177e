// core/kernels/fp8/wgmma_epilogue.cuh — what wgmma_gemm.cu's kernel is
// given (Args) and how it finishes a tile (private to this package):
// FinishPair (bias, beta, one rounding to y's dtype), StoreTile (a thread's
// accumulators to y through the warp's shared-memory staging, or split-K's
// partial sums) and SplitSumKernel (split-K's ranges added in order, then
// finished as StoreTile finishes a tile). wgmma_gemm.cu's header comment is
// the design.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "core/kernels/fp8/wgmma_ptx.cuh"

namespace gtp::kernels::fp8::cuda {

// A row of the epilogue's staging: 32 columns of y plus a pad that keeps a
// warp's pair writes (8 rows × 4 lanes) on distinct banks; 16-byte aligned.
template <typename Y>
constexpr int EpilogueRowBytes() {
  return sizeof(Y) == 4 ? 32 * 4 + 32 : 32 * 2 + 16;
}
inline constexpr uint32_t kEpilogueWarpBytes = 16 * EpilogueRowBytes<float>();  // 16 rows

// What WgmmaGemmKernel is given besides the codes' TMA maps.
struct Args {
  const float* sa;   // a's scales: [M, KB] (1×128) or [ceil(M/128), KB] (128×128)
  const float* sb;   // b's scales, the same for N
  void* y;           // [M, N], f32 or bf16
  const void* bias;  // [N], y's dtype, or null
  int64_t M, N, K;
  float beta;
  bool a_tiles, b_tiles;
  // Split-K: each tile's K blocks in `splits` consecutive ranges, each range
  // a unit of work whose f32 sum goes to partial [splits, M, N] (no bias, no
  // beta); SplitSumKernel then adds the ranges in order into y. 1: none
  // (partial unused), the tile's sum straight into y.
  int splits;
  float* partial;
  // Each tile's old y (beta ≠ 0, unsplit) asked into L2 by the producer
  // after its last block's loads (WgmmaPlan::prefetch_y), so the epilogue's
  // reads of it hit L2.
  bool prefetch_y;
};

// Thread t of kThreads asks L2 for its share of the old y of rows [m0,
// m0 + rows) × columns [n0, n0 + 128) (past M or N skipped), a 128-byte
// line at a time: the epilogue reads them with beta ≠ 0.
template <typename Y, int kThreads>
__device__ __forceinline__ void PrefetchTile(const Args& args, int64_t m0, int64_t n0, int rows,
                                             int t) {
  constexpr int kLines = 128 * int{sizeof(Y)} / 128;  // a row's lines
  const int64_t cols = args.N - n0 < 128 ? args.N - n0 : 128;
  for (int i = t; i < rows * kLines; i += kThreads) {
    const int64_t m = m0 + i / kLines, off = int64_t{i % kLines} * (128 / int{sizeof(Y)});
    if (m >= args.M || off >= cols) continue;
    const Y* p = static_cast<const Y*>(args.y) + m * args.N + n0 + off;
    asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
  }
}

// out[0..1] = (v0, v1) (+ bias[n], bias[n + 1]) + beta·old[0..1], in f32,
// rounded once to Y: how the epilogue and SplitSumKernel finish a pair of
// columns (old: y's pair in global memory; out: there, or shared memory).
template <typename Y>
__device__ __forceinline__ void FinishPair(float v0, float v1, const Y* bias, int64_t n, float beta,
                                           const Y* old, Y* out) {
  if constexpr (sizeof(Y) == 4) {
    if (bias != nullptr) v0 += bias[n], v1 += bias[n + 1];
    if (beta != 0.0f) {
      const float2 o = *reinterpret_cast<const float2*>(old);
      v0 = fmaf(beta, o.x, v0);
      v1 = fmaf(beta, o.y, v1);
    }
    *reinterpret_cast<float2*>(out) = make_float2(v0, v1);
  } else {
    if (bias != nullptr) {
      v0 += __bfloat162float(bias[n]);
      v1 += __bfloat162float(bias[n + 1]);
    }
    if (beta != 0.0f) {
      const __nv_bfloat162 o = *reinterpret_cast<const __nv_bfloat162*>(old);
      v0 = fmaf(beta, __bfloat162float(o.x), v0);
      v1 = fmaf(beta, __bfloat162float(o.y), v1);
    }
    *reinterpret_cast<__nv_bfloat162*>(out) = __floats2bfloat162_rn(v0, v1);
  }
}

// The epilogue: a thread's acc (two rows, 16 column pairs) into y (+ bias,
// + beta·y), or, split, into its range's partial sums.
// A 16-byte aligned y goes through shared memory (stage: the warp's own
// kEpilogueWarpBytes): per 32 columns, the warp writes its 16 rows' finished
// pairs there, then stores whole rows of them — the fragment's own pairs (4
// or 8 bytes, 8 rows a store) would fill only half of each 32-byte sector
// and take four times the stores (the measured cost: docs/PERFORMANCE.md,
// twenty-sixth session). The rows go out either as 16-byte stores, one run
// a lane, or (kBulk, WgmmaPlan::bulk_store) as bulk asynchronous copies,
// one row a lane of lanes 0–15, which the warp does not wait for: the
// tensor cores start the next tile while they drain, and a lane waits only
// before its stage buffer is written again (bf16: two buffers, alternating
// by 32 columns; f32: one). Otherwise, and for the split sums (f32 pairs:
// whole sectors already), straight from the registers. N is a multiple of
// 16, so a 16-byte run is wholly in y or wholly past N.
template <typename Y, bool kBulk>
__device__ __forceinline__ void StoreTile(const Args& args, const float (&acc)[64], int64_t m0,
                                          int64_t n0, int split, int row0, int col0,
                                          uint8_t* stage) {
  Y* const y = static_cast<Y*>(args.y);
  const Y* const bias = static_cast<const Y*>(args.bias);
  if (args.splits == 1 && (reinterpret_cast<uintptr_t>(y) & 15) == 0) {
    constexpr int kRowBytes = EpilogueRowBytes<Y>();
    constexpr int kBuffers = kEpilogueWarpBytes / (16 * kRowBytes);  // bf16 2, f32 1
    constexpr int kRuns = 32 * int{sizeof(Y)} / 16;  // 16-byte runs in a row's 32 columns
    const int lane = threadIdx.x % 32;
    const int64_t warp_m0 = m0 + row0 - lane / 4;  // the warp's 16 rows
#pragma unroll
    for (int q = 0; q < 4; ++q) {  // columns 32q .. 32q + 31 of the tile
      uint8_t* const buffer = stage + (q % kBuffers) * 16 * kRowBytes;
      if constexpr (kBulk) {
        // The copies that last read this buffer (kBuffers groups ago) are done.
        if (lane < 16) BulkWaitRead<kBuffers - 1>();
        __syncwarp();
      }
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int64_t m = m0 + row0 + 8 * h;
#pragma unroll
        for (int jj = 0; jj < 4; ++jj) {
          const int j = 4 * q + jj;
          const int64_t n = n0 + 8 * j + col0;
          if (m >= args.M || n >= args.N) continue;
          Y* const out =
              reinterpret_cast<Y*>(buffer + (lane / 4 + 8 * h) * kRowBytes) + 8 * jj + col0;
          FinishPair(acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1], bias, n, args.beta,
                     y + m * args.N + n, out);
        }
      }
      const int64_t n = n0 + 32 * q;
      if constexpr (kBulk) {
        FenceProxyAsyncShared();  // this lane's writes, before the copies read them
        __syncwarp();
        if (lane < 16) {
          const int64_t m = warp_m0 + lane;
          if (m < args.M && n < args.N) {
            const int64_t cols = args.N - n < 32 ? args.N - n : 32;
            BulkStore(y + m * args.N + n, SmemAddress(buffer + lane * kRowBytes),
                      static_cast<uint32_t>(cols * int64_t{sizeof(Y)}));
          }
          BulkCommit();  // one group a quarter, empty or not: the waits count them
        }
      } else {
        __syncwarp();
#pragma unroll
        for (int i = lane; i < 16 * kRuns; i += 32) {
          const int r = i / kRuns, run = i % kRuns;
          const int64_t m = warp_m0 + r, nr = n + run * (16 / int{sizeof(Y)});
          if (m < args.M && nr < args.N) {
            *reinterpret_cast<int4*>(y + m * args.N + nr) =
                *reinterpret_cast<const int4*>(buffer + r * kRowBytes + 16 * run);
          }
        }
        __syncwarp();  // the stage is written again for the next 32 columns
      }
    }
    return;
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int64_t m = m0 + row0 + 8 * h;
    if (m >= args.M) continue;
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      const int64_t n = n0 + 8 * j + col0;
      if (n >= args.N) continue;  // N is even (a multiple of 16): n + 1 < N too
      const float v0 = acc[4 * j + 2 * h], v1 = acc[4 * j + 2 * h + 1];
      if (args.splits > 1) {  // this range's sum, for SplitSumKernel
        float* part = args.partial + (int64_t{split} * args.M + m) * args.N + n;
        *reinterpret_cast<float2*>(part) = make_float2(v0, v1);
        continue;
      }
      FinishPair(v0, v1, bias, n, args.beta, y + m * args.N + n, y + m * args.N + n);
    }
  }
}

// y = (Σ_s partial[s], s ascending) (+ bias) + beta·y, per pair of columns,
// rounded once: the split units' sums, finished as the kernel's own epilogue
// finishes an unsplit tile.
template <typename Y>
__global__ void SplitSumKernel(const float* partial, int splits, int64_t M, int64_t N, Y* y,
                               float beta, const Y* bias) {
  const int64_t pairs = M * N / 2;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < pairs;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t e = 2 * i, n = e % N;
    float v0 = 0.0f, v1 = 0.0f;
    for (int s = 0; s < splits; ++s) {
      const float2 p = *reinterpret_cast<const float2*>(partial + s * M * N + e);
      v0 += p.x;
      v1 += p.y;
    }
    FinishPair(v0, v1, bias, n, beta, y + e, y + e);
  }
}

}  // namespace gtp::kernels::fp8::cuda
