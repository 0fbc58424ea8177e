// layers/packed_linears.h — column-parallel linears that read one input (an
// attention's q, k and v; a Mamba mixer's B, C and dt projections), run as
// one GEMM each or, packed, as one GEMM for all of them.
//
// The parts stay separate parameters (their own names, initialisation,
// checkpoint entries, optimizer state, GTP shards). Packed, their TP-local
// weights are read as one matrix
//
//   W = [W_0; W_1; …]   [R, C],  R = Σ_i out_i (each part's TP-local rows)
//
// and each pass is one GEMM in place of one a part (one bias add in the
// forward's epilogue, one column sum for the bias gradients):
//
//   forward : y[N, R] = x · Wᵀ + [b_0 | b_1 | …]; part i is a column block
//             of y (a row-pitched view: the fused attention and RoPE read
//             q, k, v in place as token-strided tensors)
//   backward: dy[N, R] = [dy_0 | dy_1 | …] (written there by the consumers),
//             dx = dy · W, dW = dyᵀ · x, db = Σ_rows dy.
//
// Operands are packed without copies where memory allows: with GTP 1 the
// shards live in one buffer (ShardedParam::set_shard_storage) and their main
// grads sit together in the optimizer's flat buffer
// (ShardedParam::set_grad_group); the biases likewise. Where they are not
// adjacent (gathered GTP weights, padded shards, grads split by the caller's
// layout) the weight is copied into one buffer before its GEMM and the
// gradient GEMM writes a scratch matrix whose row blocks are then added (or,
// first written, copied) into the grads — the same values either way.
//
// Not packed (one ColumnParallelLinear a part) under FP8 GEMMs, which
// quantise per weight; the caller chooses (ProjectionPacking).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/kernels/fp8/linear.h"
#include "core/tensor.h"
#include "layers/parallel_linear.h"
#include "layers/sharded_param.h"
#include "parallel/process_groups.h"

namespace gtp::layers {

// Whether projections reading one input run as one GEMM a pass. kAuto: on
// CUDA, where one GEMM should be faster (core/kernels/bench:
// gemm_algo_benchmark times the 124M model's q/k/v at 0.39 ms a step less as
// one GEMM); kOn: on the CPU too (for tests); kOff: one GEMM a part. Where
// packing is not allowed (FP8 GEMMs, and for attention f32 or context
// parallelism) the layers run one GEMM a part whatever this says.
enum class ProjectionPacking { kAuto, kOn, kOff };

// Whether a layer on `exec` packs under `p`, where packing is `allowed`.
inline bool PacksOn(ProjectionPacking p, bool allowed, const kernels::Exec& exec) {
  return allowed &&
         (p == ProjectionPacking::kOn || (p == ProjectionPacking::kAuto && exec.is_cuda()));
}

class PackedLinears {
 public:
  // parts: at least two column-parallel configs that read one input the same
  // way (in_features, bias, dtype, fp8, f32_output, sequence parallelism),
  // each with caller_reduces_input_grad (the caller owns the TP-region entry
  // and exit). packed: one GEMM per pass (not with fp8: InvalidArgument).
  static absl::StatusOr<std::unique_ptr<PackedLinears>> Create(
      const std::vector<LinearConfig>& parts, bool packed,
      const parallel::ProcessGroupCollection& pgs, GtpChain* chain);

  // One tensor a part, [N, out_i]: dense, or (packed) column blocks of `all`.
  struct Parts {
    std::vector<Tensor> part;
    Tensor all;  // packed: the [N, R] matrix the parts are views of
  };

  // x[N, C] (TP-replicated) → the parts' outputs (the params' dtype, or f32
  // with f32_output). fp8: x quantised once for all parts (`shared`).
  absl::StatusOr<Parts> Forward(const Tensor& x, Direction dir,
                                kernels::fp8::Fp8SharedInput* shared = nullptr);
  // Where the caller writes the parts' output gradients for Backward, in the
  // params' dtype, shaped like Forward's outputs (packed: views of one new
  // [N, R] tensor), uninitialised.
  Parts NewGrads() const;
  // The parts' output gradients (packed: NewGrads' views; else any dense
  // [N, out_i] tensors) → the partial dx[N, C] of this TP rank (the caller
  // reduces it over TP). Weight and bias grads as the linears'.
  absl::StatusOr<Tensor> Backward(const Parts& grads);
  void DropActivations();

  bool packed() const { return packed_; }
  int size() const { return static_cast<int>(linears_.size()); }
  ColumnParallelLinear& part(int i) { return *linears_[i]; }
  // Packed: how many operands of the last Forward and Backward were copied
  // or went through scratch (weight, bias, weight grad, bias grad) instead
  // of being read or written in place; 0 is the fast case (for tests).
  int copies() const { return copies_; }

 private:
  PackedLinears() = default;
  const kernels::Exec& exec() const { return chain_->exec(); }
  GtpChain* chain_ = nullptr;
  bool packed_ = false;
  bool bias_ = false;
  int64_t in_ = 0;              // C
  std::vector<int64_t> rows_;   // each part's TP-local out_i
  std::vector<int64_t> first_;  // each part's first column of the packed matrix
  int64_t total_ = 0;           // R
  DType dtype_ = DType::kF32;   // the params' (and the gradients')
  DType out_dtype_ = DType::kF32;
  std::vector<std::unique_ptr<ColumnParallelLinear>> linears_;
  Tensor x_saved_;  // packed: the forward's input
  int64_t n_ = 0;   // N of the last forward
  int copies_ = 0;
};

}  // namespace gtp::layers
