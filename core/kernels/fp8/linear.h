// core/kernels/fp8/linear.h — a linear layer's three GEMMs in block-scaled
// FP8 (DeepSeek-V3's recipe), each quantising its operands on the way in:
//
//   forward  y  = x·Wᵀ    x 1×128 along in,  W 128×128
//   dgrad    dx = dy·W    dy 1×128 along out, Wᵀ 128×128 (W's tiles transposed,
//                         no second rounding: TransposeTiles)
//   wgrad    dW = dyᵀ·x   dyᵀ and xᵀ 1×128 along N (QuantizeRowsTransposed,
//                         from the high-precision dy and x)
//
// x, dy, W are f32 or bf16 (ops::Linear's shapes: x [N, in], W [out, in],
// dy [N, out]); f32 accumulation per 128-wide K block (block_gemm.h);
// outputs f32 or bf16, y = … + beta·y. The quantised copies are scratch from
// e.Empty, freed on return (stream-ordered on CUDA). CPU: the reference
// (block_gemm.cc's loops, O(N·in·out), for tests); CUDA: the quantisers of
// block_quant.cu and cuBLASLt (block_gemm_cuda.cc, which needs N, in and out
// to be multiples of 16 and aborts naming them otherwise).
//
// Error: each output is within block_gemm.h's bound of the product of the
// dequantised operands; about 3.5 % relative RMS error against the
// unquantised product for Gaussian data (block_gemm_test.cc).
//
//   fp8::Fp8Linear(e, x, w, y);                      // y = x·Wᵀ
//   fp8::Fp8LinearBackwardData(e, dy, w, dx);        // dx = dy·W
//   fp8::Fp8LinearBackwardWeight(e, dy, x, dw, 1);   // dW += dyᵀ·x
//
// Several linears reading one input (attention's q, k and v; Mamba's in_proj
// parts) quantise it once through an Fp8SharedInput, and a weight quantised
// for the forward can be kept for the backward's dgrad (QuantizeWeight /
// the Fp8Matrix overloads): the same codes as quantising again, so the same
// results bit for bit (linear_test.cc checks both).
#pragma once

#include <optional>

#include "core/kernels/fp8/block_gemm.h"
#include "core/kernels/fp8/block_quant.h"
#include "core/kernels/ops.h"
#include "core/tensor.h"

namespace gtp::kernels::fp8 {

// One input's quantisations, made on first use and reused while the caller
// keeps this object (scratch from e.Empty, released with it). Every call
// must pass the same tensor (same storage, offset and shape): a different
// one aborts, naming both (a stale quantisation is never used).
class Fp8SharedInput {
 public:
  explicit Fp8SharedInput(const Exec& e) : e_(e) {}
  // x [N, in] quantised 1×128 along in (the forward's a).
  const Fp8Matrix& Rows(const Tensor& x);
  // xᵀ [in, N] quantised 1×128 along N (the wgrad's b).
  const Fp8Matrix& Transposed(const Tensor& x);
  // Both of the above, made from one read of x where neither exists yet
  // (QuantizeRowsAndTransposed: the same codes): for a dy that is both the
  // dgrad's a (Rows) and the wgrad's a (Transposed), or an x that is both the
  // forward's a and (kept) the wgrad's b; where one exists it makes the other
  // alone, where both do nothing. With column_sums (f32 or bf16 [in]) also
  // adds x's column sums to it from the same read (a
  // bias gradient; QuantizeRowsAndTransposed's order): then it must be the
  // first quantisation of x here (aborts otherwise: the sums need the read).
  void Both(const Tensor& x, const Tensor& column_sums = Tensor());
  // Both quantisations of a = act(x) (QuantizeActRowsAndTransposed; pre is
  // GELU's input for kGeluGrad), a never written; with column_sums a's
  // column sums too. Then Rows(x) and Transposed(x) give a's codes. Must be
  // the first quantisation of x here (aborts otherwise).
  void BothOf(Fp8InputAct act, const Tensor& x, const Tensor& pre,
              const Tensor& column_sums = Tensor());

 private:
  void Bind(const Tensor& x);
  Exec e_;
  Tensor x_;
  std::optional<Fp8Matrix> rows_, transposed_;
};

// w [out, in] quantised 128×128 (the forward's b).
Fp8Matrix QuantizeWeight(const Exec& e, const Tensor& w);
// Wᵀ [in, out] from w's 128×128 codes (TransposeTiles: no second rounding;
// the dgrad's b).
Fp8Matrix TransposeWeight(const Exec& e, const Fp8Matrix& wq);

// Both in one pass over w (QuantizeTilesAndTransposed): the same codes as
// QuantizeWeight and TransposeWeight of it.
struct Fp8WeightPair {
  Fp8Matrix w;   // the forward's b
  Fp8Matrix wt;  // the dgrad's b
};
Fp8WeightPair QuantizeWeightPair(const Exec& e, const Tensor& w);

// y [N, out] = x [N, in]·w [out, in]ᵀ + beta·y.
void Fp8Linear(const Exec& e, const Tensor& x, const Tensor& w, const Tensor& y,
               float beta = 0.0f);

// The same from x quantised already (xq: Fp8SharedInput::Rows) and w
// quantised already (wq: QuantizeWeight); with a bias [out] (y's dtype, beta
// 0) added to the f32 result before its rounding (BlockScaledGemm's bias).
void Fp8Linear(const Exec& e, const Fp8Matrix& xq, const Fp8Matrix& wq, const Tensor& y,
               float beta = 0.0f, const Tensor& bias = Tensor());

// dx [N, in] = dy [N, out]·w [out, in] + beta·dx.
void Fp8LinearBackwardData(const Exec& e, const Tensor& dy, const Tensor& w, const Tensor& dx,
                           float beta = 0.0f);
// The same from Wᵀ's codes (wtq: TransposeWeight of the forward's QuantizeWeight).
void Fp8LinearBackwardData(const Exec& e, const Tensor& dy, const Fp8Matrix& wtq,
                           const Tensor& dx, float beta = 0.0f);
// The same from dy's codes too (dyq: Fp8SharedInput::Rows of dy).
void Fp8LinearBackwardData(const Exec& e, const Fp8Matrix& dyq, const Fp8Matrix& wtq,
                           const Tensor& dx, float beta = 0.0f);

// dw [out, in] = dy [N, out]ᵀ·x [N, in] + beta·dw.
void Fp8LinearBackwardWeight(const Exec& e, const Tensor& dy, const Tensor& x, const Tensor& dw,
                             float beta = 0.0f);
// The same from xᵀ's codes (xtq: Fp8SharedInput::Transposed).
void Fp8LinearBackwardWeight(const Exec& e, const Tensor& dy, const Fp8Matrix& xtq,
                             const Tensor& dw, float beta = 0.0f);
// The same from dyᵀ's codes too (dytq: Fp8SharedInput::Transposed of dy).
void Fp8LinearBackwardWeight(const Exec& e, const Fp8Matrix& dytq, const Fp8Matrix& xtq,
                             const Tensor& dw, float beta = 0.0f);

}  // namespace gtp::kernels::fp8
