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
//       = p = 1 / (1 + e), e = exp(−2u) by __expf and a fast reciprocal, so
//       y = x·p and dy/dx = p + 2·x·p·(1 − p)·du with 1 − p = e·p (no
//       cancellation where 1 + tanh u does cancel). −2u is capped at 80
//       (there p < 2⁻¹¹⁵; e·p stays finite). Relative error about 1e-5 at
//       worst (__expf of large arguments), two hundred times below bf16's
//       rounding; about half the instructions of tanhf, which makes the
//       difference in the issue-bound fp8 quantiser (docs/PERFORMANCE.md,
//       session 29). GeluFor<T> / GeluGradFor<T> pick the form by storage.
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

__device__ __forceinline__ float GeluBf16(float x) {
  const float u = kGeluS * (x + kGeluC * x * x * x);
  const float e = __expf(fminf(-2.0f * u, 80.0f));
  return x * __fdividef(1.0f, 1.0f + e);
}

__device__ __forceinline__ float GeluGradBf16(float d, float x) {
  const float u = kGeluS * (x + kGeluC * x * x * x);
  const float e = __expf(fminf(-2.0f * u, 80.0f));
  const float p = __fdividef(1.0f, 1.0f + e);
  const float du = kGeluS * (1.0f + 3.0f * kGeluC * x * x);
  return d * (p + 2.0f * x * p * (e * p) * du);
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
