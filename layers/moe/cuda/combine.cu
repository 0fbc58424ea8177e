// layers/moe/cuda/combine.cu — CUDA launchers of layers/moe/combine.h.
//
// Forward: one block per token, threads over columns; the j-sum runs in the
// CPU's order with unfused f32 multiply and add, so y matches the CPU bit for
// bit. Backward: dye is zeroed, then one block per slot writes its row
// w·dy (exact as on the CPU) and reduces dw = ye·dy over columns (a tree).
// GatherAdd: one block per token, its slots in increasing row order, the
// CPU's adds.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "layers/moe/cuda/combine_cuda.h"

namespace gtp::layers::moe::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxGatherSlots = 8;  // the router's top_k limit

__device__ inline float Ld(const float* p, int64_t i) { return p[i]; }
__device__ inline float Ld(const __nv_bfloat16* p, int64_t i) { return __bfloat162float(p[i]); }
__device__ inline void St(float* p, int64_t i, float v) { p[i] = v; }
__device__ inline void St(__nv_bfloat16* p, int64_t i, float v) { p[i] = __float2bfloat16_rn(v); }

template <typename T>
__global__ void ForwardKernel(const T* ye, const int32_t* pos, const float* w, T* y, int k,
                              int64_t C) {
  const int64_t t = blockIdx.x;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    float acc = 0.0f;
    for (int j = 0; j < k; ++j) {
      const int32_t p = pos[t * k + j];
      if (p >= 0) acc = __fadd_rn(acc, __fmul_rn(w[t * k + j], Ld(ye, p * C + c)));
    }
    St(y, t * C + c, acc);
  }
}

template <typename T>
__global__ void BackwardKernel(const T* dy, const T* ye, const int32_t* pos, const float* w, T* dye,
                               float* dw, int k, int64_t C) {
  const int64_t s = blockIdx.x, t = s / k;
  const int32_t p = pos[s];
  __shared__ float part[kThreads];
  if (p < 0) {
    if (threadIdx.x == 0) dw[s] = 0.0f;
    return;
  }
  float acc = 0.0f;
  const float ws = w[s];
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    const float g = Ld(dy, t * C + c);
    acc = fmaf(Ld(ye, p * C + c), g, acc);
    St(dye, p * C + c, __fmul_rn(ws, g));
  }
  part[threadIdx.x] = acc;
  __syncthreads();
  for (int h = kThreads / 2; h > 0; h /= 2) {
    if (threadIdx.x < h) part[threadIdx.x] += part[threadIdx.x + h];
    __syncthreads();
  }
  if (threadIdx.x == 0) dw[s] = part[0];
}

// One block per token: its slots' rows in increasing pos (an insertion sort
// of at most 8 in registers; every thread sorts the same way), threads over
// columns, unfused f32 adds in the CPU's order.
template <typename T, typename O>
__global__ void GatherAddKernel(const T* xe, const int32_t* pos, const float* add, O* dx, int k,
                                int64_t C) {
  const int64_t t = blockIdx.x;
  int32_t p[kMaxGatherSlots];
  int m = 0;
  for (int j = 0; j < k; ++j) {
    const int32_t v = pos[t * k + j];
    if (v < 0) continue;
    int i = m++;
    for (; i > 0 && p[i - 1] > v; --i) p[i] = p[i - 1];
    p[i] = v;
  }
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    float acc = 0.0f;
    for (int i = 0; i < m; ++i) acc = __fadd_rn(acc, Ld(xe, p[i] * C + c));
    if (add != nullptr) acc = __fadd_rn(add[t * C + c], acc);
    St(dx, t * C + c, acc);
  }
}

template <typename T>
void LaunchGatherAdd(const T* xe, const int32_t* pos, const float* add, void* dx, int64_t n, int k,
                     int64_t C, bool dx_bf16, cudaStream_t st) {
  if (dx_bf16) {
    GatherAddKernel<<<n, kThreads, 0, st>>>(xe, pos, add, static_cast<__nv_bfloat16*>(dx), k, C);
  } else {
    GatherAddKernel<<<n, kThreads, 0, st>>>(xe, pos, add, static_cast<float*>(dx), k, C);
  }
}

}  // namespace

void GatherAdd(const void* xe, const int32_t* pos, const float* add, void* dx, int64_t n, int k,
               int64_t C, bool xe_bf16, bool dx_bf16, void* stream) {
  if (n == 0 || C == 0) return;
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  if (xe_bf16) {
    LaunchGatherAdd(static_cast<const __nv_bfloat16*>(xe), pos, add, dx, n, k, C, dx_bf16, st);
  } else {
    LaunchGatherAdd(static_cast<const float*>(xe), pos, add, dx, n, k, C, dx_bf16, st);
  }
}

void CombineForward(const void* ye, const int32_t* pos, const float* w, void* y, int64_t n, int k,
                    int64_t C, bool bf16, void* stream) {
  if (n == 0) return;
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  if (bf16) {
    ForwardKernel<<<n, kThreads, 0, st>>>(static_cast<const __nv_bfloat16*>(ye), pos, w,
                                          static_cast<__nv_bfloat16*>(y), k, C);
  } else {
    ForwardKernel<<<n, kThreads, 0, st>>>(static_cast<const float*>(ye), pos, w,
                                          static_cast<float*>(y), k, C);
  }
}

void CombineBackward(const void* dy, const void* ye, const int32_t* pos, const float* w, void* dye,
                     float* dw, int64_t n, int k, int64_t M, int64_t C, bool bf16, void* stream) {
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  if (M > 0) cudaMemsetAsync(dye, 0, M * C * (bf16 ? 2 : 4), st);
  if (n == 0) return;
  if (bf16) {
    BackwardKernel<<<n * k, kThreads, 0, st>>>(
        static_cast<const __nv_bfloat16*>(dy), static_cast<const __nv_bfloat16*>(ye), pos, w,
        static_cast<__nv_bfloat16*>(dye), dw, k, C);
  } else {
    BackwardKernel<<<n * k, kThreads, 0, st>>>(static_cast<const float*>(dy),
                                               static_cast<const float*>(ye), pos, w,
                                               static_cast<float*>(dye), dw, k, C);
  }
}

}  // namespace gtp::layers::moe::cuda
