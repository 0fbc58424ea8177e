// ColumnSumAccumulate on CUDA: sums[c] += Σ_r x[r, c] (x [R, C] f32 or bf16,
// sums f32 [C]) in kernels.h's fixed order, the CPU's (cpu/column_sum.cc), so
// both give the same bits. A linear's bias gradient (layers/parallel_linear.cc):
// one read of dy, no atomics.
//
// Pass 1, a block per (slab, column tile): warp l is lane l of the slab and
// adds rows l, l + 8, … (in order) into registers, each thread kVec adjacent
// columns (8 bf16 by one 16-byte load when C % 8 == 0 and x is aligned, else
// 1), a lane's eight rows (a 64-row slab) loaded together before they are
// added (in order: one memory round trip, not two); the 8
// lanes meet in shared memory and warp 0 adds them in lane order into
// partial[slab, c]. Pass 2 (ColumnTotalKernel): each column's slab partials
// added in slab order, then sums[c] + total.
#include <cuda_runtime.h>

#include <algorithm>

#include "core/kernels/cuda.h"
#include "core/kernels/cuda/common.cuh"
#include "core/kernels/cuda/elem.cuh"

namespace gtp::kernels::cuda {
namespace {

using internal::Aligned16;
using internal::CeilDiv;
using internal::LoadVec;
using internal::WithVec;

constexpr int kLanes = kColumnSumLanes;                 // warps per block
constexpr int kThreads = kLanes * internal::kWarpSize;  // 256
constexpr int kInFlight = 8;                            // rows loaded before they are added
static_assert(kColumnSumSlabRows % kLanes == 0, "whole rows per lane");

// One thread's kVec columns c0.. of rows r, r + kLanes, … < r1, added in
// that order from 0.
template <typename T, int kVec>
__device__ __forceinline__ void LaneSum(const T* __restrict__ x, int64_t C, int64_t c0, int64_t r,
                                        int64_t r1, float (&acc)[kVec]) {
#pragma unroll
  for (int k = 0; k < kVec; ++k) acc[k] = 0.0f;
  for (; r + (kInFlight - 1) * kLanes < r1; r += kInFlight * kLanes) {
    float v[kInFlight][kVec];
#pragma unroll
    for (int i = 0; i < kInFlight; ++i) LoadVec<kVec>(x + (r + i * kLanes) * C + c0, v[i]);
#pragma unroll
    for (int i = 0; i < kInFlight; ++i) {
#pragma unroll
      for (int k = 0; k < kVec; ++k) acc[k] += v[i][k];
    }
  }
  for (; r < r1; r += kLanes) {
    float v[kVec];
    LoadVec<kVec>(x + r * C + c0, v);
#pragma unroll
    for (int k = 0; k < kVec; ++k) acc[k] += v[k];
  }
}

// Grid (slabs, column tiles of 32·kVec); partial [slabs, C].
template <typename T, int kVec>
__global__ void __launch_bounds__(kThreads)
    ColumnSlabKernel(const T* __restrict__ x, int64_t R, int64_t C, float* __restrict__ partial) {
  constexpr int kTile = internal::kWarpSize * kVec;
  __shared__ float lanes[kLanes][kTile];
  const int lane = threadIdx.x / internal::kWarpSize, t = threadIdx.x % internal::kWarpSize;
  const int64_t slab = blockIdx.x;
  const int64_t c0 = blockIdx.y * static_cast<int64_t>(kTile) + t * kVec;
  const int64_t r0 = slab * kColumnSumSlabRows;
  const int64_t r1 = r0 + kColumnSumSlabRows < R ? r0 + kColumnSumSlabRows : R;
  // kVec > 1 only when C % kVec == 0, so a thread's columns are all in or all out.
  const bool in = c0 < C;
  float acc[kVec];
  if (in) {
    LaneSum<T, kVec>(x, C, c0, r0 + lane, r1, acc);
  } else {
#pragma unroll
    for (int k = 0; k < kVec; ++k) acc[k] = 0.0f;
  }
#pragma unroll
  for (int k = 0; k < kVec; ++k) lanes[lane][t * kVec + k] = acc[k];
  __syncthreads();
  if (lane != 0 || !in) return;
#pragma unroll
  for (int k = 0; k < kVec; ++k) {
    float s = lanes[0][t * kVec + k];
#pragma unroll
    for (int l = 1; l < kLanes; ++l) s += lanes[l][t * kVec + k];
    partial[slab * C + c0 + k] = s;
  }
}

// Pass 2: a block per 32 columns. Its warps load the slabs' partials into
// shared memory, kTotalStage slabs at a time (a warp a slab row, all of a
// stage's loads in flight together), and warp 0 adds them in slab order —
// the order and so the bits of a thread per column walking the slabs (a
// chain of dependent loads: 6.9 µs a call at 128 slabs on an H100; 6.0 with
// four loads a thread in flight, four round trips a stage).
constexpr int kTotalWarps = 8, kTotalStage = 128, kTotalLoads = kTotalStage / kTotalWarps;
static_assert(kTotalStage % (kTotalWarps * kTotalLoads) == 0, "whole load rounds a stage");

__global__ void __launch_bounds__(kTotalWarps* internal::kWarpSize)
    ColumnTotalKernel(const float* __restrict__ partial, int64_t slabs, int64_t C,
                      float* __restrict__ sums) {
  __shared__ float stage[kTotalStage][internal::kWarpSize];
  const int lane = threadIdx.x % internal::kWarpSize, warp = threadIdx.x / internal::kWarpSize;
  const int64_t c = blockIdx.x * int64_t{internal::kWarpSize} + lane;
  float acc = 0.0f;
  for (int64_t s0 = 0; s0 < slabs; s0 += kTotalStage) {
    const int n = static_cast<int>(slabs - s0 < kTotalStage ? slabs - s0 : kTotalStage);
    for (int s = warp; s < n; s += kTotalWarps * kTotalLoads) {
      float v[kTotalLoads];
#pragma unroll
      for (int i = 0; i < kTotalLoads; ++i) {
        const int si = s + i * kTotalWarps;
        v[i] = si < n && c < C ? partial[(s0 + si) * C + c] : 0.0f;
      }
#pragma unroll
      for (int i = 0; i < kTotalLoads; ++i) {
        if (s + i * kTotalWarps < n) stage[s + i * kTotalWarps][lane] = v[i];
      }
    }
    __syncthreads();
    if (warp == 0) {
#pragma unroll 8
      for (int s = 0; s < n; ++s) acc += stage[s][lane];
    }
    __syncthreads();  // the stage is read before the next round overwrites it
  }
  if (warp == 0 && c < C) sums[c] = sums[c] + acc;
}

template <typename T>
void ColumnSumAccumulateT(const T* x, int64_t R, int64_t C, float* sums, float* partial,
                          cudaStream_t stream) {
  GTP_CU_REQUIRE(R >= 0 && C >= 0, "ColumnSumAccumulate: negative size [%lld, %lld]",
                 static_cast<long long>(R), static_cast<long long>(C));
  if (R == 0 || C == 0) return;  // nothing added (the CPU's rule)
  const int64_t slabs = CeilDiv(R, kColumnSumSlabRows);
  GTP_CU_REQUIRE(slabs <= 0x7fffffffLL, "ColumnSumAccumulate: %lld rows exceed the grid",
                 static_cast<long long>(R));
  const bool vec = C % internal::kBf16Vec == 0 && Aligned16({x});
  WithVec<T>(vec, [&](auto v) {
    constexpr int kVec = decltype(v)::value;
    const int64_t tiles = CeilDiv(C, internal::kWarpSize * kVec);
    GTP_CU_REQUIRE(tiles <= 65535, "ColumnSumAccumulate: %lld columns exceed the grid",
                   static_cast<long long>(C));
    const dim3 grid(static_cast<unsigned>(slabs), static_cast<unsigned>(tiles));
    internal::Launch(ColumnSlabKernel<T, kVec>, grid, kThreads, 0, stream, x, R, C, partial);
    GTP_CU_LAUNCH_CHECK();
  });
  internal::Launch(ColumnTotalKernel, static_cast<unsigned>(CeilDiv(C, internal::kWarpSize)),
                   kTotalWarps * internal::kWarpSize, 0, stream, partial, slabs, C, sums);
  GTP_CU_LAUNCH_CHECK();
}

}  // namespace

int64_t ColumnSumPartials(int64_t R, int64_t C) {
  return std::max<int64_t>(1, CeilDiv(R, kColumnSumSlabRows) * C);
}

void ColumnSumAccumulate(const float* x, int64_t R, int64_t C, float* sums, float* partial,
                         cudaStream_t stream) {
  ColumnSumAccumulateT(x, R, C, sums, partial, stream);
}
void ColumnSumAccumulate(const bf16* x, int64_t R, int64_t C, float* sums, float* partial,
                         cudaStream_t stream) {
  ColumnSumAccumulateT(x, R, C, sums, partial, stream);
}

}  // namespace gtp::kernels::cuda
