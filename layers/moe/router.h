// layers/moe/router.h — the MoE router: a replicated f32 linear gate, scores,
// top-k selection, capacity dropping and the load-balancing losses.
//
// For each token t with gate logits l[t, 0..E) (f32, from h·W_gᵀ, W_g f32
// [E, C], never GTP-sharded):
//
//   selection scores  softmax, pre-top-k:  p = softmax(l), select on p (+ b)
//                     softmax, post-top-k: select on l (+ b)
//                     sigmoid:             σ = sigmoid(l), select on σ (+ b)
//   group-limited     experts in G equal groups; a group's score is the sum of
//                     its top (k / group_topk) selection scores; only the best
//                     group_topk groups stay eligible
//   top-k             the k largest; ties go to the lower expert index
//   weights           pre: s·p[sel]; post: s·softmax(l[sel]); sigmoid:
//                     s·σ[sel] / Σ σ[sel] (k > 1) or s·σ[sel] (k = 1);
//                     s = topk_scaling
//   expert bias b     (loss-free balancing, DeepSeek-V3) shifts selection only,
//                     never the weights; after each optimizer step
//                     b_e += rate · sign(mean_e' c_e' − c_e) from the step's
//                     token counts c summed over every data lane
//   capacity          cf > 0: each expert keeps at most ceil(cf · n · k / E) of
//                     this rank's n tokens — the largest weights (kProbability;
//                     ties: lower token) or the first tokens (kPosition); the
//                     rest are dropped (they contribute nothing, get no grad);
//                     pad_to_capacity: the MoE layer then runs every expert
//                     on exactly its capacity rows (zero rows fill the gap)
//
// Losses, over "groups" of tokens (kLane: this data lane's micro-batch — the
// rows of every TP rank of the lane together; kSequence: each sequence), with
// c[g, e] the top-k selections of expert e in group g (before dropping),
// N_g the group's tokens and q the aux probabilities (softmax(l) for softmax
// scoring, σ / Σ_e σ for sigmoid):
//
//   aux = coeff · E / k · (1/G) Σ_g (1 / N_g²) Σ_e c[g, e] · Σ_{t∈g} q[t, e]
//   z   = coeff_z · (1/N) Σ_t logsumexp(l[t])²       (N: the lane's tokens)
//
// (aux is Megatron's switch load-balancing loss; kSequence its seq_aux_loss.)
// Both add into the backward of the lane's loss; their values are reported,
// not added to the LM loss.
//
// Context parallelism (CP ranks each hold 2 of every sequence's 2·CP
// chunks): a lane's tokens are spread over its TP × CP ranks, so the counts
// c are summed over that group ("tp_cp", as Megatron reduces its aux-loss
// statistics over tp-cp) and N_g, N are the whole sequences' and lane's
// token counts; each rank adds its tokens' part of aux and z, and the
// parts sum to one rank's values. The gradient reduction averages over CP
// (the "dp_cp" group) what each CP rank computes, so a CP rank scales its
// aux and z gradients by CP (mean-normalised losses) or by the whole lane's
// tokens, every CP rank's (summed losses): the reduced gradient is one rank's.
// Capacity dropping picks among a rank's own tokens, so it would not match
// one rank under CP: refused there (MoeLayer::Create).
//
// The pure functions below work on host arrays in double precision: the
// reference the device ops (layers/moe/routing.h, f32, CPU and CUDA) are
// tested against. The Router runs the device ops on its exec.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "comm/communicator.h"
#include "core/kernels/ops.h"
#include "layers/linear.h"
#include "layers/moe/routing.h"

namespace gtp::layers::moe {

enum class ScoreFunction { kSoftmax, kSigmoid };
enum class DropPolicy { kProbability, kPosition };
enum class AuxLossType { kLane, kSequence };

struct RouterConfig {
  int num_experts = 0;  // E
  int top_k = 2;        // k, 1..8
  ScoreFunction score = ScoreFunction::kSoftmax;
  bool pre_softmax = true;  // softmax scoring: before top-k (else over the k selected)
  float topk_scaling = 1.0f;
  int num_groups = 0;  // group-limited routing: 0 = off
  int group_topk = 0;  // groups kept per token
  float aux_loss_coeff = 0.0f;
  AuxLossType aux_loss_type = AuxLossType::kLane;
  float z_loss_coeff = 0.0f;
  bool expert_bias = false;
  float bias_update_rate = 1e-3f;
  float capacity_factor = 0.0f;  // ≤ 0: dropless
  DropPolicy drop_policy = DropPolicy::kProbability;
  // Pad every expert's rows to the capacity (needs capacity_factor > 0): the
  // per-expert GEMMs and the dispatch's exchanges get static sizes (CUDA
  // graphs) at the cost of computing zero rows. Results equal the unpadded
  // capacity-dropped run's (padding rows are zeros and get no gradient).
  bool pad_to_capacity = false;

  // InvalidArgument naming the field for an unusable config.
  absl::Status Validate() const;
};

// The routing of n tokens (host arrays, row-major).
struct Routing {
  int64_t n = 0;
  int k = 0;
  int num_experts = 0;
  std::vector<int32_t> selected;  // [n·k] experts chosen by top-k (before dropping)
  std::vector<int32_t> expert;    // [n·k] = selected, or −1 where dropped
  std::vector<float> weight;      // [n·k] combine weights (kept as computed where dropped)
  std::vector<float> scores;      // [n·E] p (pre-softmax) or σ (sigmoid); post-softmax: unused
  std::vector<int64_t> counts;    // [E] kept tokens per expert
  int64_t dropped = 0;
};

// Scores, top-k and weights of n tokens (logits [n, E]); `bias` [E] or null.
// No dropping (expert = selected, counts of the selections).
Routing Route(const RouterConfig& c, const float* logits, int64_t n, const float* bias);
// Capacity dropping of r (no-op when capacity_factor ≤ 0): updates expert,
// counts and dropped. Returns the capacity (0 when dropless).
int64_t ApplyCapacity(const RouterConfig& c, Routing* r);

// Aux-loss probabilities q [n, E] of logits (see the file comment).
std::vector<float> AuxProbabilities(const RouterConfig& c, const float* logits, int64_t n);
// Top-k selections per (group, expert): [G·E], the group of local token t
// being group_of[t] (size n).
std::vector<float> SelectionCounts(const Routing& r, const std::vector<int32_t>& group_of, int G);

// d(aux)/dq for the local tokens: [n, E] = coeff·E/(k·G·N_g²)·c[g(t), e], with
// `counts` [G·E] summed over the lane and `group_tokens` [G] the lane's tokens
// per group. Also returns this rank's part of aux (Σ over the lane's ranks of
// the parts is aux) in *aux_part.
std::vector<float> AuxGradient(const RouterConfig& c, const std::vector<float>& q, int64_t n,
                               const std::vector<int32_t>& group_of, const std::vector<float>& counts,
                               const std::vector<int64_t>& group_tokens, double* aux_part);

// dlogits [n, E] (=) from the weights' gradient dweight [n·k] (ignored where
// dropped), the aux gradient daux [n, E] w.r.t. q (may be empty) and the
// z-loss over a lane of z_tokens tokens (none when z_loss_coeff is 0); the
// aux and z gradients are multiplied by loss_scale. This rank's part of the
// lane's z value is added to *z_part when non-null.
void RouteBackward(const RouterConfig& c, const Routing& r, const float* logits,
                   const float* dweight, const std::vector<float>& daux, int64_t z_tokens,
                   float loss_scale, float* dlogits, double* z_part);

// One expert-bias update: b_e += rate · sign(mean(counts) − counts_e).
void UpdateExpertBias(const RouterConfig& c, const std::vector<double>& counts, float* bias);

// A Router::Forward's routing, on the exec's device (S = rows·k slots).
struct RouterOutput {
  Tensor selected;  // [S] i32 experts chosen by top-k (before dropping)
  Tensor expert;    // [S] i32 = selected, or −1 where dropped
  Tensor weight;    // [S] f32 combine weights
  Tensor pos;       // [S] i32 row of each kept slot in the expert-sorted order, −1 dropped
  Tensor row_tok;   // [S] i32 token of each sorted row (the first Σ counts are valid)
  Tensor counts;    // [E] i32 kept slots per global expert
};

// Context parallelism for a Router (see the file comment): the CP group's
// size and the lane's TP × CP group ("tp_cp"), over which the aux-loss counts
// are summed. size 1: no CP (tp_cp unused).
struct RouterCp {
  int size = 1;
  comm::Communicator* tp_cp = nullptr;
};

// The router layer: gate weight, logits and routing on the exec's device.
// One per MoE layer; driven by the rank's training thread; not thread-safe.
class Router {
 public:
  // rows: tokens this rank routes per micro-batch (its TP slice of the lane);
  // seq_len T and first_row (the global row of this rank's first token within
  // the lane, for kSequence groups); lane_rows: the lane's tokens (B·T); tp:
  // the lane's TP group (counts are summed over it; size 1 allowed). Under
  // CP (cp.size > 1) seq_len, first_row and lane_rows count this CP rank's
  // rows (T/CP per sequence) and the counts are summed over cp.tp_cp instead.
  static absl::StatusOr<std::unique_ptr<Router>> Create(const std::string& name,
                                                        const RouterConfig& c, int64_t C,
                                                        int64_t rows, int64_t seq_len,
                                                        int64_t first_row, int64_t lane_rows,
                                                        float init_std, uint64_t seed,
                                                        comm::Communicator* tp,
                                                        const kernels::Exec& e,
                                                        const RouterCp& cp = {});
  // x [rows, C] (model dtype) → the routing on the device (valid until the
  // next Forward). `record`: count the tokens and losses into the stats
  // (false for the re-run of activation recompute). Does not synchronise
  // with the host; with aux loss and TP > 1 (CP > 1) the selection counts are
  // all-reduced over TP (TP × CP) (collective).
  absl::StatusOr<const RouterOutput*> Forward(const Tensor& x, bool record = true);
  // dweight [rows·k] f32 on the device → dx [rows, C] f32 (=, the gate's
  // input gradient); the gate's gradient accumulates (+=). loss_scale
  // multiplies the aux and z gradients (1 for mean-normalised losses; the
  // lane's tokens for summed; under CP: CP, or the lane's tokens over every
  // CP rank — see the file comment). Does not synchronise.
  absl::StatusOr<Tensor> Backward(const Tensor& dweight, float loss_scale);
  void DropActivations();

  ReplicatedParam* gate() { return &gate_; }
  const std::string& name() const { return name_; }  // e.g. "h.0.moe.router"
  const RouterConfig& config() const { return config_; }
  // Kept slots per expert of this rank's rows (0: dropless).
  int64_t capacity() const { return params_.capacity; }
  // Expert bias (host, [E]; copied to the device by each Forward) and the
  // top-k selections per expert accumulated since the last TakeCounts (this
  // rank's tokens). TakeCounts / TakeStats block: the figures accumulate on
  // the device and the first of the two calls after a forward reads them.
  std::vector<float>& expert_bias() { return bias_; }
  std::vector<double> TakeCounts();
  // aux / z values of this rank's part of the lane, summed since the last
  // call, and the number of forwards; dropped tokens likewise.
  struct Stats {
    double aux = 0, z = 0;
    int64_t dropped = 0, forwards = 0;
  };
  Stats TakeStats();

 private:
  Router() = default;
  // Adds the device accumulators into counts_ / stats_ and zeroes them.
  void Drain();

  std::string name_;
  RouterConfig config_;
  RouteParams params_;
  kernels::Exec exec_;
  comm::Communicator* tp_ = nullptr;
  comm::Communicator* counts_group_ = nullptr;  // aux counts: tp, or tp_cp under CP
  int64_t C_ = 0, rows_ = 0;
  ReplicatedParam gate_;
  std::vector<float> bias_;
  // Device accumulators, f64 in i64: [E selections | dropped | aux | z].
  Tensor acc_;
  bool acc_dirty_ = false;
  std::vector<double> counts_;
  Stats stats_;
  // Saved by Forward.
  Tensor x32_, logits_, aux_counts_;
  RouterOutput out_;
  bool record_ = true;
};

}  // namespace gtp::layers::moe
