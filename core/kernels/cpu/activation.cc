// Pointwise activations.
//
// GELU (tanh approximation), s = √(2/π):
//   u = s·(x + 0.044715·x³),  y = ½·x·(1 + tanh u)
//   dy/dx = ½·(1 + tanh u) + ½·x·(1 − tanh² u)·s·(1 + 3·0.044715·x²)
// SwiGLU on x[N, 2H] = [gate | up]:
//   y = silu(g)·u, silu(g) = g·σ(g)
//   dg = dy·u·σ(g)·(1 + g·(1 − σ(g))),  du = dy·silu(g)            (=)
#include <cmath>

#include "core/kernels/cpu.h"
#include "core/status.h"

namespace gtp::kernels::cpu {
namespace {

constexpr float kGeluS = 0.7978845608028654f;  // √(2/π)
constexpr float kGeluC = 0.044715f;

inline float Sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

}  // namespace

void GeluForward(const float* x, float* y, int64_t n) {
  GTP_CHECK(n >= 0, "GeluForward: negative size");
  for (int64_t i = 0; i < n; ++i) {
    const float xi = x[i];
    y[i] = 0.5f * xi * (1.0f + std::tanh(kGeluS * (xi + kGeluC * xi * xi * xi)));
  }
}

void GeluBackward(const float* dy, const float* x, float* dx, int64_t n) {
  GTP_CHECK(n >= 0, "GeluBackward: negative size");
  for (int64_t i = 0; i < n; ++i) {
    const float xi = x[i];
    const float t = std::tanh(kGeluS * (xi + kGeluC * xi * xi * xi));
    const float du = kGeluS * (1.0f + 3.0f * kGeluC * xi * xi);
    dx[i] = dy[i] * (0.5f * (1.0f + t) + 0.5f * xi * (1.0f - t * t) * du);
  }
}

void SwiGluForward(const float* x, float* y, int64_t N, int64_t H) {
  GTP_CHECK(N >= 0 && H >= 0, "SwiGluForward: negative size");
  for (int64_t n = 0; n < N; ++n) {
    const float* __restrict__ gate = x + n * 2 * H;
    const float* __restrict__ up = gate + H;
    float* __restrict__ yr = y + n * H;
    for (int64_t h = 0; h < H; ++h) yr[h] = gate[h] * Sigmoid(gate[h]) * up[h];
  }
}

void SwiGluBackward(const float* dy, const float* x, float* dx, int64_t N, int64_t H) {
  GTP_CHECK(N >= 0 && H >= 0, "SwiGluBackward: negative size");
  for (int64_t n = 0; n < N; ++n) {
    const float* __restrict__ gate = x + n * 2 * H;
    const float* __restrict__ up = gate + H;
    const float* __restrict__ dyr = dy + n * H;
    float* __restrict__ dgate = dx + n * 2 * H;
    float* __restrict__ dup = dgate + H;
    for (int64_t h = 0; h < H; ++h) {
      const float g = gate[h], s = Sigmoid(g);
      dgate[h] = dyr[h] * up[h] * s * (1.0f + g * (1.0f - s));
      dup[h] = dyr[h] * g * s;
    }
  }
}

}  // namespace gtp::kernels::cpu
