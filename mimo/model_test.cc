// MimoModel + MimoOptimizer: a small vision-language model on the shapes
// task trains for a few steps with the same losses, grad norms and
// parameters afterwards as on one rank, under disjoint (fan-in, fan-out,
// encoder GTP) and colocated layouts, with AdamW and with Muon; checkpoints
// restore under another layout and continue exactly.
#include "mimo/model.h"

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "comm/local/local_communicator.h"
#include "gtest/gtest.h"
#include "layers/linear.h"
#include "mimo/checkpoint.h"
#include "mimo/optimizer.h"
#include "mimo/testing/harness.h"
#include "parallel/hyper_comm_grid.h"

namespace gtp::mimo {
namespace {

using data::shapes::ShapesTask;
using testing::Dense;
using testing::Layout;
using testing::Outcome;
using testing::RunSpec;

constexpr int kSteps = 3;

RunSpec Spec(const optimizer::OptimizerConfig& oc = testing::Adam()) {
  RunSpec s;
  s.data = {.image_size = 8, .patch = 4, .seed = 3};
  s.model = testing::SmallModel(*ShapesTask::Create(s.data));
  s.steps = kSteps;
  s.optimizer = oc;
  return s;
}

const Layout kOne = {"one rank", 1, Dense(0, 1), Dense(0, 1)};
// encoder TP1·DP4 (4 lanes) | language TP2·GTP2 (2 lanes): fan-in 2.
const Layout kFanIn = {"fan-in", 8, Dense(0, 4), Dense(4, 4, 2, 2)};
// encoder TP2 (1 lane) | language DP2: fan-out 2.
const Layout kFanOut = {"fan-out", 4, Dense(0, 2, 2), Dense(2, 2)};
// encoder GTP2 (2 lanes) | language TP2 (1 lane): fan-in with GTP on the encoder.
const Layout kEncoderGtp = {"encoder-gtp", 4, Dense(0, 2, 1, 2), Dense(2, 2, 2)};
// colocated: encoder DP4 | language TP2·DP2 on the same 4 ranks.
const Layout kColocated = {"colocated", 4, Dense(0, 4), Dense(0, 4, 2)};

void ExpectSameRun(const Outcome& r, const Outcome& one, const std::string& name, double ptol) {
  ASSERT_TRUE(r.status.ok()) << name << ": " << r.status;
  ASSERT_EQ(r.losses.size(), one.losses.size()) << name;
  for (size_t s = 0; s < one.losses.size(); ++s) {
    EXPECT_NEAR(r.losses[s], one.losses[s], 1e-5 * std::fabs(one.losses[s])) << name << " step " << s;
  }
  // The global grad norm sees every module's gradient at its scale (Adam
  // alone would hide a wrongly scaled encoder gradient).
  ASSERT_EQ(r.norms.size(), one.norms.size()) << name;
  for (size_t s = 0; s < one.norms.size(); ++s) {
    EXPECT_NEAR(r.norms[s], one.norms[s], 1e-5 * one.norms[s]) << name << " step " << s;
  }
  ASSERT_EQ(r.params.size(), one.params.size()) << name;
  for (const auto& [key, v1] : one.params) {
    const auto it = r.params.find(key);
    ASSERT_NE(it, r.params.end()) << name << " " << key;
    ASSERT_EQ(it->second.size(), v1.size()) << name << " " << key;
    for (size_t i = 0; i < v1.size(); ++i) {
      ASSERT_NEAR(it->second[i], v1[i], ptol) << name << " " << key << "[" << i << "]";
    }
  }
}

TEST(MimoModel, LayoutsTrainLikeOneRank) {
  const Outcome one = testing::Train(kOne, Spec());
  ASSERT_TRUE(one.status.ok()) << one.status;
  ASSERT_EQ(one.losses.size(), static_cast<size_t>(kSteps));
  for (double v : one.losses) ASSERT_TRUE(std::isfinite(v));
  EXPECT_LT(one.losses.back(), one.losses.front());
  for (const Layout& l : {kFanIn, kFanOut, kEncoderGtp, kColocated}) {
    ExpectSameRun(testing::Train(l, Spec()), one, l.name, 2e-5);
  }
}

TEST(MimoModel, MuonTrainsLikeOneRank) {
  // Muon on both modules (Megatron-LM does not support Muon with MIMO).
  optimizer::OptimizerConfig muon = testing::Adam();
  muon.matrices = optimizer::MatrixOptimizer::kMuon;
  muon.lr.max_lr = muon.lr.min_lr = 1e-2f;
  const Outcome one = testing::Train(kOne, Spec(muon));
  ASSERT_TRUE(one.status.ok()) << one.status;
  EXPECT_LT(one.losses.back(), one.losses.front());
  for (const Layout& l : {kFanIn, kColocated, kEncoderGtp}) {
    ExpectSameRun(testing::Train(l, Spec(muon)), one, l.name, 5e-5);
  }
}

TEST(MimoModel, PerTokenLossTrainsLikeOneRank) {
  // Lanes with different numbers of valid targets: the mean over every
  // target (per-token) differs from the mean of lane means, and both
  // modules' gradients are divided by the one global count.
  RunSpec spec = Spec();
  spec.drop_every = 4;  // fan-in lanes: 7 and 8 valid targets at every step
  spec.model.language.loss_reduction = layers::LossReduction::kSum;
  const Outcome one = testing::Train(kOne, spec);
  ASSERT_TRUE(one.status.ok()) << one.status;
  RunSpec mean = spec;
  mean.model.language.loss_reduction = layers::LossReduction::kMean;
  const Outcome fan_in_mean = testing::Train(kFanIn, mean);
  ASSERT_TRUE(fan_in_mean.status.ok()) << fan_in_mean.status;
  // (The normalisation matters here: the lane-mean run's norms differ.)
  EXPECT_GT(std::fabs(fan_in_mean.norms[0] - one.norms[0]), 1e-4 * one.norms[0]);
  for (const Layout& l : {kFanIn, kFanOut, kColocated, kEncoderGtp}) {
    ExpectSameRun(testing::Train(l, spec), one, l.name, 2e-5);
  }
}

// Pipeline parallelism in the language module: 4 layers, 4 micro-batches
// per step (B = 1 per lane), tied embeddings (the head's wte copy sums with
// the first stage's). The one-rank reference runs the same micro-batches.
RunSpec PipelineSpec(int vpp = 1) {
  RunSpec s = Spec();
  s.model.language.n_layer = 4;
  s.model.language_vpp = vpp;
  s.global_batch = 8;
  s.micro_batches = 4;
  return s;
}

TEST(MimoModel, LanguagePipelineTrainsLikeOneRank) {
  const Outcome one = testing::Train(kOne, PipelineSpec());
  ASSERT_TRUE(one.status.ok()) << one.status;
  for (double v : one.losses) ASSERT_TRUE(std::isfinite(v));
  EXPECT_LT(one.losses.back(), one.losses.front());
  // encoder DP2 | language PP2 (1 lane): fan-in 2, 1F1B.
  const Layout pp2 = {"language PP2", 4, Dense(0, 2), Dense(2, 2, 1, 1, 2)};
  // encoder TP2 (1 lane) | language TP2·PP2·DP2 (2 lanes): fan-out 2.
  const Layout tp_pp_dp = {"language TP2·PP2·DP2", 10, Dense(0, 2, 2), Dense(2, 8, 2, 1, 2)};
  // encoder DP2 | language GTP2·PP2 (2 lanes): 1:1, sharded weights on stages.
  const Layout gtp_pp = {"language GTP2·PP2", 6, Dense(0, 2), Dense(2, 4, 1, 2, 2)};
  for (const Layout& l : {pp2, tp_pp_dp, gtp_pp}) {
    ExpectSameRun(testing::Train(l, PipelineSpec()), one, l.name, 2e-5);
  }
  // Interleaved: PP2 · VPP2 (4 virtual stages of one layer each).
  ExpectSameRun(testing::Train(pp2, PipelineSpec(/*vpp=*/2)), one, "language PP2·VPP2", 2e-5);
  // One micro-batch per step: the encoder keeps its activations (no recompute).
  RunSpec single = PipelineSpec();
  single.micro_batches = 1;
  single.global_batch = 2;
  const Outcome one_single = testing::Train(kOne, single);
  ASSERT_TRUE(one_single.status.ok()) << one_single.status;
  ExpectSameRun(testing::Train(pp2, single), one_single, "language PP2, M = 1", 2e-5);
}

TEST(MimoModel, PipelineSettingsOutsideTheLanguageModuleAreNamed) {
  // The encoder has no pipeline split; virtual stages need PP.
  RunSpec s = PipelineSpec();
  const Outcome enc = testing::Train({"encoder PP2", 4, Dense(0, 2, 1, 1, 2), Dense(2, 2)}, s);
  ASSERT_FALSE(enc.status.ok());
  EXPECT_NE(enc.status.message().find("encoder grid has pp = 2"), std::string::npos) << enc.status;
  const Outcome vpp = testing::Train({"vpp without pp", 4, Dense(0, 2), Dense(2, 2)}, PipelineSpec(2));
  ASSERT_FALSE(vpp.status.ok());
  EXPECT_NE(vpp.status.message().find("language_vpp = 2 needs a language grid with pp > 1"),
            std::string::npos)
      << vpp.status;
}

TEST(MimoModel, BadLayoutsAreNamed) {
  // Overlapping grids, a gap, lanes that do not divide, a batch that does not split.
  struct Bad {
    Layout layout;
    int64_t global_batch;
    const char* message;
  };
  const Bad bad[] = {
      {{"overlap", 4, Dense(0, 3), Dense(2, 2)}, 4, "overlap on rank"},
      {{"gap", 4, Dense(0, 1), Dense(2, 2)}, 4, "belongs to no module grid"},
      {{"3 vs 2 lanes", 5, Dense(0, 3), Dense(3, 2)}, 6, "divide"},
      {{"batch", 3, Dense(0, 2), Dense(2, 1)}, 3, "does not split over 2 encoder lanes"},
  };
  for (const Bad& b : bad) {
    RunSpec s = Spec();
    s.global_batch = b.global_batch;
    const Outcome r = testing::Train(b.layout, s);
    ASSERT_FALSE(r.status.ok()) << b.layout.name;
    EXPECT_NE(r.status.message().find(b.message), std::string::npos)
        << b.layout.name << ": " << r.status;
  }
}

TEST(MimoModel, LoadersThatDisagreeAreAnError) {
  // The encoder lane encodes samples {0, 1}; the language lane reads {2, 3}.
  const auto task = *ShapesTask::Create({.image_size = 8, .patch = 4, .seed = 3});
  std::vector<absl::Status> seen(2);
  absl::Status st = comm::RunRanks(2, [&](comm::Communicator& w) -> absl::Status {
    HeapAllocator host;
    const kernels::Exec e = kernels::Exec::Cpu(host);
    GTP_ASSIGN_OR_RETURN(auto eg, parallel::HyperCommGrid::Create("vision", {}, 0, 1, w));
    GTP_ASSIGN_OR_RETURN(auto lg, parallel::HyperCommGrid::Create("language", {}, 1, 1, w));
    GTP_ASSIGN_OR_RETURN(auto model, MimoModel::Create(testing::SmallModel(task), eg, lg, w, 2,
                                                       task.sequence_length(), e, host));
    const auto enc = task.MakeBatch(data::shapes::kTrain, 0, 2);
    const auto lang = task.MakeBatch(data::shapes::kTrain, 2, 2);
    Tensor patches, tokens, targets;
    if (model->has_encoder()) {
      patches = layers::TensorFromHost(e, enc.patches.data(), {2 * task.num_patches(), task.patch_dim()},
                                       DType::kF32);
    } else {
      tokens = layers::HostToDevice(e, lang.tokens, {2, task.sequence_length()});
      targets = layers::HostToDevice(e, lang.targets, {2, task.sequence_length()});
    }
    seen[w.rank()] = model->Forward(patches, tokens, targets, enc.ids, lang.ids);
    return absl::OkStatus();
  });
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_TRUE(seen[0].ok()) << seen[0];
  EXPECT_EQ(seen[1].code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(seen[1].message().find("reads samples [2,3] but the encoder lanes feeding it encoded [0,1]"),
            std::string::npos)
      << seen[1];
}

std::string FreshDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = std::string(tmp ? tmp : "/tmp") + "/" + name;
  std::filesystem::remove_all(dir);
  return dir;
}

TEST(MimoCheckpoint, RestoresUnderAnotherLayoutAndContinuesExactly) {
  const std::string root = FreshDir("mimo_ckpt");
  RunSpec save = Spec();
  save.save_root = root;
  save.save_after = 2;
  const Outcome whole = testing::Train(kFanIn, save);
  ASSERT_TRUE(whole.status.ok()) << whole.status;
  ASSERT_EQ(whole.losses.size(), static_cast<size_t>(kSteps));
  RunSpec load = Spec();
  load.load_root = root;
  // The same layout, fresh: step 3 is bit-identical.
  const Outcome again = testing::Train(kFanIn, load);
  ASSERT_TRUE(again.status.ok()) << again.status;
  ASSERT_EQ(again.losses.size(), 1u);
  EXPECT_EQ(again.losses[0], whole.losses[2]);
  EXPECT_EQ(again.params, whole.params);
  // Another layout: the same within f32 tolerance (other reduction orders).
  const Outcome other = testing::Train(kFanOut, load);
  ASSERT_TRUE(other.status.ok()) << other.status;
  ASSERT_EQ(other.losses.size(), 1u);
  EXPECT_NEAR(other.losses[0], whole.losses[2], 1e-5 * whole.losses[2]);
  for (const auto& [name, v] : whole.params) {
    const auto& o = other.params.at(name);
    for (size_t i = 0; i < v.size(); ++i) ASSERT_NEAR(o[i], v[i], 2e-5) << name << "[" << i << "]";
  }
  // The metadata names each module's grid and groups.
  auto md = checkpoint::ReadCheckpointMetadata(checkpoint::IterationDir(root, 2));
  ASSERT_TRUE(md.ok()) << md.status();
  EXPECT_NE(md->extra().at("mimo.language.grid").find("tp=2"), std::string::npos);
  EXPECT_NE(md->extra().at("mimo.vision.groups").find("replicate"), std::string::npos);
}

TEST(MimoCheckpoint, LanguagePipelineRestoresOnOneRank) {
  // Saved under language PP2 (the head's tied wte copy is not saved; the
  // load fills it from the first stage's), continued on one rank and under
  // PP2 again: step 3 as the uninterrupted PP2 run's.
  const std::string root = FreshDir("mimo_ckpt_pp");
  const Layout pp2 = {"language PP2", 4, Dense(0, 2), Dense(2, 2, 1, 1, 2)};
  RunSpec save = PipelineSpec();
  save.save_root = root;
  save.save_after = 2;
  const Outcome whole = testing::Train(pp2, save);
  ASSERT_TRUE(whole.status.ok()) << whole.status;
  RunSpec load = PipelineSpec();
  load.load_root = root;
  const Outcome again = testing::Train(pp2, load);
  ASSERT_TRUE(again.status.ok()) << again.status;
  ASSERT_EQ(again.losses.size(), 1u);
  EXPECT_EQ(again.losses[0], whole.losses[2]);
  EXPECT_EQ(again.params, whole.params);
  const Outcome one = testing::Train(kOne, load);
  ASSERT_TRUE(one.status.ok()) << one.status;
  ASSERT_EQ(one.losses.size(), 1u);
  EXPECT_NEAR(one.losses[0], whole.losses[2], 1e-5 * whole.losses[2]);
}

TEST(MimoCheckpoint, PlainCheckpointIsRefused) {
  // A checkpoint without the "mimo" entry (another job's) is named.
  const std::string root = FreshDir("not_mimo");
  absl::Status st = comm::RunRanks(1, [&](comm::Communicator& w) -> absl::Status {
    HeapAllocator host;
    checkpoint::TensorPiece p;
    p.key = "x";
    p.data = Tensor::Empty({1}, DType::kF32, host);
    p.data.data<float>()[0] = 1;
    p.global_shape = {1};
    return checkpoint::Save(root, {p}, w, {});
  });
  ASSERT_TRUE(st.ok()) << st;
  RunSpec load = Spec();
  load.load_root = root;
  const Outcome r = testing::Train(kOne, load);
  ASSERT_FALSE(r.status.ok());
  EXPECT_NE(r.status.message().find("not a MIMO checkpoint"), std::string::npos) << r.status;
}

}  // namespace
}  // namespace gtp::mimo
