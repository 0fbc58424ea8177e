// layers/cp/cuda/ring_attention_cuda.h — CUDA launchers of the ring
// attention's block kernels (layers/cp/ring_attention.h has the math). f32;
// enqueued on `stream`, no synchronisation. One thread per query row (or,
// for dk/dv, per key row): every output element has one writer, so results
// do not depend on scheduling.
#pragma once

#include <cstdint>

namespace gtp::layers::cp::cuda {

void BlockForward(const float* q, const float* k, const float* v, const int32_t* qpos,
                  const int32_t* kpos, int64_t B, int64_t Tq, int64_t Tk, int64_t NH, int64_t NKV,
                  int64_t HS, float* m, float* l, float* acc, void* stream);
void BlockBackward(const float* q, const float* k, const float* v, const int32_t* qpos,
                   const int32_t* kpos, const float* dy, const float* lse, const float* D,
                   int64_t B, int64_t Tq, int64_t Tk, int64_t NH, int64_t NKV, int64_t HS,
                   float* dq, float* dk, float* dv, void* stream);
// y = acc / l, lse = m + log l over nq rows of HS.
void Finalize(const float* m, const float* l, const float* acc, float* y, float* lse, int64_t nq,
              int64_t HS, void* stream);
// D[r] = Σ_x dy[r, x]·y[r, x].
void RowDot(const float* dy, const float* y, float* D, int64_t nq, int64_t HS, void* stream);

}  // namespace gtp::layers::cp::cuda
