#include "mimo/checkpoint.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "checkpoint/model_state.h"
#include "core/status.h"

namespace gtp::mimo {

namespace {

void Prefix(const std::string& prefix, std::vector<checkpoint::TensorPiece>* pieces) {
  for (checkpoint::TensorPiece& p : *pieces) p.key = prefix + p.key;
}

// with_tied_copies: a language pipeline's head copy of wte is loaded, never
// saved (as in the trainer).
absl::StatusOr<std::vector<checkpoint::TensorPiece>> Pieces(MimoModel& model, MimoOptimizer& opt,
                                                            int rank, bool with_tied_copies) {
  std::vector<checkpoint::TensorPiece> all;
  auto add = [&](std::vector<checkpoint::TensorPiece> v) {
    for (auto& p : v) all.push_back(std::move(p));
  };
  if (model.has_encoder()) {
    GTP_ASSIGN_OR_RETURN(const parallel::ProcessGroupCollection* pgs, model.encoder_grid().groups());
    GTP_ASSIGN_OR_RETURN(auto w, checkpoint::ModelPieces(opt.encoder_params(), *pgs));
    GTP_ASSIGN_OR_RETURN(auto s, checkpoint::OptimizerPieces(*opt.encoder(), opt.encoder_params(), *pgs));
    Prefix("mimo.", &w);
    Prefix("mimo.", &s);
    add(std::move(w));
    add(std::move(s));
  }
  if (model.has_language()) {
    GTP_ASSIGN_OR_RETURN(const parallel::ProcessGroupCollection* pgs, model.language_grid().groups());
    const optimizer::ParamSet* experts =
        opt.language_experts().sharded.empty() ? nullptr : &opt.language_experts();
    GTP_ASSIGN_OR_RETURN(auto w, checkpoint::ModelPieces(opt.language_params(), *pgs, experts,
                                                         with_tied_copies));
    GTP_ASSIGN_OR_RETURN(auto s, checkpoint::OptimizerPieces(*opt.language(), opt.language_params(),
                                                             *pgs, experts, with_tied_copies));
    // MoE expert biases: the same on every language rank of the stage
    // holding the layer, which split the writing.
    GTP_ASSIGN_OR_RETURN(const auto replica, checkpoint::StageReplica(*pgs, rank));
    std::vector<std::pair<std::string, Tensor>> buffers;
    for (layers::GptModel* part : model.language_parts()) {
      for (auto& b : part->moe_buffers()) buffers.push_back(b);
    }
    for (auto& p : checkpoint::IdenticalPieces(buffers, replica.first, replica.second)) {
      w.push_back(std::move(p));
    }
    Prefix("mimo.language.", &w);
    Prefix("mimo.language.", &s);
    add(std::move(w));
    add(std::move(s));
  }
  return all;
}

std::string GroupsNote(bool experts) {
  return experts ? "data lanes: data (dp×gtp); dense replicas: replicate (dp×cp); expert replicas: edp"
                 : "data lanes: data (dp×gtp); dense replicas: replicate (dp×cp)";
}

}  // namespace

absl::Status SaveMimoCheckpoint(const std::string& root, int64_t iteration, MimoModel& model,
                                MimoOptimizer& opt, comm::Communicator& world,
                                std::map<std::string, std::string> extra, int keep_last) {
  GTP_ASSIGN_OR_RETURN(auto pieces, Pieces(model, opt, world.rank(), /*with_tied_copies=*/false));
  checkpoint::SaveOptions so;
  so.iteration = iteration;
  so.keep_last = keep_last;
  so.extra = std::move(extra);
  so.extra["mimo"] = "1";
  so.extra["mimo.vision.grid"] = model.encoder_grid().config().ToString();
  so.extra["mimo.language.grid"] = model.language_grid().config().ToString();
  so.extra["mimo.vision.groups"] = GroupsNote(false);
  so.extra["mimo.language.groups"] = GroupsNote(model.config().language.block.moe.enabled());
  so.extra["mimo.vision.grid_ranks"] = absl::StrCat(model.encoder_grid().offset(), "+",
                                                    model.encoder_grid().size());
  so.extra["mimo.language.grid_ranks"] = absl::StrCat(model.language_grid().offset(), "+",
                                                      model.language_grid().size());
  // Progress: the same on every rank of a module (one global step decision).
  optimizer::DistributedOptimizer* o = opt.language() ? opt.language() : opt.encoder();
  so.extra["optimizer_step"] = absl::StrCat(o->progress().step);
  so.extra["optimizer_skipped"] = absl::StrCat(o->progress().num_skipped);
  return checkpoint::Save(root, pieces, world, so);
}

absl::StatusOr<checkpoint::LoadResult> LoadMimoCheckpoint(const std::string& root,
                                                          std::optional<int64_t> iteration,
                                                          MimoModel& model, MimoOptimizer& opt,
                                                          comm::Communicator& world) {
  // A MIMO checkpoint? (Before any tensor is read: another job's keys differ.)
  int64_t it = 0;
  if (iteration.has_value()) {
    it = *iteration;
  } else {
    GTP_ASSIGN_OR_RETURN(it, checkpoint::LatestIteration(root));
  }
  const std::string dir = checkpoint::IterationDir(root, it);
  GTP_ASSIGN_OR_RETURN(checkpoint::proto::Metadata md, checkpoint::ReadCheckpointMetadata(dir));
  if (md.extra().count("mimo") == 0) {
    return absl::InvalidArgumentError(absl::StrCat(dir, ": not a MIMO checkpoint (no \"mimo\" entry)"));
  }
  GTP_ASSIGN_OR_RETURN(auto pieces, Pieces(model, opt, world.rank(), /*with_tied_copies=*/true));
  GTP_ASSIGN_OR_RETURN(checkpoint::LoadResult lr, checkpoint::Load(root, it, pieces, world));
  optimizer::OptimizerProgress pr;
  GTP_ASSIGN_OR_RETURN(pr.step, checkpoint::ExtraCount(lr.extra, "optimizer_step", dir));
  GTP_ASSIGN_OR_RETURN(pr.num_skipped, checkpoint::ExtraCount(lr.extra, "optimizer_skipped", dir));
  for (optimizer::DistributedOptimizer* o : {opt.encoder(), opt.language()}) {
    if (o != nullptr) o->set_progress(pr);
  }
  for (const optimizer::ParamSet* ps :
       {&opt.encoder_params(), &opt.language_params(), &opt.language_experts()}) {
    for (layers::ShardedParam* p : ps->sharded) p->MarkUpdated();
  }
  return lr;
}

}  // namespace gtp::mimo
