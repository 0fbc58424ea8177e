#include "recipes/trainer/state.h"

#include <filesystem>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "data/corpus.h"
#include "data/indexed_dataset.h"
#include "data/mock.h"
#include "pipeline/schedule.h"
#include "recipes/trainer/typed_config.h"

namespace gtp::recipes {

// Train and validation datasets for the recipe's data source.
absl::Status MakeDatasets(const proto::Recipe& r, std::unique_ptr<data::GptDataset>* train,
                          std::unique_ptr<data::GptDataset>* valid) {
  std::shared_ptr<const data::TokenSource> src;
  data::DocumentRange tr, va;
  const double valid_share = r.data().valid_fraction() > 0 ? r.data().valid_fraction() : 0.02;  // mock, indexed
  if (r.data().source() == "corpus") {
    src = data::EmbeddedCorpusSource();
    tr = data::EmbeddedCorpusSplit(data::CorpusSplit::kTrain);
    va = data::EmbeddedCorpusSplit(data::CorpusSplit::kValidation);
  } else {
    if (r.data().source() == "mock") {
      data::MockOptions mo;
      mo.vocab_size = r.model().vocab_size();
      mo.seed = r.data().seed();
      GTP_ASSIGN_OR_RETURN(auto s, data::MockTokenSource::Create(mo));
      src = s;
    } else {
      const std::string& path = r.data().path();
      std::error_code ec;
      if (std::filesystem::is_directory(path, ec)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "data.path ", path, " is a directory: give the prefix of its NAME.idx and NAME.bin files (",
            path, "/NAME)"));
      }
      if ((absl::EndsWith(path, ".bin") || absl::EndsWith(path, ".idx")) &&
          !std::filesystem::exists(path + ".idx", ec)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "data.path is the prefix of the .idx and .bin files, without the extension: data.path=",
            path.substr(0, path.size() - 4)));
      }
      GTP_ASSIGN_OR_RETURN(auto s, data::IndexedDataset::Open(path));
      src = s;
    }
    GTP_ASSIGN_OR_RETURN(auto ranges, data::SplitDocuments(src->num_documents(), {1.0 - valid_share, valid_share}));
    tr = ranges[0];
    va = ranges[1];
  }
  data::GptDatasetOptions o;
  o.seq_length = r.model().seq_len();
  o.seed = r.data().seed();
  // Which split, of what, and what would fix it (the dataset's own message
  // names document numbers only).
  const std::string source = r.data().source() == "indexed" ? absl::StrCat("data.path ", r.data().path())
                                                            : absl::StrCat("data.source ", r.data().source());
  auto split_error = [&](const absl::Status& st, const char* which, const data::DocumentRange& d) {
    return absl::Status(
        st.code(), absl::StrCat("the ", which, " split of ", source, " (documents [", d.begin, ", ", d.end,
                                ") of ", src->num_documents(),
                                r.data().source() == "corpus"
                                    ? ""
                                    : absl::StrCat("; validation is the last ", 100 * valid_share,
                                                   " % (data.valid_fraction)"),
                                "): ", st.message(),
                                ": give the dataset more documents or tokens, a smaller model.seq_len, or another data.valid_fraction"));
  };
  o.documents = tr;
  absl::StatusOr<data::GptDataset> t = data::GptDataset::Create(src, o);
  if (!t.ok()) return split_error(t.status(), "training", tr);
  o.documents = va;
  o.shuffle = false;
  absl::StatusOr<data::GptDataset> v = data::GptDataset::Create(src, o);
  if (!v.ok()) return split_error(v.status(), "validation", va);
  *train = std::make_unique<data::GptDataset>(*std::move(t));
  *valid = std::make_unique<data::GptDataset>(*std::move(v));
  return absl::OkStatus();
}


RankState::RankState(const proto::Recipe& recipe, comm::Communicator& world,
                     comm::Communicator& host, const kernels::Exec& exec)
    : recipe(recipe), world(world), host(host), exec(exec) {}

std::vector<layers::GptModel*> RankState::RawParts() const {
  std::vector<layers::GptModel*> raw;
  for (const auto& part : parts) raw.push_back(part.get());
  return raw;
}

absl::StatusOr<std::unique_ptr<RankState>> RankState::Build(const proto::Recipe& r_,
                                                            comm::Communicator& world_,
                                                            comm::Communicator& host,
                                                            const kernels::Exec& exec_) {
  std::unique_ptr<RankState> st(new RankState(r_, world_, host, exec_));
  RankState& s = *st;
  const parallel::ParallelConfig pc = ParallelConfigOf(r_);
  GTP_ASSIGN_OR_RETURN(auto pgs, parallel::ProcessGroupCollection::Build(pc, world_, ModelFactsOf(r_)));
  s.pgs = std::make_unique<parallel::ProcessGroupCollection>(std::move(pgs));
  s.order = pc.order;  // as the groups were built (the banner shows it)
  s.expert_order = pc.expert_order;
  GTP_ASSIGN_OR_RETURN(comm::Communicator * data, s.pgs->Get(parallel::groups::kData));
  s.data = data;
  const layers::GtpOptions gtp_options = GtpOptionsOf(r_);
  // Pipeline: this rank's model chunks, virtual stages c·PP + stage.
  const int P = r_.parallel().pp(), vpp = r_.parallel().vpp();
  GTP_ASSIGN_OR_RETURN(comm::Communicator * pp, s.pgs->Get(parallel::groups::kPp));
  s.pp = pp;
  for (int c = 0; c < vpp; ++c) {
    layers::GptConfig mc = ModelConfig(r_);
    mc.pipeline.index = c * P + pp->rank();
    mc.pipeline.count = P * vpp;
    mc.pipeline.boundaries.assign(r_.parallel().pp_boundaries().begin(),
                                  r_.parallel().pp_boundaries().end());
    GTP_ASSIGN_OR_RETURN(auto part, layers::GptModel::Create(mc, r_.train().micro_batch(),
                                                             r_.model().seq_len(), *s.pgs, exec_,
                                                             gtp_options));
    s.parts.push_back(std::move(part));
  }
  s.model = s.parts.front().get();
  for (auto& part : s.parts) {
    s.params.sharded.insert(s.params.sharded.end(), part->sharded_params().begin(),
                           part->sharded_params().end());
    s.params.replicated.insert(s.params.replicated.end(), part->replicated_params().begin(),
                              part->replicated_params().end());
  }
  if (gtp_options.fp8_tile_gather) {
    // Asked for, but no FP8 linear's shard here is whole tiles: refused
    // rather than gathered as bf16 under a name that says otherwise.
    int gathered = 0, tiles = 0;
    for (const layers::ShardedParam* p : s.params.sharded) {
      if (p->gtp_size() == 1) continue;
      ++gathered;
      tiles += p->fp8_tiles() ? 1 : 0;
    }
    if (gathered > 0 && tiles == 0) {
      return absl::FailedPreconditionError(
          "parallel.gtp_gather_dtype=fp8_tiles: no FP8 linear's GTP shard is a whole number of "
          "128-row tiles (its rows / TP / GTP a multiple of 128), so none would travel as FP8 "
          "tiles (or this rank holds only layers that train.fp8_bf16_first_layers / "
          "train.fp8_bf16_last_layers keep in bf16); choose model sizes or fewer weight shards "
          "that give that, or the params' dtype");
    }
  }
  if (P > 1) {
    std::vector<layers::GptModel*> raw;
    for (auto& part : s.parts) raw.push_back(part.get());
    GTP_ASSIGN_OR_RETURN(s.runner, pipeline::PipelineRunner::Create(raw, pp, exec_));
  }
  optimizer::OptimizerConfig oc = OptimConfig(r_);
  optimizer::GradBufferOptions go;
  if (oc.matrices == optimizer::MatrixOptimizer::kMuon) go.reduce = optimizer::ReduceMode::kAllReduce;
  // A pipeline's tied embedding sums its stages' gradients before the
  // data-parallel reduction (GptModel::SyncTiedEmbedding): no overlap.
  if (P > 1) go.overlap = false;
  GTP_ASSIGN_OR_RETURN(s.grads, optimizer::GradBuffer::Create(s.params, *s.pgs, exec_, go));
  std::vector<optimizer::GradBuffer*> buffers = {s.grads.get()};
  for (auto& part : s.parts) {
    s.experts.sharded.insert(s.experts.sharded.end(), part->expert_params().begin(),
                            part->expert_params().end());
  }
  if (!s.experts.sharded.empty()) {
    // Expert weights reduce over the expert grid's data-parallel group.
    optimizer::GradBufferOptions eo = go;
    eo.groups = {"edp", "etp", "egtp", "data_cp", {"ep", "pp"}};
    GTP_ASSIGN_OR_RETURN(s.expert_grads, optimizer::GradBuffer::Create(s.experts, *s.pgs, exec_, eo));
    buffers.push_back(s.expert_grads.get());
  }
  GTP_ASSIGN_OR_RETURN(s.opt, optimizer::DistributedOptimizer::Create(buffers, *s.pgs, exec_, oc));
  GTP_RETURN_IF_ERROR(MakeDatasets(r_, &s.train, &s.valid));
  data::SamplerConfig sc;
  sc.micro_batch_size = r_.train().micro_batch();
  sc.num_lanes = s.data->size();
  sc.global_batch_size = r_.train().global_batch() > 0 ? r_.train().global_batch()
                                                       : sc.micro_batch_size * sc.num_lanes;
  GTP_ASSIGN_OR_RETURN(data::DistributedSampler sampler,
                       data::DistributedSampler::Create(sc, s.data->rank()));
  s.sampler = std::make_unique<data::DistributedSampler>(std::move(sampler));
  if (r_.train().eval_every() > 0) {
    // Each periodic evaluation reads eval_batches micro-batches per lane of
    // distinct validation samples (evaluation.h); past the split's end they
    // would wrap around and count samples twice.
    const int64_t per_batch = sc.micro_batch_size * sc.num_lanes;
    const uint64_t want = static_cast<uint64_t>(r_.train().eval_batches() * per_batch);
    const uint64_t split = s.valid->samples_per_epoch();
    if (want > split) {
      const uint64_t most = split / static_cast<uint64_t>(per_batch);
      return absl::InvalidArgumentError(absl::StrCat(
          "train.eval_batches = ", r_.train().eval_batches(), " reads ", want,
          " validation samples per evaluation (", r_.train().eval_batches(), " × train.micro_batch ",
          sc.micro_batch_size, " × ", sc.num_lanes, " data lanes), but the validation split holds ",
          split, " samples of ", r_.model().seq_len(), " tokens: ",
          most > 0 ? absl::StrCat("set train.eval_batches to at most ", most, ", ")
                   : std::string("use a smaller train.micro_batch or fewer data lanes, "),
          "raise data.valid_fraction, or set train.eval_every = 0"));
    }
  }
  if (P > 1) {
    const int64_t M = s.sampler->num_micro_batches();
    if (M < P) {
      return absl::InvalidArgumentError(absl::StrCat(
          "parallel.pp = ", P, " needs at least ", P, " micro-batches per step, got ", M,
          " (train.global_batch / (train.micro_batch × ", s.data->size(),
          " data lanes)): raise train.global_batch"));
    }
    GTP_RETURN_IF_ERROR(pipeline::Schedule(P, pp->rank(), vpp, static_cast<int>(M)).status());
  }
  int64_t n = 0;
  for (auto* p : s.params.sharded) n += p->shard().numel();
  for (auto* p : s.params.replicated) n += p->value.numel();
  for (auto* p : s.experts.sharded) n += p->shard().numel();
  s.local_params = n;
  return st;
}

}  // namespace gtp::recipes
