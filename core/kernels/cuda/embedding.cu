// core/kernels/cuda/embedding.cu — vocab-parallel embedding lookup.
//
//   forward:  out[n, :] = table[idx[n] − vocab_start, :] when the id is one of
//             this rank's rows [vocab_start, vocab_start + V), else 0.
//   backward: dtable[idx[n] − vocab_start, :] += dout[n, :] (+=, parameter grad).
//
// The backward pass is deterministic without atomics: the (row, n) pairs are
// radix-sorted by row (stably, so n increases within a row), and one block
// per distinct row adds that row's dout rows in increasing n into a register
// started from the table value, 1, 2, 4 or 8 columns per thread. Every dtable element
// therefore receives its updates one at a time in increasing n, the order of
// the plain sequential loop (bit-identical to the CPU), and a frequent id
// (real text is Zipfian) is one register chain a column (stored and reloaded
// once every 2048 rows, exactly), not a chain of read-modify-writes through
// memory.
//
// table/out are f32 or bf16 (the forward is a copy: 16-byte chunks for bf16
// rows with C % 8 == 0 and aligned buffers); dout is f32 or bf16, dtable
// always f32 (bf16 gradients widen exactly, then add in the same order).
#include <cuda_runtime.h>

#include <climits>
#include <type_traits>

#if !defined(GTP_CUDA_HOST_EMULATION)
#include <cub/device/device_radix_sort.cuh>
#else
#include <algorithm>
#include <numeric>
#include <vector>
#endif

#include "core/kernels/cuda.h"
#include "core/kernels/cuda/common.cuh"
#include "core/kernels/cuda/elem.cuh"

namespace gtp::kernels::cuda {
namespace {

using internal::Aligned16;
using internal::CeilDiv;
using internal::kBf16Vec;
using internal::kWarpSize;
using internal::Launch;
using internal::LoadVec;
using internal::WithVec;

constexpr int kThreads = 256;

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

// Keys for the sort: this rank's local row of each id, or V (sorted last,
// skipped) for ids of other vocabulary shards; values: the positions n.
__global__ void SortKeysKernel(const int32_t* __restrict__ idx, int32_t* __restrict__ keys,
                               int32_t* __restrict__ pos, int64_t N, int64_t V,
                               int64_t vocab_start) {
  for (int64_t n = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; n < N;
       n += int64_t{gridDim.x} * blockDim.x) {
    const int64_t row = static_cast<int64_t>(idx[n]) - vocab_start;
    keys[n] = row >= 0 && row < V ? static_cast<int32_t>(row) : static_cast<int32_t>(V);
    pos[n] = static_cast<int32_t>(n);
  }
}

// Entry i of the stably sorted (row, n) pairs starts a segment when its row
// differs from entry i − 1's; that block adds the segment's dout rows into
// the table row, one column per thread, starting from the table value and in
// increasing n: the order of the plain sequential loop.
// kVec columns per thread: 1 (f32 dout, or bf16 rows that are not whole
// aligned 16-byte chunks), else 2, 4 or 8 (4-, 8- or 16-byte loads of bf16
// dout; float2, float4 or two float4 of dtable): the fewest that keep the
// block within kSegThreads. A column's adds form one chain, so what bounds a
// long segment is the rows a thread has in flight: kBatch = 64 / kVec of
// them (the same registers whatever kVec), 32 at C = 768 (8 at kVec = 8 took
// ~0.17 ms for the commonest id of a byte corpus' 8192 tokens).
// A frequent token's segment runs to thousands of rows, so the block finds
// the segment's end together (blockDim rows a pass; one thread walking it
// made as many dependent loads as the segment has rows) and stages the
// segment's positions in shared memory kPosChunk at a time (a dout row's
// address then needs no global load first). Each column's sum runs through
// the chunks in order, stored and reloaded between them (exactly), so the
// sums are the plain loop's.
constexpr int kPosChunk = 2048;

constexpr int kSegThreads = 512;

// v[0, kVec) = p[0, kVec): bf16 widened (kVec ≥ 2: one 2·kVec-byte load,
// p aligned to it), or f32 (kVec ≥ 2: float2 or float4s, aligned to them).
template <int kVec, typename T>
__device__ __forceinline__ void LoadCols(const T* p, float (&v)[kVec]) {
  if constexpr (kVec == 1) {
    LoadVec<1>(p, v);
  } else if constexpr (std::is_same_v<T, float>) {
    if constexpr (kVec == 2) {
      const float2 a = *reinterpret_cast<const float2*>(p);
      v[0] = a.x, v[1] = a.y;
    } else {
#pragma unroll
      for (int i = 0; i < kVec / 4; ++i) {
        const float4 a = reinterpret_cast<const float4*>(p)[i];
        v[4 * i] = a.x, v[4 * i + 1] = a.y, v[4 * i + 2] = a.z, v[4 * i + 3] = a.w;
      }
    }
  } else if constexpr (kVec == kBf16Vec) {
    LoadVec<kVec>(p, v);
  } else {
    static_assert(std::is_same_v<T, bf16> && (kVec == 2 || kVec == 4), "2 or 4 bf16");
    uint32_t w[kVec / 2];
    if constexpr (kVec == 2) {
      w[0] = *reinterpret_cast<const uint32_t*>(p);
    } else {
      const uint2 u = *reinterpret_cast<const uint2*>(p);
      w[0] = u.x, w[1] = u.y;
    }
#pragma unroll
    for (int i = 0; i < kVec / 2; ++i) {  // little-endian: the lower address is the low half
      v[2 * i] = BitsFloat(w[i] << 16);
      v[2 * i + 1] = BitsFloat(w[i] & 0xffff0000u);
    }
  }
}

// p[0, kVec) = v (f32; float2 or float4s when kVec ≥ 2).
template <int kVec>
__device__ __forceinline__ void StoreCols(float* p, const float (&v)[kVec]) {
  if constexpr (kVec == 1) {
    p[0] = v[0];
  } else if constexpr (kVec == 2) {
    *reinterpret_cast<float2*>(p) = make_float2(v[0], v[1]);
  } else {
#pragma unroll
    for (int i = 0; i < kVec / 4; ++i) {
      reinterpret_cast<float4*>(p)[i] =
          make_float4(v[4 * i], v[4 * i + 1], v[4 * i + 2], v[4 * i + 3]);
    }
  }
}

template <typename T, int kVec>
__global__ void __launch_bounds__(kSegThreads)
    SegmentAddKernel(const int32_t* __restrict__ rows, const int32_t* __restrict__ pos,
                     const T* __restrict__ dout, float* __restrict__ dtable, int64_t N, int64_t V,
                     int64_t C) {
  __shared__ int32_t spos[kPosChunk];
  __shared__ int s_first;  // the pass's first offset past the segment
  for (int64_t i = blockIdx.x; i < N; i += gridDim.x) {
    const int32_t r = rows[i];
    if (r >= V || (i > 0 && rows[i - 1] == r)) continue;  // uniform over the block
    // The segment's end: the first entry past i whose row differs (the rows
    // are sorted, so every entry before it is r's).
    int64_t end = i + 1;
    for (;;) {
      if (threadIdx.x == 0) s_first = INT_MAX;
      __syncthreads();
      const int64_t cand = end + threadIdx.x;
      if (cand >= N || rows[cand] != r) atomicMin(&s_first, static_cast<int>(threadIdx.x));
      __syncthreads();
      const int first = s_first;
      __syncthreads();  // every thread has read s_first before the next pass resets it
      if (first != INT_MAX) {
        end += first;
        break;
      }
      end += blockDim.x;
    }
    for (int64_t k0 = i; k0 < end; k0 += kPosChunk) {
      const int64_t k1 = k0 + kPosChunk < end ? k0 + kPosChunk : end;
      for (int64_t k = k0 + threadIdx.x; k < k1; k += blockDim.x) spos[k - k0] = pos[k];
      __syncthreads();
      for (int64_t c = threadIdx.x * int64_t{kVec}; c < C; c += int64_t{blockDim.x} * kVec) {
        float* d = dtable + r * C + c;
        float acc[kVec];
        LoadCols<kVec>(d, acc);
        // kBatch rows are loaded before any is added (their loads in flight
        // together), then added in order: the plain loop's sums.
        constexpr int kBatch = kVec == 1 ? 16 : 64 / kVec;
        int64_t k = k0;
        for (; k + kBatch <= k1; k += kBatch) {
          float x[kBatch][kVec];
#pragma unroll
          for (int b = 0; b < kBatch; ++b) {
            LoadCols<kVec>(dout + static_cast<int64_t>(spos[k + b - k0]) * C + c, x[b]);
          }
#pragma unroll
          for (int b = 0; b < kBatch; ++b) {
#pragma unroll
            for (int j = 0; j < kVec; ++j) acc[j] += x[b][j];
          }
        }
        for (; k < k1; ++k) {
          float x[kVec];
          LoadCols<kVec>(dout + static_cast<int64_t>(spos[k - k0]) * C + c, x);
#pragma unroll
          for (int j = 0; j < kVec; ++j) acc[j] += x[j];
        }
        StoreCols<kVec>(d, acc);
      }
      __syncthreads();  // spos is read before the next chunk overwrites it
    }
  }
}

// f(std::integral_constant<int, kVec>) for SegmentAddKernel: 1 unless T is
// bf16 and `vec` holds (C % 8 == 0, 16-byte aligned), else the fewest of 2,
// 4, 8 columns a thread that keep C / kVec ≤ kSegThreads.
template <typename T, typename F>
void WithSegVec(bool vec, int64_t C, F&& f) {
  if constexpr (std::is_same_v<T, bf16>) {
    if (vec && C <= 2 * kSegThreads) return f(std::integral_constant<int, 2>{});
    if (vec && C <= 4 * kSegThreads) return f(std::integral_constant<int, 4>{});
    if (vec) return f(std::integral_constant<int, kBf16Vec>{});
  }
  f(std::integral_constant<int, 1>{});
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
    Launch(EmbeddingForwardKernel<T, kVec>, blocks, threads, 0, stream, idx, table, out, N, V, C,
           vocab_start);
  });
  GTP_CU_LAUNCH_CHECK();
}

int EndBit(int64_t V) {
  int bits = 1;
  while ((int64_t{1} << bits) <= V) ++bits;  // keys are in [0, V]
  return bits;
}

// cub's pairs radix sort (stable, by the keys' low `end_bit` bits) and its
// temporary bytes; under GTP_CUDA_HOST_EMULATION a stable sort on the host,
// which orders alike.
size_t SortTempBytes(int64_t N, int64_t V) {
  size_t bytes = 0;
#if defined(GTP_CUDA_HOST_EMULATION)
  (void)N;
  (void)V;
#else
  GTP_CU_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, bytes, static_cast<const int32_t*>(nullptr),
                                               static_cast<int32_t*>(nullptr),
                                               static_cast<const int32_t*>(nullptr),
                                               static_cast<int32_t*>(nullptr), static_cast<int>(N),
                                               0, EndBit(V)));
#endif
  return bytes;
}
void SortPairs(void* temp, size_t temp_bytes, const int32_t* keys, int32_t* keys_sorted,
               const int32_t* vals, int32_t* vals_sorted, int64_t N, int end_bit,
               cudaStream_t stream) {
#if defined(GTP_CUDA_HOST_EMULATION)
  (void)temp, (void)temp_bytes, (void)end_bit, (void)stream;
  std::vector<int64_t> order(static_cast<size_t>(N));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return keys[a] < keys[b]; });
  for (int64_t i = 0; i < N; ++i) {
    keys_sorted[i] = keys[order[i]];
    vals_sorted[i] = vals[order[i]];
  }
#else
  GTP_CU_CHECK(cub::DeviceRadixSort::SortPairs(temp, temp_bytes, keys, keys_sorted, vals,
                                               vals_sorted, static_cast<int>(N), 0, end_bit,
                                               stream));
#endif
}

template <typename T>
void EmbeddingBackwardT(const int32_t* idx, const T* dout, float* dtable, int64_t N, int64_t V,
                        int64_t C, int64_t vocab_start, void* scratch, cudaStream_t stream) {
  CheckArgs(N, V, C);
  if (N == 0 || V == 0 || C == 0) return;
  GTP_CU_REQUIRE(N < (int64_t{1} << 31) && V < (int64_t{1} << 31) - 1,
                 "EmbeddingBackward: N=%lld or V=%lld exceeds int32", static_cast<long long>(N),
                 static_cast<long long>(V));
  const bool own = scratch == nullptr;
  const size_t bytes = EmbeddingBackwardScratchBytes(N, V);
  if (own) GTP_CU_CHECK(cudaMallocAsync(&scratch, bytes, stream));
  int32_t* keys = static_cast<int32_t*>(scratch);
  int32_t* pos = keys + N;
  int32_t* keys_sorted = pos + N;
  int32_t* pos_sorted = keys_sorted + N;
  void* temp = pos_sorted + N;
  size_t temp_bytes = SortTempBytes(N, V);
  const int threads = 256;
  const unsigned blocks = static_cast<unsigned>(CeilDiv(N, threads) < 65535 ? CeilDiv(N, threads) : 65535);
  Launch(SortKeysKernel, blocks, threads, 0, stream, idx, keys, pos, N, V, vocab_start);
  GTP_CU_LAUNCH_CHECK();
  SortPairs(temp, temp_bytes, keys, keys_sorted, pos, pos_sorted, N, EndBit(V), stream);
  const unsigned seg_blocks = static_cast<unsigned>(N < (int64_t{1} << 20) ? N : (int64_t{1} << 20));
  WithSegVec<T>(C % kBf16Vec == 0 && Aligned16({dout, dtable}), C, [&](auto vec) {
    constexpr int kVec = decltype(vec)::value;
    const int64_t chunks = C / kVec;
    const int threads = chunks >= kSegThreads
                            ? kSegThreads
                            : static_cast<int>(CeilDiv(chunks, kWarpSize) * kWarpSize);
    Launch(SegmentAddKernel<T, kVec>, seg_blocks, threads, 0, stream, keys_sorted, pos_sorted, dout,
           dtable, N, V, C);
  });
  GTP_CU_LAUNCH_CHECK();
  if (own) GTP_CU_CHECK(cudaFreeAsync(scratch, stream));
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

int64_t EmbeddingBackwardScratchBytes(int64_t N, int64_t V) {
  const int64_t ints = 4 * N;
  return static_cast<int64_t>((ints * 4 + 255) / 256 * 256 + SortTempBytes(N, V));
}

void EmbeddingBackward(const int32_t* idx, const float* dout, float* dtable, int64_t N, int64_t V,
                       int64_t C, int64_t vocab_start, cudaStream_t stream, void* scratch) {
  EmbeddingBackwardT(idx, dout, dtable, N, V, C, vocab_start, scratch, stream);
}
void EmbeddingBackward(const int32_t* idx, const bf16* dout, float* dtable, int64_t N, int64_t V,
                       int64_t C, int64_t vocab_start, cudaStream_t stream, void* scratch) {
  EmbeddingBackwardT(idx, dout, dtable, N, V, C, vocab_start, scratch, stream);
}

}  // namespace gtp::kernels::cuda
