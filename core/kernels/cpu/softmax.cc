// Row softmax over the last dim of x[N, C]:
//   y = exp(x − max x) / Σ exp(x − max x)      (max subtracted for range)
//   dx = y ⊙ (dy − Σ dy·y)                      (=)
#include <cmath>

#include "core/kernels/cpu.h"
#include "core/status.h"

namespace gtp::kernels::cpu {

void SoftmaxForward(const float* x, float* y, int64_t N, int64_t C) {
  GTP_CHECK(N >= 0 && C > 0, "SoftmaxForward: bad size N=", N, " C=", C);
  for (int64_t n = 0; n < N; ++n) {
    const float* __restrict__ xr = x + n * C;
    float* __restrict__ yr = y + n * C;
    float mx = xr[0];
    for (int64_t c = 1; c < C; ++c) mx = std::fmax(mx, xr[c]);
    float sum = 0;
    for (int64_t c = 0; c < C; ++c) sum += (yr[c] = std::exp(xr[c] - mx));
    const float inv = 1.0f / sum;
    for (int64_t c = 0; c < C; ++c) yr[c] *= inv;
  }
}

void SoftmaxBackward(const float* dy, const float* y, float* dx, int64_t N, int64_t C) {
  GTP_CHECK(N >= 0 && C > 0, "SoftmaxBackward: bad size N=", N, " C=", C);
  for (int64_t n = 0; n < N; ++n) {
    const float* __restrict__ dyr = dy + n * C;
    const float* __restrict__ yr = y + n * C;
    float* __restrict__ dxr = dx + n * C;
    float dot = 0;
    for (int64_t c = 0; c < C; ++c) dot += dyr[c] * yr[c];
    for (int64_t c = 0; c < C; ++c) dxr[c] = yr[c] * (dyr[c] - dot);
  }
}

}  // namespace gtp::kernels::cpu
