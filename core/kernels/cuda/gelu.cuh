// core/kernels/cuda/gelu.cuh — private: GELU (tanh approximation) and its
// derivative as device functions, f32 math, accurate tanhf (no fast-math
// intrinsics). One definition for every kernel that applies them
// (activation.cu's GELU kernels, fp8's quantiser of a GELU input), so that
// a kernel applying GELU on the way in gives the bits the GELU kernel
// writes. s = √(2/π):
//   u = s·(x + 0.044715·x³),  y = ½·x·(1 + tanh u)
//   dy/dx = ½·(1 + tanh u) + ½·x·(1 − tanh² u)·s·(1 + 3·0.044715·x²)
#pragma once

#include <cuda_runtime.h>

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

}  // namespace gtp::kernels::cuda::internal
