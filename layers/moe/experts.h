// layers/moe/experts.h — a rank's local experts of one MoE layer: their
// weights stacked and sharded over EGTP, run as one grouped GEMM per
// projection.
//
//   Expert_e(x) = W2_e · act(W1_e · x)   (act: GELU, or SwiGLU with W1_e = [gate; up])
//
// E experts, E/EP on each rank of the "ep" group (global expert
// ep_rank·E/EP + i is local expert i); expert tensor parallelism splits each
// expert's hidden units over "etp" (fc1 by rows, fc2 by columns: H_l = H/ETP
// on each). A rank's local experts' W1 slices are stacked into one
// ShardedParam [E_loc·H1_l, C] (H1_l = H_l, or 2·H_l as [gate_l; up_l]) and
// their W2 slices into one [E_loc·C, H_l], each sharded over "egtp" and
// gathered in one call before the expert GEMMs (GptModel puts the two
// stacks in one prefetch group, ShardedParam::set_prefetch_group, so the
// layer before prefetches both). Checkpoints see the logical tensors
// "<name>.fc1.weight" [E·H1, C] and "<name>.fc2.weight" [E·C, H] by global
// expert index, so they reshard across EP, ETP and EGTP; Muon sees each local
// expert's matrices. No expert biases.
//
// The rows come expert-major from a token dispatcher
// (layers/moe/token_dispatcher.h): rows[i] rows of local expert i. Under ETP
// each rank's outputs (and input gradients) are partial sums over its hidden
// slice; the dispatcher sums them. Weight gradients are scaled by
// `wgrad_scale` (moe_layer.h says why). Driven by one thread; not thread-safe.
//
// FP8 (ExpertsConfig::fp8, train.precision=fp8): the six GEMMs in
// block-scaled e4m3 through core/kernels/fp8/grouped.h, each expert's
// weight quantised 128×128 on its own. cuBLASLt's FP8 GEMMs need row counts
// that are multiples of 16, so each expert's rows are padded with zero rows
// to a multiple of kFp8RowAlign (128: row counts then take at most
// tokens/128 values, so cuBLASLt's per-shape algorithm cache fills within a
// few steps) in a copy of the input, and its output rows are copied back out.
// Zero rows stay zero through fc1, GELU or SwiGLU and fc2, their gradient
// rows are zero, and they add exactly 0 to the weight gradients (and leave
// the wgrad's 1×128 block maxima unchanged): the results are the unpadded
// experts' (experts_fp8_test.cc). As the dense fp8 linears do, the forward keeps
// the weights' transposed codes for the dgrad, so the backward gathers no
// expert weight (fc1/fc2 are marked not gathered in backward); with
// fp8_wgrad false the wgrad GEMMs run in the params' dtype.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/kernels/fp8/grouped.h"
#include "core/kernels/ops.h"
#include "layers/sharded_param.h"

namespace gtp::layers::moe {

struct ExpertsConfig {
  int64_t C = 0, H = 0;  // model width; each expert's hidden size (before ETP)
  bool swiglu = false;
  DType dtype = DType::kF32;
  float init_std = 0.02f, out_std = 0.02f;  // fc1, fc2
  uint64_t seed = 0;
  int num_experts = 0;             // E (global)
  int ep_size = 1, ep_rank = 0;    // this rank's experts: [ep_rank·E/EP, (ep_rank+1)·E/EP)
  int etp_size = 1, etp_rank = 0;  // this rank's hidden slice: [etp_rank·H_l, (etp_rank+1)·H_l)
  float wgrad_scale = 1.0f;        // multiplies every expert weight gradient
  // FP8 GEMMs (dtype bf16; C, H/ETP multiples of 16: the caller checks).
  bool fp8 = false;
  bool fp8_wgrad = true;  // with fp8: the wgrad GEMMs in fp8 too
};

// fp8: each expert's rows are padded to a multiple of this.
inline constexpr int64_t kFp8RowAlign = 128;

class GroupedExperts {
 public:
  // "<name>.fc1.weight" and "<name>.fc2.weight", registered on `chain` in
  // that order and initialised from their global tensors. The caller checks
  // that EP divides E and ETP divides H.
  GroupedExperts(const std::string& name, const ExpertsConfig& c, comm::Communicator* egtp,
                 GtpChain* chain);

  // xe [Σ rows, C] (rows[i] rows of local expert i, expert-major) → ye
  // [Σ rows, C], xe's dtype. Gathers fc1 and fc2 (`dir`'s slot) and releases
  // them; keeps what Backward needs.
  absl::StatusOr<Tensor> Forward(const Tensor& xe, const std::vector<int64_t>& rows,
                                 Direction dir);
  // dye like Forward's output → dxe like its input (=); the weight gradients
  // accumulate and are reduce-scattered (ShardedParam::ReduceGrad).
  absl::StatusOr<Tensor> Backward(const Tensor& dye);
  void DropActivations();

  ShardedParam& fc1() { return *fc1_; }
  bool fp8() const { return fp8_; }
  ShardedParam& fc2() { return *fc2_; }
  int num_local_experts() const { return e_loc_; }

 private:
  absl::StatusOr<Tensor> ForwardFp8(const Tensor& xe, Direction dir);
  absl::StatusOr<Tensor> BackwardFp8(const Tensor& dye);
  // fp8: the codes of p's experts for the backward: the forward's (kept in
  // *kept, then the chain is frozen as a first backward gather would) or,
  // when none were kept, quantised from a backward gather (*gathered: the
  // caller Releases p).
  absl::Status Fp8BackwardWeight(ShardedParam& p, std::vector<kernels::fp8::Fp8WeightPair>* kept,
                                 bool* gathered);

  kernels::Exec exec_;
  GtpChain* chain_ = nullptr;
  bool fp8_ = false, fp8_wgrad_ = true;
  int64_t C_ = 0, H_loc_ = 0, H1_ = 0;  // width; hidden per ETP rank (and fc1's rows per expert)
  bool swiglu_ = false;
  int e_loc_ = 0;
  float wgrad_scale_ = 1.0f;
  std::unique_ptr<ShardedParam> fc1_, fc2_;
  // Saved by Forward: the row offsets of the local experts, the input, fc1's
  // output and the activation.
  std::vector<int64_t> off_;
  Tensor xe_, pre_, act_;
  // fp8: the padded row offsets (kFp8RowAlign) — xe_, pre_ and act_ are then
  // padded — and each expert's Wᵀ codes of fc1 and fc2 (the dgrads' b).
  std::vector<int64_t> poff_;
  std::vector<kernels::fp8::Fp8WeightPair> w1q_, w2q_;
  // fp8 with GELU experts and an fp8 wgrad (FuseActivation()): the
  // activation is never written; its codes, both layouts, are quantised from
  // pre_ as GELU is applied (fc2's forward a, its wgrad b), kept here instead
  // of act_; the backward quantises dpre from dact and pre_ likewise.
  std::unique_ptr<kernels::fp8::Fp8GroupedInput> act_q_;
  bool FuseActivation() const { return fp8_ && fp8_wgrad_ && !swiglu_; }
};

}  // namespace gtp::layers::moe
