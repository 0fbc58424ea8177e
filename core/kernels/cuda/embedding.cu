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
//
// table/out are f32 or bf16 (the forward is a copy: 16-byte chunks for bf16
// rows with C % 8 == 0 and aligned buffers); dout is f32 or bf16, dtable
// always f32 (bf16 gradients widen exactly, then add in the same order).
#include <cuda_runtime.h>

#include <type_traits>

#include "core/kernels/cuda.h"
#include "core/kernels/cuda/common.cuh"
#include "core/kernels/cuda/elem.cuh"

namespace gtp::kernels::cuda {
namespace {

using internal::Aligned16;
using internal::CeilDiv;
using internal::kBf16Vec;
using internal::kFullMask;
using internal::kWarpSize;
using internal::Load;
using internal::WithVec;

constexpr int kThreads = 256;
constexpr int kMaxBackwardBlocks = 512;

// Copies rows in chunks of kVec elements (one element, or 16 bytes of bf16);
// the zero chunk is all-zero bits, +0 in f32 and bf16.
template <typename T, int kVec>
__global__ void EmbeddingForwardKernel(const int32_t* __restrict__ idx, const T* __restrict__ table,
                                       T* __restrict__ out, int64_t N, int64_t V, int64_t C,
                                       int64_t vocab_start) {
  using Chunk = std::conditional_t<kVec == 1, T, uint4>;
  static_assert(sizeof(Chunk) == kVec * sizeof(T), "chunk size");
  const int64_t chunks = C / kVec;
  for (int64_t n = blockIdx.x; n < N; n += gridDim.x) {
    const int64_t row = static_cast<int64_t>(idx[n]) - vocab_start;
    Chunk* o = reinterpret_cast<Chunk*>(out + n * C);
    if (row >= 0 && row < V) {
      const Chunk* t = reinterpret_cast<const Chunk*>(table + row * C);
      for (int64_t c = threadIdx.x; c < chunks; c += blockDim.x) o[c] = t[c];
    } else {
      for (int64_t c = threadIdx.x; c < chunks; c += blockDim.x) o[c] = Chunk{};
    }
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    EmbeddingBackwardKernel(const int32_t* __restrict__ idx, const T* __restrict__ dout,
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
        for (int k = j; k < end; ++k) acc += Load(dout[hits[k] * C + c]);
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

template <typename T>
void EmbeddingForwardT(const int32_t* idx, const T* table, T* out, int64_t N, int64_t V, int64_t C,
                       int64_t vocab_start, cudaStream_t stream) {
  CheckArgs(N, V, C);
  if (N == 0 || C == 0) return;
  WithVec<T>(C % kBf16Vec == 0 && Aligned16({table, out}), [&](auto vec) {
    constexpr int kVec = decltype(vec)::value;
    const int64_t chunks = C / kVec;
    const int threads =
        chunks >= kThreads ? kThreads : static_cast<int>(CeilDiv(chunks, kWarpSize) * kWarpSize);
    const unsigned blocks = static_cast<unsigned>(N < (int64_t{1} << 20) ? N : (int64_t{1} << 20));
    EmbeddingForwardKernel<T, kVec>
        <<<blocks, threads, 0, stream>>>(idx, table, out, N, V, C, vocab_start);
  });
  GTP_CU_LAUNCH_CHECK();
}

template <typename T>
void EmbeddingBackwardT(const int32_t* idx, const T* dout, float* dtable, int64_t N, int64_t V,
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
  EmbeddingBackwardKernel<T>
      <<<grid, kThreads, 0, stream>>>(idx, dout, dtable, N, V, C, vocab_start, rows_per_block);
  GTP_CU_LAUNCH_CHECK();
}

}  // namespace

void EmbeddingForward(const int32_t* idx, const float* table, float* out, int64_t N, int64_t V,
                      int64_t C, int64_t vocab_start, cudaStream_t stream) {
  EmbeddingForwardT(idx, table, out, N, V, C, vocab_start, stream);
}
void EmbeddingForward(const int32_t* idx, const bf16* table, bf16* out, int64_t N, int64_t V,
                      int64_t C, int64_t vocab_start, cudaStream_t stream) {
  EmbeddingForwardT(idx, table, out, N, V, C, vocab_start, stream);
}

void EmbeddingBackward(const int32_t* idx, const float* dout, float* dtable, int64_t N, int64_t V,
                       int64_t C, int64_t vocab_start, cudaStream_t stream) {
  EmbeddingBackwardT(idx, dout, dtable, N, V, C, vocab_start, stream);
}
void EmbeddingBackward(const int32_t* idx, const bf16* dout, float* dtable, int64_t N, int64_t V,
                       int64_t C, int64_t vocab_start, cudaStream_t stream) {
  EmbeddingBackwardT(idx, dout, dtable, N, V, C, vocab_start, stream);
}

}  // namespace gtp::kernels::cuda
