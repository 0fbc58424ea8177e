// core/kernels/cuda/cross_entropy.cu — softmax cross-entropy over
// vocab-sharded logits[N, V] (this rank holds global columns
// [vocab_start, vocab_start + V)):
//   loss[n] = log(sumexp) + m − l[n, t_n],  m = max_v l[n, v],
//             sumexp = Σ_v exp(l[n, v] − m)
//   dl[n, v] = dloss[n]·(exp(l[n, v] − m)/sumexp − [v = t_n])      (=)
// Targets t_n < 0 are ignored (loss 0, gradient 0). The stages are separate
// so the layer can all-reduce between them (see core/kernels/cpu.h). The
// backward may run in place (dlogits == logits): each element is read and
// then written by the same thread.
//
// One block per row for the reductions (V is a vocabulary, often 10⁴–10⁵);
// block reductions run in a fixed order, so results are deterministic.
//
// logits/dlogits are f32 or bf16; the statistics, loss and dloss are f32 and
// the math is f32 (cuda/elem.cuh). Rows are `ld` ≥ V apart: columns [V, ld)
// are padding (e.g. an LM head computed over a padded vocabulary), never
// read into the statistics and written 0 in dlogits. bf16 rows with ld % 8 == 0
// and 16-byte aligned buffers are read (and dlogits written) 8 elements per
// access, the columns past V masked.
#include <cuda_runtime.h>

#include <algorithm>

#include "core/kernels/cuda.h"
#include "core/kernels/cuda/common.cuh"
#include "core/kernels/cuda/elem.cuh"

namespace gtp::kernels::cuda {
namespace {

using internal::Aligned16;
using internal::BlockMax;
using internal::BlockSum;
using internal::CeilDiv;
using internal::GridFor;
using internal::kBf16Vec;
using internal::Launch;
using internal::Load;
using internal::LoadVec;
using internal::StoreVec;
using internal::WithVec;

constexpr int kThreads = 256;

// Rows handled by a grid-stride loop over blocks (N may exceed the grid).
// Thread i of a row's block visits columns v = i·kVec + j·kThreads·kVec, kVec
// at a time (kVec divides V).
template <typename T, int kVec>
__global__ void __launch_bounds__(kThreads)
    StatsKernel(const T* __restrict__ logits, const int32_t* __restrict__ targets,
                float* __restrict__ row_max, float* __restrict__ target_logit, int64_t N, int64_t V,
                int64_t ld, int64_t vocab_start) {
  const int64_t v_end = (V + kVec - 1) / kVec * kVec;  // ≤ ld
  for (int64_t n = blockIdx.x; n < N; n += gridDim.x) {
    const T* l = logits + n * ld;
    float mx = -INFINITY;  // an empty shard must not win the max all-reduce
    for (int64_t v = threadIdx.x * kVec; v < v_end; v += kThreads * kVec) {
      float lv[kVec];
      LoadVec<kVec>(l + v, lv);
#pragma unroll
      for (int k = 0; k < kVec; ++k) mx = v + k < V ? fmaxf(mx, lv[k]) : mx;
    }
    mx = BlockMax<kThreads>(mx);
    if (threadIdx.x == 0) {
      row_max[n] = mx;
      const int32_t t = targets[n];
      const int64_t col = static_cast<int64_t>(t) - vocab_start;
      target_logit[n] = t >= 0 && col >= 0 && col < V ? Load(l[col]) : 0.0f;
    }
  }
}

template <typename T, int kVec>
__global__ void __launch_bounds__(kThreads)
    SumExpKernel(const T* __restrict__ logits, const float* __restrict__ row_max,
                 float* __restrict__ sumexp, int64_t N, int64_t V, int64_t ld) {
  const int64_t v_end = (V + kVec - 1) / kVec * kVec;  // ≤ ld
  for (int64_t n = blockIdx.x; n < N; n += gridDim.x) {
    const T* l = logits + n * ld;
    const float mx = row_max[n];
    float s = 0.0f;
    for (int64_t v = threadIdx.x * kVec; v < v_end; v += kThreads * kVec) {
      float lv[kVec];
      LoadVec<kVec>(l + v, lv);
#pragma unroll
      for (int k = 0; k < kVec; ++k) s += v + k < V ? expf(lv[k] - mx) : 0.0f;
    }
    s = BlockSum<kThreads>(s);
    if (threadIdx.x == 0) sumexp[n] = s;
  }
}

__global__ void LossKernel(const float* __restrict__ row_max, const float* __restrict__ sumexp,
                           const float* __restrict__ target_logit,
                           const int32_t* __restrict__ targets, float* __restrict__ loss,
                           int64_t N) {
  for (int64_t n = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; n < N;
       n += int64_t{gridDim.x} * blockDim.x) {
    loss[n] = targets[n] < 0 ? 0.0f : logf(sumexp[n]) + row_max[n] - target_logit[n];
  }
}

template <typename T, int kVec>
__global__ void __launch_bounds__(kThreads)
    BackwardKernel(const T* logits, const float* __restrict__ row_max,
                   const float* __restrict__ sumexp, const int32_t* __restrict__ targets,
                   const float* __restrict__ dloss, T* dlogits, int64_t N, int64_t V,
                   int64_t ld, int64_t vocab_start) {
  for (int64_t n = blockIdx.x; n < N; n += gridDim.x) {
    const T* l = logits + n * ld;
    T* dl = dlogits + n * ld;
    const int32_t t = targets[n];
    if (t < 0) {
      float zero[kVec];
#pragma unroll
      for (int k = 0; k < kVec; ++k) zero[k] = 0.0f;
      for (int64_t v = threadIdx.x * kVec; v < ld; v += kThreads * kVec)
        StoreVec<kVec>(dl + v, zero);
      continue;
    }
    const float mx = row_max[n], g = dloss[n], inv = 1.0f / sumexp[n];
    const int64_t col = static_cast<int64_t>(t) - vocab_start;
    for (int64_t v = threadIdx.x * kVec; v < ld; v += kThreads * kVec) {
      float lv[kVec];
      LoadVec<kVec>(l + v, lv);
#pragma unroll
      for (int k = 0; k < kVec; ++k) {
        lv[k] = v + k < V ? g * (expf(lv[k] - mx) * inv - (v + k == col ? 1.0f : 0.0f)) : 0.0f;
      }
      StoreVec<kVec>(dl + v, lv);
    }
  }
}

// Forward and backward of unsharded rows in one pass (the training step of
// a TP = 1 model, where the loss gradient's scale is known before the
// backward). A block takes a row: pass 1 reads it once, each thread keeping
// an online (max, Σexp) over its 16-byte vectors; the block combines them,
// writes the loss, and pass 2 reads the row again (from L2: the grid is a
// few blocks per SM, so the rows in flight fit in it) and overwrites it with
// the gradient. One HBM read and one write of [N, ld] instead of three reads
// and a write. exp is exp2 of log2(e)-scaled values (one FFMA and one MUFU
// per element); only a row's last vector is masked, and only the vector
// holding the target subtracts the one-hot.
// kStaged (rows of at most kStageBytes, e.g. GPT-2's 50304 columns): pass 1
// also keeps the row in shared memory, and pass 2 reads it from there — at
// 3 blocks an SM the rows in flight (~40 MB at 50304 columns) outgrow L2,
// and pass 2's reads went to HBM again. The same arithmetic on the same
// values either way, so the same bits.
constexpr int kFusedThreads = 512;
constexpr int kFusedBlocksPerSm = 3;
constexpr int kFusedUnroll = 4;
constexpr int64_t kStageBytes = 112 * 1024;  // two blocks an SM (228 KB, 1 KB reserved a block)
constexpr float kLog2e = 1.4426950408889634f;

template <bool kStaged>
__global__ void __launch_bounds__(kFusedThreads)
    FusedKernel(bf16* logits, const int32_t* __restrict__ targets, const float* __restrict__ dloss,
                float* __restrict__ loss, int64_t N, int64_t V, int64_t ld) {
  GTP_DYNAMIC_SHARED(uint4, stash);  // kStaged: the row, [ld / kV]; each thread its own vectors
  constexpr int kV = kBf16Vec;
  constexpr int64_t kStride = int64_t{kFusedThreads} * kV;
  const int64_t v_full = V / kV * kV;  // vectors below are all vocabulary
  for (int64_t n = blockIdx.x; n < N; n += gridDim.x) {
    bf16* row = logits + n * ld;
    const int32_t t = targets[n];
    float tl = 0.0f;
    if (threadIdx.x == 0 && t >= 0 && t < V) tl = Load(row[t]);
    float m = -INFINITY, se = 0.0f;  // se = Σ exp(x − m) of this thread's elements
#pragma unroll kFusedUnroll
    for (int64_t v = threadIdx.x * int64_t{kV}; v < ld; v += kStride) {
      const uint4 u = *reinterpret_cast<const uint4*>(row + v);
      if constexpr (kStaged) stash[v / kV] = u;
      float f[kV];
      internal::UnpackBf16x8(u, f);
      if (v >= v_full) {  // the partial vector and the padding: masked to −∞
#pragma unroll
        for (int k = 0; k < kV; ++k) f[k] = v + k < V ? f[k] : -INFINITY;
      }
      float vm = f[0];
#pragma unroll
      for (int k = 1; k < kV; ++k) vm = fmaxf(vm, f[k]);
      if (vm > m) {
        se *= exp2f((m - vm) * kLog2e);  // m = −∞ (nothing yet): se is 0
        m = vm;
      }
      if (m == -INFINITY) continue;  // every element so far masked or −∞
      const float ms = m * kLog2e;
#pragma unroll
      for (int k = 0; k < kV; ++k) se += exp2f(fmaf(f[k], kLog2e, -ms));
    }
    const float mx = BlockMax<kFusedThreads>(m);
    se = BlockSum<kFusedThreads>(m == -INFINITY ? 0.0f : se * exp2f((m - mx) * kLog2e));
    // BlockSum's barriers order every pass-1 read (and tl) before the writes.
    if (threadIdx.x == 0) loss[n] = t < 0 ? 0.0f : logf(se) + mx - tl;
    const float g = t < 0 ? 0.0f : dloss[n], ginv = g / se, mxs = mx * kLog2e;
#pragma unroll kFusedUnroll
    for (int64_t v = threadIdx.x * int64_t{kV}; v < ld; v += kStride) {
      float f[kV];
      if constexpr (kStaged) {
        internal::UnpackBf16x8(stash[v / kV], f);
      } else {
        LoadVec<kV>(row + v, f);
      }
#pragma unroll
      for (int k = 0; k < kV; ++k) f[k] = ginv * exp2f(fmaf(f[k], kLog2e, -mxs));
      if (v >= v_full) {
#pragma unroll
        for (int k = 0; k < kV; ++k) f[k] = v + k < V ? f[k] : 0.0f;
      }
      if (t >= v && t < v + kV && t < V) {  // (a target past V: no one-hot in the padding)
#pragma unroll
        for (int k = 0; k < kV; ++k) f[k] -= v + k == t ? g : 0.0f;
      }
      StoreVec<kV>(row + v, f);
    }
  }
}

unsigned RowGrid(int64_t N) {
  const int64_t kMax = int64_t{1} << 20;
  return static_cast<unsigned>(N < kMax ? N : kMax);
}

void CheckArgs(const char* op, int64_t N, int64_t V, int64_t ld = -1) {
  GTP_CU_REQUIRE(N >= 0 && V >= 0, "%s: negative size N=%lld V=%lld", op, static_cast<long long>(N),
                 static_cast<long long>(V));
  GTP_CU_REQUIRE(ld < 0 || ld >= V, "%s: row stride ld=%lld < V=%lld", op,
                 static_cast<long long>(ld), static_cast<long long>(V));
}

// 16-byte accesses for bf16 rows: the row stride a multiple of 8 and every
// buffer aligned.
bool VecRows(int64_t ld, std::initializer_list<const void*> ptrs) {
  return ld % kBf16Vec == 0 && Aligned16(ptrs);
}

template <typename T>
void StatsT(const T* logits, const int32_t* targets, float* row_max, float* target_logit, int64_t N,
            int64_t V, int64_t vocab_start, cudaStream_t stream, int64_t ld) {
  if (ld <= 0) ld = V;
  CheckArgs("CrossEntropyStats", N, V, ld);
  if (N == 0) return;
  WithVec<T>(VecRows(ld, {logits}), [&](auto vec) {
    constexpr int kVec = decltype(vec)::value;
    Launch(StatsKernel<T, kVec>, RowGrid(N), kThreads, 0, stream, logits, targets, row_max,
           target_logit, N, V, ld, vocab_start);
  });
  GTP_CU_LAUNCH_CHECK();
}

template <typename T>
void SumExpT(const T* logits, const float* row_max, float* sumexp, int64_t N, int64_t V,
             cudaStream_t stream, int64_t ld) {
  if (ld <= 0) ld = V;
  CheckArgs("CrossEntropySumExp", N, V, ld);
  if (N == 0) return;
  WithVec<T>(VecRows(ld, {logits}), [&](auto vec) {
    constexpr int kVec = decltype(vec)::value;
    Launch(SumExpKernel<T, kVec>, RowGrid(N), kThreads, 0, stream, logits, row_max, sumexp, N, V,
           ld);
  });
  GTP_CU_LAUNCH_CHECK();
}

template <typename T>
void BackwardT(const T* logits, const float* row_max, const float* sumexp, const int32_t* targets,
               const float* dloss, T* dlogits, int64_t N, int64_t V, int64_t vocab_start,
               cudaStream_t stream, int64_t ld) {
  if (ld <= 0) ld = V;
  CheckArgs("CrossEntropyBackward", N, V, ld);
  if (N == 0 || ld == 0) return;
  WithVec<T>(VecRows(ld, {logits, dlogits}), [&](auto vec) {
    constexpr int kVec = decltype(vec)::value;
    Launch(BackwardKernel<T, kVec>, RowGrid(N), kThreads, 0, stream, logits, row_max, sumexp,
           targets, dloss, dlogits, N, V, ld, vocab_start);
  });
  GTP_CU_LAUNCH_CHECK();
}

}  // namespace

void CrossEntropyStats(const float* logits, const int32_t* targets, float* row_max,
                       float* target_logit, int64_t N, int64_t V, int64_t vocab_start,
                       cudaStream_t stream, int64_t ld) {
  StatsT(logits, targets, row_max, target_logit, N, V, vocab_start, stream, ld);
}
void CrossEntropyStats(const bf16* logits, const int32_t* targets, float* row_max,
                       float* target_logit, int64_t N, int64_t V, int64_t vocab_start,
                       cudaStream_t stream, int64_t ld) {
  StatsT(logits, targets, row_max, target_logit, N, V, vocab_start, stream, ld);
}

void CrossEntropySumExp(const float* logits, const float* row_max, float* sumexp, int64_t N,
                        int64_t V, cudaStream_t stream, int64_t ld) {
  SumExpT(logits, row_max, sumexp, N, V, stream, ld);
}
void CrossEntropySumExp(const bf16* logits, const float* row_max, float* sumexp, int64_t N,
                        int64_t V, cudaStream_t stream, int64_t ld) {
  SumExpT(logits, row_max, sumexp, N, V, stream, ld);
}

void CrossEntropyLoss(const float* row_max, const float* sumexp, const float* target_logit,
                      const int32_t* targets, float* loss, int64_t N, cudaStream_t stream) {
  CheckArgs("CrossEntropyLoss", N, 0);
  if (N == 0) return;
  Launch(LossKernel, GridFor(N, kThreads), kThreads, 0, stream, row_max, sumexp, target_logit,
         targets, loss, N);
  GTP_CU_LAUNCH_CHECK();
}

void CrossEntropyBackward(const float* logits, const float* row_max, const float* sumexp,
                          const int32_t* targets, const float* dloss, float* dlogits, int64_t N,
                          int64_t V, int64_t vocab_start, cudaStream_t stream, int64_t ld) {
  BackwardT(logits, row_max, sumexp, targets, dloss, dlogits, N, V, vocab_start, stream, ld);
}
void CrossEntropyBackward(const bf16* logits, const float* row_max, const float* sumexp,
                          const int32_t* targets, const float* dloss, bf16* dlogits, int64_t N,
                          int64_t V, int64_t vocab_start, cudaStream_t stream, int64_t ld) {
  BackwardT(logits, row_max, sumexp, targets, dloss, dlogits, N, V, vocab_start, stream, ld);
}

bool CrossEntropyFusedSupported(const void* logits, int64_t V, int64_t ld) {
  return ld >= V && V > 0 && ld % kBf16Vec == 0 && Aligned16({logits});
}

void CrossEntropyFused(bf16* logits, const int32_t* targets, const float* dloss, float* loss,
                       int64_t N, int64_t V, int64_t ld, cudaStream_t stream) {
  CheckArgs("CrossEntropyFused", N, V, ld);
  GTP_CU_REQUIRE(CrossEntropyFusedSupported(logits, V, ld),
                 "CrossEntropyFused: unsupported V=%lld ld=%lld (see CrossEntropyFusedSupported)",
                 static_cast<long long>(V), static_cast<long long>(ld));
  if (N == 0) return;
  const int64_t stage_bytes = ld * static_cast<int64_t>(sizeof(bf16));
  if (stage_bytes <= kStageBytes) {
#if !defined(GTP_CUDA_HOST_EMULATION)
    // Raised before the occupancy is asked (Launch raises it too).
    GTP_CU_CHECK(cudaFuncSetAttribute(FusedKernel<true>,
                                      cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      static_cast<int>(stage_bytes)));
#endif
    const int per_sm =
        internal::BlocksPerSm(FusedKernel<true>, kFusedThreads, static_cast<size_t>(stage_bytes));
    const int64_t grid = std::min<int64_t>(N, int64_t{std::max(per_sm, 1)} * internal::SmCount());
    Launch(FusedKernel<true>, static_cast<unsigned>(grid), kFusedThreads,
           static_cast<size_t>(stage_bytes), stream, logits, targets, dloss, loss, N, V, ld);
  } else {
    const int64_t grid = std::min<int64_t>(N, int64_t{kFusedBlocksPerSm} * internal::SmCount());
    Launch(FusedKernel<false>, static_cast<unsigned>(grid), kFusedThreads, 0, stream, logits,
           targets, dloss, loss, N, V, ld);
  }
  GTP_CU_LAUNCH_CHECK();
}

void CrossEntropyForward(const float* logits, const int32_t* targets, float* loss, float* scratch,
                         int64_t N, int64_t V, cudaStream_t stream) {
  CheckArgs("CrossEntropyForward", N, V);
  if (N == 0) return;
  // Targets are device data; unlike the CPU version, t ≥ V is not checked here
  // (it would need a host sync): such a row gets target_logit 0.
  float* row_max = scratch;
  float* target_logit = scratch + N;
  float* sumexp = scratch + 2 * N;
  CrossEntropyStats(logits, targets, row_max, target_logit, N, V, /*vocab_start=*/0, stream);
  CrossEntropySumExp(logits, row_max, sumexp, N, V, stream);
  CrossEntropyLoss(row_max, sumexp, target_logit, targets, loss, N, stream);
}

}  // namespace gtp::kernels::cuda
