// layers/parallel_linear.h — tensor-parallel linears with GTP-sharded
// weights (ColumnParallelLinear, RowParallelLinear, LinearConfig) and the
// bias GEMM helpers they share.
//
// Both follow Megatron-LM. N = rows of the activation (B·T); with sequence
// parallelism (SP) activations outside the TP region are split along N over
// the TP group, N_tp = N / TP.
//
//   ColumnParallelLinear  W[out, in] split along out over TP: W_t[out/TP, in]
//     forward : x[N, in] (SP: x[N_tp, in], all-gathered over TP first)
//               y_t[N, out/TP] = x · W_tᵀ + b_t
//     backward: dx = dy_t · W_t, all-reduced over TP (SP: reduce-scattered)
//   RowParallelLinear     W[out, in] split along in over TP: W_t[out, in/TP]
//     forward : x_t[N, in/TP];  y = Σ_t x_t · W_tᵀ (all-reduce over TP;
//               SP: reduce-scatter → y[N_tp, out]) + b
//     backward: dy (SP: all-gathered over TP); dx_t = dy · W_t
//
// On top of TP, W_t is sharded along its rows over the GTP group
// (ShardedParam): gathered right before the GEMMs of each pass, its gradient
// reduce-scattered right after. Biases are small and stay replicated over
// GTP; their gradients are local sums over this rank's rows, averaged over
// the data lanes by gradient finalisation (optimizer/).
//
// Initialisation is topology-invariant: element (r, c) of the global W is
// init_std · PhiloxNormal(KeyFromName(name, seed), r·in + c), so every layout
// builds the same global weight (InitShardFromGlobal, param_io.h). Biases
// start at zero.
//
// Groups come only from the collection passed in ("tp", "gtp").
// Forward/Backward block only on this layer's collectives and return
// absl::Status (a peer's failure); Create refuses sizes TP does not divide.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "comm/communicator.h"
#include "core/kernels/fp8/linear.h"
#include "core/kernels/ops.h"
#include "core/tensor.h"
#include "layers/replicated_param.h"
#include "layers/sharded_param.h"
#include "parallel/process_groups.h"

namespace gtp::layers {

struct LinearConfig {
  std::string name;        // parameter name prefix, e.g. "h.0.mlp.fc"
  int64_t in_features = 0;
  int64_t out_features = 0;
  bool bias = true;
  bool sequence_parallel = false;
  float init_std = 0.02f;
  uint64_t seed = 0;
  // Column-parallel only: the caller owns the TP-region entry. Forward takes
  // the input as is (already replicated / SP-gathered over TP) and Backward
  // returns the partial dx without the TP all-reduce / reduce-scatter, so
  // several linears reading one input (q, k, v) reduce once.
  bool caller_reduces_input_grad = false;
  // Column-parallel only: the weight is `fused_parts` matrices stacked along
  // out ([part_0; part_1; ...], each out/fused_parts rows) and each TP rank
  // holds its slice of every part, stacked the same way — e.g. SwiGLU's
  // [gate; up], so a rank's output row is [gate_t | up_t].
  int fused_parts = 1;
  // Parameter and activation dtype (f32, or bf16 for mixed precision: the
  // weight, its gathers and the activations are bf16, gradients stay f32).
  DType dtype = DType::kF32;
  // FP8 GEMMs (train.precision=fp8; needs dtype bf16): the forward, dgrad and
  // wgrad GEMMs in block-scaled e4m3 (core/kernels/fp8/linear.h: x and dy
  // 1×128, W 128×128, f32 accumulation); the bias in the forward GEMM's
  // epilogue, GELU as a separate kernel after it. On CUDA the rows N and the shard's in and out
  // must be multiples of 16 (Create refuses in/out, the trainer N). The
  // forward keeps Wᵀ's codes for the backward's dgrad (1 byte per weight
  // element until then); several column-parallel linears reading one input
  // quantise it once through a shared kernels::fp8::Fp8SharedInput.
  bool fp8 = false;
  // With fp8: the wgrad GEMM in fp8 too (true: dy's two quantisations come
  // from one read, with the bias gradient; the forward quantises x both ways
  // from one read and keeps xᵀ's codes for the wgrad instead of x itself);
  // false: the wgrad GEMM in bf16 as without fp8, dy quantised for the dgrad
  // only (train.fp8_wgrad=bf16).
  bool fp8_wgrad = true;
  // Column-parallel only: y in f32 whatever dtype is (the GEMM writes the
  // f32 result unrounded; no bias, no fused GELU) — for a consumer that
  // computes in f32 (the Mamba mixer's in_proj parts), saving a cast pass.
  bool f32_output = false;
  // Row-parallel only: dx in f32 whatever dtype is (likewise: the Mamba
  // mixer's out_proj, whose input gradient goes into f32 math).
  bool f32_input_grad = false;
};

// The TP and GTP groups a layer uses, read from a collection.
struct TpGtpGroups {
  comm::Communicator* tp = nullptr;   // size 1 allowed
  comm::Communicator* gtp = nullptr;  // size 1 allowed
  static absl::StatusOr<TpGtpGroups> From(const parallel::ProcessGroupCollection& pgs);
};

class ColumnParallelLinear {
 public:
  static absl::StatusOr<std::unique_ptr<ColumnParallelLinear>> Create(
      const LinearConfig& config, const parallel::ProcessGroupCollection& pgs, GtpChain* chain);

  // y_t[N, out/TP]. Keeps what backward needs (the gathered input, or with
  // an fp8 wgrad the codes of its transpose).
  // `dir` is kRecompute when re-run for activation recompute. With fp8, a
  // `shared` input (the same x for several linears, caller_reduces_input_grad)
  // is quantised once for all of them.
  absl::StatusOr<Tensor> Forward(const Tensor& x, Direction dir = Direction::kForward,
                                 kernels::fp8::Fp8SharedInput* shared = nullptr);
  // Forward with GELU fused into the GEMM epilogue: returns gelu(x·W_tᵀ + b_t)
  // and sets *pre to x·W_tᵀ + b_t (what GELU's backward needs).
  absl::StatusOr<Tensor> ForwardGelu(const Tensor& x, Direction dir, Tensor* pre);
  // Frees what Forward kept (activation recompute re-creates it).
  void DropActivations() {
    x_saved_ = Tensor();
    wt_q_.reset();
    xt_q_.reset();
  }
  // dx (see file comment). Weight grad goes to the GTP reduce-scatter; bias
  // grad accumulates locally. With caller_reduces_input_grad, a given
  // `accumulate` [N, in] receives dx added in the GEMM (no extra pass; q, k
  // and v share one dx) and is returned. With an fp8 wgrad the forward's
  // xᵀ codes serve (kept per linear; several linears sharing an input share
  // them).
  absl::StatusOr<Tensor> Backward(const Tensor& dy, const Tensor& accumulate = Tensor());
  // Backward when this layer's output y went through GELU and dact is the
  // gradient at GELU's output: dy = GELU'(y)·dact is made as fp8 quantises it
  // (Fp8SharedInput::BothOf), never written — the bits of GELU's backward
  // kernel followed by Backward. `pre` is y as Forward returned it. Needs
  // fp8_both_ways().
  absl::StatusOr<Tensor> BackwardThroughGelu(const Tensor& dact, const Tensor& pre);

  ShardedParam& weight() { return *weight_; }
  ReplicatedParam* bias() { return bias_.value.defined() ? &bias_ : nullptr; }
  int64_t out_features_tp() const { return out_tp_; }
  // fp8 GEMMs with an fp8 wgrad: what the GELU-fused quantisers need (the
  // activation's high-precision tensor is then never read again).
  bool fp8_both_ways() const { return config_.fp8 && config_.fp8_wgrad; }

 private:
  ColumnParallelLinear(const LinearConfig& c, TpGtpGroups g, GtpChain* chain);
  LinearConfig config_;
  TpGtpGroups groups_;
  GtpChain* chain_;
  int64_t out_tp_;
  std::unique_ptr<ShardedParam> weight_;
  ReplicatedParam bias_;
  Tensor x_saved_;  // [N, in]; not kept when xt_q_ is
  int64_t rows_ = 0;  // N of the last forward
  std::optional<kernels::fp8::Fp8Matrix> wt_q_;  // fp8: Wᵀ's codes from the forward
  std::optional<kernels::fp8::Fp8Matrix> xt_q_;  // fp8 wgrad: xᵀ's codes from the forward
  absl::StatusOr<Tensor> ForwardImpl(const Tensor& x, Direction dir, Tensor* gelu_pre,
                                     kernels::fp8::Fp8SharedInput* shared);
  absl::StatusOr<Tensor> BackwardImpl(const Tensor& dy, const Tensor& accumulate,
                                      const Tensor& gelu_pre);
};

class RowParallelLinear {
 public:
  static absl::StatusOr<std::unique_ptr<RowParallelLinear>> Create(
      const LinearConfig& config, const parallel::ProcessGroupCollection& pgs, GtpChain* chain);

  // x_t[N, in/TP] → y[N, out] (SP: [N_tp, out]), plus `residual` (like y)
  // when it is defined: a new tensor, residual left as it is. On CUDA without
  // a TP reduction and without fp8 the residual is added in the GEMM's
  // epilogue (ops::LinearResidual: one pass over y fewer); otherwise after
  // the reduction and the bias.
  absl::StatusOr<Tensor> Forward(const Tensor& x, Direction dir = Direction::kForward,
                                 const Tensor& residual = Tensor());
  // Forward of x = GELU(pre), GELU applied as fp8 quantises pre
  // (Fp8SharedInput::BothOf), x never written: the bits of GELU's kernel
  // followed by Forward. Needs fp8_both_ways().
  absl::StatusOr<Tensor> ForwardOfGelu(const Tensor& pre, Direction dir,
                                       const Tensor& residual = Tensor());
  void DropActivations() {
    x_saved_ = Tensor();
    wt_q_.reset();
    xt_q_.reset();
  }
  // dy[N, out] (SP: [N_tp, out]) → dx_t[N, in/TP].
  absl::StatusOr<Tensor> Backward(const Tensor& dy);
  // Backward when this layer's input was gelu(pre) (pre [N, in/TP], from
  // ColumnParallelLinear::ForwardGelu): returns dpre = dx_t ∘ gelu'(pre),
  // GELU's backward fused into the input-gradient GEMM.
  absl::StatusOr<Tensor> BackwardDGelu(const Tensor& dy, const Tensor& pre);

  ShardedParam& weight() { return *weight_; }
  ReplicatedParam* bias() { return bias_.value.defined() ? &bias_ : nullptr; }
  int64_t in_features_tp() const { return in_tp_; }
  bool fp8_both_ways() const { return config_.fp8 && config_.fp8_wgrad; }  // as above

 private:
  RowParallelLinear(const LinearConfig& c, TpGtpGroups g, GtpChain* chain);
  LinearConfig config_;
  TpGtpGroups groups_;
  GtpChain* chain_;
  int64_t in_tp_;
  std::unique_ptr<ShardedParam> weight_;
  ReplicatedParam bias_;
  Tensor x_saved_;  // [N, in/TP]; not kept when xt_q_ is
  int64_t rows_ = 0;  // N of the last forward
  std::optional<kernels::fp8::Fp8Matrix> wt_q_;  // fp8: Wᵀ's codes from the forward
  std::optional<kernels::fp8::Fp8Matrix> xt_q_;  // fp8 wgrad: xᵀ's codes from the forward
  absl::StatusOr<Tensor> ForwardImpl(const Tensor& x, Direction dir, const Tensor& residual,
                                     bool gelu_of_x);
  absl::StatusOr<Tensor> BackwardImpl(const Tensor& dy, const Tensor& gelu_pre);
};

// ---- bias GEMMs the linears share ------------------------------------------------

// db[C] += Σ_rows dy[rows, C] (one GEMM against the chain's ones vector;
// db f32, dy f32 or bf16).
void AccumulateBiasGrad(GtpChain& chain, const Tensor& dy, const Tensor& db);
// dw = dyᵀ·x + beta·dw (ops::LinearBackwardWeight) and, when db is defined,
// db += Σ_rows dy — on CUDA by ops::ColumnSumAccumulate, on the CPU by
// AccumulateBiasGrad.
void WeightAndBiasGrad(GtpChain& chain, const Tensor& dy, const Tensor& x, const Tensor& dw,
                       float beta, const Tensor& db);
// y[rows, C] += b[C] (same dtype).
void AddBias(GtpChain& chain, const Tensor& y, const Tensor& b);

}  // namespace gtp::layers
