// ColumnSumAccumulate on the CPU: sums[c] += Σ_r x[r, c] in kernels.h's
// fixed order (slabs of kColumnSumSlabRows rows, kColumnSumLanes interleaved
// lanes per slab), the order cuda/column_sum.cu runs, so both give the same
// bits. (A bias gradient on the GPU; the CPU's layers keep their own GEMM.)
#include <algorithm>
#include <vector>

#include "core/kernels/cpu.h"
#include "core/kernels/cpu/elem.h"
#include "core/status.h"

namespace gtp::kernels::cpu {
namespace {

using internal::Load;

template <typename T>
void ColumnSumAccumulateT(const T* x, int64_t R, int64_t C, float* sums) {
  GTP_CHECK(R >= 0 && C >= 0, "ColumnSumAccumulate: negative size [", R, ", ", C, "]");
  if (R == 0) return;  // nothing added: sums keep their bits (even −0)
  std::vector<float> total(C, 0.0f), slab(C), lane(C);
  for (int64_t r0 = 0; r0 < R; r0 += kColumnSumSlabRows) {
    const int64_t r1 = std::min(R, r0 + kColumnSumSlabRows);
    for (int l = 0; l < kColumnSumLanes; ++l) {
      std::fill(lane.begin(), lane.end(), 0.0f);
      for (int64_t r = r0 + l; r < r1; r += kColumnSumLanes) {
        for (int64_t c = 0; c < C; ++c) lane[c] += Load(x[r * C + c]);
      }
      for (int64_t c = 0; c < C; ++c) slab[c] = l == 0 ? lane[c] : slab[c] + lane[c];
    }
    for (int64_t c = 0; c < C; ++c) total[c] += slab[c];
  }
  for (int64_t c = 0; c < C; ++c) sums[c] = sums[c] + total[c];
}

}  // namespace

void ColumnSumAccumulate(const float* x, int64_t R, int64_t C, float* sums) {
  ColumnSumAccumulateT(x, R, C, sums);
}
void ColumnSumAccumulate(const bf16* x, int64_t R, int64_t C, float* sums) {
  ColumnSumAccumulateT(x, R, C, sums);
}

}  // namespace gtp::kernels::cpu
