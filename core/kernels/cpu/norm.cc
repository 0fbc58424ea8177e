// LayerNorm and RMSNorm over the last dim C of x[N, C].
//
// LayerNorm:  μ = mean(x), rstd = 1/√(mean((x − μ)²) + eps), x̂ = (x − μ)·rstd,
//             y = x̂·w + b.
//   backward (g = dy·w):
//             dx = rstd·(g − mean(g) − x̂·mean(g·x̂))      (=)
//             dw += Σ_n dy·x̂,  db += Σ_n dy               (+=)
// RMSNorm:    rstd = 1/√(mean(x²) + eps), x̂ = x·rstd, y = x̂·w.
//   backward: dx = rstd·(g − x̂·mean(g·x̂)),  dw += Σ_n dy·x̂.
// Statistics use two passes (mean first, then centred squares) so a large
// common offset does not cancel the variance.
#include <cmath>

#include "core/kernels/cpu.h"
#include "core/status.h"

namespace gtp::kernels::cpu {

void LayerNormForward(const float* x, const float* w, const float* b, float* y, float* mean,
                      float* rstd, int64_t N, int64_t C, float eps) {
  GTP_CHECK(N >= 0 && C > 0, "LayerNormForward: bad size N=", N, " C=", C);
  for (int64_t n = 0; n < N; ++n) {
    const float* __restrict__ xr = x + n * C;
    float* __restrict__ yr = y + n * C;
    float mu = 0;
    for (int64_t c = 0; c < C; ++c) mu += xr[c];
    mu /= static_cast<float>(C);
    float var = 0;
    for (int64_t c = 0; c < C; ++c) {
      const float d = xr[c] - mu;
      var += d * d;
    }
    var /= static_cast<float>(C);
    const float rs = 1.0f / std::sqrt(var + eps);
    for (int64_t c = 0; c < C; ++c) {
      yr[c] = (xr[c] - mu) * rs * w[c] + (b ? b[c] : 0.0f);
    }
    mean[n] = mu;
    rstd[n] = rs;
  }
}

void LayerNormBackward(const float* dy, const float* x, const float* w, const float* mean,
                       const float* rstd, float* dx, float* dw, float* db, int64_t N, int64_t C) {
  GTP_CHECK(N >= 0 && C > 0, "LayerNormBackward: bad size N=", N, " C=", C);
  for (int64_t n = 0; n < N; ++n) {
    const float* __restrict__ dyr = dy + n * C;
    const float* __restrict__ xr = x + n * C;
    float* __restrict__ dxr = dx + n * C;
    const float mu = mean[n], rs = rstd[n];
    float g_mean = 0, gx_mean = 0;
    for (int64_t c = 0; c < C; ++c) {
      const float g = dyr[c] * w[c];
      g_mean += g;
      gx_mean += g * (xr[c] - mu) * rs;
    }
    g_mean /= static_cast<float>(C);
    gx_mean /= static_cast<float>(C);
    for (int64_t c = 0; c < C; ++c) {
      const float xhat = (xr[c] - mu) * rs;
      dxr[c] = rs * (dyr[c] * w[c] - g_mean - xhat * gx_mean);
      dw[c] += dyr[c] * xhat;
      if (db) db[c] += dyr[c];
    }
  }
}

void RMSNormForward(const float* x, const float* w, float* y, float* rstd, int64_t N, int64_t C,
                    float eps) {
  GTP_CHECK(N >= 0 && C > 0, "RMSNormForward: bad size N=", N, " C=", C);
  for (int64_t n = 0; n < N; ++n) {
    const float* __restrict__ xr = x + n * C;
    float* __restrict__ yr = y + n * C;
    float ms = 0;
    for (int64_t c = 0; c < C; ++c) ms += xr[c] * xr[c];
    const float rs = 1.0f / std::sqrt(ms / static_cast<float>(C) + eps);
    for (int64_t c = 0; c < C; ++c) yr[c] = xr[c] * rs * w[c];
    rstd[n] = rs;
  }
}

void RMSNormBackward(const float* dy, const float* x, const float* w, const float* rstd, float* dx,
                     float* dw, int64_t N, int64_t C) {
  GTP_CHECK(N >= 0 && C > 0, "RMSNormBackward: bad size N=", N, " C=", C);
  for (int64_t n = 0; n < N; ++n) {
    const float* __restrict__ dyr = dy + n * C;
    const float* __restrict__ xr = x + n * C;
    float* __restrict__ dxr = dx + n * C;
    const float rs = rstd[n];
    float gx_mean = 0;
    for (int64_t c = 0; c < C; ++c) gx_mean += dyr[c] * w[c] * xr[c] * rs;
    gx_mean /= static_cast<float>(C);
    for (int64_t c = 0; c < C; ++c) {
      const float xhat = xr[c] * rs;
      dxr[c] = rs * (dyr[c] * w[c] - xhat * gx_mean);
      dw[c] += dyr[c] * xhat;
    }
  }
}

}  // namespace gtp::kernels::cpu
