// core/kernels/cuda/attention.cu — naive self-attention with grouped-query
// heads (materialises the probabilities), causal or bidirectional.
//
//   q[B, T, NH, HS], k/v[B, T, NKV, HS]; query head h reads kv head h / G,
//   G = NH / NKV; scale = 1/√HS. Row t sees keys s < end(t) = t + 1 when
//   causal, T when not.
//   forward:  P[t, s] = softmax_{s < end}(scale·q_t·k_s)   (P[t, s] = 0 for s ≥ end)
//             out_t   = Σ_{s < end} P[t, s]·v_s
//   backward: dP[t, s] = dout_t·v_s
//             dS[t, s] = P[t, s]·(dP[t, s] − Σ_j P[t, j]·dP[t, j])
//             dq_t = scale·Σ_s dS[t, s]·k_s,  dk_s = scale·Σ_t dS[t, s]·q_t,
//             dv_s = Σ_t P[t, s]·dout_t      (all =; kv heads sum over their group)
//
// Kernels (no atomics anywhere, so deterministic):
//   forward:  one warp per (b, h, t) row computes the scores (lane per key s,
//             q_t staged in shared memory), the row softmax, and writes the full
//             row of att[B, NH, T, T]; then one thread per out element sums
//             P[t, s]·v_s over s.
//   backward: one warp per row writes dS into scratch[B, NH, T, T]; one thread
//             per dq element; one thread per (b, s, kv head, d) element of dk and
//             dv, looping over the heads of its group and over the t that
//             see key s (t ≥ s when causal, all t when not).
#include <cuda_runtime.h>

#include <cmath>

#include "core/kernels/cuda.h"
#include "core/kernels/cuda/common.cuh"

namespace gtp::kernels::cuda {
namespace {

using internal::CeilDiv;
using internal::GridFor;
using internal::kWarpSize;
using internal::WarpMax;
using internal::WarpSum;

constexpr int kRowThreads = 128;  // 4 rows (warps) per block
constexpr int kRowsPerBlock = kRowThreads / kWarpSize;
constexpr int kThreads = 256;

struct Dims {
  int64_t B, T, NH, NKV, HS, G;
  bool causal;
  // One past the last key query row t sees.
  __device__ int64_t End(int64_t t) const { return causal ? t + 1 : T; }
};

// Scores and softmax: row r = (b·NH + h)·T + t of att.
__global__ void AttentionScoresKernel(const float* __restrict__ q, const float* __restrict__ k,
                                      float* __restrict__ att, Dims d, float scale) {
  extern __shared__ float smem[];  // kRowsPerBlock · HS
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  const int64_t rows = d.B * d.NH * d.T;
  const int64_t r = blockIdx.x * int64_t{kRowsPerBlock} + warp;
  if (r >= rows) return;
  const int64_t t = r % d.T, h = (r / d.T) % d.NH, b = r / (d.T * d.NH);
  const int64_t kvh = h / d.G;
  float* sq = smem + warp * d.HS;
  const float* qt = q + ((b * d.T + t) * d.NH + h) * d.HS;
  for (int64_t i = lane; i < d.HS; i += kWarpSize) sq[i] = qt[i];
  __syncwarp();
  float* p = att + r * d.T;
  const int64_t kv_stride = d.NKV * d.HS;
  const float* kb = k + (b * d.T * d.NKV + kvh) * d.HS;  // k[b, 0, kvh, :]
  const int64_t end = d.End(t);
  float mx = -INFINITY;
  for (int64_t s = lane; s < end; s += kWarpSize) {
    const float* ks = kb + s * kv_stride;
    float acc = 0.0f;
    for (int64_t i = 0; i < d.HS; ++i) acc += sq[i] * ks[i];
    const float score = scale * acc;
    p[s] = score;
    mx = fmaxf(mx, score);
  }
  mx = WarpMax(mx);
  float sum = 0.0f;
  for (int64_t s = lane; s < end; s += kWarpSize) {
    const float e = expf(p[s] - mx);
    p[s] = e;
    sum += e;
  }
  const float inv = 1.0f / WarpSum(sum);
  // Each lane touches only the entries it wrote itself.
  for (int64_t s = lane; s < d.T; s += kWarpSize) p[s] = s < end ? p[s] * inv : 0.0f;
}

// out[b, t, h, i] = Σ_{s < end} P[b, h, t, s]·v[b, s, kvh, i].
__global__ void AttentionValuesKernel(const float* __restrict__ att, const float* __restrict__ v,
                                      float* __restrict__ out, Dims d) {
  const int64_t total = d.B * d.T * d.NH * d.HS;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < total;
       e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t i = e % d.HS, h = (e / d.HS) % d.NH, t = (e / (d.HS * d.NH)) % d.T;
    const int64_t b = e / (d.HS * d.NH * d.T);
    const int64_t kvh = h / d.G;
    const float* p = att + ((b * d.NH + h) * d.T + t) * d.T;
    const float* vb = v + (b * d.T * d.NKV + kvh) * d.HS + i;
    const int64_t kv_stride = d.NKV * d.HS;
    float acc = 0.0f;
    for (int64_t s = 0, end = d.End(t); s < end; ++s) acc += p[s] * vb[s * kv_stride];
    out[e] = acc;
  }
}

// dS row r = (b·NH + h)·T + t into ds (full row, zeros past end).
__global__ void AttentionDScoresKernel(const float* __restrict__ dout, const float* __restrict__ v,
                                       const float* __restrict__ att, float* __restrict__ ds,
                                       Dims d) {
  extern __shared__ float smem[];  // kRowsPerBlock · HS
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  const int64_t rows = d.B * d.NH * d.T;
  const int64_t r = blockIdx.x * int64_t{kRowsPerBlock} + warp;
  if (r >= rows) return;
  const int64_t t = r % d.T, h = (r / d.T) % d.NH, b = r / (d.T * d.NH);
  const int64_t kvh = h / d.G;
  float* sdo = smem + warp * d.HS;
  const float* dot_ = dout + ((b * d.T + t) * d.NH + h) * d.HS;
  for (int64_t i = lane; i < d.HS; i += kWarpSize) sdo[i] = dot_[i];
  __syncwarp();
  const float* p = att + r * d.T;
  float* dsr = ds + r * d.T;
  const int64_t kv_stride = d.NKV * d.HS;
  const float* vb = v + (b * d.T * d.NKV + kvh) * d.HS;
  const int64_t end = d.End(t);
  float pdp = 0.0f;
  for (int64_t s = lane; s < end; s += kWarpSize) {
    const float* vs = vb + s * kv_stride;
    float acc = 0.0f;
    for (int64_t i = 0; i < d.HS; ++i) acc += sdo[i] * vs[i];
    dsr[s] = acc;  // dP
    pdp += p[s] * acc;
  }
  pdp = WarpSum(pdp);
  for (int64_t s = lane; s < d.T; s += kWarpSize) dsr[s] = s < end ? p[s] * (dsr[s] - pdp) : 0.0f;
}

// dq[b, t, h, i] = scale·Σ_{s < end} dS[b, h, t, s]·k[b, s, kvh, i].
__global__ void AttentionDqKernel(const float* __restrict__ ds, const float* __restrict__ k,
                                  float* __restrict__ dq, Dims d, float scale) {
  const int64_t total = d.B * d.T * d.NH * d.HS;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < total;
       e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t i = e % d.HS, h = (e / d.HS) % d.NH, t = (e / (d.HS * d.NH)) % d.T;
    const int64_t b = e / (d.HS * d.NH * d.T);
    const int64_t kvh = h / d.G;
    const float* dsr = ds + ((b * d.NH + h) * d.T + t) * d.T;
    const float* kb = k + (b * d.T * d.NKV + kvh) * d.HS + i;
    const int64_t kv_stride = d.NKV * d.HS;
    float acc = 0.0f;
    for (int64_t s = 0, end = d.End(t); s < end; ++s) acc += dsr[s] * kb[s * kv_stride];
    dq[e] = scale * acc;
  }
}

// dk[b, s, kvh, i] = scale·Σ_{h ∈ group} Σ_{t ≥ s} dS[b, h, t, s]·q[b, t, h, i]
// dv[b, s, kvh, i] =       Σ_{h ∈ group} Σ_{t ≥ s} P[b, h, t, s]·dout[b, t, h, i]
// (over every t when not causal).
__global__ void AttentionDkvKernel(const float* __restrict__ ds, const float* __restrict__ att,
                                   const float* __restrict__ q, const float* __restrict__ dout,
                                   float* __restrict__ dk, float* __restrict__ dv, Dims d,
                                   float scale) {
  const int64_t total = d.B * d.T * d.NKV * d.HS;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < total;
       e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t i = e % d.HS, kvh = (e / d.HS) % d.NKV, s = (e / (d.HS * d.NKV)) % d.T;
    const int64_t b = e / (d.HS * d.NKV * d.T);
    const int64_t q_stride = d.NH * d.HS;
    float acc_k = 0.0f, acc_v = 0.0f;
    for (int64_t g = 0; g < d.G; ++g) {
      const int64_t h = kvh * d.G + g;
      const float* dsc = ds + (b * d.NH + h) * d.T * d.T + s;  // column s of dS[b, h]
      const float* pc = att + (b * d.NH + h) * d.T * d.T + s;
      const float* qb = q + (b * d.T * d.NH + h) * d.HS + i;  // q[b, 0, h, i]
      const float* db = dout + (b * d.T * d.NH + h) * d.HS + i;
      for (int64_t t = d.causal ? s : 0; t < d.T; ++t) {
        acc_k += dsc[t * d.T] * qb[t * q_stride];
        acc_v += pc[t * d.T] * db[t * q_stride];
      }
    }
    dk[e] = scale * acc_k;
    dv[e] = acc_v;
  }
}

Dims CheckDims(const char* op, int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS,
               bool causal) {
  GTP_CU_REQUIRE(B >= 0 && T >= 0 && HS > 0 && NH > 0 && NKV > 0,
                 "%s: bad size B=%lld T=%lld NH=%lld NKV=%lld HS=%lld", op,
                 static_cast<long long>(B), static_cast<long long>(T), static_cast<long long>(NH),
                 static_cast<long long>(NKV), static_cast<long long>(HS));
  GTP_CU_REQUIRE(NH % NKV == 0, "%s: NH=%lld is not a multiple of NKV=%lld", op,
                 static_cast<long long>(NH), static_cast<long long>(NKV));
  GTP_CU_REQUIRE(HS <= 1024, "%s: HS=%lld above the 1024 this kernel stages in shared memory", op,
                 static_cast<long long>(HS));
  return Dims{B, T, NH, NKV, HS, NH / NKV, causal};
}

float Scale(int64_t HS) { return 1.0f / std::sqrt(static_cast<float>(HS)); }

}  // namespace

void AttentionForward(const float* q, const float* k, const float* v, float* out, float* att,
                      int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS,
                      cudaStream_t stream, bool causal) {
  const Dims d = CheckDims("AttentionForward", B, T, NH, NKV, HS, causal);
  if (B == 0 || T == 0) return;
  const int64_t rows = B * NH * T;
  const size_t smem = sizeof(float) * kRowsPerBlock * HS;
  AttentionScoresKernel<<<static_cast<unsigned>(CeilDiv(rows, kRowsPerBlock)), kRowThreads, smem,
                          stream>>>(q, k, att, d, Scale(HS));
  GTP_CU_LAUNCH_CHECK();
  AttentionValuesKernel<<<GridFor(B * T * NH * HS, kThreads), kThreads, 0, stream>>>(att, v, out,
                                                                                     d);
  GTP_CU_LAUNCH_CHECK();
}

void AttentionBackward(const float* dout, const float* q, const float* k, const float* v,
                       const float* att, float* dq, float* dk, float* dv, float* scratch, int64_t B,
                       int64_t T, int64_t NH, int64_t NKV, int64_t HS, cudaStream_t stream,
                       bool causal) {
  const Dims d = CheckDims("AttentionBackward", B, T, NH, NKV, HS, causal);
  if (B == 0 || T == 0) return;
  const int64_t rows = B * NH * T;
  const size_t smem = sizeof(float) * kRowsPerBlock * HS;
  const float scale = Scale(HS);
  AttentionDScoresKernel<<<static_cast<unsigned>(CeilDiv(rows, kRowsPerBlock)), kRowThreads, smem,
                           stream>>>(dout, v, att, scratch, d);
  GTP_CU_LAUNCH_CHECK();
  AttentionDqKernel<<<GridFor(B * T * NH * HS, kThreads), kThreads, 0, stream>>>(scratch, k, dq, d,
                                                                                 scale);
  GTP_CU_LAUNCH_CHECK();
  AttentionDkvKernel<<<GridFor(B * T * NKV * HS, kThreads), kThreads, 0, stream>>>(
      scratch, att, q, dout, dk, dv, d, scale);
  GTP_CU_LAUNCH_CHECK();
}

}  // namespace gtp::kernels::cuda
