// core/kernels/fp8/block_gemm.h — the block-scaled FP8 GEMM: the reference
// (CPU) and its CUDA path through cuBLASLt: y = a·bᵀ over block-quantised e4m3
// operands, f32 accumulation per 128-wide K block (block_scale.h's design
// note gives the CPU's exact order).
//
//   y[m, n] = Σ_kb (sa(m, kb)·sb(n, kb)) · Σ_{k in kb} e4m3⁻¹(qa[m, k])·e4m3⁻¹(qb[n, k])
//
// a [M, K] and b [N, K] are both K-contiguous (ops::Linear's y = x·Wᵀ: a = x,
// b = W [out, in]; Hopper's FP8 GEMMs take only this layout). Each operand
// carries its own blocking: 1×128 (scales [rows, ceil(K/128)]) or 128×128
// (scales [ceil(rows/128), ceil(K/128)]); both block K the same way, so a
// K block kb has one scale per row of a and per row of b.
//
// y is f32 or bf16 [M, N]: y = a·bᵀ + beta·y (beta 0: written, y's old
// values never read, so NaN there does not show); a bf16 y is the f32 result
// rounded once (nearest even). A NaN scale (a block that held NaN or inf) makes every
// y it touches NaN on the CPU; what cuBLASLt does with one is not documented
// and not tested (the GPU test uses finite data only).
//
// CPU: the reference, in the order of block_scale.h's design note.
// CUDA (block_gemm_cuda.cc): cuBLASLt's FP8 GEMM with
// CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F for a 1×128 operand and
// BLK128x128_32F for a 128×128 one, f32 accumulation promoted per K block, on
// e.stream with e.blas's handle and workspace; the scales are rewritten into
// cuBLASLt's layout on the way (lt_scale_layout.h — verified by
// block_gemm_gpu_test.cc's probe on an H200). It adds these requirements, each
// an abort that names it: M, N and K multiples of 16 (cuBLAS' FP8 rule of
// 16-byte aligned rows; whether cuBLASLt takes a K that is not a multiple of
// 128 is untested: the GPU test runs K = 1008), not both operands
// 128×128 (cuBLASLt has no 2D × 2D mode), 16-byte aligned codes and y, and a
// BlasContext in e.blas; a configuration cuBLASLt finds no algorithm for
// aborts naming the scale modes and the shape (never a silent fallback).
// Compared with the CPU within the tolerance block_gemm_gpu_test.cc derives,
// not bit for bit; deterministic for a shape (the algorithm is cached per
// shape in the BlasContext).
//
//   fp8::BlockScaledGemm(e, {xq, xs, Fp8Layout::kRow1x128},
//                        {wq, ws, Fp8Layout::kTile128x128}, y);   // y = x·Wᵀ
#pragma once

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "core/kernels/fp8/block_quant.h"
#include "core/kernels/ops.h"
#include "core/tensor.h"

namespace gtp::kernels::fp8 {

// A block-quantised matrix [rows, cols]: its codes, scales and blocking.
struct Fp8Matrix {
  Tensor q;       // [rows, cols], fp8_e4m3 or u8
  Tensor scales;  // f32 [Fp8ScaleShape(rows, cols, layout)]
  Fp8Layout layout = Fp8Layout::kRow1x128;
  // Optional: the same scales in cuBLASLt's layout (f32 [LtScaleCount],
  // lt_scale_layout.h), written by the quantiser beside `scales`
  // (block_quant.h's lt_scales). The CUDA GEMM reads it as it is; without
  // it, it rewrites `scales` into scratch on every call. The CPU ignores it.
  Tensor lt_scales;
};

// Which kernel runs a BlockScaledGemm on CUDA (the CPU ignores it).
enum class Fp8GemmEngine {
  // The Exec's BlasContext decides (BlasContext::fp8_wgmma: the trainer's
  // train.fp8_gemm): kWgmma where it says so, else kCublasLt.
  kContext,
  kCublasLt,  // cuBLASLt's block-scaled FP8 GEMM (above)
  // gtp's own Hopper kernel (wgmma_gemm.cu: TMA, wgmma on e4m3, the f32
  // promotion per K block on CUDA cores). Compute capability 9.0 only (H100,
  // H200; it aborts, naming it, elsewhere). The same M, N, K and alignment
  // rules as cuBLASLt's; unlike it, it takes two 128×128 operands and a bias
  // with an f32 y. Compared with the CPU within the same tolerance
  // (block_gemm_gpu_test.cc); deterministic (no atomics). Where it splits K
  // (few tiles, long K) the split, and so the summation order, follows the
  // GPU's multiprocessor count: the same bits on GPUs of one kind.
  kWgmma,
};

// y [M, N] (f32 or bf16) = dequant(a) [M, K] · dequant(b) [N, K]ᵀ + beta·y,
// as above; with a bias [N] (y's dtype; beta must then be 0) y = (that sum
// + bias[n]) in f32, rounded once — cuBLASLt's BIAS epilogue on CUDA, where
// only a bf16 y takes a bias (cuBLASLt has no algorithm for an f32 one: it
// aborts, naming it).
void BlockScaledGemm(const Exec& e, const Fp8Matrix& a, const Fp8Matrix& b, const Tensor& y,
                     float beta = 0.0f, const Tensor& bias = Tensor(),
                     Fp8GemmEngine engine = Fp8GemmEngine::kContext);

// Whether kWgmma computes right on e's GPU: it runs two small GEMMs as the fp8
// linears call them (a forward, 1×128 · 128×128 into bf16; a wgrad, 1×128 ·
// 1×128 into f32 with beta 1; M = N = 256, K = 1024) and compares each element
// with a double reference on the host within block_gemm_gpu_test.cc's bound
// (wgmma_check.cc). OK, or FailedPrecondition naming the case and the first
// element out of bounds (or the device, where it is not compute capability
// 9.0). CUDA Exec with a BlasContext only; synchronises e.stream. The trainer
// runs it before the first step under train.fp8_gemm=wgmma, so a kernel that
// is wrong on some GPU refuses to train instead of training wrong.
absl::Status CheckWgmmaGemm(const Exec& e);

// For benchmarks (CUDA only): the algorithms cuBLASLt's heuristic offers for
// one block-scaled GEMM configuration (a's and b's layouts and shapes, y's
// dtype and shape; no bias), best first — BlockScaledGemm always runs the
// first — and a run with any of them, to compare their times. The
// descriptors are made once, here; Run sets the operands' pointers.
class BlockScaledGemmPlan {
 public:
  // Up to max_algos algorithms; aborts, naming the configuration, when
  // cuBLASLt offers none.
  BlockScaledGemmPlan(const Exec& e, const Fp8Matrix& a, const Fp8Matrix& b, const Tensor& y,
                      int max_algos);
  ~BlockScaledGemmPlan();
  BlockScaledGemmPlan(const BlockScaledGemmPlan&) = delete;
  BlockScaledGemmPlan& operator=(const BlockScaledGemmPlan&) = delete;

  int num_algos() const;
  // "id 66 tile 19 stages 8 splitK 4 reduction 2 waves 0.97" (cuBLASLt's
  // algorithm attributes).
  std::string Describe(int k) const;
  // y = a·bᵀ + beta·y with algorithm k, for operands of the configuration
  // the plan was made for.
  void Run(const Exec& e, int k, const Fp8Matrix& a, const Fp8Matrix& b, const Tensor& y,
           float beta) const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// For benchmarks (CUDA only): whether cuBLASLt fuses more than a bias into
// a block-scaled GEMM — the count of algorithms its heuristic offers (up to
// 8; 0 where it has none) for the configuration with one of these
// epilogues, as the bf16 linears use them:
//   kGeluAuxBias  y = gelu(a·bᵀ + bias), aux = a·bᵀ + bias (the MLP's fc1);
//                 aux [M, N] and bias [N] bf16, y bf16
//   kDGelu        y = (a·bᵀ)·gelu'(aux) (fc2's dgrad into the GELU's
//                 input); aux [M, N] bf16, y bf16
// Nothing runs; the answer decides whether fp8 can fuse GELU the way bf16
// does (docs/PERFORMANCE.md).
enum class Fp8ProbeEpilogue { kGeluAuxBias, kDGelu };
int BlockScaledEpilogueAlgos(const Exec& e, const Fp8Matrix& a, const Fp8Matrix& b, const Tensor& y,
                             Fp8ProbeEpilogue epilogue, const Tensor& aux, const Tensor& bias);

}  // namespace gtp::kernels::fp8
