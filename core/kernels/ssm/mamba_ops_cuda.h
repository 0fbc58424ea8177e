// core/kernels/ssm/mamba_ops_cuda.h — CUDA launchers of the Mamba-2 mixer's
// small ops behind mamba_ops.h (private to this package: call the Tensor-level
// functions). Raw f32 device pointers, row-major contiguous; every launcher
// only enqueues on `stream` (never synchronises the host) and aborts with
// file:line on a bad launch. Activation gradients =, parameter gradients +=;
// deterministic (no float atomics). Scratch is caller-allocated device memory
// of the size the matching *ScratchFloats function returns.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/dtype.h"

namespace gtp::kernels::ssm::cuda {

// x, y [B, T, Ch]; w [Ch, K]; bias [Ch].
void CausalConv1dForward(const float* x, const float* w, const float* bias, float* y, int64_t B,
                         int64_t T, int64_t Ch, int64_t K, bool silu, cudaStream_t stream);
int64_t CausalConv1dBackwardScratchFloats(int64_t B, int64_t T, int64_t Ch, int64_t K);
// dx (=), dw, dbias (+=); dx f32 or bf16 (rounded to nearest even, as a cast).
void CausalConv1dBackward(const float* dy, const float* x, const float* w, const float* bias,
                          bool silu, float* dx, float* dw, float* dbias, float* scratch,
                          int64_t B, int64_t T, int64_t Ch, int64_t K, cudaStream_t stream);
void CausalConv1dBackward(const float* dy, const float* x, const float* w, const float* bias,
                          bool silu, bf16* dx, float* dw, float* dbias, float* scratch, int64_t B,
                          int64_t T, int64_t Ch, int64_t K, cudaStream_t stream);

// raw, dt [N, H]; bias [H].
void SoftplusBiasForward(const float* raw, const float* bias, float* dt, int64_t N, int64_t H,
                         cudaStream_t stream);
int64_t SoftplusBiasBackwardScratchFloats(int64_t N, int64_t H);
// draw (=), dbias (+=).
void SoftplusBiasBackward(const float* ddt, const float* raw, const float* bias, float* draw,
                          float* dbias, float* scratch, int64_t N, int64_t H,
                          cudaStream_t stream);

// a[h] = −exp(a_log[h]) (=), H elements.
void NegExpForward(const float* a_log, float* a, int64_t H, cudaStream_t stream);
// a_log_grad[h] += da[h]·a[h].
void NegExpBackwardAccumulate(const float* da, const float* a, float* a_log_grad, int64_t H,
                              cudaStream_t stream);

// x, z, y [N, Ch]; w [Ch]; rstd [N, Ch/group]. y f32, or bf16 (each value
// the f32 result rounded to nearest even: a cast's bits).
void GatedRmsNormForward(const float* x, const float* z, const float* w, float* y, float* rstd,
                         int64_t N, int64_t Ch, int64_t group, float eps, cudaStream_t stream);
void GatedRmsNormForward(const float* x, const float* z, const float* w, bf16* y, float* rstd,
                         int64_t N, int64_t Ch, int64_t group, float eps, cudaStream_t stream);
int64_t GatedRmsNormBackwardScratchFloats(int64_t N, int64_t Ch);
// dx, dz (=), dw (+=); dz f32 or bf16 (rounded to nearest even, as a cast);
// dy f32 or bf16 (a bf16 dy gives the bits of its f32 cast).
void GatedRmsNormBackward(const float* dy, const float* x, const float* z, const float* w,
                          const float* rstd, float* dx, float* dz, float* dw, float* scratch,
                          int64_t N, int64_t Ch, int64_t group, cudaStream_t stream);
void GatedRmsNormBackward(const float* dy, const float* x, const float* z, const float* w,
                          const float* rstd, float* dx, bf16* dz, float* dw, float* scratch,
                          int64_t N, int64_t Ch, int64_t group, cudaStream_t stream);
void GatedRmsNormBackward(const bf16* dy, const float* x, const float* z, const float* w,
                          const float* rstd, float* dx, float* dz, float* dw, float* scratch,
                          int64_t N, int64_t Ch, int64_t group, cudaStream_t stream);
void GatedRmsNormBackward(const bf16* dy, const float* x, const float* z, const float* w,
                          const float* rstd, float* dx, bf16* dz, float* dw, float* scratch,
                          int64_t N, int64_t Ch, int64_t group, cudaStream_t stream);

}  // namespace gtp::kernels::ssm::cuda
