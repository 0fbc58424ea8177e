// core/kernels/decode_attention_kernels.h — pointer-level decode attention
// (KV-cache attention for a few new queries), CPU and CUDA. Layers call the
// Tensor-level ops::DecodeAttention (decode_attention.h); this header holds
// the kernels it dispatches to and is safe to include from nvcc (no abseil).
//
// The math (one sequence; HS the head size, NKV the KV heads, NH = G·NKV):
//
//   q[n, NH, HS]: the queries of positions pos0 .. pos0 + n − 1
//   k, v[L_max, NKV, HS]: the cache, rows [0, pos0 + n) valid (the n new
//                         positions' keys and values already written)
//   out[i, h, :] = Σ_{s ≤ pos0 + i} softmax_s(q[i, h]·k[s, g]/√HS) · v[s, g],
//                  g = h / G (grouped-query attention: G query heads per KV head)
//
// Causal over the cache: query i never reads rows past pos0 + i (those rows
// may hold anything, NaN included). f32, accumulated in f32. out is written
// (=) and must not alias q, k or v. Deterministic: a fixed reduction order on
// each backend (the two backends differ in rounding, not by more than f32
// summation order: the CPU takes two passes over the keys, the GPU an online
// softmax per warp merged in warp order).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace gtp::kernels {

namespace cpu {
// Runs on the calling thread. Aborts on bad sizes (NH % NKV != 0, ...).
void DecodeAttention(const float* q, const float* k, const float* v, float* out, int64_t n,
                     int64_t pos0, int64_t NH, int64_t NKV, int64_t HS);
}  // namespace cpu

namespace cuda {
// The largest head size the CUDA kernel takes (each lane keeps HS/32 outputs
// in registers).
inline constexpr int64_t kDecodeAttentionMaxHeadSize = 256;
// Device pointers; enqueued on `stream`, never blocks. One block per (query,
// head). Aborts on bad sizes or HS > kDecodeAttentionMaxHeadSize.
void DecodeAttention(const float* q, const float* k, const float* v, float* out, int64_t n,
                     int64_t pos0, int64_t NH, int64_t NKV, int64_t HS, cudaStream_t stream);
}  // namespace cuda

}  // namespace gtp::kernels
