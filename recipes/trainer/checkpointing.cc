#include "recipes/trainer/checkpointing.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "checkpoint/model_state.h"
#include "optimizer/lr_schedule.h"
#include "core/status.h"
#include "recipes/trainer/config.h"
#include "recipes/trainer/run_lock.h"
#include "recipes/trainer/typed_config.h"

namespace gtp::recipes {

Checkpointer::Checkpointer(const TrainingState& s, std::string root)
    : r_(*s.recipe), world_(*s.world), host_(*s.host), exec_(*s.exec), pgs_(s.pgs),
      parts_(s.parts), params_(*s.params), experts_(*s.experts), opt_(s.opt), sampler_(s.sampler),
      order_(s.order), expert_order_(s.expert_order), ckpt_root_(std::move(root)) {}

absl::StatusOr<SavedProgress> ParseSavedProgress(const std::map<std::string, std::string>& extra,
                                                 const std::string& dir) {
  // (std::stoull used to throw here: an abort on UCX ranks, "exception:
  // stoull" naming neither file nor field on threads.)
  SavedProgress p;
  GTP_ASSIGN_OR_RETURN(const int64_t consumed,
                       checkpoint::ExtraCount(extra, "consumed_samples", dir));
  p.consumed_samples = static_cast<uint64_t>(consumed);
  GTP_ASSIGN_OR_RETURN(p.optimizer_step, checkpoint::ExtraCount(extra, "optimizer_step", dir));
  GTP_ASSIGN_OR_RETURN(p.optimizer_skipped,
                       checkpoint::ExtraCount(extra, "optimizer_skipped", dir));
  return p;
}

absl::StatusOr<int64_t> Checkpointer::InitFromThen0(bool announce) {
  GTP_RETURN_IF_ERROR(InitFrom(announce));
  return 0;
}

// with_tied_copies: a pipeline's head copy of wte is loaded, never saved.
absl::StatusOr<std::vector<checkpoint::TensorPiece>> Checkpointer::Pieces(bool with_tied_copies) {
  GTP_ASSIGN_OR_RETURN(auto pieces,
                       checkpoint::ModelPieces(params_, *pgs_, &experts_, with_tied_copies));
  GTP_ASSIGN_OR_RETURN(auto state, checkpoint::OptimizerPieces(*opt_, params_, *pgs_, &experts_,
                                                               with_tied_copies));
  // MoE expert biases: the same on every rank of the pipeline stage holding
  // the layer, which split the writing (the whole world would leave the
  // rows of the other stages' ranks unwritten: a checkpoint no run could load).
  std::vector<std::pair<std::string, Tensor>> buffers;
  for (auto& part : parts_) {
    for (auto& b : part->moe_buffers()) buffers.push_back(b);
  }
  if (!buffers.empty()) {
    GTP_ASSIGN_OR_RETURN(const auto replica, checkpoint::StageReplica(*pgs_, world_.rank()));
    for (auto& p : checkpoint::IdenticalPieces(buffers, replica.first, replica.second)) {
      pieces.push_back(std::move(p));
    }
  }
  for (auto& p : state) pieces.push_back(std::move(p));
  return pieces;
}

absl::Status Checkpointer::Save(int64_t step, bool wait) {
  GTP_ASSIGN_OR_RETURN(auto pieces, Pieces());
  checkpoint::SaveOptions so;
  so.iteration = step;
  so.keep_last = r_.checkpoint().keep_last();
  so.extra["recipe"] = RecipeText(r_);
  so.extra["consumed_samples"] = absl::StrCat(sampler_->state().consumed_samples);
  so.extra["optimizer_step"] = absl::StrCat(opt_->progress().step);
  so.extra["optimizer_skipped"] = absl::StrCat(opt_->progress().num_skipped);
  so.extra["layout"] = absl::StrCat("world=", world_.size(), " tp=", r_.parallel().tp(),
                                    " tp_num_weight_shards=", r_.parallel().tp_num_weight_shards(),
                                    " pp=", r_.parallel().pp(), " vpp=", r_.parallel().vpp(),
                                    " cp=", r_.parallel().cp());
  // The rank orders the groups were built with (any order loads any: the
  // tensors are global; MaybeResume notes a change).
  so.extra["order"] = order_;
  if (has_moe()) so.extra["expert_order"] = expert_order_;
  if (!r_.checkpoint().async_save()) return checkpoint::Save(ckpt_root_, pieces, host_, so);
  if (saver_ == nullptr) {
    std::vector<int> all(host_.size());
    for (int i = 0; i < host_.size(); ++i) all[i] = i;
    GTP_ASSIGN_OR_RETURN(saver_comm_, host_.Split({all}, "checkpoint"));
    saver_ = std::make_unique<checkpoint::AsyncSaver>(*saver_comm_);
  }
  GTP_RETURN_IF_ERROR(saver_->Start(ckpt_root_, pieces, so));
  return wait ? saver_->Wait() : absl::OkStatus();
}

// checkpoint.no_resume=true in a run directory that already holds
// checkpoints: they move to <root>.replaced (SetAsideCheckpoints,
// run_lock.h), unless checkpoint.init_from lies among them.
absl::Status Checkpointer::SetAsideEarlierCheckpoints() {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (ckpt_root_.empty() || !fs::is_directory(ckpt_root_, ec) || fs::is_empty(ckpt_root_, ec)) {
    return absl::OkStatus();
  }
  const std::string& from = r_.checkpoint().init_from();
  if (!from.empty()) {
    const std::string a = fs::weakly_canonical(from, ec).string() + "/";
    const std::string b = fs::weakly_canonical(ckpt_root_, ec).string() + "/";
    if (absl::StartsWith(a, b)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "checkpoint.init_from ", from, " lies inside this run's checkpoint directory ", ckpt_root_,
          ", which checkpoint.no_resume=true sets aside: copy it elsewhere first, or use another --run_dir"));
    }
  }
  return SetAsideCheckpoints(ckpt_root_);
}

absl::StatusOr<int64_t> Checkpointer::Resume() {
  const bool init_from = !r_.checkpoint().init_from().empty();
  if (r_.checkpoint().no_resume()) {
    if (rank0()) GTP_RETURN_IF_ERROR(SetAsideEarlierCheckpoints());
    return init_from ? InitFromThen0(true) : 0;
  }
  if (absl::StatusOr<int64_t> latest = checkpoint::LatestIteration(ckpt_root_); !latest.ok()) {
    if (absl::IsNotFound(latest.status()))
      return init_from ? InitFromThen0(true) : 0;  // a fresh run
    return latest.status();  // damaged: never silently start over next to checkpoints
  }
  if (init_from && rank0()) {
    // A restarted fine-tune must continue itself, not start over from its base.
    std::printf("checkpoint.init_from %s ignored: resuming this run's own checkpoint in %s\n",
                r_.checkpoint().init_from().c_str(), ckpt_root_.c_str());
  }
  // The checkpoint's model must be this run's: tensors that still fit would
  // otherwise load into another function (a 4-layer run resumed with
  // model.n_layer=2 dropped two layers, and retention then deleted the last
  // good checkpoint).
  {
    GTP_ASSIGN_OR_RETURN(const int64_t latest, checkpoint::LatestIteration(ckpt_root_));
    const std::string dir = checkpoint::IterationDir(ckpt_root_, latest);
    GTP_ASSIGN_OR_RETURN(checkpoint::proto::Metadata md, checkpoint::ReadCheckpointMetadata(dir));
    // Weights without optimizer state or progress (`ckpt import`): a start,
    // not a run to continue (it used to fail with ".../exp_avg is not in").
    if (auto it = md.extra().find("imported_from"); it != md.extra().end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          ckpt_root_, " holds weights imported from ", it->second,
          " (ckpt import: no optimizer state, no progress), not a run to resume: start from it with "
          "checkpoint.init_from=", ckpt_root_, " and another --run_dir"));
    }
    if (auto it = md.extra().find("recipe"); it != md.extra().end()) {
      GTP_ASSIGN_OR_RETURN(proto::Recipe theirs, ParseRecipe(it->second, dir + " (its recipe)"));
      GTP_RETURN_IF_ERROR(SameFunction(
          theirs.model(), r_.model(), dir, "resuming",
          " (a run resumes with the model it was saved with: drop the override that changed it, "
          "or start a new run with another --run_dir or checkpoint.no_resume=true)"));
      GTP_RETURN_IF_ERROR(SameOptimizer(theirs, r_, dir));
      if (!r_.optim().override_schedule()) GTP_RETURN_IF_ERROR(SameSchedule(theirs, r_, dir));
    }
  }
  GTP_ASSIGN_OR_RETURN(auto pieces, Pieces(/*with_tied_copies=*/true));
  GTP_ASSIGN_OR_RETURN(checkpoint::LoadResult lr,
                       checkpoint::Load(ckpt_root_, std::nullopt, pieces, host_));
  for (layers::ShardedParam* p : params_.sharded) p->MarkUpdated();  // fp8 gathers re-quantise
  for (layers::ShardedParam* p : experts_.sharded) p->MarkUpdated();
  const int64_t step = lr.iteration;
  GTP_ASSIGN_OR_RETURN(const SavedProgress saved,
                       ParseSavedProgress(lr.extra, checkpoint::IterationDir(ckpt_root_, step)));
  data::SamplerState ss;
  ss.consumed_samples = saved.consumed_samples;
  sampler_->set_state(ss);
  optimizer::OptimizerProgress pr;
  pr.step = saved.optimizer_step;
  pr.num_skipped = saved.optimizer_skipped;
  opt_->set_progress(pr);
  if (rank0()) {
    std::string moved;  // checkpoints of another rank order reshard like any other layout
    for (const auto& [key, now] : {std::pair<std::string, std::string>{"order", order_},
                                   {"expert_order", expert_order_}}) {
      auto it = lr.extra.find(key);
      if (it != lr.extra.end() && it->second != now) {
        absl::StrAppend(&moved, " (saved under parallel.", key, " ", it->second, ", now ", now,
                        ")");
      }
    }
    std::printf("resumed from %s at step %lld%s\n",
                checkpoint::IterationDir(ckpt_root_, step).c_str(),
                static_cast<long long>(step), moved.c_str());
  }
  return step;
}

// A checkpoint root (its `latest`) or one iter_ directory → that iteration's
// directory.
absl::StatusOr<std::string> CheckpointIterationDir(const std::string& from) {
  std::string root = from;
  int64_t iteration = 0;
  if (std::filesystem::exists(from + "/metadata.pb")) {
    GTP_ASSIGN_OR_RETURN(checkpoint::proto::Metadata m, checkpoint::ReadCheckpointMetadata(from));
    iteration = m.iteration();
    std::filesystem::path it_dir = std::filesystem::path(from).lexically_normal();
    if (!it_dir.has_filename()) it_dir = it_dir.parent_path();  // a trailing '/'
    root = it_dir.parent_path().string();
    std::error_code ec;
    if (!std::filesystem::equivalent(checkpoint::IterationDir(root, iteration), from, ec)) {
      return absl::InvalidArgumentError(
          absl::StrCat("holds iteration ", iteration, " but is not named ",
                       checkpoint::IterationDir(root, iteration), ": give the checkpoint root"));
    }
  } else {
    GTP_ASSIGN_OR_RETURN(iteration, checkpoint::LatestIteration(from));
  }
  return checkpoint::IterationDir(root, iteration);
}

absl::StatusOr<proto::Recipe> RecipeOfCheckpoint(const std::string& from) {
  GTP_ASSIGN_OR_RETURN(const std::string dir, CheckpointIterationDir(from));
  GTP_ASSIGN_OR_RETURN(checkpoint::proto::Metadata md, checkpoint::ReadCheckpointMetadata(dir));
  auto it = md.extra().find("recipe");
  if (it == md.extra().end()) {
    return absl::NotFoundError(absl::StrCat(dir, " records no recipe (not written by the trainer or ckpt import)"));
  }
  return ParseRecipe(it->second, dir + " (its recipe)");
}

absl::Status CheckInitFrom(const proto::Recipe& r) {
  const std::string& from = r.checkpoint().init_from();
  if (from.empty()) return absl::OkStatus();
  auto bad = [&](const absl::Status& st) {
    return absl::Status(st.code(), absl::StrCat("checkpoint.init_from ", from, ": ", st.message()));
  };
  absl::StatusOr<std::string> dir = CheckpointIterationDir(from);
  if (!dir.ok()) return bad(dir.status());
  absl::StatusOr<checkpoint::proto::Metadata> md = checkpoint::ReadCheckpointMetadata(*dir);
  if (!md.ok()) return bad(md.status());
  auto it = md->extra().find("recipe");
  if (it == md->extra().end()) return absl::OkStatus();  // Load names any tensor that does not fit
  absl::StatusOr<proto::Recipe> theirs = ParseRecipe(it->second, *dir + " (its recipe)");
  if (!theirs.ok()) return bad(theirs.status());
  return SameFunction(theirs->model(), r.model(), *dir, "checkpoint.init_from",
                      " (checkpoint.init_model=true takes the checkpoint's model settings)");
}

absl::Status TakeModelFromInit(const std::vector<std::string>& sets, proto::Recipe* r) {
  const std::string& from = r->checkpoint().init_from();
  if (from.empty()) {
    return absl::InvalidArgumentError("checkpoint.init_model=true takes the model from checkpoint.init_from: set it");
  }
  absl::StatusOr<proto::Recipe> theirs = RecipeOfCheckpoint(from);
  if (!theirs.ok()) {
    return absl::Status(theirs.status().code(),
                        absl::StrCat("checkpoint.init_from ", from, ": ", theirs.status().message()));
  }
  *r->mutable_model() = theirs->model();
  std::vector<std::string> model_sets;  // still applied on top
  for (const std::string& s : sets) {
    if (absl::StartsWith(s, "model.")) model_sets.push_back(s);
  }
  GTP_RETURN_IF_ERROR(ApplyOverrides(model_sets, r));
  return FinalizeRecipe(r);
}

// checkpoint.init_from: another checkpoint's model weights (and MoE
// buffers), resharded to this layout by checkpoint::Load; the step, the
// optimizer's moments and the data position stay fresh. A bf16 run's f32
// masters are filled too (from `<param>/master`, else the f32 weight), so
// its first update starts from the checkpoint's values rather than from
// the initial weights the optimizer copied at creation.
absl::Status Checkpointer::InitFrom(bool announce) {
  const std::string& from = r_.checkpoint().init_from();
  auto bad = [&](const absl::Status& st) {
    return absl::Status(st.code(),
                        absl::StrCat("checkpoint.init_from ", from, ": ", st.message()));
  };
  absl::StatusOr<std::string> resolved = CheckpointIterationDir(from);
  if (!resolved.ok()) return bad(resolved.status());
  const std::string dir = *resolved;
  absl::StatusOr<checkpoint::proto::Metadata> meta = checkpoint::ReadCheckpointMetadata(dir);
  if (!meta.ok()) return bad(meta.status());
  std::map<std::string, DType> saved;  // the dtypes a cast below handles
  for (const auto& e : meta->tensors()) {
    for (DType d : {DType::kF32, DType::kBF16}) {
      if (e.dtype() == DTypeName(d)) saved[e.key()] = d;
    }
    if (!saved.count(e.key())) saved[e.key()] = DType::kU8;  // other: Load names any mismatch
  }
  HeapAllocator host;  // cast staging; declared before the pieces that may hold it
  // Destinations: the weights (both copies of a pipeline's tied wte), MoE
  // buffers, and the optimizer's masters where it keeps them.
  GTP_ASSIGN_OR_RETURN(std::vector<checkpoint::TensorPiece> dst,
                       Pieces(/*with_tied_copies=*/true));
  std::vector<checkpoint::TensorPiece> want;
  for (checkpoint::TensorPiece& p : dst) {
    const size_t slash = p.key.find('/');
    if (slash != std::string::npos && p.key.substr(slash + 1) != "master")
      continue;  // moments: fresh
    const std::string param = p.key.substr(0, slash);
    // The source: exact values first (an f32 master over its bf16 weight).
    std::string src = p.key;
    if (slash == std::string::npos) {
      if (p.data.dtype() == DType::kF32 && saved.count(param + "/master"))
        src = param + "/master";
    } else if (!saved.count(p.key)) {
      src = param;
    }
    p.key = src;
    want.push_back(std::move(p));
  }
  // Load checks dtypes: a piece whose saved dtype differs (an f32 import
  // into a bf16 run, say) is read into host staging and cast here.
  std::vector<std::pair<Tensor, Tensor>> casts;  // staging (saved dtype) → destination
  for (checkpoint::TensorPiece& p : want) {
    auto it = saved.find(p.key);
    if (it == saved.end() || it->second == p.data.dtype()) continue;
    const bool castable = (it->second == DType::kF32 || it->second == DType::kBF16) &&
                          (p.data.dtype() == DType::kF32 || p.data.dtype() == DType::kBF16);
    if (!castable) continue;  // Load names the mismatch
    Tensor staging = Tensor::Empty(p.data.shape(), it->second, host);
    casts.emplace_back(staging, p.data);
    p.data = staging;
  }
  absl::StatusOr<checkpoint::LoadResult> lr = checkpoint::Load(
      std::filesystem::path(dir).parent_path().string(), meta->iteration(), want, host_);
  if (!lr.ok()) return bad(lr.status());
  for (auto& [staging, out] : casts) {
    Tensor cast = Tensor::Empty(out.shape(), out.dtype(), host);
    const int64_t n = staging.numel();
    if (staging.dtype() == DType::kF32) {
      for (int64_t i = 0; i < n; ++i) cast.data<bf16>()[i] = ToBF16(staging.data<float>()[i]);
    } else {
      for (int64_t i = 0; i < n; ++i) cast.data<float>()[i] = ToF32(staging.data<bf16>()[i]);
    }
    GTP_RETURN_IF_ERROR(Copy(cast, out, exec_.stream));
  }
  for (layers::ShardedParam* p : params_.sharded) p->MarkUpdated();  // fp8 gathers re-quantise
  for (layers::ShardedParam* p : experts_.sharded) p->MarkUpdated();
  // What the shapes cannot tell: the same tensors computing something else.
  if (auto it = lr->extra.find("recipe"); it != lr->extra.end()) {
    absl::StatusOr<proto::Recipe> theirs = ParseRecipe(it->second, dir + " (its recipe)");
    if (!theirs.ok()) return bad(theirs.status());
    GTP_RETURN_IF_ERROR(SameFunction(theirs->model(), r_.model(), dir, "checkpoint.init_from"));
  }
  if (rank0() && announce) {
    std::printf(
        "initialised the model from %s (checkpoint.init_from; weights only: step 0, fresh "
        "optimizer state and data order)\n",
        dir.c_str());
  }
  return absl::OkStatus();
}

absl::Status SameSchedule(const proto::Recipe& theirs, const proto::Recipe& ours,
                          const std::string& dir) {
  const optimizer::LrSchedule a = OptimConfig(theirs).lr, b = OptimConfig(ours).lr;
  // The same function of the step is the same schedule (a constant rate's
  // decay length is no difference): compare the rates at every step up to
  // the later end (sampled beyond a million steps; past the end both are flat).
  const int64_t end = std::max(a.decay_steps, b.decay_steps) + 1;
  const int64_t stride = std::max<int64_t>(1, end / 1000000);
  bool same = true;
  for (int64_t k = 0; same && k <= end; k += stride) same = optimizer::LrAt(a, k) == optimizer::LrAt(b, k);
  same = same && optimizer::LrAt(a, end) == optimizer::LrAt(b, end);
  if (same) return absl::OkStatus();
  const std::string fix =
      a.decay_steps != b.decay_steps && ours.optim().decay_steps() == 0
          ? absl::StrCat(" To train on at the end of the saved schedule set optim.decay_steps=",
                         a.decay_steps, " (the LR stays at optim.min_lr after it);")
          : std::string(" Drop the override that changed it;");
  return absl::FailedPreconditionError(absl::StrCat(
      "resuming: the learning-rate schedule is ", optimizer::ToString(a), " in ", dir, " but ",
      optimizer::ToString(b), " in this run (train.steps and the optim settings make it): ",
      "the LR would jump.", fix,
      " to take the new schedule anyway set optim.override_schedule=true"));
}

absl::Status SameOptimizer(const proto::Recipe& theirs, const proto::Recipe& ours,
                           const std::string& dir) {
  auto matrices = [](const proto::Recipe& r) {
    return r.optim().matrices().empty() ? std::string("adamw") : r.optim().matrices();
  };
  if (matrices(theirs) == matrices(ours)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "resuming: optim.matrices is ", matrices(theirs), " in ", dir, " but ", matrices(ours),
      " in this run, and the checkpoint holds ", matrices(theirs),
      "'s optimizer state: drop the override (optim.matrices=", matrices(theirs),
      "), or start from its weights with checkpoint.init_from=", dir, " and another --run_dir"));
}

absl::Status SameFunction(const proto::Model& theirs, const proto::Model& ours,
                          const std::string& dir, const std::string& what,
                          const std::string& fix) {
  auto text = [](const proto::Model& m, const std::string& f) -> std::string {
    const int64_t kv = m.n_kv_head() > 0 ? m.n_kv_head() : m.n_head();
    if (f == "n_layer") return absl::StrCat(m.n_layer());
    if (f == "n_embd") return absl::StrCat(m.n_embd());
    if (f == "n_head") return absl::StrCat(m.n_head());
    if (f == "n_kv_head") return absl::StrCat(kv);
    if (f == "ffn_hidden")
      return absl::StrCat(m.ffn_hidden() > 0 ? m.ffn_hidden() : 4 * m.n_embd());
    if (f == "norm") return m.norm().empty() ? "layernorm" : m.norm();
    if (f == "activation") return m.activation().empty() ? "gelu" : m.activation();
    if (f == "no_bias") return m.no_bias() ? "true" : "false";
    if (f == "untied_embeddings") return m.untied_embeddings() ? "true" : "false";
    if (f == "rope") return m.rope() ? "true" : "false";
    if (f == "rope_theta")
      return m.rope() ? absl::StrCat(m.rope_theta() > 0 ? m.rope_theta() : 10000.0f) : "-";
    if (f == "layer_pattern") return m.layer_pattern();
    if (f == "norm_eps") return absl::StrCat(m.norm_eps() > 0 ? m.norm_eps() : 1e-5f);
    return absl::StrCat(m.moe().num_experts());  // moe.num_experts
  };
  for (const char* f :
       {"n_layer", "n_embd", "n_head", "n_kv_head", "ffn_hidden", "norm", "activation", "no_bias",
        "untied_embeddings", "rope", "rope_theta", "layer_pattern", "norm_eps", "moe.num_experts"}) {
    const std::string a = text(theirs, f), b = text(ours, f);
    if (a != b) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": model.", f, " is ", a, " in ", dir,
                                                     " but ", b, " in this run", fix));
    }
  }
  return absl::OkStatus();
}

}  // namespace gtp::recipes
