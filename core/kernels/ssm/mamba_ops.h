// core/kernels/ssm/mamba_ops.h — the Mamba-2 mixer's small ops around the
// SSD scan (ssd_scan.h): the depthwise causal conv1d, dt's softplus with its
// bias, the decay rates A = −exp(A_log) and the gated RMSNorm before
// out_proj. Tensor-level, f32, contiguous on exec's device. CPU calls block
// the calling thread; CUDA calls (mamba_ops.cu) only enqueue on exec.stream (the
// backwards take scratch from exec.alloc: B·T·Ch floats for the conv, plus
// ⌈rows/256⌉ floats per column of each parameter-gradient column sum).
// Activation gradients are written (=), parameter gradients accumulate (+=);
// deterministic (bit-identical run to run).
#pragma once

#include <cstdint>

#include "core/kernels/ops.h"

namespace gtp::kernels::ssm {

// y[b, t, c] = act(bias[c] + Σ_{k<K} w[c, k]·x[b, t − (K−1) + k, c]), x = 0
// before t = 0 (causal, depthwise). x, y [B, T, Ch]; w [Ch, K]; bias [Ch];
// act = SiLU when `silu`, else identity.
void CausalConv1dForward(const Exec& e, const Tensor& x, const Tensor& w, const Tensor& bias,
                         const Tensor& y, bool silu);
// dx (=), dw and dbias (+=). The pre-activation is recomputed from x. dx
// f32 or bf16 (as a cast of the f32 dx: in_proj_x's gradient input without a
// cast kernel); the rest f32.
void CausalConv1dBackward(const Exec& e, const Tensor& dy, const Tensor& x, const Tensor& w,
                          const Tensor& bias, bool silu, const Tensor& dx, const Tensor& dw,
                          const Tensor& dbias);

// dt[n, h] = softplus(raw[n, h] + bias[h]) (softplus(u) = log(1 + e^u); u
// above 20 passes through). raw, dt [N, H]; bias [H].
void SoftplusBiasForward(const Exec& e, const Tensor& raw, const Tensor& bias, const Tensor& dt);
// draw (=) = ddt·σ(raw + bias); dbias (+=) Σ_n of it.
void SoftplusBiasBackward(const Exec& e, const Tensor& ddt, const Tensor& raw, const Tensor& bias,
                          const Tensor& draw, const Tensor& dbias);

// a[h] = −exp(a_log[h]) (=): the scan's decay rates from their log
// parameter, so that A stays negative. a_log, a [H].
void NegExpForward(const Exec& e, const Tensor& a_log, const Tensor& a);
// a_log_grad[h] += da[h]·a[h] (d(−e^u)/du = −e^u = a, the forward's output).
void NegExpBackwardAccumulate(const Exec& e, const Tensor& da, const Tensor& a,
                              const Tensor& a_log_grad);

// Gated RMSNorm (Mamba-2's RMSNormGated, norm before the gate's product is
// not applied: g = x·silu(z) is normalised): for each row and each group of
// `group` channels, y = g·rstd·w with rstd = 1/√(mean(g²) + eps).
// x, z, y [N, Ch]; w [Ch]; rstd [N, Ch/group] (written, for the backward).
// x, z, w, rstd f32; y f32 or bf16 (the f32 value rounded to nearest even,
// as a cast: the out-projection's input without a cast kernel).
void GatedRmsNormForward(const Exec& e, const Tensor& x, const Tensor& z, const Tensor& w,
                         const Tensor& y, const Tensor& rstd, int64_t group, float eps);
// dx, dz (=); dw (+=). dz f32 or bf16 (as a cast of the f32 value: in_proj_z's
// gradient input without a cast kernel); dy f32 or bf16 (out_proj's input
// gradient as it comes, without a cast kernel: a bf16 dy gives the bits of
// its f32 cast); the rest f32.
void GatedRmsNormBackward(const Exec& e, const Tensor& dy, const Tensor& x, const Tensor& z,
                          const Tensor& w, const Tensor& rstd, int64_t group, const Tensor& dx,
                          const Tensor& dz, const Tensor& dw);

}  // namespace gtp::kernels::ssm
