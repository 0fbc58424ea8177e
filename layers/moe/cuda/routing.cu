// layers/moe/cuda/routing.cu — CUDA kernels of layers/moe/routing.h.
//
// The per-token math (scores, top-k, weights, aux part, backward) is one
// thread per token running layers/moe/internal/routing_math.h, the code the
// CPU loops run, so selections, weights and dlogits match the CPU bit for
// bit. Dispatch is a stable counting sort in three kernels: per chunk of 256
// slots each slot's rank among the chunk's earlier slots of its expert and
// the chunk's histogram; one block turning the histograms into offsets
// (expert-major, chunk-minor); a scatter. The result is exact (integers), in
// the CPU's order. Sums over tokens (aux and z values) are a one-block double
// tree; they are reported figures, equal to the CPU's within double rounding.
#include <cuda_runtime.h>

#include <cstdint>

#include "layers/moe/cuda/routing_cuda.h"

namespace gtp::layers::moe::cuda {
namespace {

namespace ri = routing_internal;

constexpr int kThreads = 256;

int Blocks(int64_t n) { return static_cast<int>((n + kThreads - 1) / kThreads); }

__global__ void RouteKernel(RouteParams p, const float* __restrict__ logits,
                            const float* __restrict__ bias, int64_t n, int32_t* __restrict__ sel,
                            float* __restrict__ w) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= n) return;
  ri::RouteToken(p, logits + t * p.E, bias, sel + t * p.k, w + t * p.k);
}

__global__ void CountKernel(RouteParams p, const int32_t* __restrict__ sel, int64_t S,
                            float* __restrict__ counts) {
  const int64_t s = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (s >= S) return;
  // Whole numbers below 2^24: the atomic sum is exact in any order.
  atomicAdd(&counts[ri::GroupOf(p, s / p.k) * p.E + sel[s]], 1.0f);
}

// Per chunk: rank[s] = earlier slots of the chunk with s's expert; hist[chunk, e].
__global__ void ChunkRankKernel(const int32_t* __restrict__ expert, int64_t S, int E,
                                int32_t* __restrict__ rank, int32_t* __restrict__ hist) {
  __shared__ int32_t ex[kDispatchChunk];
  const int64_t base = static_cast<int64_t>(blockIdx.x) * kDispatchChunk;
  const int i = threadIdx.x;
  const int64_t s = base + i;
  ex[i] = s < S ? expert[s] : -1;
  __syncthreads();
  if (s >= S || ex[i] < 0) return;
  int r = 0;
  for (int j = 0; j < i; ++j) r += ex[j] == ex[i];
  rank[s] = r;
  // The chunk's last slot of each expert writes the histogram entry.
  bool last = true;
  for (int j = i + 1; j < kDispatchChunk && last; ++j) last = ex[j] != ex[i];
  if (last) hist[static_cast<int64_t>(blockIdx.x) * E + ex[i]] = r + 1;
}

// One block: counts[e] = Σ_chunk hist; hist[c, e] becomes the first sorted row
// of expert e's slots in chunk c.
__global__ void OffsetsKernel(int64_t chunks, int E, int32_t* __restrict__ hist,
                              int32_t* __restrict__ counts) {
  for (int e = threadIdx.x; e < E; e += blockDim.x) {
    int32_t c = 0;
    for (int64_t ch = 0; ch < chunks; ++ch) c += hist[ch * E + e];
    counts[e] = c;
  }
  __syncthreads();
  for (int e = threadIdx.x; e < E; e += blockDim.x) {
    int32_t off = 0;
    for (int i = 0; i < e; ++i) off += counts[i];
    for (int64_t ch = 0; ch < chunks; ++ch) {
      const int32_t h = hist[ch * E + e];
      hist[ch * E + e] = off;
      off += h;
    }
  }
}

__global__ void ScatterKernel(const int32_t* __restrict__ expert, int64_t S, int k, int E,
                              const int32_t* __restrict__ rank, const int32_t* __restrict__ off,
                              int32_t* __restrict__ pos, int32_t* __restrict__ row_slot,
                              int32_t* __restrict__ row_tok) {
  const int64_t s = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (s >= S) return;
  const int32_t e = expert[s];
  if (e < 0) {
    pos[s] = -1;
    return;
  }
  const int32_t r = off[(s / kDispatchChunk) * E + e] + rank[s];
  pos[s] = r;
  row_slot[r] = static_cast<int32_t>(s);
  if (row_tok != nullptr) row_tok[r] = static_cast<int32_t>(s / k);
}

__global__ void CapacityKernel(RouteParams p, const int32_t* __restrict__ sel,
                               const float* __restrict__ w, const int32_t* __restrict__ counts,
                               const int32_t* __restrict__ pos,
                               const int32_t* __restrict__ row_slot, int64_t S,
                               int32_t* __restrict__ expert) {
  const int64_t s = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (s >= S) return;
  expert[s] = ri::KeepSlot(p, s, sel, w, counts, pos, row_slot) ? sel[s] : -1;
}

__global__ void AuxPartKernel(RouteParams p, const float* __restrict__ logits,
                              const float* __restrict__ counts, int64_t n,
                              float* __restrict__ part) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= n) return;
  part[t] = ri::AuxPart(p, logits + t * p.E, t, counts);
}

__global__ void BackwardKernel(RouteParams p, const float* __restrict__ logits,
                               const int32_t* __restrict__ sel, const int32_t* __restrict__ expert,
                               const float* __restrict__ dw, const float* __restrict__ counts,
                               int64_t n, float* __restrict__ dl, float* __restrict__ zpart) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= n) return;
  const float z = ri::BackwardToken(p, logits + t * p.E, t, sel + t * p.k, expert + t * p.k,
                                    dw + t * p.k, counts, dl + t * p.E);
  if (zpart != nullptr) zpart[t] = z;
}

// One block: *acc += Σ v[0, n) in double.
__global__ void SumKernel(const float* __restrict__ v, int64_t n, double* __restrict__ acc) {
  __shared__ double part[kThreads];
  double s = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) s += static_cast<double>(v[i]);
  part[threadIdx.x] = s;
  __syncthreads();
  for (int h = kThreads / 2; h > 0; h /= 2) {
    if (threadIdx.x < h) part[threadIdx.x] += part[threadIdx.x + h];
    __syncthreads();
  }
  if (threadIdx.x == 0) *acc += part[0];
}

__global__ void AccumulateKernel(const int32_t* __restrict__ sel_counts,
                                 const int32_t* __restrict__ kept_counts, int E, int64_t S,
                                 double* __restrict__ acc) {
  for (int e = threadIdx.x; e < E; e += blockDim.x) acc[e] += static_cast<double>(sel_counts[e]);
  if (threadIdx.x == 0) {
    int64_t kept = 0;
    for (int e = 0; e < E; ++e) kept += kept_counts[e];
    acc[E] += static_cast<double>(S - kept);
  }
}

__global__ void LocalKernel(const int32_t* __restrict__ expert, int64_t S, int e0, int el,
                            int32_t* __restrict__ local) {
  const int64_t s = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (s >= S) return;
  const int32_t x = expert[s];
  local[s] = x >= e0 && x < e0 + el ? x - e0 : -1;
}

// Each block turns the counts into offsets in shared memory (E is small),
// then thread i writes slot i's padded row and padded row i's token.
__global__ void PadKernel(const int32_t* __restrict__ expert, const int32_t* __restrict__ counts,
                          const int32_t* __restrict__ pos, const int32_t* __restrict__ row_tok,
                          int64_t S, int E, int64_t cap, int32_t* __restrict__ padded_pos,
                          int32_t* __restrict__ padded_tok) {
  extern __shared__ int32_t off[];
  if (threadIdx.x == 0) {
    int32_t a = 0;
    for (int e = 0; e < E; ++e) {
      off[e] = a;
      a += counts[e];
    }
  }
  __syncthreads();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < S) {
    const int32_t x = expert[i];
    padded_pos[i] = x < 0 ? -1 : static_cast<int32_t>(pos[i] - off[x] + x * cap);
  }
  if (i < E * cap) {
    const int e = static_cast<int>(i / cap);
    const int64_t r = i % cap;
    padded_tok[i] = r < counts[e] ? row_tok[off[e] + r] : -1;
  }
}

}  // namespace

void SelectLocalExperts(const int32_t* expert, int64_t S, int e0, int el, int32_t* local,
                        void* stream) {
  if (S == 0) return;
  LocalKernel<<<Blocks(S), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(expert, S, e0, el,
                                                                             local);
}

void PadToCapacity(const int32_t* expert, const int32_t* counts, const int32_t* pos,
                   const int32_t* row_tok, int64_t S, int E, int64_t cap, int32_t* padded_pos,
                   int32_t* padded_tok, void* stream) {
  const int64_t n = S > E * cap ? S : E * cap;
  if (n == 0) return;
  PadKernel<<<Blocks(n), kThreads, sizeof(int32_t) * E, static_cast<cudaStream_t>(stream)>>>(
      expert, counts, pos, row_tok, S, E, cap, padded_pos, padded_tok);
}

void RouteTokens(const RouteParams& p, const float* logits, const float* bias, int64_t n,
                 int32_t* selected, float* weight, void* stream) {
  if (n == 0) return;
  RouteKernel<<<Blocks(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(p, logits, bias, n,
                                                                             selected, weight);
}

void CountSelections(const RouteParams& p, const int32_t* selected, int64_t n, float* counts,
                     void* stream) {
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  cudaMemsetAsync(counts, 0, sizeof(float) * p.G * p.E, st);
  const int64_t S = n * p.k;
  if (S == 0) return;
  CountKernel<<<Blocks(S), kThreads, 0, st>>>(p, selected, S, counts);
}

void Dispatch(const int32_t* expert, int64_t S, int k, int E, int32_t* counts, int32_t* pos,
              int32_t* row_slot, int32_t* row_tok, int32_t* workspace, void* stream) {
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  const int64_t chunks = (S + kDispatchChunk - 1) / kDispatchChunk;
  int32_t* rank = workspace;
  int32_t* hist = workspace + S;
  if (chunks > 0) cudaMemsetAsync(hist, 0, sizeof(int32_t) * chunks * E, st);
  if (S > 0) {
    ChunkRankKernel<<<static_cast<int>(chunks), kDispatchChunk, 0, st>>>(expert, S, E, rank, hist);
  }
  OffsetsKernel<<<1, kThreads, 0, st>>>(chunks, E, hist, counts);
  if (S > 0) {
    ScatterKernel<<<Blocks(S), kThreads, 0, st>>>(expert, S, k, E, rank, hist, pos, row_slot,
                                                  row_tok);
  }
}

void DropOverCapacity(const RouteParams& p, const int32_t* selected, const float* weight,
                      const int32_t* counts, const int32_t* pos, const int32_t* row_slot, int64_t S,
                      int32_t* expert, void* stream) {
  if (S == 0) return;
  CapacityKernel<<<Blocks(S), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      p, selected, weight, counts, pos, row_slot, S, expert);
}

void AuxLoss(const RouteParams& p, const float* logits, const float* counts, int64_t n, float* part,
             double* acc, void* stream) {
  if (n == 0) return;
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  AuxPartKernel<<<Blocks(n), kThreads, 0, st>>>(p, logits, counts, n, part);
  SumKernel<<<1, kThreads, 0, st>>>(part, n, acc);
}

void RouteBackward(const RouteParams& p, const float* logits, const int32_t* selected,
                   const int32_t* expert, const float* dweight, const float* counts, int64_t n,
                   float* dlogits, float* zpart, double* acc, void* stream) {
  if (n == 0) return;
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  BackwardKernel<<<Blocks(n), kThreads, 0, st>>>(p, logits, selected, expert, dweight, counts, n,
                                                 dlogits, acc != nullptr ? zpart : nullptr);
  if (acc != nullptr) SumKernel<<<1, kThreads, 0, st>>>(zpart, n, acc);
}

void AccumulateCounts(const int32_t* selected_counts, const int32_t* kept_counts, int E, int64_t S,
                      double* acc, void* stream) {
  AccumulateKernel<<<1, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(selected_counts,
                                                                          kept_counts, E, S, acc);
}

}  // namespace gtp::layers::moe::cuda
