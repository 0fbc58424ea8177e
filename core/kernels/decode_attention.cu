// Decode attention on the GPU (math in decode_attention_kernels.h).
//
// One block of kWarps warps per (query i, head h). Warp w takes the keys
// s = w, w + kWarps, ... < pos0 + i + 1 in order: the lanes split HS
// (coalesced row reads), a shuffle sum gives the score, and an online
// softmax (running max m, sum l, the lane's kPer output columns acc) folds in
// the key. The warps' (m, l, acc) then merge through shared memory in warp
// order: out = Σ_w e^{m_w − M}·acc_w / Σ_w e^{m_w − M}·l_w, M = max_w m_w.
// Fixed order everywhere: the same inputs give the same bits. A warp with no
// key keeps m = −∞, l = 0, acc = 0 and contributes e^{−∞} = 0. NaN in a read
// score or value reaches the output (expf of NaN), never a silent 0.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "core/kernels/cuda/common.cuh"
#include "core/kernels/decode_attention_kernels.h"

namespace gtp::kernels::cuda {
namespace {

using internal::kWarpSize;
using internal::WarpSum;

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * kWarpSize;

// kPer: output columns per lane (HS ≤ 32·kPer).
template <int kPer>
__global__ void __launch_bounds__(kThreads)
    DecodeAttentionKernel(const float* __restrict__ q, const float* __restrict__ k,
                          const float* __restrict__ v, float* __restrict__ out, int64_t pos0,
                          int64_t NH, int64_t NKV, int64_t HS, float scale) {
  __shared__ float sm_m[kWarps], sm_l[kWarps];
  __shared__ float sm_acc[kWarps][kPer * kWarpSize];
  const int64_t i = blockIdx.x, h = blockIdx.y;
  const int64_t g = h / (NH / NKV);
  const int64_t end = pos0 + i + 1;  // causal: cache rows 0 .. pos0 + i
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  const float* qi = q + (i * NH + h) * HS;
  float qr[kPer], acc[kPer];
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    const int64_t d = lane + int64_t{kWarpSize} * j;
    qr[j] = d < HS ? qi[d] : 0.0f;
    acc[j] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  for (int64_t s = warp; s < end; s += kWarps) {
    const int64_t row = (s * NKV + g) * HS;
    float dot = 0.0f;
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int64_t d = lane + int64_t{kWarpSize} * j;
      if (d < HS) dot += qr[j] * k[row + d];
    }
    const float score = WarpSum(dot) * scale;
    const float m_new = fmaxf(m, score);
    const float corr = expf(m - m_new);  // 0 for the warp's first key (m = −∞)
    const float p = expf(score - m_new);
    l = l * corr + p;
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int64_t d = lane + int64_t{kWarpSize} * j;
      if (d < HS) acc[j] = acc[j] * corr + p * v[row + d];
    }
    m = m_new;
  }
  if (lane == 0) {
    sm_m[warp] = m;
    sm_l[warp] = l;
  }
#pragma unroll
  for (int j = 0; j < kPer; ++j) sm_acc[warp][lane + kWarpSize * j] = acc[j];
  __syncthreads();
  float M = -INFINITY;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) M = fmaxf(M, sm_m[w]);
  float c[kWarps], denom = 0.0f;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) {
    c[w] = expf(sm_m[w] - M);
    denom += c[w] * sm_l[w];
  }
  const float inv = 1.0f / denom;
  float* yi = out + (i * NH + h) * HS;
  for (int64_t d = threadIdx.x; d < HS; d += kThreads) {
    float num = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) num += c[w] * sm_acc[w][d];
    yi[d] = num * inv;
  }
}

}  // namespace

void DecodeAttention(const float* q, const float* k, const float* v, float* out, int64_t n,
                     int64_t pos0, int64_t NH, int64_t NKV, int64_t HS, cudaStream_t stream) {
  GTP_CU_REQUIRE(n >= 0 && pos0 >= 0 && NH > 0 && NKV > 0 && NH % NKV == 0,
                 "DecodeAttention: n %lld, pos0 %lld, NH %lld, NKV %lld", static_cast<long long>(n),
                 static_cast<long long>(pos0), static_cast<long long>(NH),
                 static_cast<long long>(NKV));
  GTP_CU_REQUIRE(HS > 0 && HS <= kDecodeAttentionMaxHeadSize,
                 "DecodeAttention: head size %lld outside [1, %lld]", static_cast<long long>(HS),
                 static_cast<long long>(kDecodeAttentionMaxHeadSize));
  GTP_CU_REQUIRE(n <= 0x7fffffffLL && NH <= 65535, "DecodeAttention: grid %lld x %lld too large",
                 static_cast<long long>(n), static_cast<long long>(NH));
  if (n == 0) return;
  const dim3 grid(static_cast<unsigned>(n), static_cast<unsigned>(NH));
  const float scale = 1.0f / sqrtf(static_cast<float>(HS));
  static_assert(kDecodeAttentionMaxHeadSize == 8 * kWarpSize, "kPer dispatch below");
  if (HS <= kWarpSize) {
    DecodeAttentionKernel<1><<<grid, kThreads, 0, stream>>>(q, k, v, out, pos0, NH, NKV, HS, scale);
  } else if (HS <= 2 * kWarpSize) {
    DecodeAttentionKernel<2><<<grid, kThreads, 0, stream>>>(q, k, v, out, pos0, NH, NKV, HS, scale);
  } else if (HS <= 4 * kWarpSize) {
    DecodeAttentionKernel<4><<<grid, kThreads, 0, stream>>>(q, k, v, out, pos0, NH, NKV, HS, scale);
  } else {
    DecodeAttentionKernel<8><<<grid, kThreads, 0, stream>>>(q, k, v, out, pos0, NH, NKV, HS, scale);
  }
  GTP_CU_LAUNCH_CHECK();
}

}  // namespace gtp::kernels::cuda
