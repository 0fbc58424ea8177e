// core/kernels/ssm/mamba_conv.cu — the Mamba-2 mixer's causal depthwise
// conv1d on CUDA (mamba_ops_cuda.h; math in mamba_ops.h): the forward, and
// the backward's dx, dw and dbias. Deterministic: every sum in a fixed order
// (the column sums in mamba_common.cuh's two passes over row slabs).
#include <cuda_runtime.h>

#include <algorithm>
#include <type_traits>

#include "core/kernels/ssm/mamba_common.cuh"
#include "core/kernels/ssm/mamba_ops_cuda.h"

namespace gtp::kernels::ssm::cuda {
namespace {

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

// The wide-channel backward (Ch a multiple of kStreamChannels; x, dy and
// dx aligned to a thread's 2 channels): a thread takes 2 adjacent channels
// (one 8-byte load of x and of dy a step) of a segment of kStreamSeg consecutive steps of
// one sequence, and walks it in order with the last K steps' x and g in
// registers: each step's g = dy·act'(pre) is formed once (the run kernel
// recomputes the K − 1 after each 8-step run, and reads their x and dy
// again), and dx[s] is written when g[s + K − 1] is known. Grid (Ch /
// kStreamChannels, slabs), block (32 lanes × 8 row-threads); row-thread ry of
// slab y takes segment 8·y + ry of the B·⌈T / kStreamSeg⌉ list, its dw and
// dbias terms summed in step order, the 8 row-threads' sums in order into
// partial[slab, k·Ch + c]; ColumnFinishKernel adds the slabs in order. pre, g
// and dx are the per-output kernels' expressions (so the same bits); the dw
// and dbias sums are rounded one by one, in this kernel's own order (a
// function of B and T alone, so reruns give the same bits).
constexpr int kStreamSeg = 32, kStreamVec = 2, kStreamChannels = kColWidth * kStreamVec;
// Steps whose loads are issued together: 4 (at K = 4, 8 spilled registers
// under the 3-blocks-an-SM bound; 4 fits in 80 with no stack).
constexpr int kStreamGroup = 4;
static_assert(kStreamSeg % kStreamGroup == 0, "the interior steps come in whole groups");

// One thread's segment of ConvBackwardStreamKernel, and its step t: shift
// x[t] and g[t] into the windows (xw[k], gw[k] = x, g at step t − (K−1) + k),
// form g[t], add t's dw and dbias terms (dw), and write dx[t − (K−1)] (dx).
// kChecked: the sequence's ends are guarded (steps before 0 and from T on)
// as the per-output kernels guard them; unchecked steps must lie where every
// such guard is true (the same operations, so the same bits).
template <int kK, typename TX>
struct StreamSeg {
  const float* x;
  const float* dy;
  TX* dx;
  const float (&wk)[kK][kStreamVec];
  const float (&b0)[kStreamVec];
  int32_t T, Ch;
  bool silu;

  __device__ __forceinline__ float2 At(const float* p, int32_t t) const {
    return *reinterpret_cast<const float2*>(p + int64_t{t} * Ch);
  }

  template <bool kChecked>
  __device__ __forceinline__ void Step(int32_t t, float2 xl, float2 dl, bool dw, bool write_dx,
                                       float (&xw)[kK][kStreamVec], float (&gw)[kK][kStreamVec],
                                       float (&acc)[kK + 1][kStreamVec]) const {
    const float xv[kStreamVec] = {xl.x, xl.y};
    const float dv[kStreamVec] = {dl.x, dl.y};
    float d[kStreamVec];
#pragma unroll
    for (int v = 0; v < kStreamVec; ++v) {
#pragma unroll
      for (int k = 0; k + 1 < kK; ++k) xw[k][v] = xw[k + 1][v];
      xw[kK - 1][v] = xv[v];
      float g = 0.0f;
      if (!kChecked || t < T) {
        g = dv[v];
        if (silu) {
          float pre = b0[v];
#pragma unroll
          for (int k = 0; k < kK; ++k) {
            if (!kChecked || t - (kK - 1) + k >= 0) pre += wk[k][v] * xw[k][v];  // as ConvAt
          }
          g *= SiluGrad(pre);
        }
      }
      if (dw) {
#pragma unroll
        for (int k = 0; k < kK; ++k) {
          const bool in = !kChecked || t - (kK - 1) + k >= 0;
          acc[k][v] = __fadd_rn(acc[k][v], in ? __fmul_rn(g, xw[k][v]) : 0.0f);
        }
        acc[kK][v] = __fadd_rn(acc[kK][v], g);
      }
#pragma unroll
      for (int k = 0; k + 1 < kK; ++k) gw[k][v] = gw[k + 1][v];
      gw[kK - 1][v] = g;
      d[v] = 0.0f;  // dx[s] = Σ_k g[s + K − 1 − k]·w[k] over s + K − 1 − k < T
#pragma unroll
      for (int k = 0; k < kK; ++k) {
        if (!kChecked || t - k < T) d[v] += gw[kK - 1 - k][v] * wk[k][v];
      }
    }
    if (!write_dx) return;
    TX* out = dx + int64_t{t - (kK - 1)} * Ch;
    if constexpr (std::is_same_v<TX, float>) {
      *reinterpret_cast<float2*>(out) = make_float2(d[0], d[1]);
    } else {
      *reinterpret_cast<uint32_t*>(out) = static_cast<uint32_t>(Store<TX>(d[0]).bits) |
                                          (static_cast<uint32_t>(Store<TX>(d[1]).bits) << 16);
    }
  }
};

template <int kK, typename TX>
__global__ void __launch_bounds__(kColWidth* kColRowThreads, 3)
    ConvBackwardStreamKernel(const float* __restrict__ dy, const float* __restrict__ x,
                             const float* __restrict__ w, const float* __restrict__ bias,
                             TX* __restrict__ dx, float* __restrict__ partial, int32_t B, int32_t T,
                             int32_t Ch, bool silu) {
  __shared__ float red[kK + 1][kColRowThreads][kStreamChannels + 1];
  const int cx = threadIdx.x, ry = threadIdx.y;
  const int32_t c0 = (blockIdx.x * kColWidth + cx) * kStreamVec;  // < Ch: Ch % 64 == 0
  const int32_t segs = (T + kStreamSeg - 1) / kStreamSeg;
  const int32_t q = blockIdx.y * kColRowThreads + ry;
  float acc[kK + 1][kStreamVec];
#pragma unroll
  for (int k = 0; k <= kK; ++k) {
#pragma unroll
    for (int v = 0; v < kStreamVec; ++v) acc[k][v] = 0.0f;
  }
  if (q < B * segs) {
    const int32_t b = q / segs, t0 = (q % segs) * kStreamSeg;
    const int32_t t1 = t0 + kStreamSeg < T ? t0 + kStreamSeg : T;
    float wk[kK][kStreamVec], b0[kStreamVec];
#pragma unroll
    for (int v = 0; v < kStreamVec; ++v) {
#pragma unroll
      for (int k = 0; k < kK; ++k) wk[k][v] = w[(c0 + v) * kK + k];
      b0[v] = bias[c0 + v];
    }
    const float* xs = x + int64_t{b} * T * Ch + c0;
    const float* dys = dy + int64_t{b} * T * Ch + c0;
    TX* dxs = dx + int64_t{b} * T * Ch + c0;
    // At step t: xw[k] = x and gw[k] = g at step t − (K−1) + k (each step
    // shifts them by one first, so they start as of step t0 − 1).
    float xw[kK][kStreamVec], gw[kK][kStreamVec];
#pragma unroll
    for (int k = 0; k < kK; ++k) {
      const int32_t s = t0 - kK + k;  // the K − 1 steps before t0 (k ≥ 1)
      const float2 u = k >= 1 && s >= 0 ? *reinterpret_cast<const float2*>(xs + int64_t{s} * Ch)
                                        : make_float2(0.f, 0.f);
      xw[k][0] = u.x, xw[k][1] = u.y;
#pragma unroll
      for (int v = 0; v < kStreamVec; ++v) gw[k][v] = 0.0f;
    }
    const StreamSeg<kK, TX> seg{xs, dys, dxs, wk, b0, T, Ch, silu};
    // Interior segments (whole, with K − 1 steps before and after them in
    // the sequence) take the unchecked steps: every guard below is true
    // there, and which steps add dw and write dx is known per step.
    if (t0 >= kK - 1 && t1 - t0 == kStreamSeg && t1 + (kK - 1) <= T) {
      auto group = [&](int32_t tg, auto n, bool first, bool dw) {
        constexpr int kN = decltype(n)::value;
        float2 xl[kN], dl[kN];
#pragma unroll
        for (int j = 0; j < kN; ++j) xl[j] = seg.At(seg.x, tg + j), dl[j] = seg.At(seg.dy, tg + j);
#pragma unroll
        for (int j = 0; j < kN; ++j) {
          seg.template Step<false>(tg + j, xl[j], dl[j], dw, !first || j >= kK - 1, xw, gw, acc);
        }
      };
      group(t0, std::integral_constant<int, kStreamGroup>{}, true, true);
#pragma unroll 1
      for (int32_t tg = t0 + kStreamGroup; tg < t1; tg += kStreamGroup) {
        group(tg, std::integral_constant<int, kStreamGroup>{}, false, true);
      }
      if constexpr (kK > 1) group(t1, std::integral_constant<int, kK - 1>{}, false, false);
    } else {
      const int32_t t_end = t1 + (kK - 1);  // g through t1 + K − 2 feeds dx below t1
      for (int32_t tg = t0; tg < t_end; tg += kStreamGroup) {
        float2 xl[kStreamGroup], dl[kStreamGroup];
#pragma unroll
        for (int j = 0; j < kStreamGroup; ++j) {
          const int32_t t = tg + j;
          const bool in = t < t_end && t < T;
          xl[j] = in ? seg.At(seg.x, t) : make_float2(0.f, 0.f);
          dl[j] = in ? seg.At(seg.dy, t) : make_float2(0.f, 0.f);
        }
#pragma unroll
        for (int j = 0; j < kStreamGroup; ++j) {
          const int32_t t = tg + j;
          if (t >= t_end) break;
          seg.template Step<true>(t, xl[j], dl[j], t < t1, t - (kK - 1) >= t0, xw, gw, acc);
        }
      }
    }
  }
#pragma unroll
  for (int k = 0; k <= kK; ++k) {
#pragma unroll
    for (int v = 0; v < kStreamVec; ++v) red[k][ry][cx * kStreamVec + v] = acc[k][v];
  }
  __syncthreads();
  // kStreamChannels channels × (K + 1) sums of 8 row-threads, spread over the block.
  const int64_t cols = int64_t{kK + 1} * Ch;
  for (int i = ry * kColWidth + cx; i < (kK + 1) * kStreamChannels;
       i += kColWidth * kColRowThreads) {
    const int k = i / kStreamChannels, cc = i % kStreamChannels;
    float sum = 0.0f;
    for (int qy = 0; qy < kColRowThreads; ++qy) sum += red[k][qy][cc];
    partial[blockIdx.y * cols + k * int64_t{Ch} + blockIdx.x * kStreamChannels + cc] = sum;
  }
}

// Slabs of ConvBackwardStreamKernel: 8 segments each.
int64_t ConvStreamSlabs(int64_t B, int64_t T) {
  return CeilDiv(B * CeilDiv(T, kStreamSeg), kColRowThreads);
}
// Whether the stream kernel takes a backward: the run kernels' conditions,
// whole blocks of kStreamChannels, slabs within the grid's y limit (65535,
// which many short sequences near the 32-bit index limit would pass), and x,
// dy and dx aligned to a thread's kStreamVec channels (rows then are too: Ch
// is a multiple of them).
bool ConvStreams(int64_t B, int64_t T, int64_t Ch, int64_t K, const void* dy, const void* x,
                 const void* dx, size_t dx_elem) {
  const auto aligned = [](const void* p, size_t n) {
    return reinterpret_cast<uintptr_t>(p) % n == 0;
  };
  return ConvRuns(B, T, Ch, K) && Ch % kStreamChannels == 0 && ConvStreamSlabs(B, T) <= 65535 &&
         aligned(dy, kStreamVec * sizeof(float)) && aligned(x, kStreamVec * sizeof(float)) &&
         aligned(dx, kStreamVec * dx_elem);
}

// Entries of the (b, run) list a slab of ConvBackwardRunKernel. Wide
// channels: about 64 slabs, at least 16 entries (2 a row-thread) each.
// Narrow ones (fewer than 10 blocks of 32 channels, such as the mixer's
// 16-channel B and C convs): about 512 blocks in all, at least 8 entries (1
// a row-thread) each, so a small conv is not 64 blocks of runs done one after
// another. A function of the shape alone, so reruns sum in the same order.
// (Ch = 0, nothing to sum, counts as one block: no division by zero.)
int64_t ConvSlabRuns(int64_t B, int64_t T, int64_t Ch) {
  const int64_t channel_blocks = std::max<int64_t>(1, CeilDiv(Ch, kColWidth));
  const int64_t want = channel_blocks >= 10 ? 64 : 512 / channel_blocks;
  const int64_t least = channel_blocks >= 10 ? 16 : 8;
  const int64_t total = B * CeilDiv(T, kConvRun), r = CeilDiv(total, want);
  return r > least ? r : least;
}
int64_t ConvSlabs(int64_t B, int64_t T, int64_t Ch) {
  return CeilDiv(B * CeilDiv(T, kConvRun), ConvSlabRuns(B, T, Ch));
}

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
  if (ConvRuns(B, T, Ch, K)) {  // the slabs' partials (of the stream or the run kernel)
    const int64_t slabs = std::max(ConvSlabs(B, T, Ch), ConvStreamSlabs(B, T));
    return slabs * (K + 1) * Ch;
  }
  return B * T * Ch + ColumnSlabs(B * T) * (K + 1) * Ch;  // g, then the partials
}

namespace {
template <typename TX>
void CausalConv1dBackwardT(const float* dy, const float* x, const float* w, const float* bias,
                           bool silu, TX* dx, float* dw, float* dbias, float* scratch, int64_t B,
                           int64_t T, int64_t Ch, int64_t K, cudaStream_t stream) {
  const int64_t total = B * T * Ch;
  if (total == 0) return;
  const int64_t cols = (K + 1) * Ch;
  if (ConvRuns(B, T, Ch, K)) {  // one pass (the stream or the run kernel), then the slabs' sums
    const bool streams = ConvStreams(B, T, Ch, K, dy, x, dx, sizeof(TX));
    const int64_t slabs = streams ? ConvStreamSlabs(B, T) : ConvSlabs(B, T, Ch);
    const int32_t b = static_cast<int32_t>(B), t = static_cast<int32_t>(T),
                  ch = static_cast<int32_t>(Ch);
    WithConvK(K, [&](auto kk) {
      constexpr int kK = decltype(kk)::value;
      if (streams) {
        Launch(ConvBackwardStreamKernel<kK, TX>,
               dim3(static_cast<unsigned>(Ch / kStreamChannels), static_cast<unsigned>(slabs)),
               dim3(kColWidth, kColRowThreads), 0, stream, dy, x, w, bias, dx, scratch, b, t, ch,
               silu);
      } else {
        Launch(ConvBackwardRunKernel<kK, TX>,
               dim3(static_cast<unsigned>(CeilDiv(Ch, kColWidth)), static_cast<unsigned>(slabs)),
               dim3(kColWidth, kColRowThreads), 0, stream, dy, x, w, bias, dx, scratch, b, t, ch,
               static_cast<int32_t>(ConvSlabRuns(B, T, Ch)), silu);
      }
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

}  // namespace gtp::kernels::ssm::cuda
