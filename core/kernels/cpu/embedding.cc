// Vocab-parallel embedding lookup. This rank holds rows [vocab_start,
// vocab_start + V) of the table:
//   forward:  out[n, :] = table[idx[n] − vocab_start, :]  if the row is local, else 0
//   backward: dtable[idx[n] − vocab_start, :] += dout[n, :] for local rows
// The backward walks tokens in order, so repeated ids accumulate in a fixed
// order and the result is bit-reproducible.
#include <cstring>

#include "core/kernels/cpu.h"
#include "core/status.h"

namespace gtp::kernels::cpu {
namespace {

// Local row of a global id, or −1 when another rank owns it.
inline int64_t LocalRow(int32_t id, int64_t V, int64_t vocab_start) {
  const int64_t row = static_cast<int64_t>(id) - vocab_start;
  return row >= 0 && row < V ? row : -1;
}

}  // namespace

void EmbeddingForward(const int32_t* idx, const float* table, float* out, int64_t N, int64_t V,
                      int64_t C, int64_t vocab_start) {
  GTP_CHECK(N >= 0 && V >= 0 && C >= 0, "EmbeddingForward: negative size");
  for (int64_t n = 0; n < N; ++n) {
    float* __restrict__ o = out + n * C;
    const int64_t row = LocalRow(idx[n], V, vocab_start);
    if (row < 0) {
      std::memset(o, 0, sizeof(float) * C);
    } else {
      std::memcpy(o, table + row * C, sizeof(float) * C);
    }
  }
}

void EmbeddingBackward(const int32_t* idx, const float* dout, float* dtable, int64_t N, int64_t V,
                       int64_t C, int64_t vocab_start) {
  GTP_CHECK(N >= 0 && V >= 0 && C >= 0, "EmbeddingBackward: negative size");
  for (int64_t n = 0; n < N; ++n) {
    const int64_t row = LocalRow(idx[n], V, vocab_start);
    if (row < 0) continue;
    const float* __restrict__ g = dout + n * C;
    float* __restrict__ d = dtable + row * C;
    for (int64_t c = 0; c < C; ++c) d[c] += g[c];
  }
}

}  // namespace gtp::kernels::cpu
