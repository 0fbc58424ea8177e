// core/kernels/cuda/loss.cu — loss bookkeeping on the device (see
// core/kernels/cpu/loss.cc for the math). One block of 1024 threads: each
// thread sums a strided subset in double, then a fixed-order tree combines
// them, so the result is the same bits on every run.
#include <cuda_runtime.h>

#include <algorithm>

#include "core/kernels/cuda.h"
#include "core/kernels/cuda/common.cuh"

namespace gtp::kernels::cuda {
namespace {

constexpr int kThreads = 1024;

__global__ void MaskedMeanAccumulateKernel(const float* __restrict__ loss,
                                           const int32_t* __restrict__ targets, int64_t N,
                                           float* __restrict__ acc, float* __restrict__ count) {
  __shared__ double s_sum[kThreads];
  __shared__ long long s_cnt[kThreads];
  double s = 0;
  long long c = 0;
  for (int64_t n = threadIdx.x; n < N; n += kThreads) {
    if (targets[n] < 0) continue;
    s += loss[n];
    ++c;
  }
  s_sum[threadIdx.x] = s;
  s_cnt[threadIdx.x] = c;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride >>= 1) {
    if (threadIdx.x < stride) {
      s_sum[threadIdx.x] += s_sum[threadIdx.x + stride];
      s_cnt[threadIdx.x] += s_cnt[threadIdx.x + stride];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    const long long total = s_cnt[0];
    *count = static_cast<float>(total);
    if (total > 0) *acc += static_cast<float>(s_sum[0] / static_cast<double>(total));
  }
}

__global__ void FillReciprocalKernel(const float* __restrict__ count, float* __restrict__ out,
                                     int64_t n) {
  const float c = *count;
  const float v = c > 0 ? 1.0f / c : 0.0f;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    out[i] = v;
  }
}

__global__ void CountValidKernel(const int32_t* __restrict__ targets, int64_t N,
                                 float* __restrict__ count) {
  __shared__ long long s_cnt[kThreads];
  long long c = 0;
  for (int64_t n = threadIdx.x; n < N; n += kThreads) c += targets[n] >= 0 ? 1 : 0;
  s_cnt[threadIdx.x] = c;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride >>= 1) {
    if (threadIdx.x < stride) s_cnt[threadIdx.x] += s_cnt[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) *count = static_cast<float>(s_cnt[0]);
}

}  // namespace

void CountValid(const int32_t* targets, int64_t N, float* count, cudaStream_t stream) {
  CountValidKernel<<<1, kThreads, 0, stream>>>(targets, N, count);
  GTP_CU_LAUNCH_CHECK();
}

void MaskedMeanAccumulate(const float* loss, const int32_t* targets, int64_t N, float* acc,
                          float* count, cudaStream_t stream) {
  MaskedMeanAccumulateKernel<<<1, kThreads, 0, stream>>>(loss, targets, N, acc, count);
  GTP_CU_LAUNCH_CHECK();
}

void FillReciprocal(const float* count, float* out, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  const int blocks = static_cast<int>(std::min<int64_t>((n + 255) / 256, 1024));
  FillReciprocalKernel<<<blocks, 256, 0, stream>>>(count, out, n);
  GTP_CU_LAUNCH_CHECK();
}

}  // namespace gtp::kernels::cuda
