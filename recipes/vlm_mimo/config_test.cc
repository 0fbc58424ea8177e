#include "recipes/vlm_mimo/config.h"

#include <string>

#include "gtest/gtest.h"

namespace gtp::recipes::vlm {
namespace {

std::string Error(const std::vector<std::string>& sets) {
  absl::StatusOr<VlmRecipe> r = LoadVlmRecipe("", sets);
  if (!r.ok()) return std::string(r.status().message());
  const absl::Status st = CheckVlmLayout(*r);
  return st.ok() ? "" : std::string(st.message());
}

// The recipe's own config: the layout and optimizer the recipe always
// trained with before it read a config (the same losses for the same
// steps, batch and lr; 1000 steps of 32 images at lr 3e-3 since).
TEST(LoadVlmRecipe, TheDefaultIsTheRecipesLayoutAndOptimizer) {
  absl::StatusOr<VlmRecipe> r = LoadVlmRecipe("", {});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(CheckVlmLayout(*r).ok());
  EXPECT_EQ(WorldSize(*r), 8);
  EXPECT_EQ(r->parallel().encoder().ranks(), 4);
  EXPECT_EQ(r->parallel().language().tp(), 2);
  EXPECT_EQ(r->parallel().language().gtp(), 2);
  EXPECT_EQ(DataLanes(r->parallel().encoder()), 4);
  EXPECT_EQ(DataLanes(r->parallel().language()), 2);
  const optimizer::OptimizerConfig o = OptimConfigOf(*r);
  EXPECT_EQ(o.matrices, optimizer::MatrixOptimizer::kMuon);
  EXPECT_EQ(o.lr.decay, optimizer::LrDecay::kCosine);
  EXPECT_EQ(o.lr.max_lr, 3e-3f);
  EXPECT_EQ(o.lr.min_lr, 3e-3f / 10);  // in f32, as the recipe always did
  EXPECT_EQ(o.lr.warmup_steps, 20);
  EXPECT_EQ(o.lr.decay_steps, r->train().steps());
  EXPECT_EQ(o.clip_grad, 1.0);
  EXPECT_EQ(o.adamw.beta1, 0.9f);
  EXPECT_EQ(o.adamw.beta2, 0.95f);
  EXPECT_EQ(o.adamw.weight_decay, 0.01f);
  EXPECT_EQ(o.muon.weight_decay, 0.0f);
  const parallel::ParallelConfig g = GridConfig(r->parallel().language());
  EXPECT_EQ(g.tp, 2);
  EXPECT_EQ(g.tp_num_weight_shards, 4);
  const proto::Recipe t = TrainerRecipe(*r);
  EXPECT_EQ(t.parallel().world_size(), 8);
  EXPECT_EQ(t.train().precision(), "f32");
  EXPECT_EQ(t.train().device(), "cpu");
}

TEST(LoadVlmRecipe, SetOverridesAndUnknownKeys) {
  absl::StatusOr<VlmRecipe> r =
      LoadVlmRecipe("", {"train.steps=7", "parallel.language.tp=1", "optim.matrices=adamw"});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->train().steps(), 7);
  EXPECT_EQ(r->parallel().language().tp(), 1);
  EXPECT_EQ(OptimConfigOf(*r).matrices, optimizer::MatrixOptimizer::kAdamW);
  EXPECT_EQ(OptimConfigOf(*r).lr.warmup_steps, 7);  // warmup at most train.steps
  EXPECT_EQ(Error({"train.stepz=3"}),
            "override 'train.stepz=3': no such setting (did you mean train.steps?); "
            "--list_settings prints "
            "them all");
  EXPECT_EQ(Error({"optim.matrices=moun"}),
            "optim.matrices must be adamw or muon, got moun (did you mean muon?)");
  EXPECT_EQ(Error({"train.steps=-3"}).rfind("train.steps must be a finite number >= 0, got -3", 0),
            0u)
      << Error({"train.steps=-3"});
}

TEST(CheckVlmLayout, RefusalsNameTheSetting) {
  EXPECT_EQ(
      Error({"parallel.language.tp=3"}),
      "parallel.language.tp (3) must divide model.heads (4): tensor parallelism splits the heads");
  EXPECT_EQ(
      Error({"parallel.language.ranks=6"}),
      "parallel.language.tp × parallel.language.gtp = 4 must divide parallel.language.ranks (6)");
  EXPECT_EQ(Error({"parallel.colocated=true"}), "");  // 4 and 4
  EXPECT_EQ(Error({"parallel.colocated=true", "parallel.encoder.ranks=2"}),
            "parallel.colocated needs parallel.encoder.ranks (2) = parallel.language.ranks (4)");
  EXPECT_EQ(Error({"train.global_batch=6"}),
            "train.global_batch (6) must be divisible by the encoder grid's 4 data lanes "
            "(parallel.encoder.ranks / parallel.encoder.tp)");
  EXPECT_EQ(Error({"train.global_batch=3"}),
            "train.global_batch (3) must be divisible by the language grid's 2 data lanes "
            "(parallel.language.ranks / parallel.language.tp)");
  EXPECT_EQ(
      Error({"parallel.encoder.ranks=3", "train.global_batch=48"}),
      "the encoder grid's 3 data lanes and the language grid's 2 must divide one another (the "
      "bridge fans lanes in or out)");
  EXPECT_EQ(Error({"model.patch=5"}),
            "model.image_size (16) must be ≥ 8 and a multiple of model.patch (5)");
  EXPECT_EQ(Error({"model.heads=3"}), "model.width (64) must be divisible by model.heads (3)");
  EXPECT_EQ(Error({"checkpoint.dir=/tmp/x"})
                .rfind("checkpoint.dir is a path inside the run directory", 0),
            0u);
}

TEST(CanResume, SameModelSeedOptimizerAndSchedule) {
  const VlmRecipe a = *LoadVlmRecipe("", {});
  auto with = [](const std::vector<std::string>& sets) { return *LoadVlmRecipe("", sets); };
  EXPECT_TRUE(CanResume(a, a, "d").ok());
  // Another layout, batch or cadence: fine (checkpoints reshard).
  EXPECT_TRUE(
      CanResume(a, with({"parallel.colocated=true", "train.log_every=1", "checkpoint.every=5"}),
                "d")
          .ok());
  EXPECT_EQ(CanResume(a, with({"model.width=32"}), "d").message(),
            "cannot resume d: model.width is 64 there but 32 in this run (a checkpoint's weights "
            "fit only "
            "the model they were trained as); keep model.width=64, or start afresh with "
            "checkpoint.no_resume=true or another --run_dir");
  EXPECT_NE(CanResume(a, with({"train.seed=1"}), "d").message().find("train.seed is 1234"),
            std::string::npos);
  EXPECT_NE(
      CanResume(a, with({"optim.matrices=adamw"}), "d").message().find("optim.matrices is muon"),
      std::string::npos);
  EXPECT_NE(CanResume(a, with({"optim.lr=0.02"}), "d").message().find("optim.lr is 0.003"),
            std::string::npos);
  EXPECT_NE(
      CanResume(a, with({"train.steps=1500"}), "d").message().find("set optim.decay_steps=1000"),
      std::string::npos);
  EXPECT_TRUE(CanResume(a, with({"train.steps=1500", "optim.decay_steps=1000"}), "d").ok());
}

TEST(Schema, ListsEveryKeyWithItsComment) {
  const std::vector<SettingInfo> all = AllSettings(Schema());
  bool found = false;
  for (const SettingInfo& s : all) {
    if (s.key == "parallel.language.gtp") {
      found = true;
      EXPECT_EQ(s.type, "int32");
      EXPECT_EQ(s.comment, "weight shards per TP slice, all-gathered before each GEMM; 0: 1");
    }
  }
  EXPECT_TRUE(found);
  const std::string t = SettingsTable(*LoadVlmRecipe("", {}), Schema());
  EXPECT_NE(t.find("\noptim.matrices=\"muon\"  (string: adamw | muon)"), std::string::npos) << t;
  EXPECT_NE(t.find("\ntrain.steps="), std::string::npos) << t;
}

}  // namespace
}  // namespace gtp::recipes::vlm
