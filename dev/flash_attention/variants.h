// dev/flash_attention/variants.h — backward variants of the fused causal
// attention, for the benchmark and the GPU test in this directory only (not in
// core/kernels/cuda.h). Shapes, layouts and pointer rules as
// cuda::FlashAttentionBackward.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/dtype.h"

namespace gtp::kernels::cuda {

// The previous backward (three kernels: D, dk/dv, dq) for HS 64 and 128; same
// results as FlashAttentionBackward. Defined in
// core/kernels/cuda/flash_attention.cu for side-by-side timing; scratch:
// FlashAttentionBackwardScratchBytes.
void FlashAttentionBackwardSeparateDq(const bf16* dout, const bf16* q, const bf16* k, const bf16* v,
                                      const bf16* out, const float* lse, bf16* dq, bf16* dk,
                                      bf16* dv, void* scratch, int64_t B, int64_t T, int64_t NH,
                                      int64_t NKV, int64_t HS, cudaStream_t stream);

// Defined in variants.cu. Scratch bytes for every mode of
// FlashAttentionBackwardFusedDqVariant (D plus the fused-dq slots).
int64_t FlashAttentionBackwardVariantScratchBytes(int64_t B, int64_t T, int64_t NH, int64_t HS);

// Timing experiments, HS 64 (mode 7: HS 128). dk and dv are right in every
// mode; dq is WRONG on purpose in modes 1, 2 and 8 (timing only) and meant to
// be right in the others (variants_gpu_test checks 0, 6, 9, 10, 11, 12).
//   0  dq fused into the dk/dv kernel (semaphore chain over the key tiles)
//   1  as 0, partials stored without waiting or adding (wrong dq: the GEMM's cost)
//   2  as 0, added without waiting (racy dq: the read-modify-write without the chain)
//   3  as 0, query tiles visited diagonal first    4  as 0, lane 0 alone acquires/releases
//   6  the three-kernel path's dk/dv and dq blocks in one launch    7  6 at HS 128
//   8  the three-kernel path without its dq pass (D + dk/dv; dq not written)
//   9  the three-kernel path, dk/dv kernel at ≤168 registers (3 blocks/SM)
//   10 0 at ≤168 registers    11 6 at ≤168 registers (what FlashAttentionBackward runs)
//   12 10 with each semaphore release deferred by one step
void FlashAttentionBackwardFusedDqVariant(int mode, const bf16* dout, const bf16* q, const bf16* k,
                                          const bf16* v, const bf16* out, const float* lse,
                                          bf16* dq, bf16* dk, bf16* dv, void* scratch, int64_t B,
                                          int64_t T, int64_t NH, int64_t NKV, int64_t HS,
                                          cudaStream_t stream);

}  // namespace gtp::kernels::cuda
