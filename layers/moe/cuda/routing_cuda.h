// layers/moe/cuda/routing_cuda.h — raw CUDA launchers of layers/moe/routing.h
// (layers/moe/cuda/routing.cu). Device pointers; enqueued on `stream`; no
// synchronisation. `acc` arguments are one device double each (+=).
#pragma once

#include <cstdint>

#include "layers/moe/internal/routing_math.h"

namespace gtp::layers::moe {
namespace cuda {

using routing_internal::RouteParams;

// Slots per block of the dispatch's chunked counting sort.
constexpr int kDispatchChunk = 256;
// Scratch ints Dispatch needs for S slots and E experts.
inline int64_t DispatchWorkspaceInts(int64_t S, int E) {
  return S + ((S + kDispatchChunk - 1) / kDispatchChunk) * E;
}

void RouteTokens(const RouteParams& p, const float* logits, const float* bias, int64_t n,
                 int32_t* selected, float* weight, void* stream);
void CountSelections(const RouteParams& p, const int32_t* selected, int64_t n, float* counts,
                     void* stream);
void Dispatch(const int32_t* expert, int64_t S, int k, int E, int32_t* counts, int32_t* pos,
              int32_t* row_slot, int32_t* row_tok, int32_t* workspace, void* stream);
void DropOverCapacity(const RouteParams& p, const int32_t* selected, const float* weight,
                      const int32_t* counts, const int32_t* pos, const int32_t* row_slot, int64_t S,
                      int32_t* expert, void* stream);
// part: scratch [n].
void AuxLoss(const RouteParams& p, const float* logits, const float* counts, int64_t n, float* part,
             double* acc, void* stream);
// zpart: scratch [n] (used when acc is non-null).
void RouteBackward(const RouteParams& p, const float* logits, const int32_t* selected,
                   const int32_t* expert, const float* dweight, const float* counts, int64_t n,
                   float* dlogits, float* zpart, double* acc, void* stream);
// local[s] = expert[s] − e0 where e0 ≤ expert[s] < e0 + el, else −1.
void SelectLocalExperts(const int32_t* expert, int64_t S, int e0, int el, int32_t* local,
                        void* stream);
// See routing.h's PadToCapacity.
void PadToCapacity(const int32_t* expert, const int32_t* counts, const int32_t* pos,
                   const int32_t* row_tok, int64_t S, int E, int64_t cap, int32_t* padded_pos,
                   int32_t* padded_tok, void* stream);
// acc[e] += selected_counts[e] (e < E); acc[E] += S − Σ kept_counts.
void AccumulateCounts(const int32_t* selected_counts, const int32_t* kept_counts, int E, int64_t S,
                      double* acc, void* stream);

}  // namespace cuda
}  // namespace gtp::layers::moe
