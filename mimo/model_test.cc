// MimoModel + MimoOptimizer: a small vision-language model on the shapes
// task trains for a few AdamW steps with the same losses and the same
// parameters afterwards as on one rank, under disjoint (fan-in, fan-out,
// 1:1 with an encoder GTP) and colocated layouts; loaders that disagree
// with the bridge are an error.
#include "mimo/model.h"

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>
#include <vector>

#include "comm/local/local_communicator.h"
#include "data/shapes/shapes.h"
#include "gtest/gtest.h"
#include "layers/linear.h"
#include "mimo/checkpoint.h"
#include "mimo/optimizer.h"
#include "parallel/hyper_comm_grid.h"
#include "parallel/parallel_config.h"

namespace gtp::mimo {
namespace {

using data::shapes::ShapesTask;

struct Module {
  int offset = 0, size = 1, tp = 1, gtp = 1;
};
struct Layout {
  const char* name;
  int world;
  Module encoder, language;
};

constexpr int64_t kG = 4;  // samples per step (global batch)
constexpr int kSteps = 3;

MimoConfig Config(const ShapesTask& task) {
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

struct Outcome {
  std::vector<double> losses;                        // per step, mean over language lanes
  std::vector<double> norms;                         // per step, the global grad norm
  std::map<std::string, std::vector<float>> params;  // global tensors after the steps
};

parallel::ParallelConfig Pc(const Module& m) {
  parallel::ParallelConfig pc;
  pc.tp = m.tp;
  pc.tp_num_weight_shards = m.tp * m.gtp;
  return pc;
}

// Checkpointing: save after step `save_after` (1-based) into `save_root`;
// or start from the checkpoint in `load_root` and run the remaining steps.
struct Ckpt {
  std::string save_root;
  int save_after = 0;
  std::string load_root;
};

Outcome Train(const Layout& l, const Ckpt& ck = {}, const optimizer::OptimizerConfig& oc = Adam()) {
  Outcome out;
  std::mutex mu;
  std::map<int, std::map<int, double>> lane_loss;  // step → lane → loss
  const ShapesTask task = *ShapesTask::Create({.image_size = 8, .patch = 4, .seed = 3});
  absl::Status st = comm::RunRanks(l.world, [&](comm::Communicator& w) -> absl::Status {
    HeapAllocator host;
    const kernels::Exec e = kernels::Exec::Cpu(host);
    GTP_ASSIGN_OR_RETURN(auto eg, parallel::HyperCommGrid::Create("vision", Pc(l.encoder),
                                                                  l.encoder.offset, l.encoder.size, w));
    GTP_ASSIGN_OR_RETURN(auto lg, parallel::HyperCommGrid::Create(
                                      "language", Pc(l.language), l.language.offset, l.language.size, w));
    const int D = lg.num_data_lanes();
    GTP_ASSIGN_OR_RETURN(auto model, MimoModel::Create(Config(task), eg, lg, w, kG / D,
                                                       task.sequence_length(), e, host));
    GTP_ASSIGN_OR_RETURN(auto opt, MimoOptimizer::Create(*model, w, e, oc, oc));
    int first = 0;
    if (!ck.load_root.empty()) {
      GTP_ASSIGN_OR_RETURN(checkpoint::LoadResult lr,
                           LoadMimoCheckpoint(ck.load_root, std::nullopt, *model, *opt, w));
      first = static_cast<int>(lr.iteration);
    }
    for (int step = first; step < kSteps; ++step) {
      const int64_t base = step * kG;
      Tensor patches, tokens, targets;
      std::vector<int64_t> enc_ids, lang_ids;
      if (model->has_encoder()) {
        const auto r = model->EncoderSamples();
        const auto b = task.MakeBatch(data::shapes::kTrain, base + r.first, r.count);
        patches = layers::TensorFromHost(e, b.patches.data(), {r.count * task.num_patches(), task.patch_dim()},
                                         DType::kF32);
        enc_ids = b.ids;
      }
      if (model->has_language()) {
        const auto r = model->LanguageSamples();
        const auto b = task.MakeBatch(data::shapes::kTrain, base + r.first, r.count);
        tokens = layers::HostToDevice(e, b.tokens, {r.count, task.sequence_length()});
        targets = layers::HostToDevice(e, b.targets, {r.count, task.sequence_length()});
        lang_ids = b.ids;
      }
      GTP_RETURN_IF_ERROR(model->Forward(patches, tokens, targets, enc_ids, lang_ids));
      opt->StartMicrobatch(true);
      GTP_RETURN_IF_ERROR(model->Backward());
      if (model->has_language()) {
        GTP_ASSIGN_OR_RETURN(float loss, model->language()->TakeLossSum());
        GTP_ASSIGN_OR_RETURN(int lane, lg.DataLane(w.rank()));
        std::lock_guard<std::mutex> g(mu);
        lane_loss[step][lane] = loss;
      }
      GTP_ASSIGN_OR_RETURN(optimizer::StepStats s, opt->Step());
      if (s.skipped || !std::isfinite(s.grad_norm)) return absl::InternalError("bad step");
      if (w.rank() == 0) out.norms.push_back(s.grad_norm);
      if (!ck.save_root.empty() && step + 1 == ck.save_after) {
        GTP_RETURN_IF_ERROR(SaveMimoCheckpoint(ck.save_root, step + 1, *model, *opt, w));
      }
    }
    // Every rank writes its pieces of every global tensor.
    std::lock_guard<std::mutex> g(mu);
    auto sharded = [&](const std::vector<layers::ShardedParam*>& ps) {
      for (layers::ShardedParam* p : ps) {
        auto& v = out.params[p->name()];
        v.resize(p->global_layout().global_rows * p->global_layout().global_cols);
        layers::StoreShardToGlobal(*p, p->shard(), v.data());
      }
    };
    auto replicated = [&](const std::vector<layers::ReplicatedParam*>& ps) {
      for (layers::ReplicatedParam* p : ps) {  // rows through the layout (column-parallel biases)
        const auto& lay = p->layout;
        auto& v = out.params[p->name];
        v.resize(lay.global_rows * lay.global_cols);
        const int64_t rows = p->value.numel() / lay.global_cols;
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t c = 0; c < lay.global_cols; ++c)
            v[lay.row_map(r) * lay.global_cols + c] = p->value.data<float>()[r * lay.global_cols + c];
      }
    };
    if (model->has_encoder()) {
      sharded(model->encoder()->sharded_params());
      replicated(model->encoder()->replicated_params());
    }
    if (model->has_language()) {
      sharded(model->language()->sharded_params());
      replicated(model->language()->replicated_params());
    }
    return absl::OkStatus();
  });
  EXPECT_TRUE(st.ok()) << l.name << ": " << st;
  for (auto& [step, lanes] : lane_loss) {
    double sum = 0;
    for (auto& [lane, loss] : lanes) sum += loss;
    out.losses.push_back(sum / lanes.size());
  }
  return out;
}

TEST(MimoModel, LayoutsTrainLikeOneRank) {
  const Outcome one = Train({"one rank", 1, {0, 1}, {0, 1}});
  ASSERT_EQ(one.losses.size(), static_cast<size_t>(kSteps));
  for (double v : one.losses) ASSERT_TRUE(std::isfinite(v));
  EXPECT_LT(one.losses.back(), one.losses.front());
  const std::vector<Layout> layouts = {
      // encoder TP1·DP4 (4 lanes) | language TP2·GTP2 (2 lanes): fan-in 2.
      {"fan-in", 8, {0, 4, 1, 1}, {4, 4, 2, 2}},
      // encoder TP2 (1 lane) | language DP2: fan-out 2.
      {"fan-out", 4, {0, 2, 2, 1}, {2, 2, 1, 1}},
      // encoder GTP2 (2 lanes) | language TP2 (1 lane)... fan-in with GTP on the encoder.
      {"encoder-gtp", 4, {0, 2, 1, 2}, {2, 2, 2, 1}},
      // colocated: encoder DP4 | language TP2·DP2 on the same 4 ranks.
      {"colocated", 4, {0, 4, 1, 1}, {0, 4, 2, 1}},
  };
  for (const Layout& l : layouts) {
    const Outcome r = Train(l);
    ASSERT_EQ(r.losses.size(), one.losses.size()) << l.name;
    for (size_t s = 0; s < one.losses.size(); ++s) {
      EXPECT_NEAR(r.losses[s], one.losses[s], 1e-5 * std::fabs(one.losses[s])) << l.name << " step " << s;
    }
    // The global grad norm sees every module's gradient at its scale (Adam
    // alone would hide a wrongly scaled encoder gradient).
    ASSERT_EQ(r.norms.size(), one.norms.size()) << l.name;
    for (size_t s = 0; s < one.norms.size(); ++s) {
      EXPECT_NEAR(r.norms[s], one.norms[s], 1e-5 * one.norms[s]) << l.name << " step " << s;
    }
    ASSERT_EQ(r.params.size(), one.params.size()) << l.name;
    for (const auto& [name, v1] : one.params) {
      const auto it = r.params.find(name);
      ASSERT_NE(it, r.params.end()) << l.name << " " << name;
      ASSERT_EQ(it->second.size(), v1.size()) << l.name << " " << name;
      for (size_t i = 0; i < v1.size(); ++i) {
        ASSERT_NEAR(it->second[i], v1[i], 2e-5) << l.name << " " << name << "[" << i << "]";
      }
    }
  }
}

TEST(MimoModel, MuonTrainsLikeOneRank) {
  // Muon on both modules (Megatron-LM does not support Muon with MIMO).
  optimizer::OptimizerConfig muon = Adam();
  muon.matrices = optimizer::MatrixOptimizer::kMuon;
  muon.lr.max_lr = muon.lr.min_lr = 1e-2f;
  const Outcome one = Train({"one rank", 1, {0, 1}, {0, 1}}, {}, muon);
  ASSERT_EQ(one.losses.size(), static_cast<size_t>(kSteps));
  EXPECT_LT(one.losses.back(), one.losses.front());
  for (const Layout& l : {Layout{"fan-in", 8, {0, 4, 1, 1}, {4, 4, 2, 2}},
                          Layout{"colocated", 4, {0, 4, 1, 1}, {0, 4, 2, 1}},
                          Layout{"encoder-gtp", 4, {0, 2, 1, 2}, {2, 2, 2, 1}}}) {
    const Outcome r = Train(l, {}, muon);
    ASSERT_EQ(r.losses.size(), one.losses.size()) << l.name;
    for (size_t s = 0; s < one.losses.size(); ++s) {
      EXPECT_NEAR(r.losses[s], one.losses[s], 1e-5 * one.losses[s]) << l.name << " step " << s;
    }
    for (const auto& [name, v] : one.params) {
      const auto& o = r.params.at(name);
      for (size_t i = 0; i < v.size(); ++i) ASSERT_NEAR(o[i], v[i], 5e-5) << l.name << " " << name << "[" << i << "]";
    }
  }
}

std::string FreshDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = std::string(tmp ? tmp : "/tmp") + "/" + name;
  std::filesystem::remove_all(dir);
  return dir;
}

TEST(MimoCheckpoint, RestoresUnderAnotherLayoutAndContinuesExactly) {
  const Layout a = {"fan-in", 8, {0, 4, 1, 1}, {4, 4, 2, 2}};
  const Layout b = {"fan-out", 4, {0, 2, 2, 1}, {2, 2, 1, 1}};
  const std::string root = FreshDir("mimo_ckpt");
  const Outcome whole = Train(a, {root, 2, ""});
  ASSERT_EQ(whole.losses.size(), static_cast<size_t>(kSteps));
  // The same layout, fresh: step 3 is bit-identical.
  const Outcome again = Train(a, {"", 0, root});
  ASSERT_EQ(again.losses.size(), 1u);
  EXPECT_EQ(again.losses[0], whole.losses[2]);
  EXPECT_EQ(again.params, whole.params);
  // Another layout: the same within f32 tolerance (different reduction orders).
  const Outcome other = Train(b, {"", 0, root});
  ASSERT_EQ(other.losses.size(), 1u);
  EXPECT_NEAR(other.losses[0], whole.losses[2], 1e-5 * whole.losses[2]);
  for (const auto& [name, v] : whole.params) {
    const auto& o = other.params.at(name);
    for (size_t i = 0; i < v.size(); ++i) ASSERT_NEAR(o[i], v[i], 2e-5) << name << "[" << i << "]";
  }
  // The metadata names each module's grid.
  auto md = checkpoint::ReadCheckpointMetadata(checkpoint::IterationDir(root, 2));
  ASSERT_TRUE(md.ok()) << md.status();
  EXPECT_NE(md->extra().at("mimo.language.grid").find("tp=2"), std::string::npos);
  EXPECT_NE(md->extra().at("mimo.vision.groups").find("replicate"), std::string::npos);
}

TEST(MimoCheckpoint, PlainCheckpointIsRefused) {
  // A checkpoint without the "mimo" entry (any other job's) is named.
  const std::string root = FreshDir("not_mimo");
  absl::Status st = comm::RunRanks(1, [&](comm::Communicator& w) -> absl::Status {
    HeapAllocator host;
    checkpoint::TensorPiece p;
    p.key = "x";
    p.data = Tensor::Empty({1}, DType::kF32, host);
    p.data.data<float>()[0] = 1;
    p.global_shape = {1};
    GTP_RETURN_IF_ERROR(checkpoint::Save(root, {p}, w, {}));
    const ShapesTask task = *ShapesTask::Create({.image_size = 8, .patch = 4, .seed = 3});
    const kernels::Exec e = kernels::Exec::Cpu(host);
    GTP_ASSIGN_OR_RETURN(auto g, parallel::HyperCommGrid::Create("vision", {}, 0, 1, w));
    GTP_ASSIGN_OR_RETURN(auto l, parallel::HyperCommGrid::Create("language", {}, 0, 1, w));
    GTP_ASSIGN_OR_RETURN(auto model, MimoModel::Create(Config(task), g, l, w, 2,
                                                       task.sequence_length(), e, host));
    GTP_ASSIGN_OR_RETURN(auto opt, MimoOptimizer::Create(*model, w, e, Adam(), Adam()));
    auto lr = LoadMimoCheckpoint(root, std::nullopt, *model, *opt, w);
    EXPECT_FALSE(lr.ok());
    return absl::OkStatus();
  });
  EXPECT_TRUE(st.ok()) << st;
}

}  // namespace
}  // namespace gtp::mimo
