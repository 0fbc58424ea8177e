// layers/qkv_projection.h — attention's q, k and v projections: three
// column-parallel linears reading one input, run as three GEMMs or, packed,
// as one.
//
// The three stay separate parameters ("<name>.q", ".k", ".v": their own
// initialisation, checkpoint names, optimizer state, GTP shards). Packed,
// their TP-local weights are read as one matrix
//
//   W = [W_q; W_k; W_v]   [R, C],  R = Cq + 2·Ckv  (Cq = NH_tp·HS, Ckv = NKV_tp·HS)
//
// and each pass is one GEMM in place of three (one bias add in the forward's
// epilogue, one column sum for the three bias gradients):
//
//   forward : y[N, R] = x · Wᵀ + [b_q | b_k | b_v]; q, k, v are column
//             blocks of y (row-pitched views, read by the fused attention as
//             token-strided tensors: kernels::ops::FlashAttentionForward)
//   backward: dy[N, R] = [dq | dk | dv] (written there by the attention's
//             backward), dx = dy · W, dW = dyᵀ · x, db = Σ_rows dy.
//
// The operands are packed without copies where memory allows: with GTP 1 the
// three shards live in one buffer (ShardedParam::set_shard_storage) and their
// main grads sit together in the optimizer's flat buffer
// (ShardedParam::set_grad_group); the biases likewise. Where they are not
// adjacent (gathered GTP weights, grads split by the caller's layout) the
// weight is copied into one buffer before its GEMM and the gradient GEMM
// writes a scratch matrix whose row blocks are then added (or, first written,
// copied) into the three grads — the same values either way.
//
// Not packed (three linears, ColumnParallelLinear) under FP8 GEMMs, which
// quantise per weight; the caller chooses (Attention packs in bf16 without
// context parallelism, whose ring wants q, k, v dense:
// TransformerConfig::qkv_packing).
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "core/kernels/fp8/linear.h"
#include "core/tensor.h"
#include "layers/parallel_linear.h"
#include "layers/sharded_param.h"
#include "parallel/process_groups.h"

namespace gtp::layers {

class QkvProjection {
 public:
  // q, k, v: column-parallel configs with caller_reduces_input_grad (the
  // caller owns the TP-region entry and exit). packed: one GEMM per pass (not
  // with fp8: InvalidArgument).
  static absl::StatusOr<std::unique_ptr<QkvProjection>> Create(
      const LinearConfig& q, const LinearConfig& k, const LinearConfig& v, bool packed,
      const parallel::ProcessGroupCollection& pgs, GtpChain* chain);

  // q [N, Cq], k and v [N, Ckv]: dense tensors, or (packed) column blocks of
  // `all` [N, R].
  struct Parts {
    Tensor q, k, v;
    Tensor all;  // packed: the [N, R] matrix q, k and v are views of
  };

  // x[N, C] (TP-replicated) → q, k, v. fp8: x quantised once for the three
  // (`shared`).
  absl::StatusOr<Parts> Forward(const Tensor& x, Direction dir,
                                kernels::fp8::Fp8SharedInput* shared = nullptr);
  // Where the caller writes dq, dk, dv for Backward: shaped like Forward's
  // output (packed: views of one new [N, R] tensor), uninitialised.
  Parts NewGrads() const;
  // dq, dk, dv (from NewGrads) → the partial dx[N, C] of this TP rank
  // (the caller reduces it over TP). Weight and bias grads as the linears'.
  absl::StatusOr<Tensor> Backward(const Parts& grads);
  void DropActivations();

  bool packed() const { return packed_; }
  // Packed: how many operands of the last Forward and Backward were copied
  // or went through scratch (weight, bias, weight grad, bias grad) instead
  // of being read or written in place; 0 is the fast case (for tests).
  int copies() const { return copies_; }
  ColumnParallelLinear& q() { return *q_; }
  ColumnParallelLinear& k() { return *k_; }
  ColumnParallelLinear& v() { return *v_; }

 private:
  QkvProjection() = default;
  ColumnParallelLinear* part(int i) { return i == 0 ? q_.get() : i == 1 ? k_.get() : v_.get(); }
  const kernels::Exec& exec() const { return chain_->exec(); }
  GtpChain* chain_ = nullptr;
  bool packed_ = false;
  int64_t in_ = 0;        // C
  int64_t rows_[3] = {};  // Cq, Ckv, Ckv
  int64_t total_ = 0;     // R
  DType dtype_ = DType::kF32;
  std::unique_ptr<ColumnParallelLinear> q_, k_, v_;
  // Packed: the storage the three GTP-1 shards and the three bias values
  // live in (rows [0, Cq), [Cq, Cq+Ckv), [Cq+Ckv, R)).
  Tensor weight_storage_, bias_storage_;
  Tensor x_saved_;  // packed: the forward's input
  int64_t n_ = 0;   // N of the last forward
  int copies_ = 0;
};

}  // namespace gtp::layers
