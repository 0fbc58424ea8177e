// core/kernels/ssm/ssm_cuda.h — CUDA launchers of the Mamba-2 ops behind
// ssd_scan.h and mamba_ops.h (private to this package: call the Tensor-level
// functions). Raw f32 device pointers, row-major contiguous; every launcher
// only enqueues on `stream` (never synchronises the host) and aborts with
// file:line on a bad launch. Math and conventions as in the public headers:
// activation gradients =, parameter gradients +=; deterministic (no float
// atomics: every reduction has a fixed order). Scratch is caller-allocated
// device memory of the size the matching *ScratchFloats function returns.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace gtp::kernels::ssm::cuda {

// The largest state size N the scan kernels take (a thread holds up to 8
// state elements of a row in registers, 32 lanes a row).
inline constexpr int64_t kSsdMaxN = 256;

// y[B, T, H, P] (=). Shapes as ssd_scan.h; P ≤ 1024, N ≤ kSsdMaxN.
void SsdScanForward(const float* x, const float* dt, const float* A, const float* Bm,
                    const float* Cm, const float* D, float* y, int64_t B, int64_t T, int64_t H,
                    int64_t P, int64_t G, int64_t N, cudaStream_t stream);

// Floats of scratch SsdScanBackward needs: O(B·H·T) per-step scalars, the
// states at the chunk boundaries (2·B·H·(⌈T/chunk⌉ − 1)·P·N), and
// per-(head, p-tile) dB/dC partials [B, T, H, ⌈P/rows⌉, N] unless H = G and
// one block holds all of P (see MakeScanPlan in ssm.cu).
int64_t SsdScanBackwardScratchFloats(int64_t B, int64_t T, int64_t H, int64_t P, int64_t G,
                                     int64_t N, int64_t chunk);
// dx, ddt, dBm, dCm (=); dA, dD (+=). A forward and a reverse sweep run side
// by side (ssm.cu); they save the state at every chunk boundary (min(chunk,
// T) steps apart), where the decay gradient restarts from its exact value.
void SsdScanBackward(const float* dy, const float* x, const float* dt, const float* A,
                     const float* Bm, const float* Cm, const float* D, float* dx, float* ddt,
                     float* dA, float* dBm, float* dCm, float* dD, float* scratch, int64_t B,
                     int64_t T, int64_t H, int64_t P, int64_t G, int64_t N, int64_t chunk,
                     cudaStream_t stream);

// x, y [B, T, Ch]; w [Ch, K]; bias [Ch].
void CausalConv1dForward(const float* x, const float* w, const float* bias, float* y, int64_t B,
                         int64_t T, int64_t Ch, int64_t K, bool silu, cudaStream_t stream);
int64_t CausalConv1dBackwardScratchFloats(int64_t B, int64_t T, int64_t Ch, int64_t K);
// dx (=), dw, dbias (+=).
void CausalConv1dBackward(const float* dy, const float* x, const float* w, const float* bias,
                          bool silu, float* dx, float* dw, float* dbias, float* scratch,
                          int64_t B, int64_t T, int64_t Ch, int64_t K, cudaStream_t stream);

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

// x, z, y [N, Ch]; w [Ch]; rstd [N, Ch/group].
void GatedRmsNormForward(const float* x, const float* z, const float* w, float* y, float* rstd,
                         int64_t N, int64_t Ch, int64_t group, float eps, cudaStream_t stream);
int64_t GatedRmsNormBackwardScratchFloats(int64_t N, int64_t Ch);
// dx, dz (=), dw (+=).
void GatedRmsNormBackward(const float* dy, const float* x, const float* z, const float* w,
                          const float* rstd, float* dx, float* dz, float* dw, float* scratch,
                          int64_t N, int64_t Ch, int64_t group, cudaStream_t stream);

}  // namespace gtp::kernels::ssm::cuda
