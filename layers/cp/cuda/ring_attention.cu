// layers/cp/cuda/ring_attention.cu — see ring_attention_cuda.h.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "layers/cp/cuda/ring_attention_cuda.h"

namespace gtp::layers::cp::cuda {
namespace {

constexpr int kThreads = 128;

int Blocks(int64_t n) { return static_cast<int>((n + kThreads - 1) / kThreads); }

__global__ void ForwardKernel(const float* q, const float* k, const float* v, const int32_t* qpos,
                              const int32_t* kpos, int64_t B, int64_t Tq, int64_t Tk, int64_t NH,
                              int64_t NKV, int64_t HS, float* m, float* l, float* acc) {
  const int64_t r = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (r >= B * Tq * NH) return;
  const int64_t h = r % NH, i = (r / NH) % Tq, b = r / (NH * Tq);
  const int64_t kh = h / (NH / NKV);
  const float scale = 1.0f / sqrtf(static_cast<float>(HS));
  const float* qi = q + r * HS;
  float bm = -INFINITY;
  for (int64_t j = 0; j < Tk; ++j) {
    if (kpos[j] > qpos[i]) continue;
    const float* kj = k + ((b * Tk + j) * NKV + kh) * HS;
    float d = 0;
    for (int64_t x = 0; x < HS; ++x) d = fmaf(qi[x], kj[x], d);
    bm = fmaxf(bm, d * scale);
  }
  if (bm == -INFINITY) return;
  const float m_new = fmaxf(m[r], bm), rescale = expf(m[r] - m_new);
  float* a = acc + r * HS;
  float lr = l[r] * rescale;
  for (int64_t x = 0; x < HS; ++x) a[x] *= rescale;
  for (int64_t j = 0; j < Tk; ++j) {
    if (kpos[j] > qpos[i]) continue;
    const float* kj = k + ((b * Tk + j) * NKV + kh) * HS;
    float d = 0;
    for (int64_t x = 0; x < HS; ++x) d = fmaf(qi[x], kj[x], d);
    const float p = expf(d * scale - m_new);
    lr += p;
    const float* vj = v + ((b * Tk + j) * NKV + kh) * HS;
    for (int64_t x = 0; x < HS; ++x) a[x] = fmaf(p, vj[x], a[x]);
  }
  l[r] = lr;
  m[r] = m_new;
}

__global__ void DqKernel(const float* q, const float* k, const float* v, const int32_t* qpos,
                         const int32_t* kpos, const float* dy, const float* lse, const float* D,
                         int64_t B, int64_t Tq, int64_t Tk, int64_t NH, int64_t NKV, int64_t HS,
                         float* dq) {
  const int64_t r = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (r >= B * Tq * NH) return;
  const int64_t h = r % NH, i = (r / NH) % Tq, b = r / (NH * Tq);
  const int64_t kh = h / (NH / NKV);
  const float scale = 1.0f / sqrtf(static_cast<float>(HS));
  const float* qi = q + r * HS;
  const float* dyi = dy + r * HS;
  float* dqi = dq + r * HS;
  for (int64_t j = 0; j < Tk; ++j) {
    if (kpos[j] > qpos[i]) continue;
    const int64_t c = (b * Tk + j) * NKV + kh;
    float d = 0, dp = 0;
    for (int64_t x = 0; x < HS; ++x) {
      d = fmaf(qi[x], k[c * HS + x], d);
      dp = fmaf(dyi[x], v[c * HS + x], dp);
    }
    const float p = expf(d * scale - lse[r]);
    const float ds = p * (dp - D[r]) * scale;
    for (int64_t x = 0; x < HS; ++x) dqi[x] = fmaf(ds, k[c * HS + x], dqi[x]);
  }
}

__global__ void DkvKernel(const float* q, const float* k, const float* v, const int32_t* qpos,
                          const int32_t* kpos, const float* dy, const float* lse, const float* D,
                          int64_t B, int64_t Tq, int64_t Tk, int64_t NH, int64_t NKV, int64_t HS,
                          float* dk, float* dv) {
  const int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (c >= B * Tk * NKV) return;
  const int64_t kh = c % NKV, j = (c / NKV) % Tk, b = c / (NKV * Tk);
  const int64_t group = NH / NKV;
  const float scale = 1.0f / sqrtf(static_cast<float>(HS));
  const float* kj = k + c * HS;
  const float* vj = v + c * HS;
  float* dkj = dk + c * HS;
  float* dvj = dv + c * HS;
  for (int64_t i = 0; i < Tq; ++i) {
    if (kpos[j] > qpos[i]) continue;
    for (int64_t h = kh * group; h < (kh + 1) * group; ++h) {
      const int64_t r = (b * Tq + i) * NH + h;
      const float* qi = q + r * HS;
      const float* dyi = dy + r * HS;
      float d = 0, dp = 0;
      for (int64_t x = 0; x < HS; ++x) {
        d = fmaf(qi[x], kj[x], d);
        dp = fmaf(dyi[x], vj[x], dp);
      }
      const float p = expf(d * scale - lse[r]);
      const float ds = p * (dp - D[r]) * scale;
      for (int64_t x = 0; x < HS; ++x) {
        dvj[x] = fmaf(p, dyi[x], dvj[x]);
        dkj[x] = fmaf(ds, qi[x], dkj[x]);
      }
    }
  }
}

__global__ void FinalizeKernel(const float* m, const float* l, const float* acc, float* y,
                               float* lse, int64_t nq, int64_t HS) {
  const int64_t r = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (r >= nq) return;
  lse[r] = m[r] + logf(l[r]);
  for (int64_t x = 0; x < HS; ++x) y[r * HS + x] = acc[r * HS + x] / l[r];
}

__global__ void RowDotKernel(const float* dy, const float* y, float* D, int64_t nq, int64_t HS) {
  const int64_t r = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (r >= nq) return;
  float s = 0;
  for (int64_t x = 0; x < HS; ++x) s = fmaf(dy[r * HS + x], y[r * HS + x], s);
  D[r] = s;
}

}  // namespace

void BlockForward(const float* q, const float* k, const float* v, const int32_t* qpos,
                  const int32_t* kpos, int64_t B, int64_t Tq, int64_t Tk, int64_t NH, int64_t NKV,
                  int64_t HS, float* m, float* l, float* acc, void* stream) {
  const int64_t n = B * Tq * NH;
  if (n == 0) return;
  ForwardKernel<<<Blocks(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      q, k, v, qpos, kpos, B, Tq, Tk, NH, NKV, HS, m, l, acc);
}

void BlockBackward(const float* q, const float* k, const float* v, const int32_t* qpos,
                   const int32_t* kpos, const float* dy, const float* lse, const float* D,
                   int64_t B, int64_t Tq, int64_t Tk, int64_t NH, int64_t NKV, int64_t HS,
                   float* dq, float* dk, float* dv, void* stream) {
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  if (B * Tq * NH > 0) {
    DqKernel<<<Blocks(B * Tq * NH), kThreads, 0, st>>>(q, k, v, qpos, kpos, dy, lse, D, B, Tq, Tk,
                                                      NH, NKV, HS, dq);
  }
  if (B * Tk * NKV > 0) {
    DkvKernel<<<Blocks(B * Tk * NKV), kThreads, 0, st>>>(q, k, v, qpos, kpos, dy, lse, D, B, Tq,
                                                        Tk, NH, NKV, HS, dk, dv);
  }
}

void Finalize(const float* m, const float* l, const float* acc, float* y, float* lse, int64_t nq,
              int64_t HS, void* stream) {
  if (nq == 0) return;
  FinalizeKernel<<<Blocks(nq), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(m, l, acc, y, lse,
                                                                                nq, HS);
}

void RowDot(const float* dy, const float* y, float* D, int64_t nq, int64_t HS, void* stream) {
  if (nq == 0) return;
  RowDotKernel<<<Blocks(nq), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(dy, y, D, nq, HS);
}

}  // namespace gtp::layers::cp::cuda
