// core/kernels/cuda/gelu.cuh — private: GELU (tanh approximation) and its
// derivative as device functions, f32 math. One definition for every kernel
// that applies them (activation.cu's GELU kernels, fp8's quantiser of a GELU
// input), so that a kernel applying GELU on the way in gives the bits the
// GELU kernel writes. s = √(2/π):
//   u = s·(x + 0.044715·x³),  y = ½·x·(1 + tanh u)
//   dy/dx = ½·(1 + tanh u) + ½·x·(1 − tanh² u)·s·(1 + 3·0.044715·x²)
// Two forms of the same function:
//   Gelu, GeluGrad            accurate tanhf (f32 data: the reference path);
//   GeluBf16, GeluGradBf16    for data stored as bf16: ½(1 + tanh u) = σ(2u)
//       = p, with q = 1 − p, both from a = exp(−2|u|) by __expf and a fast
//       reciprocal of 1 + a (Sigma2u), so y = x·p and dy/dx = p + 2·x·p·q·du:
//       no overflow, and no cancellation where 1 + tanh u cancels. Relative
//       error expected about 1e-5 at worst (__expf of large arguments; on
//       the host, with an exact exp, 7.6e-6: gelu_emulation_test), two
//       hundred times below bf16's rounding, down to |y| ~ 1e-30 (below,
//       where a flushes to 0, y is ±0); about half the instructions of
//       tanhf. Written to speed up the fp8 quantiser of a GELU input; timed
//       on an H100 it made no measurable difference there (the thirtieth
//       session in docs/PERFORMANCE.md: that kernel is held by its
//       registers, not by tanhf). GeluFor<T> / GeluGradFor<T> pick the form
//       by storage.
#pragma once

#include <cuda_runtime.h>

#include <type_traits>

namespace gtp::kernels::cuda::internal {

inline constexpr float kGeluS = 0.7978845608028654f;  // √(2/π)
inline constexpr float kGeluC = 0.044715f;

__device__ __forceinline__ float Gelu(float x) {
  return 0.5f * x * (1.0f + tanhf(kGeluS * (x + kGeluC * x * x * x)));
}

// d·GELU'(x): the gradient at GELU's input from d, the gradient at its output.
__device__ __forceinline__ float GeluGrad(float d, float x) {
  const float t = tanhf(kGeluS * (x + kGeluC * x * x * x));
  const float du = kGeluS * (1.0f + 3.0f * kGeluC * x * x);
  return d * (0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du);
}

// p = σ(2u) = ½(1 + tanh u) and q = 1 − p from a = exp(−2|u|) ∈ [0, 1]:
// r = 1 / (1 + a) is one of them and a·r the other, by u's sign (no
// overflow, no cancellation).
__device__ __forceinline__ void Sigma2u(float u, float& p, float& q) {
  const float a = __expf(-2.0f * fabsf(u));
  const float r = __fdividef(1.0f, 1.0f + a);
  const float ar = a * r;
  p = u >= 0.0f ? r : ar;
  q = u >= 0.0f ? ar : r;
}

__device__ __forceinline__ float GeluBf16(float x) {
  float p, q;
  Sigma2u(kGeluS * (x + kGeluC * x * x * x), p, q);
  return x * p;
}

__device__ __forceinline__ float GeluGradBf16(float d, float x) {
  float p, q;
  Sigma2u(kGeluS * (x + kGeluC * x * x * x), p, q);
  const float du = kGeluS * (1.0f + 3.0f * kGeluC * x * x);
  return d * (p + 2.0f * x * p * q * du);
}

// The form for data stored as T (float or bf16).
template <typename T>
__device__ __forceinline__ float GeluFor(float x) {
  if constexpr (std::is_same_v<T, float>) {
    return Gelu(x);
  } else {
    return GeluBf16(x);
  }
}
template <typename T>
__device__ __forceinline__ float GeluGradFor(float d, float x) {
  if constexpr (std::is_same_v<T, float>) {
    return GeluGrad(d, x);
  } else {
    return GeluGradBf16(d, x);
  }
}

}  // namespace gtp::kernels::cuda::internal
