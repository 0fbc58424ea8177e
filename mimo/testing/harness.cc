#include "mimo/testing/harness.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "comm/local/local_communicator.h"
#include "core/status.h"
#include "layers/linear.h"
#include "mimo/checkpoint.h"
#include "mimo/optimizer.h"
#include "parallel/hyper_comm_grid.h"

namespace gtp::mimo::testing {

using data::shapes::ShapesTask;

ModuleLayout Dense(int offset, int size, int tp, int gtp, int pp) {
  ModuleLayout m;
  m.offset = offset;
  m.size = size;
  m.config.tp = tp;
  m.config.pp = pp;
  m.config.tp_num_weight_shards = tp * gtp;
  return m;
}

MimoConfig SmallModel(const ShapesTask& task) {
  MimoConfig c;
  c.encoder.patch_dim = task.patch_dim();
  c.encoder.num_patches = task.num_patches();
  c.encoder.n_layer = 1;
  c.encoder.block.n_embd = 16;
  c.encoder.block.n_head = 2;
  c.encoder.block.seed = 5;
  c.encoder.projector_hidden = 16;
  c.language = layers::GptConfig::Gpt2(ShapesTask::vocab_size(), task.sequence_length(), 2, 16, 2);
  c.language.block.seed = 6;
  return c;
}

optimizer::OptimizerConfig Adam() {
  optimizer::OptimizerConfig o;
  o.lr.max_lr = 3e-3f;
  o.lr.min_lr = 3e-3f;
  o.lr.warmup_steps = 0;
  o.clip_grad = 1.0;
  o.adamw.weight_decay = 0.01f;
  return o;
}

namespace {

// Every rank writes its pieces of every global tensor into `out`.
void CollectParams(MimoModel& model, std::map<std::string, std::vector<float>>* out) {
  auto sharded = [&](const std::vector<layers::ShardedParam*>& ps) {
    for (layers::ShardedParam* p : ps) {
      auto& v = (*out)[p->name()];
      v.assign(p->global_layout().global_rows * p->global_layout().global_cols, std::nanf(""));
      layers::StoreShardToGlobal(*p, p->shard(), v.data());
    }
  };
  auto replicated = [&](const std::vector<layers::ReplicatedParam*>& ps) {
    for (layers::ReplicatedParam* p : ps) {  // rows through the layout (column-parallel biases)
      const auto& lay = p->layout;
      auto& v = (*out)[p->name];
      v.assign(lay.global_rows * lay.global_cols, std::nanf(""));
      const int64_t rows = p->value.numel() / lay.global_cols;
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < lay.global_cols; ++c)
          v[lay.row_map(r) * lay.global_cols + c] = p->value.data<float>()[r * lay.global_cols + c];
    }
  };
  if (model.has_encoder()) {
    sharded(model.encoder()->sharded_params());
    replicated(model.encoder()->replicated_params());
  }
  for (layers::GptModel* part : model.language_parts()) {
    // A pipeline's head copy of a tied wte is the first stage's (skipped).
    std::vector<layers::ShardedParam*> own;
    for (layers::ShardedParam* p : part->sharded_params()) {
      if (!p->tied_copy()) own.push_back(p);
    }
    sharded(own);
    sharded(part->expert_params());
    replicated(part->replicated_params());
  }
}

}  // namespace

absl::Status TrainRank(comm::Communicator& w, const Layout& l, const RunSpec& spec, RankLog* log) {
  GTP_ASSIGN_OR_RETURN(const ShapesTask task, ShapesTask::Create(spec.data));
  const int M = spec.micro_batches;
  if (M < 1 || spec.global_batch % M != 0) {
    return absl::InvalidArgumentError("global batch vs micro-batches");
  }
  const int64_t G = spec.global_batch / M;  // samples per micro-batch
  HeapAllocator host;
  const kernels::Exec e = kernels::Exec::Cpu(host);
  GTP_ASSIGN_OR_RETURN(auto eg, parallel::HyperCommGrid::Create("vision", l.encoder.config,
                                                                l.encoder.offset, l.encoder.size, w));
  GTP_ASSIGN_OR_RETURN(auto lg, parallel::HyperCommGrid::Create("language", l.language.config,
                                                                l.language.offset, l.language.size, w));
  const int D = lg.num_data_lanes();
  if (G % D != 0) return absl::InvalidArgumentError("global batch vs language lanes");
  GTP_ASSIGN_OR_RETURN(auto model, MimoModel::Create(spec.model, eg, lg, w, G / D,
                                                     task.sequence_length(), e, host));
  GTP_ASSIGN_OR_RETURN(auto opt, MimoOptimizer::Create(*model, w, e, spec.optimizer, spec.optimizer));
  comm::Communicator* lang_grid = nullptr;
  if (model->has_language()) {
    GTP_ASSIGN_OR_RETURN(lang_grid, lg.Get("grid"));
  }
  int first = 0;
  if (!spec.load_root.empty()) {
    GTP_ASSIGN_OR_RETURN(checkpoint::LoadResult lr,
                         LoadMimoCheckpoint(spec.load_root, std::nullopt, *model, *opt, w));
    first = static_cast<int>(lr.iteration);
  }
  const int L = task.sequence_length();
  // A batch with the spec's dropped targets, and its count of valid ones.
  auto batch = [&](int64_t first_sample, int64_t n, int64_t* valid) {
    ShapesTask::Batch b = task.MakeBatch(data::shapes::kTrain, first_sample, n);
    *valid = 0;
    for (int64_t i = 0; i < n; ++i) {
      for (int j = 0; j < L; ++j) {
        int32_t& t = b.targets[i * L + j];
        if (spec.drop_every > 0 && (b.ids[i] * 31 + j) % spec.drop_every == 0) t = -1;
        *valid += t >= 0;
      }
    }
    return b;
  };
  for (int step = first; step < spec.steps; ++step) {
    std::vector<int64_t> enc_valid(M, 0), lang_valid(M, 0);
    auto micro = [&](int m) -> absl::StatusOr<MimoBatch> {
      const int64_t base = (static_cast<int64_t>(step) * M + m) * G;
      MimoBatch mb;
      if (model->has_encoder()) {
        const auto r = model->EncoderSamples();
        const auto b = batch(base + r.first, r.count, &enc_valid[m]);
        mb.patches = layers::TensorFromHost(e, b.patches.data(),
                                            {r.count * task.num_patches(), task.patch_dim()},
                                            DType::kF32);
        mb.encoder_ids = b.ids;
      }
      if (model->has_language()) {
        const auto r = model->LanguageSamples();
        const auto b = batch(base + r.first, r.count, &lang_valid[m]);
        mb.tokens = layers::HostToDevice(e, b.tokens, {r.count, L});
        mb.targets = layers::HostToDevice(e, b.targets, {r.count, L});
        mb.language_ids = b.ids;
      }
      return mb;
    };
    // Under language PP the micro-batches finish in the schedule's order.
    const bool pipelined = model->language_pp() > 1;
    auto before = [&](Module module, int m) {
      if (module == Module::kEncoder) {
        opt->StartEncoderMicrobatch(m == M - 1, enc_valid[m]);
      } else {
        opt->StartLanguageMicrobatch(!pipelined && m == M - 1, lang_valid[m]);
      }
    };
    GTP_RETURN_IF_ERROR(model->Step(M, micro, before));
    int64_t valid = 0;
    for (int64_t v : lang_valid) valid += v;
    RankLog::LaneLoss lane_loss;
    if (model->has_language()) {
      // The lane's loss from the rank holding the head (the mean over the
      // micro-batches of their means; with kSum, of their sums).
      if (layers::GptModel* head = model->language_head(); head != nullptr) {
        GTP_ASSIGN_OR_RETURN(float loss, head->TakeLossSum());
        GTP_ASSIGN_OR_RETURN(int lane, lg.DataLane(w.rank()));
        lane_loss = {lane, loss / M, valid};
      }
      if (spec.model.language.block.moe.enabled()) {
        GTP_RETURN_IF_ERROR(
            layers::GptModel::FinishMoeStep(model->language_parts(), *lang_grid, D, M).status());
      }
    }
    log->lane_losses.push_back(lane_loss);
    GTP_ASSIGN_OR_RETURN(optimizer::StepStats s, opt->Step());
    log->norms.push_back(s.grad_norm);
    if (s.skipped) ++log->skipped;
    if (!spec.save_root.empty() && step + 1 == spec.save_after) {
      GTP_RETURN_IF_ERROR(SaveMimoCheckpoint(spec.save_root, step + 1, *model, *opt, w));
    }
  }
  if (spec.collect_params) CollectParams(*model, &log->params);
  return absl::OkStatus();
}

Outcome Train(const Layout& l, const RunSpec& spec) {
  Outcome out;
  std::vector<RankLog> logs(l.world);
  out.status = comm::RunRanks(l.world, [&](comm::Communicator& w) -> absl::Status {
    return TrainRank(w, l, spec, &logs[w.rank()]);
  });
  if (!out.status.ok()) return out;
  const RankLog& r0 = logs[0];
  out.norms = r0.norms;
  out.skipped = r0.skipped;
  for (size_t s = 0; s < r0.norms.size(); ++s) {
    std::map<int, RankLog::LaneLoss> lanes;
    for (const RankLog& g : logs) {
      if (g.lane_losses[s].lane >= 0) lanes[g.lane_losses[s].lane] = g.lane_losses[s];
    }
    double sum = 0, tokens = 0;
    for (auto& [lane, ll] : lanes) {
      sum += ll.loss * ll.tokens;
      tokens += ll.tokens;
    }
    out.losses.push_back(tokens > 0 ? sum / tokens : 0.0);
  }
  for (const RankLog& g : logs) {
    for (const auto& [name, v] : g.params) {
      auto& o = out.params[name];
      if (o.empty()) o.assign(v.size(), std::nanf(""));
      for (size_t i = 0; i < v.size(); ++i) {
        if (!std::isnan(v[i])) o[i] = v[i];
      }
    }
  }
  return out;
}

}  // namespace gtp::mimo::testing
