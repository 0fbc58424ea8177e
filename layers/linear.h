// layers/linear.h — tensor-parallel linears with GTP-sharded weights.
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
// builds the same global weight. Biases start at zero.
//
// Groups come only from the collection passed in ("tp", "gtp").
// Forward/Backward block only on this layer's collectives.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "comm/communicator.h"
#include "core/kernels/ops.h"
#include "core/status.h"
#include "core/tensor.h"
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
};

// A replicated (not GTP-sharded) parameter with its f32 gradient.
struct ReplicatedParam {
  std::string name;
  Tensor value;  // the model dtype (f32 or bf16)
  Tensor grad;   // f32, same shape; += by backward
  // True when each TP rank's grad covers only its sequence-parallel rows, so
  // finalisation must sum it over TP (Megatron's sequence-parallel params).
  bool grad_needs_tp_sum = false;
  // Where `value` sits in the global tensor: rows (dim 0) map through
  // layout.row_map, all columns are held. When tp_sharded is false every TP
  // rank holds the whole tensor (norm weights, row-parallel biases); when
  // true each holds its slice (column-parallel biases).
  ShardedParam::GlobalLayout layout;
  bool tp_sharded = false;
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

  // y_t[N, out/TP]. Keeps what backward needs (the gathered input).
  // `dir` is kRecompute when re-run for activation recompute.
  absl::StatusOr<Tensor> Forward(const Tensor& x, Direction dir = Direction::kForward);
  // Forward with GELU fused into the GEMM epilogue: returns gelu(x·W_tᵀ + b_t)
  // and sets *pre to x·W_tᵀ + b_t (what GELU's backward needs).
  absl::StatusOr<Tensor> ForwardGelu(const Tensor& x, Direction dir, Tensor* pre);
  // Frees what Forward kept (activation recompute re-creates it).
  void DropActivations() { x_saved_ = Tensor(); }
  // dx (see file comment). Weight grad goes to the GTP reduce-scatter; bias
  // grad accumulates locally. With caller_reduces_input_grad, a given
  // `accumulate` [N, in] receives dx added in the GEMM (no extra pass; q, k
  // and v share one dx) and is returned.
  absl::StatusOr<Tensor> Backward(const Tensor& dy, const Tensor& accumulate = Tensor());

  ShardedParam& weight() { return *weight_; }
  ReplicatedParam* bias() { return bias_.value.defined() ? &bias_ : nullptr; }
  int64_t out_features_tp() const { return out_tp_; }

 private:
  ColumnParallelLinear(const LinearConfig& c, TpGtpGroups g, GtpChain* chain);
  LinearConfig config_;
  TpGtpGroups groups_;
  GtpChain* chain_;
  int64_t out_tp_;
  std::unique_ptr<ShardedParam> weight_;
  ReplicatedParam bias_;
  Tensor x_saved_;  // [N, in]
  absl::StatusOr<Tensor> ForwardImpl(const Tensor& x, Direction dir, Tensor* gelu_pre);
};

class RowParallelLinear {
 public:
  static absl::StatusOr<std::unique_ptr<RowParallelLinear>> Create(
      const LinearConfig& config, const parallel::ProcessGroupCollection& pgs, GtpChain* chain);

  // x_t[N, in/TP] → y[N, out] (SP: [N_tp, out]).
  absl::StatusOr<Tensor> Forward(const Tensor& x, Direction dir = Direction::kForward);
  void DropActivations() { x_saved_ = Tensor(); }
  // dy[N, out] (SP: [N_tp, out]) → dx_t[N, in/TP].
  absl::StatusOr<Tensor> Backward(const Tensor& dy);
  // Backward when this layer's input was gelu(pre) (pre [N, in/TP], from
  // ColumnParallelLinear::ForwardGelu): returns dpre = dx_t ∘ gelu'(pre),
  // GELU's backward fused into the input-gradient GEMM.
  absl::StatusOr<Tensor> BackwardDGelu(const Tensor& dy, const Tensor& pre);

  ShardedParam& weight() { return *weight_; }
  ReplicatedParam* bias() { return bias_.value.defined() ? &bias_ : nullptr; }
  int64_t in_features_tp() const { return in_tp_; }

 private:
  RowParallelLinear(const LinearConfig& c, TpGtpGroups g, GtpChain* chain);
  LinearConfig config_;
  TpGtpGroups groups_;
  GtpChain* chain_;
  int64_t in_tp_;
  std::unique_ptr<ShardedParam> weight_;
  ReplicatedParam bias_;
  Tensor x_saved_;  // [N, in/TP]
  absl::StatusOr<Tensor> BackwardImpl(const Tensor& dy, const Tensor& gelu_pre);
};

// ---- helpers shared by the layers ------------------------------------------------

// Sets p's global layout (see ShardedParam::GlobalLayout) and fills its
// shard from the topology-invariant initialiser: element (R, C) of the
// global weight is std · PhiloxNormal(KeyFromName(name, seed), R·global_cols + C).
// Pad rows stay zero.
void InitShardFromGlobal(ShardedParam& p, ShardedParam::GlobalLayout layout, uint64_t seed,
                         float std);
// Fills p's shard from the full global weight (host, row-major f32
// [global_rows, global_cols]) using p's global layout, rounded to p's dtype.
// Blocks (host copy).
void LoadShardFromGlobal(ShardedParam& p, const float* global);
// Gathers nothing: writes this rank's piece of `src` (p's shard, or any
// tensor shaped like it, e.g. its main grad; f32 or bf16) into `global`
// (host, f32, sized like the global weight); elements this rank does not
// hold are left untouched.
void StoreShardToGlobal(const ShardedParam& p, const Tensor& src, float* global);
// A new tensor on e's device holding host f32 `values` (shape `s`) rounded
// to `dtype`. Blocks (host copy).
Tensor TensorFromHost(const kernels::Exec& e, const float* values, const Shape& s, DType dtype);
// Host vector → a new tensor of shape `s` on e's device. A copy from pageable
// memory is staged before the call returns, so `v` may change afterwards;
// `wait` also waits for the copy to land.
template <typename T>
Tensor HostToDevice(const kernels::Exec& e, const std::vector<T>& v, const Shape& s,
                    bool wait = false) {
  Tensor out = e.Empty(s, DTypeOf<T>::value);
  if (!v.empty()) {
    Tensor h = Tensor::Wrap(const_cast<T*>(v.data()), s, DTypeOf<T>::value, Device::Cpu());
    GTP_CHECK_OK(Copy(h, out, e.stream, /*sync=*/wait));
  }
  return out;
}
// Device tensor → host vector. Blocks (the stream, up to the copy).
template <typename T>
std::vector<T> DeviceToHost(const kernels::Exec& e, const Tensor& t) {
  std::vector<T> v(t.numel());
  if (!v.empty()) {
    Tensor h = Tensor::Wrap(v.data(), t.shape(), t.dtype(), Device::Cpu());
    GTP_CHECK_OK(Copy(t, h, e.stream, /*sync=*/true));
  }
  return v;
}
// Writes host f32 `values` (dst.numel() of them) into `dst` (f32 or bf16,
// any device), rounding to dst's dtype. Blocks (host copy).
void CopyFromHostF32(const kernels::Exec& e, const float* values, const Tensor& dst);

// Activation collectives over `group` along dim 0 (blocking). Size-1 groups
// return the input (AllReduce: in place).
absl::StatusOr<Tensor> AllGatherRows(const kernels::Exec& e, comm::Communicator& group,
                                     const Tensor& x);
absl::StatusOr<Tensor> ReduceScatterRows(const kernels::Exec& e, comm::Communicator& group,
                                         const Tensor& x);
absl::Status AllReduceSum(comm::Communicator& group, const Tensor& x);

// db[C] += Σ_rows dy[rows, C] (one GEMM against the chain's ones vector;
// db f32, dy f32 or bf16).
void AccumulateBiasGrad(GtpChain& chain, const Tensor& dy, const Tensor& db);
// dw = dyᵀ·x + beta·dw (ops::LinearBackwardWeight) and, when db is defined,
// db += Σ_rows dy — on CUDA taken from the same GEMM (its bias-gradient
// epilogue), on the CPU by AccumulateBiasGrad.
void WeightAndBiasGrad(GtpChain& chain, const Tensor& dy, const Tensor& x, const Tensor& dw,
                       float beta, const Tensor& db);
// y[rows, C] += b[C] (same dtype).
void AddBias(GtpChain& chain, const Tensor& y, const Tensor& b);

}  // namespace gtp::layers
