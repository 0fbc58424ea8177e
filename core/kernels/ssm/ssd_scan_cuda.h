// core/kernels/ssm/ssd_scan_cuda.h — CUDA launchers of the SSD scan behind
// ssd_scan.h (private to this package: call the Tensor-level functions). Raw
// f32 device pointers, row-major contiguous; every launcher only enqueues on
// `stream` (never synchronises the host) and aborts with file:line on a bad
// launch. Math and conventions as in ssd_scan.h: activation gradients =,
// parameter gradients +=; deterministic (no float atomics). Scratch is
// caller-allocated device memory of the size SsdScanBackwardScratchFloats returns.
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
// one block holds all of P (see MakeScanPlan in ssd_scan.cu).
int64_t SsdScanBackwardScratchFloats(int64_t B, int64_t T, int64_t H, int64_t P, int64_t G,
                                     int64_t N, int64_t chunk);
// dx, ddt, dBm, dCm (=); dA, dD (+=). A forward and a reverse sweep run side
// by side (ssd_scan.cu); they save the state at every chunk boundary (min(chunk,
// T) steps apart), where the decay gradient restarts from its exact value.
void SsdScanBackward(const float* dy, const float* x, const float* dt, const float* A,
                     const float* Bm, const float* Cm, const float* D, float* dx, float* ddt,
                     float* dA, float* dBm, float* dCm, float* dD, float* scratch, int64_t B,
                     int64_t T, int64_t H, int64_t P, int64_t G, int64_t N, int64_t chunk,
                     cudaStream_t stream);

// ---- The chunked form (ssd_chunked.cu): parallel over (b, h, chunk), chunks
// of 64, 32 or 16 steps (the largest not above max(chunk, 16) whose blocks
// fit shared memory: P·N up to about 14k), the chunk products on the tensor
// cores as 3×TF32. Same math and conventions; the scalar gradients in double;
// deterministic. Scratch: SsdChunkedScratchFloats floats of device memory
// (the forward needs some too: the chunk-entry states).

// How the chunked kernels' per-chunk work is cut into blocks.
//   kPerHead: a block per (b, h, chunk).
//   kHeadGroups: a block per (b, chunk, heads of one group), walking its heads
//     in order: B, C and C·Bᵀ staged once for the block's heads (the heads of a
//     group share them), the next head's rows copied in (cp.async) while one
//     head computes. The forward's y is kPerHead's bit for bit. The backward
//     sums dB, dC over the block's heads in head order inside the block; the
//     group's heads are split over blocks only where B·⌈T/L⌉·G is small
//     (HeadSplits), and without a split every output is kPerHead's bit for bit.
//     It takes kPerHead's chunk length, where its larger backward block fits
//     at that length (else SsdChunkedFits says no).
enum class ChunkedBlocks { kPerHead, kHeadGroups };

// Whether some chunk length fits these P, N (else use the recurrence above).
bool SsdChunkedFits(int64_t P, int64_t N, int64_t chunk,
                    ChunkedBlocks kernel = ChunkedBlocks::kPerHead);
// The chunk length (64, 32 or 16; 0 when nothing fits). kHeadGroups takes
// kPerHead's length or none.
int SsdChunkedLength(int64_t P, int64_t N, int64_t chunk,
                     ChunkedBlocks kernel = ChunkedBlocks::kPerHead);
int64_t SsdChunkedScratchFloats(int64_t B, int64_t T, int64_t H, int64_t P, int64_t G, int64_t N,
                                int64_t chunk, bool backward,
                                ChunkedBlocks kernel = ChunkedBlocks::kPerHead);
// (The forward's chunk length and scratch do not depend on `kernel`.)
void SsdChunkedForward(const float* x, const float* dt, const float* A, const float* Bm,
                       const float* Cm, const float* D, float* y, float* scratch, int64_t B,
                       int64_t T, int64_t H, int64_t P, int64_t G, int64_t N, int64_t chunk,
                       cudaStream_t stream, ChunkedBlocks kernel = ChunkedBlocks::kPerHead);
void SsdChunkedBackward(const float* dy, const float* x, const float* dt, const float* A,
                        const float* Bm, const float* Cm, const float* D, float* dx, float* ddt,
                        float* dA, float* dBm, float* dCm, float* dD, float* scratch, int64_t B,
                        int64_t T, int64_t H, int64_t P, int64_t G, int64_t N, int64_t chunk,
                        cudaStream_t stream, ChunkedBlocks kernel = ChunkedBlocks::kPerHead);

// ---- The chunked form with a warp per (b, h, chunk) (ssd_mma.cu,
// ssd_mma_backward.cu): chunks of SsdMmaChunkLength steps (64 where
// `chunk` ≥ 64 and max(P, N) is in 17..32, else 32), P
// and N up to 64 zero-padded to 16, 32 or 64, the chunk products on the
// tensor cores as bf16 mma.sync: with `split`, each operand split into two
// bf16 terms (about f32 accuracy, three mma a product); without, each
// operand rounded to bf16 (one mma: the precision of Mamba-2's own kernels).
// Blocks of up to 4 heads of a group share B, C and C·Bᵀ. Same math and
// conventions; the decays and the scalar gradients in double;
// deterministic. Scratch: SsdMmaScratchFloats floats of device memory.
bool SsdMmaFits(int64_t P, int64_t N);
// The kernels' chunk length for the caller's `chunk` (0 where they do not fit).
int64_t SsdMmaChunkLength(int64_t P, int64_t N, int64_t chunk);
int64_t SsdMmaScratchFloats(int64_t B, int64_t T, int64_t H, int64_t P, int64_t G, int64_t N,
                            int64_t chunk, bool backward);
void SsdMmaForward(const float* x, const float* dt, const float* A, const float* Bm,
                   const float* Cm, const float* D, float* y, float* scratch, int64_t B, int64_t T,
                   int64_t H, int64_t P, int64_t G, int64_t N, int64_t chunk, bool split,
                   cudaStream_t stream);
void SsdMmaBackward(const float* dy, const float* x, const float* dt, const float* A,
                    const float* Bm, const float* Cm, const float* D, float* dx, float* ddt,
                    float* dA, float* dBm, float* dCm, float* dD, float* scratch, int64_t B,
                    int64_t T, int64_t H, int64_t P, int64_t G, int64_t N, int64_t chunk,
                    bool split, cudaStream_t stream);

}  // namespace gtp::kernels::ssm::cuda
