// layers/moe/cuda/combine_cuda.h — raw CUDA launchers of layers/moe/combine.h
// (layers/moe/cuda/combine.cu); `bf16`: the row tensors are bf16, else f32.
// Enqueued on `stream`; no synchronisation.
#pragma once

#include <cstdint>

namespace gtp::layers::moe {
namespace cuda {
// Raw CUDA launchers (layers/moe/cuda/combine.cu); bf16 = whether the row
// tensors are bf16 (else f32).
void CombineForward(const void* ye, const int32_t* pos, const float* w, void* y, int64_t n, int k,
                    int64_t C, bool bf16, void* stream);
void CombineBackward(const void* dy, const void* ye, const int32_t* pos, const float* w, void* dye,
                     float* dw, int64_t n, int k, int64_t M, int64_t C, bool bf16, void* stream);
// xe_bf16 / dx_bf16: each row tensor's dtype (else f32); add may be null; k ≤ 8.
void GatherAdd(const void* xe, const int32_t* pos, const float* add, void* dx, int64_t n, int k,
               int64_t C, bool xe_bf16, bool dx_bf16, void* stream);
}  // namespace cuda

}  // namespace gtp::layers::moe
