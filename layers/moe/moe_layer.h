// layers/moe/moe_layer.h — a mixture-of-experts MLP with expert parallelism
// (EP) and expert GTP (EGTP).
//
//   y = Σ_j w_j · Expert_{e_j}(x)      (top-k routing, layers/moe/router.h)
//   Expert_e(x) = W2_e · act(W1_e · x) (act: GELU, or SwiGLU with W1_e = [gate; up])
//
// Rows: the layer routes only the rows that are this rank's own. With
// sequence parallelism those are the rank's N/TP rows already; without it
// every TP rank of a lane holds the same N rows, so each routes its slice
// [t·N/TP, (t+1)·N/TP), and the output (and, in backward, the input
// gradient) is all-gathered over TP. Every token is processed exactly once.
//
// Experts: E experts, E/EP on each rank of the "ep" group (global expert
// ep_rank·E/EP + i is local expert i); expert tensor parallelism splits each
// expert's hidden units over "etp" (fc1 by rows, fc2 by columns: H_l = H/ETP
// on each). A rank's local experts' W1 slices are stacked into one
// ShardedParam [E_loc·H1_l, C] (H1_l = H_l, or 2·H_l as [gate_l; up_l]) and
// their W2 slices into one [E_loc·C, H_l], each sharded over "egtp" and
// gathered in one call before the expert GEMMs; the two stacks form one
// prefetch group (ShardedParam::set_prefetch_group), so the layer before
// prefetches both: the whole MoE layer's experts one param ahead. Checkpoints see the logical tensors
// "<name>.experts.fc1.weight" [E·H1, C] and "<name>.experts.fc2.weight"
// [E·C, H] by global expert index, so they reshard across EP, ETP and EGTP.
// No expert biases.
//
// Dispatch (dropless or capacity-dropped): this rank's kept (token, slot)
// pairs sorted by global expert, then token; rows gathered in that order;
// per-(rank, expert) counts exchanged by all-to-all over "ep", the rows by
// all-to-all(v); with ETP the ETP group's received rows all-gathered (as
// Megatron's all-to-all dispatcher does over its tensor-parallel group);
// rows reordered expert-major; each local expert's rows run through its
// GEMMs (one grouped GEMM per projection, ops::GroupedLinear); the results travel back the
// same way — the ETP ranks' partial fc2 outputs summed (reduce-scatter) —
// and are combined with the routing weights (layers/moe/combine.h).
// Backward runs the same path in reverse.
// Routing runs on the exec's device (layers/moe/routing.h): scores, top-k,
// dropping and the dispatch order never leave it. Only the per-expert counts
// come to the host (the all-to-all sizes and the per-expert GEMMs need them),
// after their exchange over ep / etp on the device: one host synchronisation
// per MoE layer forward, none in backward.
//
// All-gather dispatcher (MoeConfig::dispatcher = kAllGather; Megatron's
// MoEAllGatherTokenDispatcher): every rank all-gathers the rows and their
// routing (expert or −1 where dropped, weight) of its EP group, then of its
// ETP group — the rows laid out [etp rank][ep rank][token] — picks the slots
// of its local experts in the all-to-all's expert-major order (so the expert
// GEMMs see the same rows in the same order), combines its experts' weighted
// (partial, with ETP) outputs into every gathered token (j ascending) and
// reduce-scatters them over etp, then ep (f32 sums in rank order) so each
// rank gets its own tokens' outputs. Backward all-gathers dy the same way and
// reduce-scatters dx and the weights' gradient. More traffic than the
// all-to-all (every token to every rank) but no count exchange; the one host
// synchronisation reads the local experts' row counts.
//
// Padding (RouterConfig::pad_to_capacity): each (source rank, expert) block
// holds exactly the capacity rows (zero rows after the kept ones), so every
// exchange and GEMM has a static size: an expert runs on ETP·EP·capacity
// rows. The padding rows are zeros, no slot names them (the combine skips
// them, their gradient is 0) and they add exactly 0 to the weight gradients,
// so results equal the unpadded dropped run's. No counts reach the host: no
// synchronisation in forward.
//
// Gradients: expert weight gradients are the sum over every token routed to
// the expert. With mean-normalised losses the GTP reduce-scatter over egtp
// and the expert buffer's reduction over edp average, so the expert GEMMs
// scale their weight gradients by TP / (ETP·EP) = EGTP·EDP / (data lanes),
// which makes them the gradient of the mean of the lanes' losses, like the
// dense weights'. The gate is replicated; each TP rank's gradient covers its
// own rows (summed over TP at finalisation).
//
// Context parallelism (the "cp" group has more than one rank): the block's T
// is this CP rank's T/CP tokens of each sequence. Routing is per token, so
// dispatch and experts are unchanged — the expert grid carves EP / EGTP / EDP
// from every rank (CP ranks included, as Megatron's expert data parallelism),
// and TP / (ETP·EP) is still EGTP·EDP / (GTP·DP·CP): the expert buffer's
// EDP average covers the CP ranks as the dense buffer's dp_cp average does.
// The router sums its aux-loss counts over "tp_cp" and scales its aux / z
// gradients by CP (router.h). Capacity dropping is refused (it would drop
// among a rank's own chunks).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "layers/linear.h"
#include "layers/moe/router.h"
#include "layers/sharded_param.h"
#include "parallel/process_groups.h"

namespace gtp::layers::moe {

// How tokens reach the ranks of their experts (see MoeLayer's file comment).
enum class Dispatcher { kAllToAll, kAllGather };

struct MoeConfig {
  RouterConfig router;          // router.num_experts = 0: a dense model
  Dispatcher dispatcher = Dispatcher::kAllToAll;
  int64_t ffn_hidden = 0;        // each expert's hidden size (0: the block's)
  int64_t shared_ffn_hidden = 0; // a shared expert (dense MLP beside the routed ones); 0: none
  // Which layers are MoE: layer l when l % every_n == 0 (Megatron's
  // moe_layer_freq), unless `pattern` is set: one character per layer, 'E'
  // for MoE and '-' for a dense MLP (e.g. "-E-E").
  int every_n = 1;
  std::string pattern;

  bool enabled() const { return router.num_experts > 0; }
  bool IsMoeLayer(int layer) const;
  absl::Status Validate(int n_layer) const;
};

// What the layer takes from its block.
struct MoeShape {
  int64_t C = 0, H = 0;  // model width; expert hidden (resolved)
  int64_t B = 0, T = 0;  // micro-batch
  bool swiglu = false;
  bool sequence_parallel = false;
  bool loss_sum = false;  // the lane's loss is a sum over tokens (not a mean)
  DType dtype = DType::kF32;
  float init_std = 0.02f, out_std = 0.02f;  // fc1, fc2
  uint64_t seed = 0;
};

class MoeLayer {
 public:
  // Reads "tp", "ep", "etp", "egtp" from pgs ("cp" and "tp_cp" too when
  // present with CP > 1). InvalidArgument naming the problem (experts not
  // divisible by EP, hidden not by ETP, rows vs TP, router config, capacity
  // dropping under CP).
  static absl::StatusOr<std::unique_ptr<MoeLayer>> Create(const std::string& name,
                                                          const MoeConfig& c, const MoeShape& s,
                                                          const parallel::ProcessGroupCollection& pgs,
                                                          GtpChain* chain);
  // h [N or N_tp, C] (the normalised input) → [N or N_tp, C]. Collective over
  // ep and etp (and tp without SP); blocks on the counts (not when padded to
  // capacity).
  absl::StatusOr<Tensor> Forward(const Tensor& h, Direction dir = Direction::kForward);
  // dout like Forward's output → dh like its input.
  absl::StatusOr<Tensor> Backward(const Tensor& dout);
  void DropActivations();

  Router& router() { return *router_; }
  ShardedParam& fc1() { return *fc1_; }
  ShardedParam& fc2() { return *fc2_; }
  int num_local_experts() const { return e_loc_; }
  // Rows each local expert ran on in the last forward [E/EP] (ETP·EP·capacity
  // each when padded to capacity).
  const std::vector<int64_t>& expert_rows() const { return ne_; }

 private:
  MoeLayer() = default;
  // Rows exchange over ep: x [Σ send, C] → [Σ recv, C].
  absl::StatusOr<Tensor> Exchange(const Tensor& x, const std::vector<int64_t>& send_rows,
                                  const std::vector<int64_t>& recv_rows);
  // out[i] = x[idx[i]] (i32 on the device); x itself when idx is undefined.
  Tensor GatherRows(const Tensor& x, const Tensor& idx);
  // ETP: the group's received rows [r][…] from every ETP rank (all-gather-v),
  // and its reverse — each rank's rows summed over the ETP ranks' partial
  // results (reduce-scatter-v, f32 sums in rank order).
  absl::StatusOr<Tensor> EtpGather(const Tensor& x);
  absl::StatusOr<Tensor> EtpReduceScatter(const Tensor& y);
  absl::Status Plan(const RouterOutput& r);
  // The dispatchers' forward (→ [rows, C] f32 or model dtype) and backward
  // (dy [rows, C] → dx [rows, C] f32; dw [rows·k] (=) the weights' gradient).
  absl::StatusOr<Tensor> ForwardAllToAll(const Tensor& x, const RouterOutput& r, Direction dir);
  absl::StatusOr<Tensor> ForwardAllGather(const Tensor& x, const RouterOutput& r, Direction dir);
  absl::StatusOr<Tensor> BackwardAllToAll(const Tensor& dy, const Tensor& dw);
  absl::StatusOr<Tensor> BackwardAllGather(const Tensor& dy, const Tensor& dw);
  // The local experts on xe [Σ ne_, C] (rows expert-major) → ye [Σ ne_, C];
  // and back: dye → dxe (ETP: partial sums over the hidden slice), the
  // weight gradients accumulated.
  absl::StatusOr<Tensor> Experts(const Tensor& xe, Direction dir);
  absl::StatusOr<Tensor> ExpertsBackward(const Tensor& dye);
  // All-gather: x [m, c] → [ETP·EP·m, c] as [etp rank][ep rank][m]; and its
  // reverse, x [ETP·EP·m, c] → f32 [m, c] summed over the group (over etp,
  // then ep, each in rank order).
  absl::StatusOr<Tensor> GatherGroup(const Tensor& x);
  absl::StatusOr<Tensor> ReduceScatterGroup(const Tensor& x);

  MoeShape shape_;
  kernels::Exec exec_;
  GtpChain* chain_ = nullptr;
  comm::Communicator *tp_ = nullptr, *ep_ = nullptr, *etp_ = nullptr;
  int E_ = 0, k_ = 0, e_loc_ = 0, ep_size_ = 1, ep_rank_ = 0, etp_size_ = 1;
  int cp_ = 1;  // context-parallel ranks sharing each sequence
  int64_t rows_ = 0, row0_ = 0, H_loc_ = 0, H1_ = 0;  // hidden per ETP rank (and of fc1's rows)
  bool slice_ = false;   // route a TP slice of replicated rows
  bool all_gather_ = false, pad_ = false;
  bool static_plan_ = false;  // padded all-to-all: reorder_ built once
  float wgrad_scale_ = 1.0f;
  std::unique_ptr<Router> router_;
  std::unique_ptr<ShardedParam> fc1_, fc2_;
  // Plan of the last forward: M_ kept slots of this rank's tokens (padded:
  // E·capacity); the received rows' order for the experts and back (device;
  // undefined when EP = ETP = 1 or no rows). All-gather: M_ unused.
  int64_t M_ = 0;
  Tensor reorder_, inv_reorder_;
  std::vector<int64_t> send_rows_, recv_rows_, etp_rows_, ne_;
  // Saved activations. perm_d_: the token of each dispatched row (of x, or
  // all-gather: of the gathered rows; −1: a padding row); pos_d_, w_d_: each
  // slot's row in yp_ and its weight (all-gather: of the gathered slots);
  // yp_: the rows the combine reads (all-to-all: returned; all-gather: ye).
  Tensor perm_d_, pos_d_, w_d_, xe_, pre_, act_, yp_;
};

}  // namespace gtp::layers::moe
