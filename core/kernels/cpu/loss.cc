// Loss bookkeeping on the device, so a training step never reads the loss
// back (CPU versions; the CUDA ones are in cuda/loss.cu):
//   MaskedMeanAccumulate: c = #{n : targets[n] >= 0}, s = Σ_{targets ≥ 0} loss[n]
//                         (in index order, double), count[0] = c,
//                         acc[0] += c > 0 ? s / c : 0.
//   FillReciprocal:       out[i] = count[0] > 0 ? 1 / count[0] : 0.
//   CountValid:           count[0] = #{n : targets[n] >= 0}.
#include "core/kernels/cpu.h"
#include "core/status.h"

namespace gtp::kernels::cpu {

void MaskedMeanAccumulate(const float* loss, const int32_t* targets, int64_t N, float* acc,
                          float* count) {
  GTP_CHECK(N >= 0, "MaskedMeanAccumulate: negative size");
  double s = 0;
  int64_t c = 0;
  for (int64_t n = 0; n < N; ++n) {
    if (targets[n] < 0) continue;
    s += loss[n];
    ++c;
  }
  *count = static_cast<float>(c);
  if (c > 0) *acc += static_cast<float>(s / static_cast<double>(c));
}

void FillReciprocal(const float* count, float* out, int64_t n) {
  const float v = *count > 0 ? 1.0f / *count : 0.0f;
  for (int64_t i = 0; i < n; ++i) out[i] = v;
}

void CountValid(const int32_t* targets, int64_t N, float* count) {
  int64_t c = 0;
  for (int64_t n = 0; n < N; ++n) c += targets[n] >= 0 ? 1 : 0;
  *count = static_cast<float>(c);
}

}  // namespace gtp::kernels::cpu
