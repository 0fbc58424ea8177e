// core/kernels/cuda/embedding.cu — vocab-parallel embedding lookup.
//
//   forward:  out[n, :] = table[idx[n] − vocab_start, :] when the id is one of
//             this rank's rows [vocab_start, vocab_start + V), else 0.
//   backward: dtable[idx[n] − vocab_start, :] += dout[n, :] (+=, parameter grad).
//
// The backward pass is deterministic without sorting and without atomics:
// block (b, y) owns the vocab rows [b·R, (b+1)·R) and the 256 columns of tile
// y; it scans all N ids in order, compacting the positions that hit its rows,
// and adds those dout rows in increasing n, one column per thread. Every
// dtable element therefore receives its updates one at a time in increasing
// n, the order of the plain sequential loop (bit-identical to the CPU). Cost:
// (#blocks · N) id reads from L2, cheap next to the N·C gradient traffic for
// the block counts used here (at most 512 row blocks per column tile).
#include <cuda_runtime.h>

#include "core/kernels/cuda.h"
#include "core/kernels/cuda/common.cuh"

namespace gtp::kernels::cuda {
namespace {

using internal::CeilDiv;
using internal::kFullMask;
using internal::kWarpSize;

constexpr int kThreads = 256;
constexpr int kMaxBackwardBlocks = 512;

__global__ void EmbeddingForwardKernel(const int32_t* __restrict__ idx,
                                       const float* __restrict__ table, float* __restrict__ out,
                                       int64_t N, int64_t V, int64_t C, int64_t vocab_start) {
  for (int64_t n = blockIdx.x; n < N; n += gridDim.x) {
    const int64_t row = static_cast<int64_t>(idx[n]) - vocab_start;
    float* o = out + n * C;
    if (row >= 0 && row < V) {
      const float* t = table + row * C;
      for (int64_t c = threadIdx.x; c < C; c += blockDim.x) o[c] = t[c];
    } else {
      for (int64_t c = threadIdx.x; c < C; c += blockDim.x) o[c] = 0.0f;
    }
  }
}

__global__ void __launch_bounds__(kThreads)
    EmbeddingBackwardKernel(const int32_t* __restrict__ idx, const float* __restrict__ dout,
                            float* __restrict__ dtable, int64_t N, int64_t V, int64_t C,
                            int64_t vocab_start, int64_t rows_per_block) {
  __shared__ int64_t hits[kThreads];      // token positions n, increasing
  __shared__ int64_t hit_rows[kThreads];  // their local rows
  __shared__ int warp_hits[kThreads / kWarpSize];
  const int64_t lo = blockIdx.x * rows_per_block;
  const int64_t hi = lo + rows_per_block < V ? lo + rows_per_block : V;
  if (lo >= hi) return;  // uniform over the block
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  const int64_t c = blockIdx.y * int64_t{kThreads} + threadIdx.x;  // this thread's column
  for (int64_t base = 0; base < N; base += kThreads) {
    const int64_t n = base + threadIdx.x;
    bool hit = false;
    int64_t row = 0;
    if (n < N) {
      row = static_cast<int64_t>(idx[n]) - vocab_start;
      hit = row >= lo && row < hi;
    }
    const unsigned mask = __ballot_sync(kFullMask, hit);
    if (lane == 0) warp_hits[warp] = __popc(mask);
    __syncthreads();
    int offset = 0, total = 0;
    for (int w = 0; w < kThreads / kWarpSize; ++w) {
      const int count = warp_hits[w];
      if (w < warp) offset += count;
      total += count;
    }
    // Compaction that keeps increasing n.
    if (hit) {
      const int at = offset + __popc(mask & ((1u << lane) - 1u));
      hits[at] = n;
      hit_rows[at] = row;
    }
    __syncthreads();
    // A run of consecutive hits on one row is summed in registers and stored
    // once (many tokens may share an id, e.g. padding); the adds still happen
    // one at a time in increasing n, so the bits are those of the plain loop.
    for (int j = 0; j < total;) {
      const int64_t r = hit_rows[j];
      int end = j + 1;
      while (end < total && hit_rows[end] == r) ++end;
      if (c < C) {
        float* dt = dtable + r * C + c;
        float acc = *dt;
#pragma unroll 8
        for (int k = j; k < end; ++k) acc += dout[hits[k] * C + c];
        *dt = acc;
      }
      j = end;
    }
    __syncthreads();  // the shared arrays are rewritten next round
  }
}

void CheckArgs(int64_t N, int64_t V, int64_t C) {
  GTP_CU_REQUIRE(N >= 0 && V >= 0 && C >= 0, "Embedding: negative size N=%lld V=%lld C=%lld",
                 static_cast<long long>(N), static_cast<long long>(V), static_cast<long long>(C));
}

}  // namespace

void EmbeddingForward(const int32_t* idx, const float* table, float* out, int64_t N, int64_t V,
                      int64_t C, int64_t vocab_start, cudaStream_t stream) {
  CheckArgs(N, V, C);
  if (N == 0 || C == 0) return;
  const int threads =
      C >= kThreads ? kThreads : static_cast<int>(CeilDiv(C, kWarpSize) * kWarpSize);
  const unsigned blocks = static_cast<unsigned>(N < (int64_t{1} << 20) ? N : (int64_t{1} << 20));
  EmbeddingForwardKernel<<<blocks, threads, 0, stream>>>(idx, table, out, N, V, C, vocab_start);
  GTP_CU_LAUNCH_CHECK();
}

void EmbeddingBackward(const int32_t* idx, const float* dout, float* dtable, int64_t N, int64_t V,
                       int64_t C, int64_t vocab_start, cudaStream_t stream) {
  CheckArgs(N, V, C);
  if (N == 0 || V == 0 || C == 0) return;
  const int64_t blocks = V < kMaxBackwardBlocks ? V : kMaxBackwardBlocks;
  const int64_t rows_per_block = CeilDiv(V, blocks);
  const int64_t col_tiles = CeilDiv(C, kThreads);
  GTP_CU_REQUIRE(col_tiles <= 65535, "EmbeddingBackward: C=%lld too large",
                 static_cast<long long>(C));
  const dim3 grid(static_cast<unsigned>(CeilDiv(V, rows_per_block)),
                  static_cast<unsigned>(col_tiles));
  EmbeddingBackwardKernel<<<grid, kThreads, 0, stream>>>(idx, dout, dtable, N, V, C, vocab_start,
                                                         rows_per_block);
  GTP_CU_LAUNCH_CHECK();
}

}  // namespace gtp::kernels::cuda
