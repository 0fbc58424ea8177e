// core/kernels/cuda/norm.cu — LayerNorm and RMSNorm over the last dim C of
// x[N, C].
//
//   LayerNorm: y = (x − mean)·rstd·w + b,  rstd = 1/√(var + eps)
//   RMSNorm:   y = x·rstd·w,               rstd = 1/√(mean(x²) + eps)
//   Backward with x̂ = (x − mean)·rstd (x·rstd for RMSNorm), g = dy·w:
//     dx = rstd·(g − mean(g) − x̂·mean(g·x̂))    (RMSNorm: no mean(g) term)
//     dw += Σ_n dy·x̂,  db += Σ_n dy
//
// Row statistics and dx: one warp per row. dw/db deterministically in two
// passes: the rows are cut into P chunks (P depends on N only); pass 1 writes
// each chunk's column sums to scratch[P, C], pass 2 adds the P partials of a
// column in a fixed order (32 strided sums, then those in order) and then
// adds the total into dw/db. For
// bf16 rows with C a multiple of 256 up to 1536 (every GPU training shape we
// run) pass 1 is fused into the dx kernel: one read of dy and x in all.
//
// x, w, b, y, dy, dx are f32 or bf16 (one type per call); mean, rstd, dw, db
// and the scratch are f32; all math is f32 (cuda/elem.cuh). bf16 rows with
// C % 8 == 0 and 16-byte aligned buffers are read and written 8 elements (16
// bytes) per lane access; that changes the f32 summation order of the row
// statistics, not the determinism.
#include <cuda_runtime.h>

#include <type_traits>

#include "core/kernels/cuda.h"
#include "core/kernels/cuda/common.cuh"
#include "core/kernels/cuda/elem.cuh"

namespace gtp::kernels::cuda {
namespace {

using internal::Aligned16;
using internal::CeilDiv;
using internal::InOrderSum;
using internal::kBf16Vec;
using internal::kWarpSize;
using internal::Launch;
using internal::LoadVec;
using internal::StoreVec;
using internal::WarpSum;
using internal::WithVec;

constexpr int kRowThreads = 256;  // 8 rows (warps) per block
constexpr int kRowsPerBlock = kRowThreads / kWarpSize;
constexpr int kColThreads = 256;
constexpr int64_t kMinRowsPerChunk = 16;
constexpr int64_t kMaxChunks = 1024;

// Number of row chunks of the dw/db reduction; a function of N only, so the
// summation order (and the bits) never depend on the device.
int64_t NormChunks(int64_t N) {
  const int64_t p = CeilDiv(N, kMinRowsPerChunk);
  return p < kMaxChunks ? (p > 0 ? p : 1) : kMaxChunks;
}

// Lane `lane` of a row's warp visits columns c = lane·kVec + j·32·kVec, kVec
// at a time (kVec divides C). With kIters > 0 (C = kIters·32·kVec exactly,
// WithRowIters below) the lane loads its row slice once into registers, all of
// it in flight together, and the three passes run on those: the same
// values in the same order as the loop form (kIters = 0, any C), so the
// same bits, with one trip to memory a row instead of three.
template <int kIters, int kVec, typename T>
__device__ __forceinline__ void LoadRow(const T* __restrict__ xr, int lane,
                                        float (&xv)[kIters][kVec]) {
#pragma unroll
  for (int i = 0; i < kIters; ++i)
    LoadVec<kVec>(xr + (int64_t{i} * kWarpSize + lane) * kVec, xv[i]);
}

template <typename T, int kVec, int kIters>
__global__ void LayerNormForwardKernel(const T* __restrict__ x, const T* __restrict__ w,
                                       const T* __restrict__ b, T* __restrict__ y,
                                       float* __restrict__ mean, float* __restrict__ rstd,
                                       int64_t N, int64_t C, float eps) {
  const int lane = threadIdx.x % kWarpSize;
  const int64_t row = blockIdx.x * int64_t{kRowsPerBlock} + threadIdx.x / kWarpSize;
  if (row >= N) return;
  const T* xr = x + row * C;
  T* yr = y + row * C;
  float m, r;
  if constexpr (kIters > 0) {
    float xv[kIters][kVec];
    LoadRow<kIters, kVec>(xr, lane, xv);
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < kIters; ++i) {
#pragma unroll
      for (int k = 0; k < kVec; ++k) s += xv[i][k];
    }
    m = WarpSum(s) / static_cast<float>(C);
    float v = 0.0f;
#pragma unroll
    for (int i = 0; i < kIters; ++i) {
#pragma unroll
      for (int k = 0; k < kVec; ++k) {
        const float d = xv[i][k] - m;
        v += d * d;
      }
    }
    const float var = WarpSum(v) / static_cast<float>(C);
    r = 1.0f / sqrtf(var + eps);
#pragma unroll
    for (int i = 0; i < kIters; ++i) {
      const int64_t c = (int64_t{i} * kWarpSize + lane) * kVec;
      float wv[kVec], bv[kVec];
      LoadVec<kVec>(w + c, wv);
      if (b != nullptr) LoadVec<kVec>(b + c, bv);
#pragma unroll
      for (int k = 0; k < kVec; ++k) {
        const float o = (xv[i][k] - m) * r * wv[k];
        xv[i][k] = b != nullptr ? o + bv[k] : o;
      }
      StoreVec<kVec>(yr + c, xv[i]);
    }
  } else {
    float s = 0.0f;
    for (int64_t c = lane * kVec; c < C; c += kWarpSize * kVec) {
      float xv[kVec];
      LoadVec<kVec>(xr + c, xv);
#pragma unroll
      for (int k = 0; k < kVec; ++k) s += xv[k];
    }
    m = WarpSum(s) / static_cast<float>(C);
    float v = 0.0f;
    for (int64_t c = lane * kVec; c < C; c += kWarpSize * kVec) {
      float xv[kVec];
      LoadVec<kVec>(xr + c, xv);
#pragma unroll
      for (int k = 0; k < kVec; ++k) {
        const float d = xv[k] - m;
        v += d * d;
      }
    }
    const float var = WarpSum(v) / static_cast<float>(C);
    r = 1.0f / sqrtf(var + eps);
    for (int64_t c = lane * kVec; c < C; c += kWarpSize * kVec) {
      float xv[kVec], wv[kVec], bv[kVec];
      LoadVec<kVec>(xr + c, xv);
      LoadVec<kVec>(w + c, wv);
      if (b != nullptr) LoadVec<kVec>(b + c, bv);
#pragma unroll
      for (int k = 0; k < kVec; ++k) {
        const float o = (xv[k] - m) * r * wv[k];
        xv[k] = b != nullptr ? o + bv[k] : o;
      }
      StoreVec<kVec>(yr + c, xv);
    }
  }
  if (lane == 0) {
    if (mean != nullptr) mean[row] = m;
    if (rstd != nullptr) rstd[row] = r;
  }
}

// mean == nullptr selects RMSNorm (x̂ = x·rstd, no mean(g) term).
template <typename T, int kVec>
__global__ void NormBackwardDxKernel(const T* __restrict__ dy, const T* __restrict__ x,
                                     const T* __restrict__ w, const float* __restrict__ mean,
                                     const float* __restrict__ rstd, T* __restrict__ dx, int64_t N,
                                     int64_t C, const T* __restrict__ dres) {
  const int lane = threadIdx.x % kWarpSize;
  const int64_t row = blockIdx.x * int64_t{kRowsPerBlock} + threadIdx.x / kWarpSize;
  if (row >= N) return;
  const T* dyr = dy + row * C;
  const T* xr = x + row * C;
  T* dxr = dx + row * C;
  const float m = mean != nullptr ? mean[row] : 0.0f;
  const float r = rstd[row];
  float sg = 0.0f, sgx = 0.0f;
  for (int64_t c = lane * kVec; c < C; c += kWarpSize * kVec) {
    float dv[kVec], wv[kVec], xv[kVec];
    LoadVec<kVec>(dyr + c, dv);
    LoadVec<kVec>(w + c, wv);
    LoadVec<kVec>(xr + c, xv);
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      const float g = dv[k] * wv[k];
      sg += g;
      sgx += g * ((xv[k] - m) * r);
    }
  }
  const float mean_g = mean != nullptr ? WarpSum(sg) / static_cast<float>(C) : 0.0f;
  const float mean_gx = WarpSum(sgx) / static_cast<float>(C);
  for (int64_t c = lane * kVec; c < C; c += kWarpSize * kVec) {
    float dv[kVec], wv[kVec], xv[kVec], rv[kVec];
    LoadVec<kVec>(dyr + c, dv);
    LoadVec<kVec>(w + c, wv);
    LoadVec<kVec>(xr + c, xv);
    if (dres != nullptr) {
      LoadVec<kVec>(dres + row * C + c, rv);
    } else {
#pragma unroll
      for (int k = 0; k < kVec; ++k) rv[k] = 0.0f;
    }
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      const float xhat = (xv[k] - m) * r;
      xv[k] = (dv[k] * wv[k] - mean_g - xhat * mean_gx) * r + rv[k];
    }
    StoreVec<kVec>(dxr + c, xv);
  }
}

// Pass 1: block (column tile, chunk p) sums its chunk's rows per column.
// partial_w[p, c] = Σ dy·x̂, partial_b[p, c] = Σ dy (when partial_b is set).
// A thread owns kVec adjacent columns; each column's sum runs over the rows
// in order, so kVec does not change the bits.
template <typename T, int kVec>
__global__ void NormBackwardPartialKernel(const T* __restrict__ dy, const T* __restrict__ x,
                                          const float* __restrict__ mean,
                                          const float* __restrict__ rstd,
                                          float* __restrict__ partial_w,
                                          float* __restrict__ partial_b, int64_t N, int64_t C,
                                          int64_t rows_per_chunk) {
  const int64_t c = (blockIdx.x * int64_t{kColThreads} + threadIdx.x) * kVec;
  const int64_t p = blockIdx.y;
  if (c >= C) return;
  const int64_t r0 = p * rows_per_chunk;
  const int64_t r1 = r0 + rows_per_chunk < N ? r0 + rows_per_chunk : N;
  float sw[kVec], sb[kVec];
#pragma unroll
  for (int k = 0; k < kVec; ++k) sw[k] = sb[k] = 0.0f;
  for (int64_t n = r0; n < r1; ++n) {
    float d[kVec], xv[kVec];
    LoadVec<kVec>(dy + n * C + c, d);
    LoadVec<kVec>(x + n * C + c, xv);
    const float m = mean != nullptr ? mean[n] : 0.0f;
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      sw[k] += d[k] * ((xv[k] - m) * rstd[n]);
      sb[k] += d[k];
    }
  }
#pragma unroll
  for (int k = 0; k < kVec; ++k) {
    partial_w[p * C + c + k] = sw[k];
    if (partial_b != nullptr) partial_b[p * C + c + k] = sb[k];
  }
}

// Pass 2: dw[c] += Σ_p partial_w[p, c] (and db likewise). A block takes 8
// columns (C / 8 blocks: a 768-wide norm spreads over 96 SMs, not 24); its
// 32 thread groups each add the chunks p ≡ group (mod 32) in increasing p,
// kBatch of them loaded before any is added (loads in flight together), then
// group 0 adds the 32 sums in group order: a fixed order for a given chunk
// count.
constexpr int kFinalCols = 8;
constexpr int kFinalGroups = kColThreads / kFinalCols;

__global__ void __launch_bounds__(kColThreads)
    NormBackwardFinalKernel(const float* __restrict__ partial_w,
                            const float* __restrict__ partial_b, float* __restrict__ dw,
                            float* __restrict__ db, int64_t C, int64_t chunks) {
  __shared__ float sw[kFinalGroups][kFinalCols], sb[kFinalGroups][kFinalCols];
  const int cx = threadIdx.x % kFinalCols, gy = threadIdx.x / kFinalCols;
  const int64_t c = blockIdx.x * int64_t{kFinalCols} + cx;
  float aw = 0.0f, ab = 0.0f;
  if (c < C && gy < chunks) {
    const int64_t n = (chunks - gy + kFinalGroups - 1) / kFinalGroups;  // p = gy, gy + 32, …
    aw = InOrderSum<8>(partial_w + gy * C + c, n, kFinalGroups * C);
    if (partial_b != nullptr) ab = InOrderSum<8>(partial_b + gy * C + c, n, kFinalGroups * C);
  }
  sw[gy][cx] = aw;
  sb[gy][cx] = ab;
  __syncthreads();
  if (gy != 0 || c >= C) return;
  float tw = 0.0f, tb = 0.0f;
#pragma unroll
  for (int g = 0; g < kFinalGroups; ++g) {
    tw += sw[g][cx];
    tb += sb[g][cx];
  }
  dw[c] += tw;
  if (partial_b != nullptr) db[c] += tb;
}

// Fused backward for bf16 rows with C = kIters·32·8 (the GPU training path):
// block p owns chunk p of the rows (as the two-pass reduction); its warp w
// takes rows r0 + w, r0 + w + 8, …, writes dx from the registers it loaded
// dy and x into, and accumulates its columns' dy·x̂ and dy. The 8 warps'
// column sums meet in shared memory and are added in warp order into
// partial[p, c]; NormBackwardFinalKernel then adds the chunks. dy and x are
// read once instead of twice, and dw/db need no second kernel over [N, C].
//
// Where each warp keeps its column sums (kSmemSums): in registers up to
// kIters = 6 (C ≤ 1536), in shared memory past it (C = 1792, 2048), where
// 2·kIters·8 more live floats a thread would spill. The shared form holds
// each warp's sums in its own row of acc [dw | db][warp][C], each lane its
// 8 columns as two 16-byte words, the pair's order swapped on lanes 4–7 of
// each 8 so that a quarter-warp's 16-byte accesses meet 32 different banks.
// Every sum adds the same terms in the same order in both forms (row by
// row, then the warps in order), so they give the same bits
// (norm_emulation_test's SumForms checks it launch against launch).
// Measured (H100, 2026-12-07, core/kernels/bench:norm_benchmark, [8192, C]
// bf16, µs a call): at C = 2048 this kernel takes 82.9 (LayerNorm, dw and
// db) and 75.3 (RMSNorm) against the two passes' 117 and 98.9 (176
// registers, no stack; a first version that picked a lane's word by a
// lane-dependent index put dv and xh on the stack, 512 bytes, and took 110
// and 98.8). At C ≤ 1536 no shared-memory variant beat the registers by
// more than ~10 % and some lost (768: 27.8 → 30.9), so they stay.
// (Tried earlier and measured slower, 2026-12-07 on an H100,
// docs/PERFORMANCE.md: the column sums in shared memory for every width —
// 126 registers at C = 1024, two blocks an SM instead of one — took 28 →
// 45 µs at C = 768 and 39 → 49 µs at 1024, [8192, C] with db.)
template <int kIters, bool kSmemSums>
__global__ void __launch_bounds__(kRowThreads)
    NormBackwardFusedKernel(const bf16* __restrict__ dy, const bf16* __restrict__ x,
                            const bf16* __restrict__ w, const float* __restrict__ mean,
                            const float* __restrict__ rstd, bf16* __restrict__ dx,
                            const bf16* __restrict__ dres, float* __restrict__ partial_w,
                            float* __restrict__ partial_b, int64_t N, int64_t rows_per_chunk) {
  constexpr int kV = kBf16Vec;
  static_assert(kV == 8, "a lane's columns are two 16-byte words of f32 sums");
  constexpr int64_t C = int64_t{kIters} * kWarpSize * kV;
  // Registers: colsum [kRowsPerBlock][C], the warps' sums staged at the end.
  // Shared sums: acc [1 or 2][kRowsPerBlock][C], dw's then (with db) db's.
  GTP_DYNAMIC_SHARED(float, colsum);
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  const bool with_b = partial_b != nullptr;
  const int64_t p = blockIdx.x;
  const int64_t r0 = p * rows_per_chunk;
  const int64_t r1 = r0 + rows_per_chunk < N ? r0 + rows_per_chunk : N;
  constexpr int kRegIters = kSmemSums ? 1 : kIters;
  float aw[kRegIters][kV], ab[kRegIters][kV];
#pragma unroll
  for (int i = 0; i < kRegIters; ++i) {
#pragma unroll
    for (int k = 0; k < kV; ++k) aw[i][k] = ab[i][k] = 0.0f;
  }
  // The shared form: lane's word h of iteration i at acc + (i·32 + lane)·8 + 4·(h ^ swap).
  const int swap = (lane >> 2) & 1;
  float* acc_w = colsum + int64_t{warp} * C;
  float* acc_b = colsum + (kRowsPerBlock + int64_t{warp}) * C;
  if constexpr (kSmemSums) {
#pragma unroll
    for (int i = 0; i < kIters; ++i) {
      const int64_t c = (int64_t{i} * kWarpSize + lane) * kV;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int64_t o = c + 4 * (h ^ swap);
        *reinterpret_cast<float4*>(acc_w + o) = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (with_b) *reinterpret_cast<float4*>(acc_b + o) = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      }
    }
  }
  for (int64_t row = r0 + warp; row < r1; row += kRowsPerBlock) {
    const float m = mean != nullptr ? mean[row] : 0.0f;
    const float r = rstd[row];
    float dv[kIters][kV], xh[kIters][kV];
    float sg = 0.0f, sgx = 0.0f;
#pragma unroll
    for (int i = 0; i < kIters; ++i) {
      const int64_t c = (int64_t{i} * kWarpSize + lane) * kV;
      float wv[kV];
      LoadVec<kV>(dy + row * C + c, dv[i]);
      LoadVec<kV>(x + row * C + c, xh[i]);
      LoadVec<kV>(w + c, wv);
#pragma unroll
      for (int k = 0; k < kV; ++k) {
        xh[i][k] = (xh[i][k] - m) * r;
        const float g = dv[i][k] * wv[k];
        sg += g;
        sgx += g * xh[i][k];
      }
      if constexpr (kSmemSums) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          // The word this lane touches now: its second when swapped. Its
          // values are picked by a select between two fixed registers (an
          // index that varies by lane would put dv and xh in local memory).
          const bool second = (h ^ swap) != 0;
          const int64_t o = c + (second ? 4 : 0);
          float d[4], e[4];
#pragma unroll
          for (int k = 0; k < 4; ++k) {
            d[k] = second ? dv[i][4 + k] : dv[i][k];
            e[k] = second ? xh[i][4 + k] : xh[i][k];
          }
          float4 a = *reinterpret_cast<float4*>(acc_w + o);
          a.x += d[0] * e[0];
          a.y += d[1] * e[1];
          a.z += d[2] * e[2];
          a.w += d[3] * e[3];
          *reinterpret_cast<float4*>(acc_w + o) = a;
          if (with_b) {
            float4 b = *reinterpret_cast<float4*>(acc_b + o);
            b.x += d[0];
            b.y += d[1];
            b.z += d[2];
            b.w += d[3];
            *reinterpret_cast<float4*>(acc_b + o) = b;
          }
        }
      } else {
#pragma unroll
        for (int k = 0; k < kV; ++k) {
          aw[i][k] += dv[i][k] * xh[i][k];
          ab[i][k] += dv[i][k];
        }
      }
    }
    const float mean_g = mean != nullptr ? WarpSum(sg) / static_cast<float>(C) : 0.0f;
    const float mean_gx = WarpSum(sgx) / static_cast<float>(C);
#pragma unroll
    for (int i = 0; i < kIters; ++i) {
      const int64_t c = (int64_t{i} * kWarpSize + lane) * kV;
      float wv[kV], o[kV], rv[kV];
      LoadVec<kV>(w + c, wv);
      if (dres != nullptr) {
        LoadVec<kV>(dres + row * C + c, rv);
      } else {
#pragma unroll
        for (int k = 0; k < kV; ++k) rv[k] = 0.0f;
      }
#pragma unroll
      for (int k = 0; k < kV; ++k) {
        o[k] = (dv[i][k] * wv[k] - mean_g - xh[i][k] * mean_gx) * r + rv[k];
      }
      StoreVec<kV>(dx + row * C + c, o);
    }
  }
  // Column sums of the 8 warps, added in warp order: dw, then db.
  for (int pass = 0; pass < (with_b ? 2 : 1); ++pass) {
    const float* sums = colsum;  // the shared form's acc_w rows (pass 0) or acc_b rows
    if constexpr (kSmemSums) {
      if (pass == 1) sums = colsum + int64_t{kRowsPerBlock} * C;
    } else {
      if (pass == 1) __syncthreads();  // pass 0's readers are done with colsum
#pragma unroll
      for (int i = 0; i < kIters; ++i) {
        const int64_t c = (int64_t{i} * kWarpSize + lane) * kV;
#pragma unroll
        for (int k = 0; k < kV; ++k) colsum[warp * C + c + k] = pass == 0 ? aw[i][k] : ab[i][k];
      }
    }
    __syncthreads();
    float* out = pass == 0 ? partial_w : partial_b;
    for (int64_t c = threadIdx.x; c < C; c += kRowThreads) {
      float s = 0.0f;
#pragma unroll
      for (int v = 0; v < kRowsPerBlock; ++v) s += sums[v * C + c];
      out[p * C + c] = s;
    }
  }
}

// The fused backward's kIters for C (0: not supported, use the two passes).
// Up to kMaxRegisterSumIters the column sums stay in registers (their
// staging in shared memory under 48 KiB); past it, in shared memory (at
// kMaxFusedIters, C = 2048: 64 KiB for dw, 128 KiB with db — one block an SM).
constexpr int kMaxRegisterSumIters = 6;
constexpr int kMaxFusedIters = 8;
int FusedIters(int64_t C) {
  constexpr int64_t kCols = int64_t{kWarpSize} * kBf16Vec;
  if (C % kCols != 0) return 0;
  const int64_t it = C / kCols;
  return it >= 1 && it <= kMaxFusedIters ? static_cast<int>(it) : 0;
}

template <int kIters>
void LaunchFused(const bf16* dy, const bf16* x, const bf16* w, const float* mean,
                 const float* rstd, bf16* dx, const bf16* dres, float* partial_w,
                 float* partial_b, int64_t N, int64_t chunks, int64_t rows_per_chunk,
                 cudaStream_t stream) {
  constexpr bool kSmemSums = kIters > kMaxRegisterSumIters;
  const size_t rows = kSmemSums && partial_b != nullptr ? 2 * kRowsPerBlock : kRowsPerBlock;
  const size_t smem = sizeof(float) * rows * kIters * kWarpSize * kBf16Vec;
  Launch(NormBackwardFusedKernel<kIters, kSmemSums>, static_cast<unsigned>(chunks), kRowThreads,
         smem, stream, dy, x, w, mean, rstd, dx, dres, partial_w, partial_b, N, rows_per_chunk);
}

template <typename T, int kVec, int kIters>
__global__ void RMSNormForwardKernel(const T* __restrict__ x, const T* __restrict__ w,
                                     T* __restrict__ y, float* __restrict__ rstd, int64_t N,
                                     int64_t C, float eps) {
  const int lane = threadIdx.x % kWarpSize;
  const int64_t row = blockIdx.x * int64_t{kRowsPerBlock} + threadIdx.x / kWarpSize;
  if (row >= N) return;
  const T* xr = x + row * C;
  T* yr = y + row * C;
  float r;
  if constexpr (kIters > 0) {  // the row in registers, as LayerNormForwardKernel's
    float xv[kIters][kVec];
    LoadRow<kIters, kVec>(xr, lane, xv);
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < kIters; ++i) {
#pragma unroll
      for (int k = 0; k < kVec; ++k) s += xv[i][k] * xv[i][k];
    }
    const float ms = WarpSum(s) / static_cast<float>(C);
    r = 1.0f / sqrtf(ms + eps);
#pragma unroll
    for (int i = 0; i < kIters; ++i) {
      const int64_t c = (int64_t{i} * kWarpSize + lane) * kVec;
      float wv[kVec];
      LoadVec<kVec>(w + c, wv);
#pragma unroll
      for (int k = 0; k < kVec; ++k) xv[i][k] = xv[i][k] * r * wv[k];
      StoreVec<kVec>(yr + c, xv[i]);
    }
  } else {
    float s = 0.0f;
    for (int64_t c = lane * kVec; c < C; c += kWarpSize * kVec) {
      float xv[kVec];
      LoadVec<kVec>(xr + c, xv);
#pragma unroll
      for (int k = 0; k < kVec; ++k) s += xv[k] * xv[k];
    }
    const float ms = WarpSum(s) / static_cast<float>(C);
    r = 1.0f / sqrtf(ms + eps);
    for (int64_t c = lane * kVec; c < C; c += kWarpSize * kVec) {
      float xv[kVec], wv[kVec];
      LoadVec<kVec>(xr + c, xv);
      LoadVec<kVec>(w + c, wv);
#pragma unroll
      for (int k = 0; k < kVec; ++k) xv[k] = xv[k] * r * wv[k];
      StoreVec<kVec>(yr + c, xv);
    }
  }
  if (lane == 0 && rstd != nullptr) rstd[row] = r;
}

void CheckArgs(const char* op, int64_t N, int64_t C) {
  GTP_CU_REQUIRE(N >= 0 && C >= 0, "%s: negative size N=%lld C=%lld", op, static_cast<long long>(N),
                 static_cast<long long>(C));
}

// Calls f(std::integral_constant<int, n>{}) when n is one of kFirst..kMax
// and returns true; returns false (f not called) otherwise. The kernels'
// compile-time kIters from a run-time count.
template <int kFirst, int kMax, typename F>
bool WithIters(int64_t n, F&& f) {
  if constexpr (kFirst > kMax) {
    return false;
  } else {
    if (n == kFirst) {
      f(std::integral_constant<int, kFirst>{});
      return true;
    }
    return WithIters<kFirst + 1, kMax>(n, f);
  }
}

// Calls f(std::integral_constant<int, kIters>) with the forward kernels'
// kIters for C: C / (32·kVec) where that is a whole 1..kMaxRowIters on the
// 16-byte path (a lane's slice of the row, up to 64 floats, held in
// registers: C = 256 … 2048 in steps of 256), else 0 (the loop form).
constexpr int kMaxRowIters = 8;
template <int kVec, typename F>
void WithRowIters(int64_t C, F&& f) {
  constexpr int64_t kCols = int64_t{kWarpSize} * kVec;
  if constexpr (kVec == kBf16Vec) {
    if (C % kCols == 0 && WithIters<1, kMaxRowIters>(C / kCols, f)) return;
  }
  f(std::integral_constant<int, 0>{});
}

unsigned RowBlocks(int64_t N) { return static_cast<unsigned>(CeilDiv(N, kRowsPerBlock)); }

// 16-byte accesses for bf16 rows: C a multiple of 8 and every buffer aligned.
bool VecRows(int64_t C, std::initializer_list<const void*> ptrs) {
  return C % kBf16Vec == 0 && Aligned16(ptrs);
}

// Shared backward of both norms; mean == nullptr selects RMSNorm.
template <typename T>
void NormBackward(const T* dy, const T* x, const T* w, const float* mean, const float* rstd, T* dx,
                  float* dw, float* db, float* scratch, int64_t N, int64_t C, cudaStream_t stream,
                  const T* dres) {
  if (N == 0 || C == 0) return;
  const bool vec = VecRows(C, {dy, x, w, dx, dres});
  if constexpr (std::is_same_v<T, bf16>) {
    const int iters = FusedIters(C);
    if (vec && iters > 0 && dw != nullptr) {
      GTP_CU_REQUIRE(scratch != nullptr, "norm backward: scratch is required for dw/db");
      const int64_t chunks = NormChunks(N);
      const int64_t rows_per_chunk = CeilDiv(N, chunks);
      float* partial_w = scratch;
      float* partial_b = db != nullptr ? scratch + chunks * C : nullptr;
      auto launch = [&](auto it) {
        LaunchFused<decltype(it)::value>(dy, x, w, mean, rstd, dx, dres, partial_w, partial_b, N,
                                         chunks, rows_per_chunk, stream);
      };
      const bool launched = WithIters<1, kMaxFusedIters>(iters, launch);
      GTP_CU_REQUIRE(launched, "norm backward: no fused kernel for kIters %d", iters);
      GTP_CU_LAUNCH_CHECK();
      Launch(NormBackwardFinalKernel, static_cast<unsigned>(CeilDiv(C, kFinalCols)), kColThreads, 0,
             stream, partial_w, partial_b, dw, db, C, chunks);
      GTP_CU_LAUNCH_CHECK();
      return;
    }
  }
  WithVec<T>(vec, [&](auto v) {
    constexpr int kVec = decltype(v)::value;
    Launch(NormBackwardDxKernel<T, kVec>, RowBlocks(N), kRowThreads, 0, stream, dy, x, w, mean,
           rstd, dx, N, C, dres);
  });
  GTP_CU_LAUNCH_CHECK();
  if (dw == nullptr && db == nullptr) return;
  GTP_CU_REQUIRE(dw != nullptr, "norm backward: db without dw is not supported");
  GTP_CU_REQUIRE(scratch != nullptr, "norm backward: scratch is required for dw/db");
  const int64_t chunks = NormChunks(N);
  const int64_t rows_per_chunk = CeilDiv(N, chunks);
  float* partial_w = scratch;
  float* partial_b = db != nullptr ? scratch + chunks * C : nullptr;
  WithVec<T>(vec, [&](auto v) {
    constexpr int kVec = decltype(v)::value;
    const dim3 grid(static_cast<unsigned>(CeilDiv(C, kColThreads * kVec)),
                    static_cast<unsigned>(chunks));
    Launch(NormBackwardPartialKernel<T, kVec>, grid, kColThreads, 0, stream, dy, x, mean, rstd,
           partial_w, partial_b, N, C, rows_per_chunk);
  });
  GTP_CU_LAUNCH_CHECK();
  Launch(NormBackwardFinalKernel, static_cast<unsigned>(CeilDiv(C, kFinalCols)), kColThreads, 0,
         stream, partial_w, partial_b, dw, db, C, chunks);
  GTP_CU_LAUNCH_CHECK();
}

template <typename T>
void LayerNormForwardT(const T* x, const T* w, const T* b, T* y, float* mean, float* rstd,
                       int64_t N, int64_t C, float eps, cudaStream_t stream) {
  CheckArgs("LayerNormForward", N, C);
  if (N == 0) return;
  GTP_CU_REQUIRE(C > 0, "LayerNormForward: C must be positive");
  WithVec<T>(VecRows(C, {x, w, b, y}), [&](auto v) {
    constexpr int kVec = decltype(v)::value;
    WithRowIters<kVec>(C, [&](auto it) {
      Launch(LayerNormForwardKernel<T, kVec, decltype(it)::value>, RowBlocks(N), kRowThreads, 0,
             stream, x, w, b, y, mean, rstd, N, C, eps);
    });
  });
  GTP_CU_LAUNCH_CHECK();
}

template <typename T>
void LayerNormBackwardT(const T* dy, const T* x, const T* w, const float* mean, const float* rstd,
                        T* dx, float* dw, float* db, float* scratch, int64_t N, int64_t C,
                        cudaStream_t stream, const T* dres) {
  CheckArgs("LayerNormBackward", N, C);
  GTP_CU_REQUIRE(N == 0 || mean != nullptr, "LayerNormBackward: mean is required");
  NormBackward(dy, x, w, mean, rstd, dx, dw, db, scratch, N, C, stream, dres);
}

template <typename T>
void RMSNormForwardT(const T* x, const T* w, T* y, float* rstd, int64_t N, int64_t C, float eps,
                     cudaStream_t stream) {
  CheckArgs("RMSNormForward", N, C);
  if (N == 0) return;
  GTP_CU_REQUIRE(C > 0, "RMSNormForward: C must be positive");
  WithVec<T>(VecRows(C, {x, w, y}), [&](auto v) {
    constexpr int kVec = decltype(v)::value;
    WithRowIters<kVec>(C, [&](auto it) {
      Launch(RMSNormForwardKernel<T, kVec, decltype(it)::value>, RowBlocks(N), kRowThreads, 0,
             stream, x, w, y, rstd, N, C, eps);
    });
  });
  GTP_CU_LAUNCH_CHECK();
}

template <typename T>
void RMSNormBackwardT(const T* dy, const T* x, const T* w, const float* rstd, T* dx, float* dw,
                      float* scratch, int64_t N, int64_t C, cudaStream_t stream, const T* dres) {
  CheckArgs("RMSNormBackward", N, C);
  NormBackward(dy, x, w, /*mean=*/nullptr, rstd, dx, dw, /*db=*/nullptr, scratch, N, C, stream,
               dres);
}

}  // namespace

void LayerNormForward(const float* x, const float* w, const float* b, float* y, float* mean,
                      float* rstd, int64_t N, int64_t C, float eps, cudaStream_t stream) {
  LayerNormForwardT(x, w, b, y, mean, rstd, N, C, eps, stream);
}
void LayerNormForward(const bf16* x, const bf16* w, const bf16* b, bf16* y, float* mean,
                      float* rstd, int64_t N, int64_t C, float eps, cudaStream_t stream) {
  LayerNormForwardT(x, w, b, y, mean, rstd, N, C, eps, stream);
}

int64_t LayerNormBackwardScratchFloats(int64_t N, int64_t C) { return 2 * NormChunks(N) * C; }

void LayerNormBackward(const float* dy, const float* x, const float* w, const float* mean,
                       const float* rstd, float* dx, float* dw, float* db, float* scratch,
                       int64_t N, int64_t C, cudaStream_t stream, const float* dresidual) {
  LayerNormBackwardT(dy, x, w, mean, rstd, dx, dw, db, scratch, N, C, stream, dresidual);
}
void LayerNormBackward(const bf16* dy, const bf16* x, const bf16* w, const float* mean,
                       const float* rstd, bf16* dx, float* dw, float* db, float* scratch, int64_t N,
                       int64_t C, cudaStream_t stream, const bf16* dresidual) {
  LayerNormBackwardT(dy, x, w, mean, rstd, dx, dw, db, scratch, N, C, stream, dresidual);
}

void RMSNormForward(const float* x, const float* w, float* y, float* rstd, int64_t N, int64_t C,
                    float eps, cudaStream_t stream) {
  RMSNormForwardT(x, w, y, rstd, N, C, eps, stream);
}
void RMSNormForward(const bf16* x, const bf16* w, bf16* y, float* rstd, int64_t N, int64_t C,
                    float eps, cudaStream_t stream) {
  RMSNormForwardT(x, w, y, rstd, N, C, eps, stream);
}

int64_t RMSNormBackwardScratchFloats(int64_t N, int64_t C) { return NormChunks(N) * C; }

void RMSNormBackward(const float* dy, const float* x, const float* w, const float* rstd, float* dx,
                     float* dw, float* scratch, int64_t N, int64_t C, cudaStream_t stream,
                     const float* dresidual) {
  RMSNormBackwardT(dy, x, w, rstd, dx, dw, scratch, N, C, stream, dresidual);
}
void RMSNormBackward(const bf16* dy, const bf16* x, const bf16* w, const float* rstd, bf16* dx,
                     float* dw, float* scratch, int64_t N, int64_t C, cudaStream_t stream,
                     const bf16* dresidual) {
  RMSNormBackwardT(dy, x, w, rstd, dx, dw, scratch, N, C, stream, dresidual);
}

}  // namespace gtp::kernels::cuda
