// core/kernels/ssm/mamba_ops.cu — CUDA kernels of the Mamba-2 mixer's small
// ops (mamba_ops_cuda.h; math in mamba_ops.h): causal conv1d, dt softplus,
// A = −exp(A_log), gated RMSNorm. Deterministic: every reduction is done by one
// thread in a fixed order or by a warp's xor shuffles; column sums (conv and
// norm weight grads, biases) in two fixed-order passes over row slabs.
#include <cuda_runtime.h>

#include <type_traits>

#include "core/kernels/cuda/common.cuh"
#include "core/kernels/cuda/elem.cuh"
#include "core/kernels/ssm/mamba_ops_cuda.h"

namespace gtp::kernels::ssm::cuda {
namespace {

using ::gtp::kernels::cuda::internal::BlockSum;
using ::gtp::kernels::cuda::internal::CeilDiv;
using ::gtp::kernels::cuda::internal::GridFor;
using ::gtp::kernels::cuda::internal::InOrderSum;
using ::gtp::kernels::cuda::internal::kWarpSize;
using ::gtp::kernels::cuda::internal::Launch;
using ::gtp::kernels::cuda::internal::Store;
using ::gtp::kernels::cuda::internal::WarpSum;

constexpr int kThreads = 256;
constexpr int kWarpsPerBlock = kThreads / kWarpSize;

__device__ __forceinline__ float Sigmoid(float v) { return 1.0f / (1.0f + expf(-v)); }
__device__ __forceinline__ float Silu(float v) { return v * Sigmoid(v); }
__device__ __forceinline__ float SiluGrad(float v) {
  const float s = Sigmoid(v);
  return s * (1.0f + v * (1.0f - s));
}

// ---------------------------------------------------------------- conv1d

// The conv kernels' index arithmetic in Idx: int32_t when B·T·Ch ≤ 2³⁰ (the
// launchers' choice; so no index or grid-stride step overflows), else int64_t
// — 64-bit divisions per element cost more than the conv itself. The float
// operations are the same either way.
template <typename Idx>
__device__ __forceinline__ float ConvAt(const float* __restrict__ x, const float* __restrict__ w,
                                        const float* __restrict__ bias, Idx T, Idx Ch, Idx K, Idx b,
                                        Idx t, Idx c) {
  float acc = bias[c];
  for (Idx k = 0; k < K; ++k) {
    const Idx s = t - (K - 1) + k;
    if (s >= 0) acc += w[c * K + k] * x[(b * T + s) * Ch + c];
  }
  return acc;
}

template <typename Idx>
__global__ void ConvForwardKernel(const float* __restrict__ x, const float* __restrict__ w,
                                  const float* __restrict__ bias, float* __restrict__ y, Idx B,
                                  Idx T, Idx Ch, Idx K, bool silu) {
  const Idx total = B * T * Ch;
  for (Idx i = blockIdx.x * Idx(blockDim.x) + threadIdx.x; i < total;
       i += Idx(gridDim.x) * blockDim.x) {
    const Idx c = i % Ch, t = (i / Ch) % T, b = i / (Ch * T);
    const float v = ConvAt<Idx>(x, w, bias, T, Ch, K, b, t, c);
    y[i] = silu ? Silu(v) : v;
  }
}

// g = dy·act'(pre), the gradient of the pre-activation, into scratch.
template <typename Idx>
__global__ void ConvPreGradKernel(const float* __restrict__ dy, const float* __restrict__ x,
                                  const float* __restrict__ w, const float* __restrict__ bias,
                                  float* __restrict__ gpre, Idx B, Idx T, Idx Ch, Idx K,
                                  bool silu) {
  const Idx total = B * T * Ch;
  for (Idx i = blockIdx.x * Idx(blockDim.x) + threadIdx.x; i < total;
       i += Idx(gridDim.x) * blockDim.x) {
    const Idx c = i % Ch, t = (i / Ch) % T, b = i / (Ch * T);
    float v = dy[i];
    if (silu) v *= SiluGrad(ConvAt<Idx>(x, w, bias, T, Ch, K, b, t, c));
    gpre[i] = v;
  }
}

// dx[b, s, c] = Σ_k g[b, s + K − 1 − k, c]·w[c, k] (=); dx f32 or bf16 (TX).
template <typename Idx, typename TX>
__global__ void ConvDxKernel(const float* __restrict__ gpre, const float* __restrict__ w,
                             TX* __restrict__ dx, Idx B, Idx T, Idx Ch, Idx K) {
  const Idx total = B * T * Ch;
  for (Idx i = blockIdx.x * Idx(blockDim.x) + threadIdx.x; i < total;
       i += Idx(gridDim.x) * blockDim.x) {
    const Idx c = i % Ch, s = (i / Ch) % T, b = i / (Ch * T);
    float acc = 0.0f;
    for (Idx k = 0; k < K; ++k) {
      const Idx t = s + (K - 1) - k;
      if (t < T) acc += gpre[(b * T + t) * Ch + c] * w[c * K + k];
    }
    dx[i] = Store<TX>(acc);
  }
}

// The conv by runs (the forward here, the backward's one pass below:
// ConvBackwardRunKernel): a thread takes channel c of kConvRun consecutive
// steps of one sequence, loads the window of x those outputs read once and
// keeps the kernel's K ≤ kConvMaxK taps in registers (kK a template
// parameter), and does its index divisions once per run — the kernels above
// divide three times and load K inputs per output. Each output adds the same
// products in the same order (bias, then k = 0 … K−1 for the forward; k = 0
// … K−1 for dx), so the same bits. int32 indices (the launchers take these
// where ConvIndex32 holds and K ≤ kConvMaxK).
constexpr int kConvRun = 8, kConvMaxK = 4;

// Runs of (b, run, c) with c fastest (coalesced across a warp).
struct ConvRun {
  int32_t b, t0, c;
  __device__ ConvRun(int32_t i, int32_t T, int32_t Ch) {
    const int32_t runs = (T + kConvRun - 1) / kConvRun;
    c = i % Ch;
    const int32_t rest = i / Ch;
    t0 = (rest % runs) * kConvRun;
    b = rest / runs;
  }
};

// pre[t0 + j] for j < kConvRun (steps past T left as they are).
template <int kK>
__device__ __forceinline__ void ConvRunPre(const float* __restrict__ x, const float* __restrict__ w,
                                           const float* __restrict__ bias, int32_t T, int32_t Ch,
                                           const ConvRun& r, float pre[kConvRun]) {
  float win[kConvRun + kK - 1];  // x at steps t0 − (kK−1) … t0 + kConvRun − 1
#pragma unroll
  for (int j = 0; j < kConvRun + kK - 1; ++j) {
    const int32_t s = r.t0 - (kK - 1) + j;
    win[j] = s >= 0 && s < T ? x[(r.b * T + s) * Ch + r.c] : 0.0f;
  }
  float wk[kK];
#pragma unroll
  for (int k = 0; k < kK; ++k) wk[k] = w[r.c * kK + k];
  const float b0 = bias[r.c];
#pragma unroll
  for (int j = 0; j < kConvRun; ++j) {
    float acc = b0;
#pragma unroll
    for (int k = 0; k < kK; ++k) {
      if (r.t0 + j - (kK - 1) + k >= 0) acc += wk[k] * win[j + k];  // as ConvAt skips s < 0
    }
    pre[j] = acc;
  }
}

template <int kK>
__global__ void ConvForwardRunKernel(const float* __restrict__ x, const float* __restrict__ w,
                                     const float* __restrict__ bias, float* __restrict__ y,
                                     int32_t B, int32_t T, int32_t Ch, bool silu) {
  const int32_t items = B * ((T + kConvRun - 1) / kConvRun) * Ch;
  for (int32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < items; i += gridDim.x * blockDim.x) {
    const ConvRun r(i, T, Ch);
    float pre[kConvRun];
    ConvRunPre<kK>(x, w, bias, T, Ch, r, pre);
#pragma unroll
    for (int j = 0; j < kConvRun; ++j) {
      if (r.t0 + j < T) y[(r.b * T + r.t0 + j) * Ch + r.c] = silu ? Silu(pre[j]) : pre[j];
    }
  }
}

// f(std::integral_constant<int, K>) for K ∈ [1, kConvMaxK] (ConvRuns holds).
template <typename F>
void WithConvK(int64_t K, F&& f) {
  switch (K) {
    case 1:
      return f(std::integral_constant<int, 1>{});
    case 2:
      return f(std::integral_constant<int, 2>{});
    case 3:
      return f(std::integral_constant<int, 3>{});
    default:
      return f(std::integral_constant<int, kConvMaxK>{});
  }
}
static_assert(kConvMaxK == 4, "WithConvK lists 1 … kConvMaxK");

// Launch size for the run kernels: one thread a run.
unsigned ConvRunGrid(int64_t B, int64_t T, int64_t Ch) {
  return GridFor(B * CeilDiv(T, kConvRun) * Ch, kThreads);
}

// Whether a conv of `total` elements takes 32-bit indices.
bool ConvIndex32(int64_t total) { return total <= (int64_t{1} << 30); }

// Whether the run kernels take a conv: K ≤ kConvMaxK taps and 32-bit indices
// (with a run's overhang); else the per-output kernels.
bool ConvRuns(int64_t B, int64_t T, int64_t Ch, int64_t K) {
  return K >= 1 && K <= kConvMaxK && ConvIndex32(B * (T + kConvRun) * Ch);
}

// Column sums of a [rows, cols] matrix of values in two fixed-order passes
// (one block per column over 8192 rows is serial and starves the GPU):
//   1. blocks of 32 columns × 8 row-threads each add a slab of `slab_rows`
//      rows (thread (cx, ry) takes rows ry, ry + 8, …; then the 8 in order)
//      into partial[slab, col];
//   2. out(col, Σ_slab partial[slab, col]) with the slabs in order.
// The slab size depends on rows only, so reruns give the same bits. A value
// source V gives each column's accessor once (V::Column(col)), so the index
// arithmetic that depends on the column alone (divisions by the channel
// count, the group size) is done once per thread, not once per element; the
// per-row part uses 32-bit arithmetic (ColumnReduce requires rows < 2³¹).
constexpr int kColWidth = 32, kColRowThreads = 8;

int64_t ColumnSlabRows(int64_t rows) {
  const int64_t min_rows = 256, max_slabs = 4096;
  const int64_t r = CeilDiv(rows, max_slabs);
  return r > min_rows ? r : min_rows;
}
int64_t ColumnSlabs(int64_t rows) { return rows > 0 ? CeilDiv(rows, ColumnSlabRows(rows)) : 0; }

template <class V>
__global__ void ColumnPartialKernel(V value, float* __restrict__ partial, int64_t rows,
                                    int64_t cols, int64_t slab_rows) {
  __shared__ float red[kColRowThreads][kColWidth + 1];
  const int cx = threadIdx.x, ry = threadIdx.y;
  const int64_t col = blockIdx.x * int64_t{kColWidth} + cx, slab = blockIdx.y;
  const int64_t r0 = slab * slab_rows, r1 = r0 + slab_rows < rows ? r0 + slab_rows : rows;
  float acc = 0.0f;
  if (col < cols) {
    const auto column = value.Column(col);
    // kBatch rows read before any is added (their loads in flight together),
    // then added in row order: the sums of the one-at-a-time loop.
    constexpr int kBatch = 8;
    int64_t r = r0 + ry;
    for (; r + (kBatch - 1) * kColRowThreads < r1; r += kBatch * kColRowThreads) {
      float v[kBatch];
#pragma unroll
      for (int k = 0; k < kBatch; ++k) v[k] = column(r + k * kColRowThreads);
#pragma unroll
      for (int k = 0; k < kBatch; ++k) acc += v[k];
    }
    for (; r < r1; r += kColRowThreads) acc += column(r);
  }
  red[ry][cx] = acc;
  __syncthreads();
  if (ry == 0 && col < cols) {
    float s = 0.0f;
    for (int q = 0; q < kColRowThreads; ++q) s += red[q][cx];
    partial[slab * cols + col] = s;
  }
}

template <class O>
__global__ void ColumnFinishKernel(const float* __restrict__ partial, int64_t slabs, int64_t cols,
                                   O out) {
  for (int64_t c = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; c < cols;
       c += int64_t{gridDim.x} * blockDim.x) {
    out(c, InOrderSum<8>(partial + c, slabs, cols));  // the slabs in order
  }
}

// in[r, c].
struct PlainValue {
  const float* __restrict__ in;
  int64_t cols;
  struct Col {
    const float* __restrict__ p;  // &in[0, c]
    int64_t cols;
    __device__ float operator()(int64_t r) const { return p[r * cols]; }
  };
  __device__ Col Column(int64_t c) const { return {in + c, cols}; }
};
// out[c] += s.
struct AddOut {
  float* __restrict__ out;
  __device__ void operator()(int64_t c, float s) const { out[c] += s; }
};

// Conv weight and bias grads as (K + 1)·Ch columns over the B·T rows, column
// k·Ch + c (k < K: g[b, t, c]·x[b, t − (K−1) + k, c]; k = K: g[b, t, c]).
// Row r = b·T + t, so x's row is r − (K−1) + k whenever t − (K−1) + k ≥ 0.
struct ConvGradValue {
  const float* __restrict__ gpre;
  const float* __restrict__ x;
  int64_t T, Ch, K;
  struct Col {
    const float* __restrict__ g;   // &gpre[0, c]
    const float* __restrict__ xc;  // &x[0, c]
    int64_t Ch;
    int32_t T, shift;  // shift = k − (K − 1) ≤ 0: x's row is r + shift
    bool bias;         // k = K: the bias column (g alone)
    __device__ float operator()(int64_t r) const {
      const float gv = g[r * Ch];
      if (bias) return gv;
      const int32_t s = static_cast<int32_t>(r) % T + shift;
      return s >= 0 ? gv * xc[(r + shift) * Ch] : 0.0f;
    }
  };
  __device__ Col Column(int64_t col) const {
    const int64_t k = col / Ch, c = col % Ch;
    return {gpre + c, x + c, Ch, static_cast<int32_t>(T), static_cast<int32_t>(k - (K - 1)),
            k == K};
  }
};
struct ConvGradOut {
  float* __restrict__ dw;
  float* __restrict__ dbias;
  int64_t Ch, K;
  __device__ void operator()(int64_t col, float s) const {
    const int64_t k = col / Ch, c = col % Ch;
    if (k == K) {
      dbias[c] += s;
    } else {
      dw[c * K + k] += s;
    }
  }
};

// The run path's whole backward (K ≤ kConvMaxK) in one pass. Grid
// (⌈Ch / 32⌉, slabs), block (32 channels × 8 row-threads); a slab is
// `slab_runs` consecutive entries of the B·⌈T / 8⌉ (b, run) list
// (ConvSlabRuns), row-thread ry takes entries ry, ry + 8, … of it. For its
// run a thread forms g = dy·act'(pre) at the run's 8 steps and the K − 1
// after them (those its dx reads: recomputed, not stored), writes dx, and
// adds the dw and dbias terms of its own steps (ConvGradValue's columns);
// the 8 row-threads' sums go in order into partial[slab, k·Ch + c], and
// ColumnFinishKernel adds the slabs in order. Every pre, g and dx is the
// per-output kernels' expression (bias, then k = 0 … K−1; dx over k = 0 …
// K−1), so the same bits; the dw and dbias sums are rounded one by one
// (__fmul_rn, __fadd_rn: ptxas may not fuse them). It reads x and dy once
// and writes dx (the three-kernel form wrote g and read it twice).
template <int kK, typename TX>
__global__ void ConvBackwardRunKernel(const float* __restrict__ dy, const float* __restrict__ x,
                                      const float* __restrict__ w, const float* __restrict__ bias,
                                      TX* __restrict__ dx, float* __restrict__ partial, int32_t B,
                                      int32_t T, int32_t Ch, int32_t slab_runs, bool silu) {
  __shared__ float red[kK + 1][kColRowThreads][kColWidth + 1];
  constexpr int kJ = kConvRun + kK - 1;  // the steps whose g a run needs
  const int cx = threadIdx.x, ry = threadIdx.y;
  const int32_t c = blockIdx.x * kColWidth + cx;
  const int32_t runs = (T + kConvRun - 1) / kConvRun, total = B * runs;
  const int32_t q0 = blockIdx.y * slab_runs;
  const int32_t q1 = q0 + slab_runs < total ? q0 + slab_runs : total;
  float acc[kK + 1];
#pragma unroll
  for (int k = 0; k <= kK; ++k) acc[k] = 0.0f;
  if (c < Ch) {
    float wk[kK];
#pragma unroll
    for (int k = 0; k < kK; ++k) wk[k] = w[c * kK + k];
    const float b0 = bias[c];
    for (int32_t q = q0 + ry; q < q1; q += kColRowThreads) {
      const int32_t b = q / runs, t0 = (q % runs) * kConvRun;
      float win[kJ + kK - 1];  // x at steps t0 − (kK−1) … t0 + kJ − 1
#pragma unroll
      for (int j = 0; j < kJ + kK - 1; ++j) {
        const int32_t s = t0 - (kK - 1) + j;
        win[j] = s >= 0 && s < T ? x[(b * T + s) * Ch + c] : 0.0f;
      }
      float g[kJ];  // g at steps t0 … t0 + kJ − 1 (0 past T)
#pragma unroll
      for (int j = 0; j < kJ; ++j) {
        const int32_t t = t0 + j;
        g[j] = 0.0f;
        if (t < T) {
          float gv = dy[(b * T + t) * Ch + c];
          if (silu) {
            float pre = b0;
#pragma unroll
            for (int k = 0; k < kK; ++k) {
              if (t - (kK - 1) + k >= 0) pre += wk[k] * win[j + k];  // as ConvAt skips s < 0
            }
            gv *= SiluGrad(pre);
          }
          g[j] = gv;
        }
      }
#pragma unroll
      for (int j = 0; j < kConvRun; ++j) {
        const int32_t t = t0 + j;
        if (t >= T) continue;
        float d = 0.0f;  // dx[t] = Σ_k g[t + K − 1 − k]·w[k] over t + K − 1 − k < T
#pragma unroll
        for (int k = 0; k < kK; ++k) {
          if (t + (kK - 1) - k < T) d += g[j + (kK - 1) - k] * wk[k];
        }
        dx[(b * T + t) * Ch + c] = Store<TX>(d);
#pragma unroll
        for (int k = 0; k < kK; ++k) {
          const int32_t s = t - (kK - 1) + k;
          acc[k] = __fadd_rn(acc[k], s >= 0 ? __fmul_rn(g[j], win[j + k]) : 0.0f);
        }
        acc[kK] = __fadd_rn(acc[kK], g[j]);
      }
    }
  }
#pragma unroll
  for (int k = 0; k <= kK; ++k) red[k][ry][cx] = acc[k];
  __syncthreads();
  if (ry == 0 && c < Ch) {
    const int64_t cols = int64_t{kK + 1} * Ch;
#pragma unroll
    for (int k = 0; k <= kK; ++k) {
      float sum = 0.0f;
      for (int qy = 0; qy < kColRowThreads; ++qy) sum += red[k][qy][cx];
      partial[blockIdx.y * cols + k * int64_t{Ch} + c] = sum;
    }
  }
}

// Entries of the (b, run) list a slab of ConvBackwardRunKernel: about 64
// slabs, at least 16 entries (2 a row-thread) each; a function of the list's
// length alone, so reruns sum in the same order.
int64_t ConvSlabRuns(int64_t B, int64_t T) {
  const int64_t total = B * CeilDiv(T, kConvRun), r = CeilDiv(total, 64);
  return r > 16 ? r : 16;
}
int64_t ConvSlabs(int64_t B, int64_t T) {
  return CeilDiv(B * CeilDiv(T, kConvRun), ConvSlabRuns(B, T));
}

template <class V, class O>
void ColumnReduce(V value, O out, float* partial, int64_t rows, int64_t cols, cudaStream_t stream) {
  const int64_t slabs = ColumnSlabs(rows);
  if (cols == 0 || slabs == 0) return;  // adding nothing
  GTP_CU_REQUIRE(rows < (int64_t{1} << 31), "column sums over %lld rows (at most 2^31 - 1)",
                 static_cast<long long>(rows));
  const dim3 grid(static_cast<unsigned>(CeilDiv(cols, kColWidth)), static_cast<unsigned>(slabs));
  Launch(ColumnPartialKernel<V>, grid, dim3(kColWidth, kColRowThreads), 0, stream, value, partial,
         rows, cols, ColumnSlabRows(rows));
  GTP_CU_LAUNCH_CHECK();
  Launch(ColumnFinishKernel<O>, GridFor(cols, kThreads), kThreads, 0, stream, partial, slabs, cols,
         out);
  GTP_CU_LAUNCH_CHECK();
}

// ---------------------------------------------------------------- softplus

__global__ void SoftplusForwardKernel(const float* __restrict__ raw, const float* __restrict__ bias,
                                      float* __restrict__ dt, int64_t N, int64_t H) {
  const int64_t total = N * H;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float u = raw[i] + bias[i % H];
    dt[i] = u > 20.0f ? u : log1pf(expf(u));
  }
}

__global__ void SoftplusBackwardKernel(const float* __restrict__ ddt, const float* __restrict__ raw,
                                       const float* __restrict__ bias, float* __restrict__ draw,
                                       int64_t N, int64_t H) {
  const int64_t total = N * H;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float u = raw[i] + bias[i % H];
    draw[i] = ddt[i] * (u > 20.0f ? 1.0f : Sigmoid(u));
  }
}

// ---------------------------------------------------------------- A = −exp(A_log)

__global__ void NegExpForwardKernel(const float* __restrict__ a_log, float* __restrict__ a,
                                    int64_t H) {
  const int64_t h = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (h < H) a[h] = -expf(a_log[h]);
}

__global__ void NegExpBackwardKernel(const float* __restrict__ da, const float* __restrict__ a,
                                     float* __restrict__ a_log_grad, int64_t H) {
  const int64_t h = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (h < H) a_log_grad[h] += da[h] * a[h];
}

// ---------------------------------------------------------------- gated RMSNorm

// One warp per (row, group); lanes stride over the group's channels. y in
// f32 or bf16 (TY: the out-projection's input dtype, rounded here instead of
// by a cast kernel after).
template <typename TY>
__global__ void GatedRmsNormForwardKernel(const float* __restrict__ x, const float* __restrict__ z,
                                          const float* __restrict__ w, TY* __restrict__ y,
                                          float* __restrict__ rstd, int64_t N, int64_t Ch,
                                          int64_t group, float eps) {
  const int64_t Gs = Ch / group;
  const int64_t item = blockIdx.x * int64_t{kWarpsPerBlock} + threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  if (item >= N * Gs) return;
  const int64_t n = item / Gs, gi = item % Gs, base = n * Ch + gi * group;
  float ss = 0.0f;
  for (int64_t j = lane; j < group; j += kWarpSize) {
    const float g = x[base + j] * Silu(z[base + j]);
    ss += g * g;
  }
  ss = WarpSum(ss);
  const float r = 1.0f / sqrtf(ss / static_cast<float>(group) + eps);
  if (lane == 0) rstd[item] = r;
  for (int64_t j = lane; j < group; j += kWarpSize) {
    const float g = x[base + j] * Silu(z[base + j]);
    y[base + j] = Store<TY>(g * r * w[gi * group + j]);
  }
}

// dg = r·w·dy − g·r³·mean(w·dy·g); dx = dg·silu(z), dz = dg·x·silu'(z) (dz
// f32 or bf16: TZ, in_proj_z's gradient input, rounded here, not by a cast).
template <typename TZ>
__global__ void GatedRmsNormBackwardKernel(const float* __restrict__ dy,
                                           const float* __restrict__ x, const float* __restrict__ z,
                                           const float* __restrict__ w,
                                           const float* __restrict__ rstd, float* __restrict__ dx,
                                           TZ* __restrict__ dz, int64_t N, int64_t Ch,
                                           int64_t group) {
  const int64_t Gs = Ch / group;
  const int64_t item = blockIdx.x * int64_t{kWarpsPerBlock} + threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  if (item >= N * Gs) return;
  const int64_t n = item / Gs, gi = item % Gs, base = n * Ch + gi * group;
  const float r = rstd[item];
  float dot = 0.0f;
  for (int64_t j = lane; j < group; j += kWarpSize) {
    const float g = x[base + j] * Silu(z[base + j]);
    dot += w[gi * group + j] * dy[base + j] * g;
  }
  const float m = WarpSum(dot) / static_cast<float>(group);
  for (int64_t j = lane; j < group; j += kWarpSize) {
    const float zi = z[base + j], xi = x[base + j], si = Silu(zi);
    const float g = xi * si;
    const float dg = r * w[gi * group + j] * dy[base + j] - g * r * r * r * m;
    dx[base + j] = dg * si;
    dz[base + j] = Store<TZ>(dg * xi * SiluGrad(zi));
  }
}

// The same two kernels for wide groups (kRowNormMin ≤ group ≤ kThreads·
// kRowNormPer; the hybrid's is d_inner / n_groups = 1536): a block per
// (n, group) item, each thread keeping its ≤ kRowNormPer elements in
// registers from the reduction to the writes. The warp-per-item kernels
// above read x, z (and dy) twice, and at a group of 1536 the second read
// misses L2 (the live items' data exceed it). The sums are internal::
// BlockSum's (lane-strided per thread, then its fixed tree): a fixed order.
constexpr int kRowNormPer = 8;
constexpr int64_t kRowNormMin = 256;

template <typename TY>
__global__ void __launch_bounds__(kThreads)
    GatedRmsNormForwardRowKernel(const float* __restrict__ x, const float* __restrict__ z,
                                 const float* __restrict__ w, TY* __restrict__ y,
                                 float* __restrict__ rstd, int64_t N, int64_t Ch, int64_t group,
                                 float eps) {
  const int64_t Gs = Ch / group;
  for (int64_t item = blockIdx.x; item < N * Gs; item += gridDim.x) {  // uniform over the block
    const int64_t n = item / Gs, gi = item % Gs, base = n * Ch + gi * group;
    float g[kRowNormPer];
    float ss = 0.0f;
#pragma unroll
    for (int k = 0; k < kRowNormPer; ++k) {
      const int64_t j = threadIdx.x + int64_t{k} * kThreads;
      g[k] = j < group ? x[base + j] * Silu(z[base + j]) : 0.0f;
      ss += g[k] * g[k];
    }
    ss = BlockSum<kThreads>(ss);
    const float r = 1.0f / sqrtf(ss / static_cast<float>(group) + eps);
    if (threadIdx.x == 0) rstd[item] = r;
#pragma unroll
    for (int k = 0; k < kRowNormPer; ++k) {
      const int64_t j = threadIdx.x + int64_t{k} * kThreads;
      if (j < group) y[base + j] = Store<TY>(g[k] * r * w[gi * group + j]);
    }
  }
}

// The backward also sums dw: block (slab, gi) takes group gi of rows
// slab·R … (slab + 1)·R − 1 (R = NormSlabRows(N)) in order, each thread
// adding its columns' dy·g·r over those rows, and writes the slab's sums to
// partial[slab, gi·group + j]; ColumnFinishKernel adds the slabs in order.
// (So dy, x and z are read once; a separate column pass read them again.)
template <typename TZ>
__global__ void __launch_bounds__(kThreads)
    GatedRmsNormBackwardRowKernel(const float* __restrict__ dy, const float* __restrict__ x,
                                  const float* __restrict__ z, const float* __restrict__ w,
                                  const float* __restrict__ rstd, float* __restrict__ dx,
                                  TZ* __restrict__ dz, float* __restrict__ partial, int64_t N,
                                  int64_t Ch, int64_t group, int64_t slab_rows) {
  const int64_t Gs = Ch / group, gi = blockIdx.x % Gs, slab = blockIdx.x / Gs;
  const int64_t r0 = slab * slab_rows, r1 = r0 + slab_rows < N ? r0 + slab_rows : N;
  float dwp[kRowNormPer];
#pragma unroll
  for (int k = 0; k < kRowNormPer; ++k) dwp[k] = 0.0f;
  for (int64_t n = r0; n < r1; ++n) {  // uniform over the block
    const int64_t item = n * Gs + gi, base = n * Ch + gi * group;
    const float r = rstd[item];
    float xv[kRowNormPer], zv[kRowNormPer], dyv[kRowNormPer];
    float dot = 0.0f;
#pragma unroll
    for (int k = 0; k < kRowNormPer; ++k) {
      const int64_t j = threadIdx.x + int64_t{k} * kThreads;
      xv[k] = zv[k] = dyv[k] = 0.0f;
      if (j < group) {
        xv[k] = x[base + j], zv[k] = z[base + j], dyv[k] = dy[base + j];
        dot += w[gi * group + j] * dyv[k] * (xv[k] * Silu(zv[k]));
      }
    }
    const float m = BlockSum<kThreads>(dot) / static_cast<float>(group);
#pragma unroll
    for (int k = 0; k < kRowNormPer; ++k) {
      const int64_t j = threadIdx.x + int64_t{k} * kThreads;
      if (j >= group) continue;
      const float zi = zv[k], xi = xv[k], si = Silu(zi);
      const float g = xi * si;
      const float dg = r * w[gi * group + j] * dyv[k] - g * r * r * r * m;
      dx[base + j] = dg * si;
      dz[base + j] = Store<TZ>(dg * xi * SiluGrad(zi));
      dwp[k] += dyv[k] * g * r;
    }
  }
#pragma unroll
  for (int k = 0; k < kRowNormPer; ++k) {
    const int64_t j = threadIdx.x + int64_t{k} * kThreads;
    if (j < group) partial[slab * Ch + gi * group + j] = dwp[k];
  }
}

// Rows a slab of the row backward: about 1024 slabs (enough blocks for the
// GPU at one group a row), at least 4 rows each; a function of N alone, so
// reruns sum in the same order.
int64_t NormSlabRows(int64_t N) {
  const int64_t r = CeilDiv(N, 1024);
  return r > 4 ? r : 4;
}

bool RowNorm(int64_t group) { return group >= kRowNormMin && group <= kThreads * kRowNormPer; }
unsigned RowNormGrid(int64_t items) {
  return static_cast<unsigned>(items < (int64_t{1} << 20) ? items : (int64_t{1} << 20));
}

// dw's terms: dy[n, c]·g[n, c]·rstd[n, c / group], column c, row n.
struct RmsDwValue {
  const float* __restrict__ dy;
  const float* __restrict__ x;
  const float* __restrict__ z;
  const float* __restrict__ rstd;
  int64_t Ch, group;
  struct Col {
    const float* __restrict__ dy;  // each at [0, c]
    const float* __restrict__ x;
    const float* __restrict__ z;
    const float* __restrict__ rstd;  // &rstd[0, c / group]
    int64_t Ch, groups;              // groups = Ch / group: rstd's row length
    __device__ float operator()(int64_t n) const {
      const int64_t i = n * Ch;
      return dy[i] * (x[i] * Silu(z[i])) * rstd[n * groups];
    }
  };
  __device__ Col Column(int64_t c) const {
    return {dy + c, x + c, z + c, rstd + c / group, Ch, Ch / group};
  }
};

unsigned Blocks(int64_t n) { return static_cast<unsigned>(CeilDiv(n, kThreads)); }

}  // namespace

void CausalConv1dForward(const float* x, const float* w, const float* bias, float* y, int64_t B,
                         int64_t T, int64_t Ch, int64_t K, bool silu, cudaStream_t stream) {
  const int64_t total = B * T * Ch;
  if (total == 0) return;
  if (ConvRuns(B, T, Ch, K)) {
    WithConvK(K, [&](auto kk) {
      Launch(ConvForwardRunKernel<decltype(kk)::value>, ConvRunGrid(B, T, Ch), kThreads, 0, stream,
             x, w, bias, y, static_cast<int32_t>(B), static_cast<int32_t>(T),
             static_cast<int32_t>(Ch), silu);
    });
  } else if (ConvIndex32(total)) {
    Launch(ConvForwardKernel<int32_t>, GridFor(total, kThreads), kThreads, 0, stream, x, w, bias, y,
           static_cast<int32_t>(B), static_cast<int32_t>(T), static_cast<int32_t>(Ch),
           static_cast<int32_t>(K), silu);
  } else {
    Launch(ConvForwardKernel<int64_t>, GridFor(total, kThreads), kThreads, 0, stream, x, w, bias, y,
           B, T, Ch, K, silu);
  }
  GTP_CU_LAUNCH_CHECK();
}

int64_t CausalConv1dBackwardScratchFloats(int64_t B, int64_t T, int64_t Ch, int64_t K) {
  if (ConvRuns(B, T, Ch, K)) return ConvSlabs(B, T) * (K + 1) * Ch;  // the slabs' partials
  return B * T * Ch + ColumnSlabs(B * T) * (K + 1) * Ch;             // g, then the partials
}

namespace {
template <typename TX>
void CausalConv1dBackwardT(const float* dy, const float* x, const float* w, const float* bias,
                           bool silu, TX* dx, float* dw, float* dbias, float* scratch, int64_t B,
                           int64_t T, int64_t Ch, int64_t K, cudaStream_t stream) {
  const int64_t total = B * T * Ch;
  if (total == 0) return;
  const int64_t cols = (K + 1) * Ch;
  if (ConvRuns(B, T, Ch, K)) {  // one pass (ConvBackwardRunKernel), then the slabs' sums
    const int64_t slabs = ConvSlabs(B, T);
    WithConvK(K, [&](auto kk) {
      constexpr int kK = decltype(kk)::value;
      Launch(ConvBackwardRunKernel<kK, TX>,
             dim3(static_cast<unsigned>(CeilDiv(Ch, kColWidth)), static_cast<unsigned>(slabs)),
             dim3(kColWidth, kColRowThreads), 0, stream, dy, x, w, bias, dx, scratch,
             static_cast<int32_t>(B), static_cast<int32_t>(T), static_cast<int32_t>(Ch),
             static_cast<int32_t>(ConvSlabRuns(B, T)), silu);
    });
    GTP_CU_LAUNCH_CHECK();
    Launch(ColumnFinishKernel<ConvGradOut>, GridFor(cols, kThreads), kThreads, 0, stream,
           static_cast<const float*>(scratch), slabs, cols, ConvGradOut{dw, dbias, Ch, K});
    GTP_CU_LAUNCH_CHECK();
    return;
  }
  float* gpre = scratch;
  float* partial = scratch + total;
  const unsigned grid = GridFor(total, kThreads);
  if (ConvIndex32(total)) {
    const int32_t b = static_cast<int32_t>(B), t = static_cast<int32_t>(T),
                  ch = static_cast<int32_t>(Ch), k = static_cast<int32_t>(K);
    Launch(ConvPreGradKernel<int32_t>, grid, kThreads, 0, stream, dy, x, w, bias, gpre, b, t, ch, k,
           silu);
    GTP_CU_LAUNCH_CHECK();
    Launch(ConvDxKernel<int32_t, TX>, grid, kThreads, 0, stream, gpre, w, dx, b, t, ch, k);
  } else {
    Launch(ConvPreGradKernel<int64_t>, grid, kThreads, 0, stream, dy, x, w, bias, gpre, B, T, Ch, K,
           silu);
    GTP_CU_LAUNCH_CHECK();
    Launch(ConvDxKernel<int64_t, TX>, grid, kThreads, 0, stream, gpre, w, dx, B, T, Ch, K);
  }
  GTP_CU_LAUNCH_CHECK();
  ColumnReduce(ConvGradValue{gpre, x, T, Ch, K}, ConvGradOut{dw, dbias, Ch, K}, partial, B * T,
               cols, stream);
}
}  // namespace

void CausalConv1dBackward(const float* dy, const float* x, const float* w, const float* bias,
                          bool silu, float* dx, float* dw, float* dbias, float* scratch, int64_t B,
                          int64_t T, int64_t Ch, int64_t K, cudaStream_t stream) {
  CausalConv1dBackwardT(dy, x, w, bias, silu, dx, dw, dbias, scratch, B, T, Ch, K, stream);
}
void CausalConv1dBackward(const float* dy, const float* x, const float* w, const float* bias,
                          bool silu, bf16* dx, float* dw, float* dbias, float* scratch, int64_t B,
                          int64_t T, int64_t Ch, int64_t K, cudaStream_t stream) {
  CausalConv1dBackwardT(dy, x, w, bias, silu, dx, dw, dbias, scratch, B, T, Ch, K, stream);
}

void SoftplusBiasForward(const float* raw, const float* bias, float* dt, int64_t N, int64_t H,
                         cudaStream_t stream) {
  if (N * H == 0) return;
  Launch(SoftplusForwardKernel, GridFor(N * H, kThreads), kThreads, 0, stream, raw, bias, dt, N, H);
  GTP_CU_LAUNCH_CHECK();
}

int64_t SoftplusBiasBackwardScratchFloats(int64_t N, int64_t H) { return ColumnSlabs(N) * H; }

void SoftplusBiasBackward(const float* ddt, const float* raw, const float* bias, float* draw,
                          float* dbias, float* scratch, int64_t N, int64_t H, cudaStream_t stream) {
  if (N * H == 0) return;
  Launch(SoftplusBackwardKernel, GridFor(N * H, kThreads), kThreads, 0, stream, ddt, raw, bias,
         draw, N, H);
  GTP_CU_LAUNCH_CHECK();
  ColumnReduce(PlainValue{draw, H}, AddOut{dbias}, scratch, N, H, stream);
}

void NegExpForward(const float* a_log, float* a, int64_t H, cudaStream_t stream) {
  if (H == 0) return;
  Launch(NegExpForwardKernel, Blocks(H), kThreads, 0, stream, a_log, a, H);
  GTP_CU_LAUNCH_CHECK();
}

void NegExpBackwardAccumulate(const float* da, const float* a, float* a_log_grad, int64_t H,
                              cudaStream_t stream) {
  if (H == 0) return;
  Launch(NegExpBackwardKernel, Blocks(H), kThreads, 0, stream, da, a, a_log_grad, H);
  GTP_CU_LAUNCH_CHECK();
}

namespace {
template <typename TY>
void GatedRmsNormForwardT(const float* x, const float* z, const float* w, TY* y, float* rstd,
                          int64_t N, int64_t Ch, int64_t group, float eps, cudaStream_t stream) {
  const int64_t items = N * (Ch / group);
  if (items == 0) return;
  if (RowNorm(group)) {
    Launch(GatedRmsNormForwardRowKernel<TY>, RowNormGrid(items), kThreads, 0, stream, x, z, w, y,
           rstd, N, Ch, group, eps);
  } else {
    Launch(GatedRmsNormForwardKernel<TY>, static_cast<unsigned>(CeilDiv(items, kWarpsPerBlock)),
           kThreads, 0, stream, x, z, w, y, rstd, N, Ch, group, eps);
  }
  GTP_CU_LAUNCH_CHECK();
}
}  // namespace

void GatedRmsNormForward(const float* x, const float* z, const float* w, float* y, float* rstd,
                         int64_t N, int64_t Ch, int64_t group, float eps, cudaStream_t stream) {
  GatedRmsNormForwardT(x, z, w, y, rstd, N, Ch, group, eps, stream);
}
void GatedRmsNormForward(const float* x, const float* z, const float* w, bf16* y, float* rstd,
                         int64_t N, int64_t Ch, int64_t group, float eps, cudaStream_t stream) {
  GatedRmsNormForwardT(x, z, w, y, rstd, N, Ch, group, eps, stream);
}

int64_t GatedRmsNormBackwardScratchFloats(int64_t N, int64_t Ch) {
  // The column pass's partials (narrow groups) or the row kernel's slabs.
  const int64_t row_slabs = N > 0 ? CeilDiv(N, NormSlabRows(N)) : 0;
  return (ColumnSlabs(N) > row_slabs ? ColumnSlabs(N) : row_slabs) * Ch;
}

namespace {
template <typename TZ>
void GatedRmsNormBackwardT(const float* dy, const float* x, const float* z, const float* w,
                           const float* rstd, float* dx, TZ* dz, float* dw, float* scratch,
                           int64_t N, int64_t Ch, int64_t group, cudaStream_t stream) {
  const int64_t items = N * (Ch / group);
  if (items == 0) return;
  if (RowNorm(group)) {
    const int64_t slab_rows = NormSlabRows(N), slabs = CeilDiv(N, slab_rows);
    GTP_CU_REQUIRE(slabs * (Ch / group) < (int64_t{1} << 31), "gated RMSNorm backward: %lld blocks",
                   static_cast<long long>(slabs * (Ch / group)));
    Launch(GatedRmsNormBackwardRowKernel<TZ>, static_cast<unsigned>(slabs * (Ch / group)), kThreads,
           0, stream, dy, x, z, w, rstd, dx, dz, scratch, N, Ch, group, slab_rows);
    GTP_CU_LAUNCH_CHECK();
    Launch(ColumnFinishKernel<AddOut>, GridFor(Ch, kThreads), kThreads, 0, stream,
           static_cast<const float*>(scratch), slabs, Ch, AddOut{dw});
    GTP_CU_LAUNCH_CHECK();
    return;
  }
  Launch(GatedRmsNormBackwardKernel<TZ>, static_cast<unsigned>(CeilDiv(items, kWarpsPerBlock)),
         kThreads, 0, stream, dy, x, z, w, rstd, dx, dz, N, Ch, group);
  GTP_CU_LAUNCH_CHECK();
  ColumnReduce(RmsDwValue{dy, x, z, rstd, Ch, group}, AddOut{dw}, scratch, N, Ch, stream);
}
}  // namespace

void GatedRmsNormBackward(const float* dy, const float* x, const float* z, const float* w,
                          const float* rstd, float* dx, float* dz, float* dw, float* scratch,
                          int64_t N, int64_t Ch, int64_t group, cudaStream_t stream) {
  GatedRmsNormBackwardT(dy, x, z, w, rstd, dx, dz, dw, scratch, N, Ch, group, stream);
}
void GatedRmsNormBackward(const float* dy, const float* x, const float* z, const float* w,
                          const float* rstd, float* dx, bf16* dz, float* dw, float* scratch,
                          int64_t N, int64_t Ch, int64_t group, cudaStream_t stream) {
  GatedRmsNormBackwardT(dy, x, z, w, rstd, dx, dz, dw, scratch, N, Ch, group, stream);
}

}  // namespace gtp::kernels::ssm::cuda
