// Pointwise activations.
//
// GELU (tanh approximation), s = √(2/π):
//   u = s·(x + 0.044715·x³),  y = ½·x·(1 + tanh u)
//   dy/dx = ½·(1 + tanh u) + ½·x·(1 − tanh² u)·s·(1 + 3·0.044715·x²)
// SwiGLU on x[N, 2H] = [gate | up]:
//   y = silu(g)·u, silu(g) = g·σ(g)
//   dg = dy·u·σ(g)·(1 + g·(1 − σ(g))),  du = dy·silu(g)            (=)
// x, y, dy, dx are all f32 or all bf16; the math is f32 (cpu/elem.h).
#include <cmath>

#include "core/kernels/cpu.h"
#include "core/kernels/cpu/elem.h"
#include "core/status.h"

namespace gtp::kernels::cpu {
namespace {

using internal::Load;
using internal::Store;

constexpr float kGeluS = 0.7978845608028654f;  // √(2/π)
constexpr float kGeluC = 0.044715f;

inline float Sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

template <typename T>
void GeluForwardT(const T* x, T* y, int64_t n) {
  GTP_CHECK(n >= 0, "GeluForward: negative size");
  for (int64_t i = 0; i < n; ++i) {
    const float xi = Load(x[i]);
    y[i] = Store<T>(0.5f * xi * (1.0f + std::tanh(kGeluS * (xi + kGeluC * xi * xi * xi))));
  }
}

template <typename T>
void GeluBackwardT(const T* dy, const T* x, T* dx, int64_t n) {
  GTP_CHECK(n >= 0, "GeluBackward: negative size");
  for (int64_t i = 0; i < n; ++i) {
    const float xi = Load(x[i]);
    const float t = std::tanh(kGeluS * (xi + kGeluC * xi * xi * xi));
    const float du = kGeluS * (1.0f + 3.0f * kGeluC * xi * xi);
    dx[i] = Store<T>(Load(dy[i]) * (0.5f * (1.0f + t) + 0.5f * xi * (1.0f - t * t) * du));
  }
}

template <typename T>
void SwiGluForwardT(const T* x, T* y, int64_t N, int64_t H) {
  GTP_CHECK(N >= 0 && H >= 0, "SwiGluForward: negative size");
  for (int64_t n = 0; n < N; ++n) {
    const T* __restrict__ gate = x + n * 2 * H;
    const T* __restrict__ up = gate + H;
    T* __restrict__ yr = y + n * H;
    for (int64_t h = 0; h < H; ++h) {
      const float g = Load(gate[h]);
      yr[h] = Store<T>(g * Sigmoid(g) * Load(up[h]));
    }
  }
}

template <typename T>
void SwiGluBackwardT(const T* dy, const T* x, T* dx, int64_t N, int64_t H) {
  GTP_CHECK(N >= 0 && H >= 0, "SwiGluBackward: negative size");
  for (int64_t n = 0; n < N; ++n) {
    const T* __restrict__ gate = x + n * 2 * H;
    const T* __restrict__ up = gate + H;
    const T* __restrict__ dyr = dy + n * H;
    T* __restrict__ dgate = dx + n * 2 * H;
    T* __restrict__ dup = dgate + H;
    for (int64_t h = 0; h < H; ++h) {
      const float g = Load(gate[h]), s = Sigmoid(g), d = Load(dyr[h]);
      dgate[h] = Store<T>(d * Load(up[h]) * s * (1.0f + g * (1.0f - s)));
      dup[h] = Store<T>(d * g * s);
    }
  }
}

}  // namespace

void GeluForward(const float* x, float* y, int64_t n) { GeluForwardT(x, y, n); }
void GeluForward(const bf16* x, bf16* y, int64_t n) { GeluForwardT(x, y, n); }

void GeluBackward(const float* dy, const float* x, float* dx, int64_t n) {
  GeluBackwardT(dy, x, dx, n);
}
void GeluBackward(const bf16* dy, const bf16* x, bf16* dx, int64_t n) {
  GeluBackwardT(dy, x, dx, n);
}

void SwiGluForward(const float* x, float* y, int64_t N, int64_t H) { SwiGluForwardT(x, y, N, H); }
void SwiGluForward(const bf16* x, bf16* y, int64_t N, int64_t H) { SwiGluForwardT(x, y, N, H); }

void SwiGluBackward(const float* dy, const float* x, float* dx, int64_t N, int64_t H) {
  SwiGluBackwardT(dy, x, dx, N, H);
}
void SwiGluBackward(const bf16* dy, const bf16* x, bf16* dx, int64_t N, int64_t H) {
  SwiGluBackwardT(dy, x, dx, N, H);
}

}  // namespace gtp::kernels::cpu
