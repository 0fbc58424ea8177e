// recipes/trainer/checkpointing.h — one rank's checkpoints: periodic and
// final saves (synchronous, or in the background with
// checkpoint.async_save), resuming this run's own `latest`, and
// checkpoint.init_from (another checkpoint's weights, resharded to this
// layout, step and optimizer fresh). Keys and metadata are those of
// checkpoint/ (docs/DESIGN.md): any layout restores any other.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "checkpoint/checkpoint.h"
#include "comm/communicator.h"
#include "core/kernels/ops.h"
#include "data/sampler.h"
#include "layers/gpt.h"
#include "optimizer/optimizer.h"
#include "parallel/process_groups.h"
#include "recipes/trainer/config.pb.h"

namespace gtp::recipes {

// What a checkpoint holds of one rank's run. Not owned: all of it must
// outlive the Checkpointer.
struct TrainingState {
  const proto::Recipe* recipe = nullptr;
  comm::Communicator* world = nullptr;  // ranks (the moe buffers split their writing over it)
  comm::Communicator* host = nullptr;   // host-memory traffic of save and load
  const kernels::Exec* exec = nullptr;
  const parallel::ProcessGroupCollection* pgs = nullptr;
  std::vector<layers::GptModel*> parts;   // this rank's model chunks
  optimizer::ParamSet* params = nullptr;  // dense params
  optimizer::ParamSet* experts = nullptr; // MoE expert weights
  optimizer::DistributedOptimizer* opt = nullptr;
  data::DistributedSampler* sampler = nullptr;
  std::string order, expert_order;  // the rank orders the groups were built with
};

class Checkpointer {
 public:
  // `root`: this run's checkpoint directory (<run_dir>/<checkpoint.dir>).
  Checkpointer(const TrainingState& state, std::string root);

  // Saves after `step` (the recipe, the data position, the optimizer's
  // progress and the rank orders in the metadata). With
  // checkpoint.async_save the write runs in the background unless `wait`.
  // Collective over the ranks.
  absl::Status Save(int64_t step, bool wait);
  // At start-up: this run's own latest checkpoint when there is one (and
  // checkpoint.no_resume is off), else checkpoint.init_from when set, else
  // nothing. Returns the step to continue after (0: a fresh run). A damaged
  // `latest` is an error, never a silent fresh start. Collective.
  absl::StatusOr<int64_t> Resume();
  // checkpoint.init_from's weights (and MoE buffers, and a bf16 run's f32
  // masters); InvalidArgument naming the first model setting that differs
  // from the checkpoint's recipe. `announce`: rank 0 says so. Collective.
  absl::Status InitFrom(bool announce);

  const std::string& root() const { return ckpt_root_; }

 private:
  bool rank0() const { return world_.rank() == 0; }
  absl::Status SetAsideEarlierCheckpoints();
  bool has_moe() const { return r_.model().moe().num_experts() > 0; }
  absl::StatusOr<int64_t> InitFromThen0(bool announce);
  // with_tied_copies: a pipeline's head copy of wte is loaded, never saved.
  absl::StatusOr<std::vector<checkpoint::TensorPiece>> Pieces(bool with_tied_copies = false);

  const proto::Recipe& r_;
  comm::Communicator& world_;
  comm::Communicator& host_;
  const kernels::Exec& exec_;
  const parallel::ProcessGroupCollection* pgs_;
  std::vector<layers::GptModel*> parts_;
  optimizer::ParamSet& params_;
  optimizer::ParamSet& experts_;
  optimizer::DistributedOptimizer* opt_;
  data::DistributedSampler* sampler_;
  std::string order_, expert_order_;
  std::string ckpt_root_;
  std::unique_ptr<comm::Communicator> saver_comm_;
  std::unique_ptr<checkpoint::AsyncSaver> saver_;  // after saver_comm_: destroyed first
};

// A checkpoint root (its `latest`) or one iter_ directory → that
// iteration's directory; an iter_ directory must be named for its iteration.
absl::StatusOr<std::string> CheckpointIterationDir(const std::string& path);

// The recipe a checkpoint records (the trainer's, or `ckpt import`'s model).
absl::StatusOr<proto::Recipe> RecipeOfCheckpoint(const std::string& path);

// checkpoint.init_from as the trainer checks it before the run directory
// exists: it resolves (`latest` or an iter_ directory), its metadata.pb is
// intact and its recorded model computes what the recipe's does
// (SameFunction). Errors name checkpoint.init_from and the path. OK without
// init_from. Reads metadata.pb only; blocks on it.
absl::Status CheckInitFrom(const proto::Recipe& r);

// checkpoint.init_model=true: `r`'s model section becomes the one recorded
// in checkpoint.init_from, then the `model.*` entries of `sets` apply on top
// and the recipe is finalized again — a fine-tune without retyping the model.
absl::Status TakeModelFromInit(const std::vector<std::string>& sets, proto::Recipe* r);

// A trainer checkpoint's progress entries (metadata "extra"): DataLoss
// naming `dir`, the field and its value when one is missing or not a whole
// number >= 0.
struct SavedProgress {
  uint64_t consumed_samples = 0;
  int64_t optimizer_step = 0, optimizer_skipped = 0;
};
absl::StatusOr<SavedProgress> ParseSavedProgress(const std::map<std::string, std::string>& extra,
                                                 const std::string& dir);

// OK when `ours` resumes the learning-rate schedule `theirs` was saved with
// (decay, rates, warmup, decay steps); FailedPrecondition naming both and
// the fix otherwise (extending train.steps used to restart the cosine
// silently: the LR jumped from 3e-4 to about 7e-4).
absl::Status SameSchedule(const proto::Recipe& theirs, const proto::Recipe& ours,
                          const std::string& dir);

// OK when `ours` resumes the optimizer state `theirs` was saved with
// (optim.matrices: AdamW's moments are not Muon's momentum); InvalidArgument
// naming the setting, both values and the fixes otherwise (it used to read
// as a damaged checkpoint: "tensor …/momentum is not in …").
absl::Status SameOptimizer(const proto::Recipe& theirs, const proto::Recipe& ours,
                           const std::string& dir);

// InvalidArgument "<what>: model.<setting> is A in <dir> but B in this
// run<fix>" for the first model setting in which `theirs` (a checkpoint's
// recipe) and `ours` differ, defaults resolved.
absl::Status SameFunction(const proto::Model& theirs, const proto::Model& ours,
                          const std::string& dir, const std::string& what,
                          const std::string& fix = "");

}  // namespace gtp::recipes
