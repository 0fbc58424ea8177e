#include "plan/model.h"

#include "gtest/gtest.h"
#include "plan/round_cluster_testing.h"
#include "recipes/trainer/config.h"
#include "recipes/trainer/mfu.h"

namespace gtp::plan {
namespace {

recipes::proto::Recipe Load(const std::string& path, const std::vector<std::string>& sets = {}) {
  absl::StatusOr<recipes::proto::Recipe> r = recipes::LoadRecipe(path, sets);
  EXPECT_TRUE(r.ok()) << r.status();
  return *r;
}

Cluster Round() { return RoundCluster(100e9); }

// The blocks' MFU FLOPs plus the ends' are the trainer's MFU count exactly
// (the same function, differenced; only rounding of doubles).
TEST(Model, BlockFlopsSumToTheMfuCount) {
  const CostModel cost(Round());
  for (auto [path, sets] : std::vector<std::pair<std::string, std::vector<std::string>>>{
           {"tools/plan/llama70b.pbtxt", {"parallel.world_size=8"}},
           {"tools/plan/gpt_megatron2021.pbtxt", {"parallel.world_size=8", "train.global_batch=8"}},
           {"tools/plan/hybrid_moe_280b.pbtxt",
            {"parallel.world_size=128", "parallel.gtp_gather_dtype=bf16"}}}) {
    recipes::proto::Recipe r = Load(path, sets);
    absl::StatusOr<Layout> l = LayoutFromRecipe(r);
    ASSERT_TRUE(l.ok()) << l.status();
    absl::StatusOr<ModelCost> mc = CostModelOf(r, *l, cost);
    ASSERT_TRUE(mc.ok()) << path << ": " << mc.status();
    double sum = mc->ends.mfu_flops_per_token;
    for (const BlockCost& b : mc->blocks) sum += b.mfu_flops_per_token;
    EXPECT_NEAR(sum / recipes::TrainingFlopPerToken(recipes::ShapeOf(r.model())), 1.0, 1e-12) << path;
    // Parameters: the blocks' dense + replicated + expert, plus the ends', are
    // the MFU count's parameters with every expert (top_k = E).
    recipes::ModelShape all = recipes::ShapeOf(r.model());
    all.top_k = all.num_experts;
    double params = mc->ends.sharded_params + mc->ends.replicated_params;
    for (const BlockCost& b : mc->blocks) params += b.sharded_params + b.replicated_params + b.expert_params;
    EXPECT_NEAR(params / recipes::NonPositionParamsApprox(all), 1.0, 1e-9) << path;
  }
}

TEST(Model, AttentionBlockByHand) {
  // C = 1024, 16 heads (kv 16), T = 1024, micro-batch 2, TP 2, GTP 2, SP, bf16, no bias.
  recipes::proto::Recipe r = Load("tools/plan/gpt_megatron2021.pbtxt",
                                  {"model.n_layer=2", "model.n_embd=1024", "model.n_head=16", "model.seq_len=1024",
                                   "model.no_bias=true", "model.norm=rmsnorm", "model.recompute=false",
                                   "parallel.world_size=4", "parallel.tp=2", "parallel.tp_num_weight_shards=4",
                                   "parallel.sequence_parallel=true", "train.micro_batch=2", "train.global_batch=4"});
  const CostModel cost(Round());
  absl::StatusOr<Layout> l = LayoutFromRecipe(r);
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(l->gtp, 2);
  EXPECT_EQ(l->dp, 1);
  absl::StatusOr<ModelCost> mc = CostModelOf(r, *l, cost);
  ASSERT_TRUE(mc.ok()) << mc.status();
  const BlockCost& a = mc->blocks[0];
  ASSERT_EQ(a.kind, '*');
  const double C = 1024, N = 2048, t = 2;
  EXPECT_DOUBLE_EQ(a.sharded_params, 4 * C * C);  // q, k, v, o
  // GTP all-gather of the TP-local q/k/v/o (2·C²  elements, bf16) over 2
  // ranks on NVLink: 1/2 · 4·C² bytes / 100e9 (latency 0).
  EXPECT_DOUBLE_EQ(a.gather, 0.5 * (4 * C * C / t * 2) / 100e9);
  // Its f32 gradient reduce-scattered: twice the bytes.
  EXPECT_DOUBLE_EQ(a.reduce_scatter, 2 * a.gather);
  // SP: all-gather + reduce-scatter of N·C bf16 over TP 2, forward and backward.
  EXPECT_DOUBLE_EQ(a.tp_fwd, 2 * 0.5 * N * C * 2 / 100e9);
  // Saved: norm input N/2·C bf16 + rstd N/2 f32; hin N·C; q, k, v N·3C/2; y
  // N·C/2 (all bf16); lse N·16/2 f32.
  const double saved = N / t * (2 * C + 4) + 2 * N * C + 2 * N * 3 * C / t + 2 * N * C / t + 4 * N * 16 / t;
  EXPECT_DOUBLE_EQ(a.act_bytes, saved);
  EXPECT_DOUBLE_EQ(a.input_bytes, 2 * N / t * C);
}

TEST(Model, RefusesLayoutsThatDoNotDivide) {
  const Cluster c = Round();
  recipes::proto::Recipe r = Load("tools/plan/llama70b.pbtxt", {"parallel.world_size=64"});
  absl::StatusOr<Layout> base = LayoutFromRecipe(r);
  ASSERT_TRUE(base.ok());
  auto msg = [&](Layout l) {
    absl::Status s = CheckLayout(r, l, c);
    return s.ok() ? std::string("ok") : std::string(s.message());
  };
  Layout l = *base;
  EXPECT_EQ(msg(l), "ok");
  l.tp = 16;
  l.dp = 4;
  EXPECT_NE(msg(l).find("parallel.tp = 16"), std::string::npos);  // kv heads 8
  l = *base;
  l.pp = 3;
  EXPECT_NE(msg(l).find("model.n_layer = 80"), std::string::npos);
  l = *base;
  l.micro_batch = 3;
  EXPECT_NE(msg(l).find("train.global_batch = 1024"), std::string::npos);
  l = *base;
  l.ep = 2;
  EXPECT_NE(msg(l).find("parallel.ep"), std::string::npos);
  // An uneven pipeline split is refused, not costed as an even one.
  recipes::proto::Recipe uneven = r;
  uneven.mutable_parallel()->add_pp_boundaries(0);
  uneven.mutable_parallel()->add_pp_boundaries(30);
  EXPECT_NE(std::string(CheckLayout(uneven, *base, c).message()).find("parallel.pp_boundaries sets an uneven split"),
            std::string::npos);
  l = *base;
  l.precision = "fp8";
  Cluster a100 = c;
  a100.peak_fp8_flops = 0;
  EXPECT_NE(std::string(CheckLayout(r, l, a100).message()).find("no fp8"), std::string::npos);
  EXPECT_FALSE(LayoutFromRecipe(Load("tools/plan/llama70b.pbtxt",
                                     {"parallel.world_size=60", "parallel.tp=8", "parallel.tp_num_weight_shards=8"}))
                   .ok());
}

}  // namespace
}  // namespace gtp::plan
