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
// x, w, b, y, dy, dx are f32 or bf16 (one type per call); mean, rstd, dw, db
// are f32; the math is f32 either way (cpu/elem.h).
#include <cmath>

#include "core/kernels/cpu.h"
#include "core/kernels/cpu/elem.h"
#include "core/status.h"

namespace gtp::kernels::cpu {
namespace {

using internal::Load;
using internal::Store;

template <typename T>
void LayerNormForwardT(const T* x, const T* w, const T* b, T* y, float* mean, float* rstd,
                       int64_t N, int64_t C, float eps) {
  GTP_CHECK(N >= 0 && C > 0, "LayerNormForward: bad size N=", N, " C=", C);
  for (int64_t n = 0; n < N; ++n) {
    const T* __restrict__ xr = x + n * C;
    T* __restrict__ yr = y + n * C;
    float mu = 0;
    for (int64_t c = 0; c < C; ++c) mu += Load(xr[c]);
    mu /= static_cast<float>(C);
    float var = 0;
    for (int64_t c = 0; c < C; ++c) {
      const float d = Load(xr[c]) - mu;
      var += d * d;
    }
    var /= static_cast<float>(C);
    const float rs = 1.0f / std::sqrt(var + eps);
    for (int64_t c = 0; c < C; ++c) {
      yr[c] = Store<T>((Load(xr[c]) - mu) * rs * Load(w[c]) + (b ? Load(b[c]) : 0.0f));
    }
    mean[n] = mu;
    rstd[n] = rs;
  }
}

template <typename T>
void LayerNormBackwardT(const T* dy, const T* x, const T* w, const float* mean, const float* rstd,
                        T* dx, float* dw, float* db, int64_t N, int64_t C, const T* dres) {
  GTP_CHECK(N >= 0 && C > 0, "LayerNormBackward: bad size N=", N, " C=", C);
  for (int64_t n = 0; n < N; ++n) {
    const T* __restrict__ dyr = dy + n * C;
    const T* __restrict__ xr = x + n * C;
    T* __restrict__ dxr = dx + n * C;
    const float mu = mean[n], rs = rstd[n];
    float g_mean = 0, gx_mean = 0;
    for (int64_t c = 0; c < C; ++c) {
      const float g = Load(dyr[c]) * Load(w[c]);
      g_mean += g;
      gx_mean += g * (Load(xr[c]) - mu) * rs;
    }
    g_mean /= static_cast<float>(C);
    gx_mean /= static_cast<float>(C);
    for (int64_t c = 0; c < C; ++c) {
      const float xhat = (Load(xr[c]) - mu) * rs;
      const float res = dres != nullptr ? Load(dres[n * C + c]) : 0.0f;
      dxr[c] = Store<T>(rs * (Load(dyr[c]) * Load(w[c]) - g_mean - xhat * gx_mean) + res);
      dw[c] += Load(dyr[c]) * xhat;
      if (db) db[c] += Load(dyr[c]);
    }
  }
}

template <typename T>
void RMSNormForwardT(const T* x, const T* w, T* y, float* rstd, int64_t N, int64_t C, float eps) {
  GTP_CHECK(N >= 0 && C > 0, "RMSNormForward: bad size N=", N, " C=", C);
  for (int64_t n = 0; n < N; ++n) {
    const T* __restrict__ xr = x + n * C;
    T* __restrict__ yr = y + n * C;
    float ms = 0;
    for (int64_t c = 0; c < C; ++c) ms += Load(xr[c]) * Load(xr[c]);
    const float rs = 1.0f / std::sqrt(ms / static_cast<float>(C) + eps);
    for (int64_t c = 0; c < C; ++c) yr[c] = Store<T>(Load(xr[c]) * rs * Load(w[c]));
    rstd[n] = rs;
  }
}

template <typename T>
void RMSNormBackwardT(const T* dy, const T* x, const T* w, const float* rstd, T* dx, float* dw,
                      int64_t N, int64_t C, const T* dres) {
  GTP_CHECK(N >= 0 && C > 0, "RMSNormBackward: bad size N=", N, " C=", C);
  for (int64_t n = 0; n < N; ++n) {
    const T* __restrict__ dyr = dy + n * C;
    const T* __restrict__ xr = x + n * C;
    T* __restrict__ dxr = dx + n * C;
    const float rs = rstd[n];
    float gx_mean = 0;
    for (int64_t c = 0; c < C; ++c) gx_mean += Load(dyr[c]) * Load(w[c]) * Load(xr[c]) * rs;
    gx_mean /= static_cast<float>(C);
    for (int64_t c = 0; c < C; ++c) {
      const float xhat = Load(xr[c]) * rs;
      const float res = dres != nullptr ? Load(dres[n * C + c]) : 0.0f;
      dxr[c] = Store<T>(rs * (Load(dyr[c]) * Load(w[c]) - xhat * gx_mean) + res);
      dw[c] += Load(dyr[c]) * xhat;
    }
  }
}

}  // namespace

void LayerNormForward(const float* x, const float* w, const float* b, float* y, float* mean,
                      float* rstd, int64_t N, int64_t C, float eps) {
  LayerNormForwardT(x, w, b, y, mean, rstd, N, C, eps);
}
void LayerNormForward(const bf16* x, const bf16* w, const bf16* b, bf16* y, float* mean,
                      float* rstd, int64_t N, int64_t C, float eps) {
  LayerNormForwardT(x, w, b, y, mean, rstd, N, C, eps);
}

void LayerNormBackward(const float* dy, const float* x, const float* w, const float* mean,
                       const float* rstd, float* dx, float* dw, float* db, int64_t N, int64_t C,
                       const float* dresidual) {
  LayerNormBackwardT(dy, x, w, mean, rstd, dx, dw, db, N, C, dresidual);
}
void LayerNormBackward(const bf16* dy, const bf16* x, const bf16* w, const float* mean,
                       const float* rstd, bf16* dx, float* dw, float* db, int64_t N, int64_t C,
                       const bf16* dresidual) {
  LayerNormBackwardT(dy, x, w, mean, rstd, dx, dw, db, N, C, dresidual);
}

void RMSNormForward(const float* x, const float* w, float* y, float* rstd, int64_t N, int64_t C,
                    float eps) {
  RMSNormForwardT(x, w, y, rstd, N, C, eps);
}
void RMSNormForward(const bf16* x, const bf16* w, bf16* y, float* rstd, int64_t N, int64_t C,
                    float eps) {
  RMSNormForwardT(x, w, y, rstd, N, C, eps);
}

void RMSNormBackward(const float* dy, const float* x, const float* w, const float* rstd, float* dx,
                     float* dw, int64_t N, int64_t C, const float* dresidual) {
  RMSNormBackwardT(dy, x, w, rstd, dx, dw, N, C, dresidual);
}
void RMSNormBackward(const bf16* dy, const bf16* x, const bf16* w, const float* rstd, bf16* dx,
                     float* dw, int64_t N, int64_t C, const bf16* dresidual) {
  RMSNormBackwardT(dy, x, w, rstd, dx, dw, N, C, dresidual);
}

}  // namespace gtp::kernels::cpu
