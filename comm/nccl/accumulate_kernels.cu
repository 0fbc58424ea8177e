// Element-wise kernels for the NCCL backend (see accumulate_kernels.h).
// Math: widen is exact; narrow rounds to nearest even once, after the
// division for kMean. Grid-stride loops; one thread per element.
#include "comm/nccl/accumulate_kernels.h"

#include <cuda_runtime.h>


#include "core/dtype.h"

namespace gtp::comm::nccl_internal {
namespace {

constexpr int kThreads = 256;

int Blocks(int64_t n) {
  int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<int>(b > 4096 ? 4096 : (b < 1 ? 1 : b));
}

cudaError_t Launched() { return cudaGetLastError(); }

__global__ void WidenBF16(const uint16_t* __restrict__ src, float* __restrict__ dst, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    dst[i] = BF16BitsToF32(src[i]);
  }
}
__global__ void WidenF16(const uint16_t* __restrict__ src, float* __restrict__ dst, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    dst[i] = F16BitsToF32(src[i]);
  }
}
template <int kKind>  // 0 f32, 1 bf16, 2 f16
__global__ void Narrow(const float* __restrict__ src, void* __restrict__ dst, int64_t n, int divisor) {
  const float d = static_cast<float>(divisor);
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    float v = divisor == 1 ? src[i] : src[i] / d;
    if (kKind == 0) static_cast<float*>(dst)[i] = v;
    if (kKind == 1) static_cast<uint16_t*>(dst)[i] = F32ToBF16Bits(v);
    if (kKind == 2) static_cast<uint16_t*>(dst)[i] = F32ToF16Bits(v);
  }
}
template <typename T>
__global__ void Divide(T* buf, int64_t n, int divisor) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    buf[i] = buf[i] / static_cast<T>(divisor);
  }
}

}  // namespace

cudaError_t LaunchWiden(DType dtype, const void* src, float* dst, int64_t n, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  auto* in = static_cast<const uint16_t*>(src);
  if (dtype == DType::kBF16) {
    WidenBF16<<<Blocks(n), kThreads, 0, s>>>(in, dst, n);
  } else if (dtype == DType::kF16) {
    WidenF16<<<Blocks(n), kThreads, 0, s>>>(in, dst, n);
  } else {
    return cudaErrorInvalidValue;
  }
  return Launched();
}

cudaError_t LaunchNarrow(DType dtype, const float* src, void* dst, int64_t n, int divisor,
                          cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  switch (dtype) {
    case DType::kF32: Narrow<0><<<Blocks(n), kThreads, 0, s>>>(src, dst, n, divisor); break;
    case DType::kBF16: Narrow<1><<<Blocks(n), kThreads, 0, s>>>(src, dst, n, divisor); break;
    case DType::kF16: Narrow<2><<<Blocks(n), kThreads, 0, s>>>(src, dst, n, divisor); break;
    default: return cudaErrorInvalidValue;
  }
  return Launched();
}

cudaError_t LaunchDivide(DType dtype, void* buf, int64_t n, int divisor, cudaStream_t s) {
  if (n == 0 || divisor == 1) return cudaSuccess;
  switch (dtype) {
    case DType::kF32: Divide<float><<<Blocks(n), kThreads, 0, s>>>(static_cast<float*>(buf), n, divisor); break;
    case DType::kI32: Divide<int32_t><<<Blocks(n), kThreads, 0, s>>>(static_cast<int32_t*>(buf), n, divisor); break;
    case DType::kI64: Divide<int64_t><<<Blocks(n), kThreads, 0, s>>>(static_cast<int64_t*>(buf), n, divisor); break;
    default: return cudaErrorInvalidValue;
  }
  return Launched();
}

}  // namespace gtp::comm::nccl_internal
