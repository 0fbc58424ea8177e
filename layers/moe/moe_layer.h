// layers/moe/moe_layer.h — a mixture-of-experts MLP with expert parallelism
// (EP) and expert GTP (EGTP).
//
//   y = Σ_j w_j · Expert_{e_j}(x)      (top-k routing, layers/moe/router.h)
//   Expert_e(x) = W2_e · act(W1_e · x) (act: GELU, or SwiGLU with W1_e = [gate; up])
//
// The layer composes three parts, each in its own file:
//
//   Router            (router.h)           gate, scores, top-k, capacity, aux / z losses
//   TokenDispatcher   (token_dispatcher.h) the rows to their experts' ranks and back:
//                     AllToAllDispatcher (all_to_all_dispatcher.h) or
//                     AllGatherDispatcher (all_gather_dispatcher.h), MoeConfig::dispatcher
//   GroupedExperts    (experts.h)          this rank's experts, stacked, sharded over EGTP
//
// Forward: h → this rank's rows x → Router → Dispatch → experts → Combine →
// y (→ the TP all-gather, below). Backward: CombineBackward (dy → the
// experts' output gradient and the routing weights' gradient), the experts'
// backward, the router's backward, then DispatchBackward sums the rows'
// gradients into their tokens and adds the gate's input gradient.
//
// Rows: the layer routes only the rows that are this rank's own. With
// sequence parallelism those are the rank's N/TP rows already; without it
// every TP rank of a lane holds the same N rows, so each routes its slice
// [t·N/TP, (t+1)·N/TP), and the output (and, in backward, the input
// gradient) is all-gathered over TP. Every token is processed exactly once.
//
// Experts: E experts, E/EP on each rank of the "ep" group, each's hidden
// units split over "etp"; the checkpoint names are
// "<name>.experts.fc1.weight" [E·H1, C] and "<name>.experts.fc2.weight"
// [E·C, H] (experts.h). Routing runs on the exec's device
// (layers/moe/routing.h): scores, top-k, dropping and the dispatch order
// never leave it; a dispatcher reads only row counts on the host (one
// synchronisation per MoE layer forward, none in backward, none at all when
// padded to capacity).
//
// Padding (RouterConfig::pad_to_capacity): every exchange and expert GEMM
// gets a static size (the dispatchers' headers say how). The padding rows
// are zeros, no slot names them (the combine skips them, their gradient is
// 0) and they add exactly 0 to the weight gradients, so results equal the
// unpadded dropped run's.
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
#include "layers/layer_kind.h"
#include "layers/moe/experts.h"
#include "layers/moe/router.h"
#include "layers/moe/token_dispatcher.h"
#include "layers/sharded_param.h"
#include "parallel/process_groups.h"

namespace gtp::layers::moe {

// How tokens reach the ranks of their experts: the TokenDispatcher
// implementations (AllToAllDispatcher, AllGatherDispatcher).
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
  // Whether every_n / pattern make layer `layer` a MoE layer: the rule of
  // layers/layer_kind.h, which the layout plan applies (layers/gpt_layout.h)
  // to decide each layer once. The rule views `pattern`: keep this config.
  MoeLayerRule LayerRule() const { return {enabled(), every_n, pattern}; }
  bool IsMoeLayer(int layer) const { return LayerRule().IsMoeLayer(layer); }
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
  // The experts' GEMMs in block-scaled FP8 (experts.h; dtype bf16, C and
  // H/ETP multiples of 16, refused by name otherwise); the router stays in
  // dtype. fp8_wgrad: their wgrad GEMMs too. train.precision=fp8 sets it on
  // the CPU only for now (layers/moe_feed_forward.cc says why).
  bool fp8 = false;
  bool fp8_wgrad = true;
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
  ShardedParam& fc1() { return experts_->fc1(); }
  ShardedParam& fc2() { return experts_->fc2(); }
  int num_local_experts() const { return experts_->num_local_experts(); }
  // Rows each local expert ran on in the last forward [E/EP] (ETP·EP·capacity
  // each when padded to capacity).
  const std::vector<int64_t>& expert_rows() const { return dispatcher_->expert_rows(); }

 private:
  MoeLayer() = default;

  MoeShape shape_;
  kernels::Exec exec_;
  comm::Communicator* tp_ = nullptr;
  int k_ = 0;
  int cp_ = 1;  // context-parallel ranks sharing each sequence
  int64_t rows_ = 0, row0_ = 0;
  bool slice_ = false;  // route a TP slice of replicated rows
  std::unique_ptr<Router> router_;
  std::unique_ptr<TokenDispatcher> dispatcher_;
  std::unique_ptr<GroupedExperts> experts_;
};

}  // namespace gtp::layers::moe
