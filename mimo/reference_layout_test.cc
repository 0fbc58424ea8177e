// The reference system's MIMO validations on CPU with the in-process
// backend: 24 ranks, the encoder on 8 (TP2·DP4) and the language model on 16
// (TP2·GTP4·DP2, experts EP4·EGTP2·EDP2), 128 experts in every MLP layer of a
// 20-layer tiny language stack (dense or a hybrid Mamba + MoE one with a
// shared expert): 100 iterations with finite loss and grad
// norm and no skipped step, a checkpoint at 100, a fresh 24-rank load, and
// iteration 101 equal to the uninterrupted run's.
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "gtest/gtest.h"
#include "mimo/testing/harness.h"

namespace gtp::mimo {
namespace {

using data::shapes::ShapesTask;

// The language model: 20 layers with 128 experts in every MLP; or (hybrid)
// the reference system's other validation, a 20-layer hybrid stack of
// Mamba-2 ('M'), attention ('*') and MoE ('E', 128 experts beside a shared
// expert) layers, "MEM*E" four times: 8 Mamba, 8 MoE, 4 attention (Mamba
// d_inner 32 in 4 heads of 8, 2 groups: TP2 splits both).
void RunReferenceLayout(bool hybrid) {
  testing::Layout layout{"reference", 24, testing::Dense(0, 8, 2), testing::Dense(8, 16, 2, 4)};
  layout.language.config.ep = 4;
  layout.language.config.etp = 1;
  layout.language.config.expert_tp_num_weight_shards = 2;  // EGTP2 (EDP2 derived)
  testing::RunSpec spec;
  spec.data = {.image_size = 8, .patch = 4, .seed = 11};
  const ShapesTask task = *ShapesTask::Create(spec.data);
  spec.model = testing::SmallModel(task);
  spec.model.language.n_layer = 20;
  spec.model.language.block.n_layer = 20;
  auto& moe = spec.model.language.block.moe;
  moe.router.num_experts = 128;
  moe.router.top_k = 2;
  moe.router.aux_loss_coeff = 0.01f;
  moe.ffn_hidden = 8;
  if (hybrid) {
    spec.model.language.layer_pattern = "MEM*EMEM*EMEM*EMEM*E";
    moe.shared_ffn_hidden = 8;
    auto& mamba = spec.model.language.block.mamba;
    mamba.head_dim = 8;
    mamba.n_groups = 2;
    mamba.d_state = 8;
    mamba.chunk = 8;
  }
  spec.global_batch = 16;  // two samples per language lane (8 lanes), four per encoder lane (4)
  spec.steps = 101;
  spec.optimizer = testing::Adam();
  spec.collect_params = false;
  const char* tmp = std::getenv("TEST_TMPDIR");
  spec.save_root = std::string(tmp ? tmp : "/tmp") + "/mimo_reference";
  std::filesystem::remove_all(spec.save_root);
  spec.save_after = 100;
  const testing::Outcome whole = testing::Train(layout, spec);
  ASSERT_TRUE(whole.status.ok()) << whole.status;
  ASSERT_EQ(whole.losses.size(), 101u);
  EXPECT_EQ(whole.skipped, 0);
  for (size_t i = 0; i < whole.losses.size(); ++i) {
    ASSERT_TRUE(std::isfinite(whole.losses[i]) && std::isfinite(whole.norms[i])) << "step " << i + 1;
  }
  EXPECT_LT(whole.losses.back(), whole.losses.front());
  std::printf("loss: step 1 %.6f, step 100 %.6f, step 101 %.6f\n", whole.losses[0],
              whole.losses[99], whole.losses[100]);
  testing::RunSpec resume = spec;
  resume.save_root.clear();
  resume.load_root = spec.save_root;
  const testing::Outcome fresh = testing::Train(layout, resume);
  ASSERT_TRUE(fresh.status.ok()) << fresh.status;
  ASSERT_EQ(fresh.losses.size(), 1u);
  EXPECT_EQ(fresh.losses[0], whole.losses[100]);
  EXPECT_EQ(fresh.norms[0], whole.norms[100]);
}

TEST(MimoReferenceLayout, HundredStepsCheckpointAndIteration101) { RunReferenceLayout(false); }

TEST(MimoReferenceLayout, HybridMambaMoeLanguageModel) { RunReferenceLayout(true); }

}  // namespace
}  // namespace gtp::mimo
