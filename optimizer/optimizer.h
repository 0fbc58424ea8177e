// optimizer/optimizer.h — the distributed optimizer (DESIGN.md §5): AdamW
// with fp32 state sharded over the replicate group, Muon for matrices with
// layer-wise ownership, global grad-norm clipping, NaN/Inf step skipping and
// an LR schedule.
//
//   GTP_ASSIGN_OR_RETURN(auto grads, GradBuffer::Create(params, pgs, exec, buffer_options));
//   GTP_ASSIGN_OR_RETURN(auto opt, DistributedOptimizer::Create(grads.get(), pgs, exec, config));
//   (or Create({dense.get(), experts.get()}, ...) for separately reduced buffers)
//   for (...) {                                  // one iteration
//     for (int m = 0; m < M; ++m) {
//       grads->StartMicrobatch(m == M - 1, tokens_m);
//       model->Forward(...); model->Backward();
//     }
//     GTP_ASSIGN_OR_RETURN(StepStats s, opt->Step());  // also zeroes the grads
//   }
//
// AdamW (every param not given to Muon). Each replicate rank owns its slice
// of every gradient bucket (GradBuffer::shard_range) and keeps exp_avg,
// exp_avg_sq and — for params that are not f32 — an f32 master copy for
// exactly those elements: per-rank state ≈ 1/(TP·GTP·DP) of the model's.
// After the update the slices are all-gathered over the replicate group and
// copied (cast) into the params. Weight decay applies where decay_filter says
// (default: tensors of rank ≥ 2; norms and biases are not decayed).
// distributed = false keeps the whole state on every rank instead (needs
// all-reduced grads).
//
// Muon (matrices = kMuon; params chosen by muon_filter, by default every
// GTP-sharded matrix except the embedding and the LM head):
//   m ← β·m + (1 − β)·g;  u = m, or (1 − β)·g + β·m with Nesterov;
//   p ← p·(1 − lr·wd) − lr·scale·NS(u)
// The unit of ownership is one matrix Newton–Schulz sees: a param, or each
// block of a stacked param (ShardedParam::matrix_blocks: MoE experts).
// Each unit is owned by one replicate rank (owners balanced by the cost
// max(M, N)·min(M, N)² of the unit's dims, greedily, all units of all params
// together); on the owner replica every TP×GTP rank keeps the momentum of
// its shard's rows of that unit. kDuplicated (default): a replica owning any
// unit of a param gathers u over GTP (stripping the padding) and TP once for
// all of them; for each owned unit one of its TP×GTP ranks (ns_rank, the
// replica's units balanced over its TP×GTP ranks by the same cost)
// assembles the unit's rows of the global matrix through the params' matrix
// layouts and runs Newton–Schulz on them, and the result is broadcast from
// that rank over GTP and TP; each rank keeps its own slice — so results do
// not depend on the layout, and each unit is orthogonalised once (a stack's
// experts on different ranks). kBlockwise orthogonalises each rank's shard
// alone (cheaper, but the update depends on TP and GTP; a stack is one unit
// there). The scale comes from the full matrix dims M×N: kSpectral
// √max(M, N), kShape √max(1, M/N), kUnitRms √(M/N). Updated shards are then
// broadcast, unit by unit, from the owner over the replicate group. Muon needs the
// gradients all-reduced (ReduceMode::kAllReduce): a matrix's owner needs its
// whole reduced gradient.
//
// Each Step first finishes the gradient sync if the caller has not, computes
// the global grad norm (optimizer/grad_norm.h), skips the step (counting it)
// when the norm is NaN or Inf, clips to clip_grad, updates, and zeroes the
// gradients. Collective over the replicate, tp and gtp groups; blocks.
// Without Muon, and where every group of more than one rank takes device
// memory (NCCL; or a single rank), the norm, clip scale and skip decision
// stay on the device (optimizer/grad_norm.h GlobalGradNormOnDevice) and AdamW
// reads them there: the step is enqueued whole and read back once at its end.
// Threading: the rank's training thread only.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/kernels/kernels.h"
#include "core/kernels/ops.h"
#include "optimizer/grad_buffer.h"
#include "optimizer/lr_schedule.h"
#include "parallel/process_groups.h"

namespace gtp::optimizer {

namespace internal {
class AdamWUpdater;
class MuonUpdater;
}

// Which update rule matrices get; everything else always uses AdamW.
enum class MatrixOptimizer { kAdamW, kMuon };
// Muon's update scale from the full matrix dims (M rows = out, N cols = in).
enum class MuonScale { kSpectral, kShape, kUnitRms };
// How Muon treats TP/GTP-sharded matrices (see the file comment).
enum class MuonMode { kDuplicated, kBlockwise };

struct AdamWConfig {
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;  // decoupled; applied where decay_filter is true
};

struct MuonConfig {
  float momentum = 0.95f;
  bool nesterov = false;
  int ns_steps = 5;
  kernels::NsCoefficients coefficients = kernels::NsCoefficients::kQuintic;
  MuonScale scale = MuonScale::kSpectral;
  MuonMode mode = MuonMode::kDuplicated;
  float weight_decay = 0.0f;  // decoupled: p ← p·(1 − lr·wd)
  float lr_multiplier = 1.0f;  // Muon's lr = schedule lr × this
};

struct OptimizerConfig {
  MatrixOptimizer matrices = MatrixOptimizer::kAdamW;
  AdamWConfig adamw;
  MuonConfig muon;
  LrSchedule lr;
  // Max global grad norm; <= 0 disables clipping (the norm is still computed
  // to detect NaN/Inf).
  double clip_grad = 0.0;
  // Shard AdamW state over the replicate group.
  bool distributed = true;
  // Which AdamW params get weight decay (default: DefaultWeightDecay).
  std::function<bool(const GradParam&)> decay_filter;
  // Which params Muon updates when matrices = kMuon (default: DefaultMuonParam).
  std::function<bool(const GradParam&)> muon_filter;
};

// Tensors of rank ≥ 2 (weights, embeddings); not norms or biases.
bool DefaultWeightDecay(const GradParam& p);
// GTP-sharded matrices except embeddings and the LM head (names containing
// "wte", "wpe", "embed" or "lm_head"). Stacked MoE experts are one matrix
// per expert (ShardedParam::matrix_layout): each expert is orthogonalised
// alone, with an owner of its own.
bool DefaultMuonParam(const GradParam& p);

// Checkpointable counters (the LR schedule is a function of `step`).
struct OptimizerProgress {
  int64_t step = 0;         // optimizer steps taken (skipped ones excluded)
  int64_t num_skipped = 0;  // steps skipped for a non-finite grad norm
};

// What one Step did.
struct StepStats {
  bool skipped = false;
  double grad_norm = 0.0;  // before clipping
  float lr = 0.0f;         // the schedule's lr for this step
  int64_t step = 0;        // progress().step after the call
};

// One piece of optimizer state on this rank, for checkpoints: `tensor` (f32,
// 1-D) holds state for elements [begin, begin + tensor.numel()) of param
// `param`'s flat local storage (GradParam::value(): the shard, or the
// replicated value), whose place in the global tensor the param's global
// layout gives.
struct StateTensor {
  std::string param;
  std::string kind;  // "exp_avg", "exp_avg_sq", "master" (AdamW); "momentum", "master" (Muon)
  int64_t begin = 0;
  Tensor tensor;
};

// A Muon-managed matrix (a unit of ownership) and its owner.
struct MuonMatrixInfo {
  std::string name;  // the param's; "<param>[b]" for block b of a stack
  int block = 0;     // index in the param's stack (ShardedParam::matrix_blocks)
  int64_t rows = 0, cols = 0;  // full (global) dims M, N of this matrix
  int owner = 0;               // replicate rank
  // kDuplicated: the rank of the owner replica's TP×GTP grid (tp rank · GTP
  // + gtp rank) that runs Newton–Schulz on the whole matrix.
  int ns_rank = 0;
  double cost = 0.0;
};

class DistributedOptimizer {
 public:
  // Classifies params, allocates state through exec (eagerly, so allocator
  // statistics show it) and, for Muon, exchanges the matrices' layouts over
  // each buffer's tp and gtp groups. `buffers` (e.g. dense and expert, each
  // reduced over the groups it read from `pgs`) must outlive the optimizer;
  // the groups come from the buffers, `pgs` is the collection they were
  // built from.
  // InvalidArgument for inconsistent options (Muon or distributed = false
  // with reduce-scattered grads, a bad schedule, Muon on a param without a
  // global layout). Collective over tp and gtp (Muon only); blocks.
  static absl::StatusOr<std::unique_ptr<DistributedOptimizer>> Create(
      std::vector<GradBuffer*> buffers, const parallel::ProcessGroupCollection& pgs,
      const kernels::Exec& exec, const OptimizerConfig& config);
  static absl::StatusOr<std::unique_ptr<DistributedOptimizer>> Create(
      GradBuffer* grads, const parallel::ProcessGroupCollection& pgs, const kernels::Exec& exec,
      const OptimizerConfig& config) {
    return Create(std::vector<GradBuffer*>{grads}, pgs, exec, config);
  }
  ~DistributedOptimizer();
  DistributedOptimizer(const DistributedOptimizer&) = delete;
  DistributedOptimizer& operator=(const DistributedOptimizer&) = delete;

  // One optimizer step (see the file comment). Collective; blocks.
  absl::StatusOr<StepStats> Step();
  // Several optimizers under one global grad norm (MIMO: one per module,
  // on their own groups): GradNorm finishes the gradient sync and returns
  // this optimizer's norm (collective like Step); the caller combines the
  // modules' norms (√Σ norm²) and passes the result to every optimizer's
  // Step(grad_norm), which clips and skips by it (NaN/Inf: every module
  // skips) instead of its own. Host path (not the device-enqueued one).
  absl::StatusOr<double> GradNorm();
  absl::StatusOr<StepStats> Step(double grad_norm);

  // The same step in three parts, for a caller that captures the whole
  // training step in a CUDA graph. Only when CanEnqueueSteps() (AdamW, and
  // every group of more than one rank takes device memory, or one rank):
  //   PrepareStep  host only: this step's lr and bias corrections into the
  //                page-locked buffer EnqueueStep's copy reads (call before
  //                each launch or replay);
  //   EnqueueStep  finishes the grad sync and enqueues the norm, the update
  //                and the zeroing; never waits (capturable);
  //   FinishStep   waits for them and returns the stats (updates progress).
  bool CanEnqueueSteps() const;
  void PrepareStep();
  absl::Status EnqueueStep();
  absl::StatusOr<StepStats> FinishStep();

  const OptimizerProgress& progress() const { return progress_; }
  // For checkpoint restore.
  void set_progress(const OptimizerProgress& p) { progress_ = p; }
  const OptimizerConfig& config() const { return config_; }

  // This rank's state pieces (views; writing them restores state), buffer by
  // buffer.
  std::vector<StateTensor> state_tensors() const;
  // Bytes of optimizer state held by this rank.
  int64_t state_bytes() const;
  // Muon matrices (one per stacked block) in a fixed order, with owners
  // (empty under kAdamW).
  std::vector<MuonMatrixInfo> muon_matrices() const;
  // Newton–Schulz runs on this rank since creation (0 under kAdamW).
  int64_t muon_newton_schulz_calls() const;

 private:
  // The optimizer's part for one gradient buffer: an updater per rule.
  struct Part {
    GradBuffer* grads = nullptr;
    std::vector<char> is_muon;  // per GradBuffer param
    std::unique_ptr<internal::AdamWUpdater> adamw;
    std::unique_ptr<internal::MuonUpdater> muon;
  };
  // The params' values changed (ShardedParam::MarkUpdated).
  static void MarkShardsUpdated(const Part& part);

  DistributedOptimizer() = default;
  absl::Status CreatePart(GradBuffer* grads, Part* part);
  // The one update path of Step and EnqueueStep: AdamW (its scalars on the
  // device when given), Muon, the all-gather of AdamW's params, then the
  // shards marked updated and the gradients zeroed.
  absl::Status Update(Part& part, float lr, int64_t t, float grad_scale,
                      const float* device_scalars = nullptr, const float* device_step = nullptr);
  std::vector<const GradBuffer*> Buffers() const;
  absl::Status GatherParams(const Part& part);

  OptimizerConfig config_;
  kernels::Exec exec_;
  std::vector<Part> parts_;
  OptimizerProgress progress_;
  // The enqueued step (PrepareStep / EnqueueStep / FinishStep).
  PinnedHostAllocator pinned_;
  HeapAllocator host_alloc_;
  Tensor step_host_, step_dev_;  // f32 [3] {lr, bc1, bc2}: host (pinned), device
  Tensor norm_scalars_;          // f32 [3] {norm, clip scale, skip} on the device
  float pending_lr_ = 0.0f;
  int64_t pending_t_ = 0;
};

}  // namespace gtp::optimizer
