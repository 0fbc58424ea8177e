// core/kernels/ssm/ssd_scan.h — the Mamba-2 selective state-space scan (SSD,
// "state-space duality"), forward and backward, as Tensor-level ops.
//
// Math, per batch b and head h (a scalar A per head, as Mamba-2):
//   x  [B, T, H, P]   inputs (P = head dim)
//   dt [B, T, H]      step sizes, already positive (the caller applies softplus
//                     and dt_bias)
//   A  [H]            decay rates (negative reals; A = −exp(A_log))
//   Bm [B, T, G, N]   input projections, G groups, H % G == 0: head h uses
//   Cm [B, T, G, N]   output projections  group g = h / (H/G)
//   D  [H]            skip weights
//   y  [B, T, H, P]   outputs
// State S_t [P, N], S_{−1} = 0:
//   S_t = exp(dt_t·A_h)·S_{t−1} + dt_t · x_t ⊗ B_t      (x_t ∈ R^P, B_t ∈ R^N)
//   y_t = S_t · C_t + D_h · x_t                          (S_t·C_t ∈ R^P)
//
// Computed by the chunked SSD algorithm ("minimal SSD" of the Mamba-2 paper,
// mamba_ssm's ssd_minimal): the sequence is cut into chunks of `chunk` steps
// (the last may be shorter). With a_t = dt_t·A_h and cs_i = Σ_{k ≤ i} a_k
// inside the chunk,
//   1. diagonal blocks: y_i += Σ_{j ≤ i} (C_i·B_j)·exp(cs_i − cs_j)·dt_j·x_j
//      (the quadratic, attention-like form with the segment-sum decay);
//   2. chunk states:    S_c = Σ_j exp(cs_last − cs_j)·dt_j·x_j ⊗ B_j;
//   3. inter-chunk recurrence: S_in[c+1] = exp(cs_last)·S_in[c] + S_c;
//   4. state to output: y_i += exp(cs_i)·S_in[c]·C_i.
// Every exponent is ≤ 0, so nothing overflows. Cost O(T·L·(N + P) + T·N·P)
// per head. The backward runs the same chunks in reverse, recomputing the
// chunk-entry states from the inputs (nothing is saved by the forward).
//
// Conventions (core/kernels/kernels.h): row-major contiguous f32 tensors on
// exec's device; activation gradients (dx, ddt, dBm, dCm) are written (=);
// parameter gradients (dA, dD) accumulate (+=). f32 data with f32
// accumulation of vector products; cumulative decays and the per-head scalar
// reductions (dA, dD, ddt) in double. Deterministic: bit-identical run to
// run. Outputs must not alias inputs. Bad shapes, dtypes or devices abort
// (GTP_CHECK); nothing returns Status.
//
// CPU calls run on the calling thread (blocking). CUDA calls only enqueue on
// exec.stream (never block the host); SsdAutoKernel picks the kernels by
// default. The recurrence (ssd_scan.cu) runs the scan itself, parallel over (b, h, p, n); its
// backward is a forward and a reverse sweep plus a suffix sum of per-step scalars that restarts
// from an exact value every min(chunk, T) steps. The chunked kernels (ssd_chunked.cu,
// SsdCudaKernel::kChunked) run the CPU's algorithm with chunks of 64 steps (32 or 16 when chunk is
// smaller or P·N large), parallel over (b, h, chunk), with a short pass over the chunks for the
// chunk-entry states and the products on the tensor cores (3×TF32). Both need N ≤ 256, P ≤ 1024 and
// take scratch from exec.alloc: the recurrence's backward O(B·T·H) floats, the states at the chunk
// boundaries (2·B·H·(⌈T/chunk⌉ − 1)·P·N), and 2·B·T·H·⌈P/rows⌉·N more when G < H or P is split over
// blocks; the chunked forward B·H·⌈T/L⌉·(P·N + 1) floats, its backward twice that plus 2·B·T·H·N
// when G < H. kChunkedMma (ssd_mma.cu; P, N ≤ 64) gives each (b, h, chunk) one warp and keeps a
// chunk's products in registers between mma.sync instructions; scratch: the chunk states and
// per-chunk scalars (ssd_scan_cuda.h SsdMmaScratchFloats). Thread-safe for distinct output tensors.
//
//   Exec e = Exec::Cpu(host);
//   ssm::SsdScanForward(e, x, dt, A, Bm, Cm, D, y);
//   ssm::SsdScanBackward(e, dy, x, dt, A, Bm, Cm, D, dx, ddt, dA, dBm, dCm, dD);
#pragma once

#include <cstdint>

#include "core/kernels/ops.h"
#include "core/tensor.h"

namespace gtp::kernels::ssm {

// The default chunk length L (Mamba-2's).
inline constexpr int64_t kSsdDefaultChunk = 128;

// Which CUDA kernels run a scan (CPU calls ignore it: the CPU runs the
// chunked form). kRecurrence: ssd_scan.cu, serial in T per state element.
// kChunked: ssd_chunked.cu, the chunked form parallel over (b, h, chunk),
// its products on the tensor cores as 3×TF32 (f32 accuracy); it aborts on a
// shape whose block does not fit shared memory (P·N beyond about 14k).
// kChunkedHeads: kChunked with a block per (b, chunk, heads of a group) in
// the per-chunk kernels (ssd_scan_cuda.h ChunkedBlocks::kHeadGroups): B, C
// and C·Bᵀ staged once for the block's heads. Same chunk length as kChunked
// (it aborts where its larger backward block does not fit at that length,
// e.g. P·N above about 512 at 64-step chunks: SsdCudaKernelFits), so y is
// kChunked's bit for bit;
// the gradients too where B·⌈T/L⌉·G ≥ 128 or each block has one head (else
// dB and dC are summed in another fixed order). Opt-in: on the H200 it was
// not faster than kChunked (docs/PERFORMANCE.md, 2026-12-05).
// kChunkedMma: ssd_mma.cu, the chunked form with a warp per (b, h, chunk)
// and its products as bf16 mma.sync with split operands (about f32
// accuracy); P and N up to 64; chunks of 64 steps where chunk ≥ 64 and
// max(P, N) is in 17..32, else 32 (SsdCudaChunkLength). Checked on the CPU by a warp
// emulator (ssd_mma_emulation_test) and on the GPU by ssm_gpu_test.
// kChunkedMmaBf16: the same with each product's operands rounded to bf16
// (one mma where kChunkedMma takes three; Mamba-2's own kernels' precision:
// about 1e-2 of the outputs' scale). The Mamba mixer of a bf16 model runs it
// where kAuto picks kChunkedMma (layers/mamba/mamba_mixer.cc ScanKernel).
// kAuto (the default): SsdAutoKernel's choice.
enum class SsdCudaKernel {
  kRecurrence,
  kChunked,
  kChunkedHeads,
  kChunkedMma,
  kChunkedMmaBf16,
  kAuto
};

// The kernel kAuto runs: kChunkedMma wherever it fits (P and N up to 64),
// from its times beside the others (f32, ms, B = 8; docs/PERFORMANCE.md):
//   H200, 2026-12-05           forward mma / recurrence / chunked   backward mma / chunked / recurrence
//   T 1024, H 96, P = N = 16   0.178 / 0.383* / 0.580*              0.550 / 1.36* / 2.49*
//   T 1024, H 24, P = N = 64   0.504 / 0.612 / 0.827                2.04 / 2.28 / 3.21
// (* the same call's H100 figures; the hybrid step on the H200 went from
// 27.03 to 19.66 ms). Wider states take the earlier rule, from one H200
// (2026-12-04; f32, ms):
//   shape (B, T, H, P, N)     forward chunked / recurrence   backward chunked / recurrence
//   2, 4096, 128, 64, 128     19.2 / 4.83                    56.2 / 37.0
// so the recurrence for the forward, and for the backward the chunked
// kernels where P·N ≤ 256 and they fit, else the recurrence. Returns
// kChunkedMma, kChunked or kRecurrence.
SsdCudaKernel SsdAutoKernel(bool backward, int64_t P, int64_t N, int64_t chunk);

// Whether `kernel` runs a CUDA forward (backward) of this P, N and chunk
// rather than aborting: the chunked kernels need their chunk block to fit
// shared memory (kChunkedHeads' backward block is the larger); all need
// N ≤ 256 and P ≤ 1024.
bool SsdCudaKernelFits(SsdCudaKernel kernel, bool backward, int64_t P, int64_t N, int64_t chunk);

// The chunk length L (64, 32 or 16) the chunked CUDA kernels (kChunked,
// kChunkedHeads) cut T into for this P, N and chunk; 0 where their blocks do
// not fit. kChunkedHeads takes kChunked's length or none. kChunkedMma and
// kChunkedMmaBf16 take 64 where chunk ≥ 64 and max(P, N) is in 17..32,
// else 32.
int64_t SsdCudaChunkLength(SsdCudaKernel kernel, bool backward, int64_t P, int64_t N,
                           int64_t chunk);

// y[B, T, H, P] = the scan of x, dt, A, Bm, Cm, D above (=). chunk ≥ 1; T
// need not be a multiple of it. The result does not depend on chunk beyond
// f32 rounding.
void SsdScanForward(const Exec& e, const Tensor& x, const Tensor& dt, const Tensor& A,
                    const Tensor& Bm, const Tensor& Cm, const Tensor& D, const Tensor& y,
                    int64_t chunk = kSsdDefaultChunk, SsdCudaKernel kernel = SsdCudaKernel::kAuto);

// Gradients of a loss L given dy = ∂L/∂y [B, T, H, P]:
//   dx [B, T, H, P], ddt [B, T, H], dBm, dCm [B, T, G, N]   written (=);
//   dA [H], dD [H]                                          accumulated (+=).
// Shapes as the forward's; the same chunk as the forward is not required.
void SsdScanBackward(const Exec& e, const Tensor& dy, const Tensor& x, const Tensor& dt,
                     const Tensor& A, const Tensor& Bm, const Tensor& Cm, const Tensor& D,
                     const Tensor& dx, const Tensor& ddt, const Tensor& dA, const Tensor& dBm,
                     const Tensor& dCm, const Tensor& dD, int64_t chunk = kSsdDefaultChunk,
                     SsdCudaKernel kernel = SsdCudaKernel::kAuto);

}  // namespace gtp::kernels::ssm
