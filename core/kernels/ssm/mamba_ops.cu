// core/kernels/ssm/mamba_ops.cu — CUDA kernels of the Mamba-2 mixer's small
// ops (mamba_ops_cuda.h; math in mamba_ops.h): dt softplus, A = −exp(A_log),
// gated RMSNorm (the causal conv1d is mamba_conv.cu's). Deterministic: every
// reduction is done by one thread in a fixed order, by a warp's xor shuffles
// or by a block's fixed tree; column sums (norm weight grads, biases) in
// mamba_common.cuh's two fixed-order passes over row slabs.
#include <cuda_runtime.h>

#include "core/kernels/ssm/mamba_common.cuh"
#include "core/kernels/ssm/mamba_ops_cuda.h"

namespace gtp::kernels::ssm::cuda {
namespace {

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
// f32 or bf16: TZ, in_proj_z's gradient input, rounded here, not by a cast;
// dy f32 or bf16: TD, out_proj's input gradient read as it is, each value
// widened exactly, so a bf16 dy gives the bits of its f32 cast).
template <typename TD, typename TZ>
__global__ void GatedRmsNormBackwardKernel(const TD* __restrict__ dy, const float* __restrict__ x,
                                           const float* __restrict__ z, const float* __restrict__ w,
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
    dot += w[gi * group + j] * Load(dy[base + j]) * g;
  }
  const float m = WarpSum(dot) / static_cast<float>(group);
  for (int64_t j = lane; j < group; j += kWarpSize) {
    const float zi = z[base + j], xi = x[base + j], si = Silu(zi);
    const float g = xi * si;
    const float dg = r * w[gi * group + j] * Load(dy[base + j]) - g * r * r * r * m;
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

// The forward over many rows (NormForwardSlabs): block (slab, gi) takes
// group gi of rows slab·R … (slab + 1)·R − 1 (R = NormSlabRows(N)), loading
// row n + 1's x and z before row n's block sum, as the backward does, so a
// row's loads overlap the previous row's reduction and stores (a block per
// row waited on its loads every row). Each row's arithmetic is the row
// kernel's, term for term: the same bits.
template <typename TY>
__global__ void __launch_bounds__(kThreads, 4)
    GatedRmsNormForwardSlabKernel(const float* __restrict__ x, const float* __restrict__ z,
                                  const float* __restrict__ w, TY* __restrict__ y,
                                  float* __restrict__ rstd, int64_t N, int64_t Ch, int64_t group,
                                  int64_t slab_rows, float eps) {
  const int64_t Gs = Ch / group, gi = blockIdx.x % Gs, slab = blockIdx.x / Gs;
  const int64_t r0 = slab * slab_rows, r1 = r0 + slab_rows < N ? r0 + slab_rows : N;
  float wv[kRowNormPer], xn[kRowNormPer], zn[kRowNormPer];
  auto load_row = [&](int64_t n) {
    const int64_t base = n * Ch + gi * group;
#pragma unroll
    for (int k = 0; k < kRowNormPer; ++k) {
      const int64_t j = threadIdx.x + int64_t{k} * kThreads;
      xn[k] = zn[k] = 0.0f;
      if (j < group) xn[k] = x[base + j], zn[k] = z[base + j];
    }
  };
#pragma unroll
  for (int k = 0; k < kRowNormPer; ++k) {
    const int64_t j = threadIdx.x + int64_t{k} * kThreads;
    wv[k] = j < group ? w[gi * group + j] : 0.0f;
  }
  if (r0 < r1) load_row(r0);
  for (int64_t n = r0; n < r1; ++n) {  // uniform over the block
    const int64_t base = n * Ch + gi * group;
    float g[kRowNormPer];
    float ss = 0.0f;
#pragma unroll
    for (int k = 0; k < kRowNormPer; ++k) {
      const int64_t j = threadIdx.x + int64_t{k} * kThreads;
      g[k] = j < group ? xn[k] * Silu(zn[k]) : 0.0f;
      ss += g[k] * g[k];
    }
    if (n + 1 < r1) load_row(n + 1);  // g holds this row: xn, zn are free
    ss = BlockSum<kThreads>(ss);
    const float r = 1.0f / sqrtf(ss / static_cast<float>(group) + eps);
    if (threadIdx.x == 0) rstd[n * Gs + gi] = r;
#pragma unroll
    for (int k = 0; k < kRowNormPer; ++k) {
      const int64_t j = threadIdx.x + int64_t{k} * kThreads;
      if (j < group) y[base + j] = Store<TY>(g[k] * r * wv[k]);
    }
  }
}

// The backward also sums dw: block (slab, gi) takes group gi of rows
// slab·R … (slab + 1)·R − 1 (R = NormSlabRows(N)) in order, each thread
// adding its columns' dy·g·r over those rows, and writes the slab's sums to
// partial[slab, gi·group + j]; ColumnReduce adds the slabs (fixed order).
// (So dy, x and z are read once; a separate column pass read them again.)
template <typename TD, typename TZ>
__global__ void __launch_bounds__(kThreads, 3)
    GatedRmsNormBackwardRowKernel(const TD* __restrict__ dy, const float* __restrict__ x,
                                  const float* __restrict__ z, const float* __restrict__ w,
                                  const float* __restrict__ rstd, float* __restrict__ dx,
                                  TZ* __restrict__ dz, float* __restrict__ partial, int64_t N,
                                  int64_t Ch, int64_t group, int64_t slab_rows) {
  const int64_t Gs = Ch / group, gi = blockIdx.x % Gs, slab = blockIdx.x / Gs;
  const int64_t r0 = slab * slab_rows, r1 = r0 + slab_rows < N ? r0 + slab_rows : N;
  float dwp[kRowNormPer], wv[kRowNormPer];
  // The next row's x, z, dy and rstd are loaded before this row's block sum,
  // so a row's loads overlap the previous row's reduction and stores (one
  // row at a time left each block waiting on its loads at every row). Held
  // to 80 registers (3 blocks an SM, two rows each in flight; unbounded it
  // took 112, 2 blocks; 4 blocks spill). The arithmetic is unchanged: the
  // same bits.
  float xn[kRowNormPer], zn[kRowNormPer], dyn[kRowNormPer], rn = 0.0f;
  auto load_row = [&](int64_t n) {
    const int64_t base = n * Ch + gi * group;
    rn = rstd[n * Gs + gi];
#pragma unroll
    for (int k = 0; k < kRowNormPer; ++k) {
      const int64_t j = threadIdx.x + int64_t{k} * kThreads;
      xn[k] = zn[k] = dyn[k] = 0.0f;
      if (j < group) xn[k] = x[base + j], zn[k] = z[base + j], dyn[k] = Load(dy[base + j]);
    }
  };
#pragma unroll
  for (int k = 0; k < kRowNormPer; ++k) {
    const int64_t j = threadIdx.x + int64_t{k} * kThreads;
    dwp[k] = 0.0f;
    wv[k] = j < group ? w[gi * group + j] : 0.0f;
  }
  if (r0 < r1) load_row(r0);
  for (int64_t n = r0; n < r1; ++n) {  // uniform over the block
    const int64_t base = n * Ch + gi * group;
    const float r = rn;
    float xv[kRowNormPer], zv[kRowNormPer], dyv[kRowNormPer];
#pragma unroll
    for (int k = 0; k < kRowNormPer; ++k) xv[k] = xn[k], zv[k] = zn[k], dyv[k] = dyn[k];
    if (n + 1 < r1) load_row(n + 1);
    float dot = 0.0f;
#pragma unroll
    for (int k = 0; k < kRowNormPer; ++k) {
      const int64_t j = threadIdx.x + int64_t{k} * kThreads;
      if (j < group) dot += wv[k] * dyv[k] * (xv[k] * Silu(zv[k]));
    }
    const float m = BlockSum<kThreads>(dot) / static_cast<float>(group);
#pragma unroll
    for (int k = 0; k < kRowNormPer; ++k) {
      const int64_t j = threadIdx.x + int64_t{k} * kThreads;
      if (j >= group) continue;
      const float zi = zv[k], xi = xv[k], si = Silu(zi);
      const float g = xi * si;
      const float dg = r * wv[k] * dyv[k] - g * r * r * r * m;
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
// Whether the wide-group forward takes slabs of rows: from N = 4096, where
// NormSlabRows gives about 1024 slabs of at least 4 rows; fewer rows keep a
// block per row, for more blocks.
bool NormForwardSlabs(int64_t N) { return N >= 4096; }
unsigned RowNormGrid(int64_t items) {
  return static_cast<unsigned>(items < (int64_t{1} << 20) ? items : (int64_t{1} << 20));
}

// dw's terms: dy[n, c]·g[n, c]·rstd[n, c / group], column c, row n.
template <typename TD>
struct RmsDwValue {
  const TD* __restrict__ dy;
  const float* __restrict__ x;
  const float* __restrict__ z;
  const float* __restrict__ rstd;
  int64_t Ch, group;
  struct Col {
    const TD* __restrict__ dy;  // each at [0, c]
    const float* __restrict__ x;
    const float* __restrict__ z;
    const float* __restrict__ rstd;  // &rstd[0, c / group]
    int64_t Ch, groups;              // groups = Ch / group: rstd's row length
    __device__ float operator()(int64_t n) const {
      const int64_t i = n * Ch;
      return Load(dy[i]) * (x[i] * Silu(z[i])) * rstd[n * groups];
    }
  };
  __device__ Col Column(int64_t c) const {
    return {dy + c, x + c, z + c, rstd + c / group, Ch, Ch / group};
  }
};

unsigned Blocks(int64_t n) { return static_cast<unsigned>(CeilDiv(n, kThreads)); }

}  // namespace

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
  if (RowNorm(group) && NormForwardSlabs(N)) {
    const int64_t slab_rows = NormSlabRows(N), blocks = CeilDiv(N, slab_rows) * (Ch / group);
    GTP_CU_REQUIRE(blocks < (int64_t{1} << 31), "gated RMSNorm forward: %lld blocks",
                   static_cast<long long>(blocks));
    Launch(GatedRmsNormForwardSlabKernel<TY>, static_cast<unsigned>(blocks), kThreads, 0, stream, x,
           z, w, y, rstd, N, Ch, group, slab_rows, eps);
  } else if (RowNorm(group)) {
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
  // The column pass's partials (narrow groups), or the row kernel's slabs
  // followed by the partials of their own column sums (ColumnReduce).
  const int64_t row_slabs = N > 0 ? CeilDiv(N, NormSlabRows(N)) : 0;
  const int64_t row = (row_slabs + ColumnSlabs(row_slabs)) * Ch;
  return ColumnSlabs(N) * Ch > row ? ColumnSlabs(N) * Ch : row;
}

namespace {
template <typename TD, typename TZ>
void GatedRmsNormBackwardT(const TD* dy, const float* x, const float* z, const float* w,
                           const float* rstd, float* dx, TZ* dz, float* dw, float* scratch,
                           int64_t N, int64_t Ch, int64_t group, cudaStream_t stream) {
  const int64_t items = N * (Ch / group);
  if (items == 0) return;
  if (RowNorm(group)) {
    const int64_t slab_rows = NormSlabRows(N), slabs = CeilDiv(N, slab_rows);
    GTP_CU_REQUIRE(slabs * (Ch / group) < (int64_t{1} << 31), "gated RMSNorm backward: %lld blocks",
                   static_cast<long long>(slabs * (Ch / group)));
    Launch(GatedRmsNormBackwardRowKernel<TD, TZ>, static_cast<unsigned>(slabs * (Ch / group)),
           kThreads, 0, stream, dy, x, z, w, rstd, dx, dz, scratch, N, Ch, group, slab_rows);
    GTP_CU_LAUNCH_CHECK();
    // dw += the slabs' column sums, by ColumnReduce's two passes over the
    // [slabs, Ch] partials (about a thousand slabs: one thread per column
    // adding them in order left six blocks each a thousand loads long).
    ColumnReduce(PlainValue{scratch, Ch}, AddOut{dw}, scratch + slabs * Ch, slabs, Ch, stream);
    return;
  }
  Launch(GatedRmsNormBackwardKernel<TD, TZ>, static_cast<unsigned>(CeilDiv(items, kWarpsPerBlock)),
         kThreads, 0, stream, dy, x, z, w, rstd, dx, dz, N, Ch, group);
  GTP_CU_LAUNCH_CHECK();
  ColumnReduce(RmsDwValue<TD>{dy, x, z, rstd, Ch, group}, AddOut{dw}, scratch, N, Ch, stream);
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
void GatedRmsNormBackward(const bf16* dy, const float* x, const float* z, const float* w,
                          const float* rstd, float* dx, float* dz, float* dw, float* scratch,
                          int64_t N, int64_t Ch, int64_t group, cudaStream_t stream) {
  GatedRmsNormBackwardT(dy, x, z, w, rstd, dx, dz, dw, scratch, N, Ch, group, stream);
}
void GatedRmsNormBackward(const bf16* dy, const float* x, const float* z, const float* w,
                          const float* rstd, float* dx, bf16* dz, float* dw, float* scratch,
                          int64_t N, int64_t Ch, int64_t group, cudaStream_t stream) {
  GatedRmsNormBackwardT(dy, x, z, w, rstd, dx, dz, dw, scratch, N, Ch, group, stream);
}

}  // namespace gtp::kernels::ssm::cuda
