// Vocab-parallel embedding lookup. This rank holds rows [vocab_start,
// vocab_start + V) of the table:
//   forward:  out[n, :] = table[idx[n] − vocab_start, :]  if the row is local, else 0
//   backward: dtable[idx[n] − vocab_start, :] += dout[n, :] for local rows
// The backward walks tokens in order, so repeated ids accumulate in a fixed
// order and the result is bit-reproducible.
// table/out are f32 or bf16 (forward: a copy, no rounding); dout is f32 or
// bf16, dtable always f32 (bf16 gradients are widened exactly, then added).
#include <cstring>

#include "core/kernels/cpu.h"
#include "core/kernels/cpu/elem.h"
#include "core/status.h"

namespace gtp::kernels::cpu {
namespace {

// Local row of a global id, or −1 when another rank owns it.
inline int64_t LocalRow(int32_t id, int64_t V, int64_t vocab_start) {
  const int64_t row = static_cast<int64_t>(id) - vocab_start;
  return row >= 0 && row < V ? row : -1;
}

using internal::Load;

template <typename T>
void EmbeddingForwardT(const int32_t* idx, const T* table, T* out, int64_t N, int64_t V, int64_t C,
                       int64_t vocab_start) {
  GTP_CHECK(N >= 0 && V >= 0 && C >= 0, "EmbeddingForward: negative size");
  for (int64_t n = 0; n < N; ++n) {
    T* __restrict__ o = out + n * C;
    const int64_t row = LocalRow(idx[n], V, vocab_start);
    if (row < 0) {
      std::memset(o, 0, sizeof(T) * C);  // +0.0 in f32 and bf16
    } else {
      std::memcpy(o, table + row * C, sizeof(T) * C);
    }
  }
}

template <typename T>
void EmbeddingBackwardT(const int32_t* idx, const T* dout, float* dtable, int64_t N, int64_t V,
                        int64_t C, int64_t vocab_start) {
  GTP_CHECK(N >= 0 && V >= 0 && C >= 0, "EmbeddingBackward: negative size");
  for (int64_t n = 0; n < N; ++n) {
    const int64_t row = LocalRow(idx[n], V, vocab_start);
    if (row < 0) continue;
    const T* __restrict__ g = dout + n * C;
    float* __restrict__ d = dtable + row * C;
    for (int64_t c = 0; c < C; ++c) d[c] += Load(g[c]);
  }
}

}  // namespace

void EmbeddingForward(const int32_t* idx, const float* table, float* out, int64_t N, int64_t V,
                      int64_t C, int64_t vocab_start) {
  EmbeddingForwardT(idx, table, out, N, V, C, vocab_start);
}
void EmbeddingForward(const int32_t* idx, const bf16* table, bf16* out, int64_t N, int64_t V,
                      int64_t C, int64_t vocab_start) {
  EmbeddingForwardT(idx, table, out, N, V, C, vocab_start);
}

void EmbeddingBackward(const int32_t* idx, const float* dout, float* dtable, int64_t N, int64_t V,
                       int64_t C, int64_t vocab_start) {
  EmbeddingBackwardT(idx, dout, dtable, N, V, C, vocab_start);
}
void EmbeddingBackward(const int32_t* idx, const bf16* dout, float* dtable, int64_t N, int64_t V,
                       int64_t C, int64_t vocab_start) {
  EmbeddingBackwardT(idx, dout, dtable, N, V, C, vocab_start);
}

}  // namespace gtp::kernels::cpu
