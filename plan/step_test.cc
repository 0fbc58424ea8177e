#include "plan/step.h"

#include <algorithm>

#include "gtest/gtest.h"
#include "plan/round_cluster_testing.h"
#include "recipes/trainer/config.h"
#include "recipes/trainer/mfu.h"

namespace gtp::plan {
namespace {

Cluster Round() { return RoundCluster(1000e9); }

recipes::proto::Recipe Gpt(const std::vector<std::string>& extra) {
  std::vector<std::string> sets = {"model.n_layer=4", "model.n_embd=1024", "model.n_head=16", "model.seq_len=1024",
                                   "model.recompute=false", "model.no_bias=true", "model.norm=rmsnorm"};
  sets.insert(sets.end(), extra.begin(), extra.end());
  absl::StatusOr<recipes::proto::Recipe> r = recipes::LoadRecipe("tools/plan/gpt_megatron2021.pbtxt", sets);
  EXPECT_TRUE(r.ok()) << r.status();
  return *r;
}

Prediction PredictOf(const recipes::proto::Recipe& r, const CostModel& cost) {
  absl::StatusOr<Layout> l = LayoutFromRecipe(r);
  EXPECT_TRUE(l.ok()) << l.status();
  absl::StatusOr<Prediction> p = Predict(r, *l, cost);
  EXPECT_TRUE(p.ok()) << p.status();
  return *p;
}

// Memory of a plain layout by hand: every parameter on the GPU; bf16 weight
// (2 B), f32 grad (4 B), f32 master + two moments (12 B) over DP.
TEST(Step, MemoryByHand) {
  const CostModel cost(Round());
  recipes::proto::Recipe r = Gpt({"parallel.world_size=2", "train.global_batch=4"});
  const Prediction p = PredictOf(r, cost);
  const double n = static_cast<double>(recipes::NonPositionParams(recipes::ShapeOf(r.model())));
  EXPECT_NEAR(p.memory.weights, 2 * n, 1e-6 * n);
  EXPECT_NEAR(p.memory.grads, 4 * n, 1e-6 * n);
  EXPECT_NEAR(p.memory.optimizer, 12 * n / 2, 1e-6 * n);  // dp = 2
  EXPECT_EQ(p.memory.gather_buffers, 0);
  // GTP 2 instead of DP 2: weights and grads halve (the sharded part), the
  // optimizer state is no longer split over DP (the replicate group is 1).
  recipes::proto::Recipe g = Gpt({"parallel.world_size=2", "parallel.tp_num_weight_shards=2", "train.global_batch=4"});
  const Prediction q = PredictOf(g, cost);
  const double C = 1024, repl = 4 * 2 * C + C;  // two norms a layer, the final norm (RMSNorm: weights only)
  const double sharded = n - repl;
  EXPECT_NEAR(q.memory.weights, 2 * (sharded / 2 + repl), 1e-6 * n);
  EXPECT_NEAR(q.memory.optimizer, 12 * (sharded / 2 + repl), 1e-6 * n);
  // Two blocks' TP-local weights, gathered (bf16) and their f32 wgrads: the
  // largest "block" here is the tied table V·C.
  EXPECT_NEAR(q.memory.gather_buffers, 2 * 51200 * C * (2 + 4), 1);
}

// The prefetch chain: with compute far longer than any gather, only the
// cold starts are exposed — the embedding table's gather that starts each
// forward pass, the head's that starts each backward, and the chain head's
// (the embedding table's) reduce-scatter at the end of each backward.
TEST(Step, GtpGatherHidesBehindCompute) {
  Cluster c = Round();
  c.intra = {1e15, 0};  // gathers nearly free
  const CostModel cost(c);
  recipes::proto::Recipe g = Gpt({"parallel.world_size=2", "parallel.tp_num_weight_shards=2", "train.global_batch=8"});
  const Prediction p = PredictOf(g, cost);
  absl::StatusOr<ModelCost> mc = CostModelOf(g, p.layout, cost);
  ASSERT_TRUE(mc.ok());
  const int M = p.micro_batches;  // 8 / (mb 1 × 2 lanes) = 4
  EXPECT_EQ(M, 4);
  EXPECT_NEAR(p.breakdown.gtp_gather.exposed, M * 2 * mc->ends.head_gather, 1e-15);
  EXPECT_NEAR(p.breakdown.gtp_reduce_scatter.exposed, M * mc->ends.head_reduce_scatter, 1e-15);
  // Slow gathers (a 1000× slower link) are exposed by what compute cannot cover:
  // exposed = Σ max(0, gather_i − compute_{i−1}).
  c.intra = {1e9, 0};
  const CostModel slow(c);
  const Prediction q = PredictOf(g, slow);
  absl::StatusOr<ModelCost> ms = CostModelOf(g, q.layout, slow);
  double fwd = ms->ends.head_gather + std::max(0.0, ms->blocks[0].gather - ms->ends.embed_fwd);
  for (size_t i = 1; i < ms->blocks.size(); ++i) {
    fwd += std::max(0.0, ms->blocks[i].gather - ms->blocks[i - 1].fwd_compute);
  }
  fwd += std::max(0.0, ms->ends.head_gather - ms->blocks.back().fwd_compute);
  EXPECT_GT(q.breakdown.gtp_gather.exposed, M * fwd * 0.999);  // backward adds its own
  EXPECT_GT(q.step_time, p.step_time);
}

// Optimizer: HBM-bound AdamW over the local shard (30 B an element for bf16
// params) plus the grad-norm read (4 B), on the round cluster's 1 TB/s.
TEST(Step, OptimizerByHand) {
  const CostModel cost(Round());
  recipes::proto::Recipe r = Gpt({"parallel.world_size=4", "train.global_batch=4"});
  const Prediction p = PredictOf(r, cost);
  const double n = static_cast<double>(recipes::NonPositionParams(recipes::ShapeOf(r.model())));
  EXPECT_NEAR(p.breakdown.optimizer, (30 * n / 4 + 4 * n) / 1e12, 1e-6 * p.breakdown.optimizer);
}

// Step time = compute + exposed communication + bubble + optimizer on one
// stage, and MFU is the trainer's formula on the result.
TEST(Step, MfuIsTheTrainersFormula) {
  const CostModel cost(Round());
  recipes::proto::Recipe r = Gpt({"parallel.world_size=8", "parallel.tp=2", "parallel.tp_num_weight_shards=2",
                                  "parallel.pp=2", "train.global_batch=16"});
  const Prediction p = PredictOf(r, cost);
  const double fpt = recipes::TrainingFlopPerToken(recipes::ShapeOf(r.model()));
  EXPECT_NEAR(p.mfu, fpt * p.tokens_per_s / 8 / 1e15, 1e-12);
  EXPECT_NEAR(p.tokens_per_s, 16 * 1024 / p.step_time, 1e-6);
  EXPECT_GT(p.breakdown.bubble, 0);
  EXPECT_GT(p.breakdown.tp.exposed, 0);
  EXPECT_FALSE(p.calibrated);
}

TEST(Step, RecomputeTradesMemoryForTime) {
  const CostModel cost(Round());
  const Prediction off = PredictOf(Gpt({"parallel.world_size=1", "train.global_batch=2"}), cost);
  const Prediction on = PredictOf(Gpt({"parallel.world_size=1", "train.global_batch=2", "model.recompute=true"}), cost);
  EXPECT_LT(on.memory.activations, off.memory.activations);
  EXPECT_GT(on.step_time, off.step_time);
  EXPECT_GT(on.breakdown.compute.at("recompute"), 0);
  EXPECT_DOUBLE_EQ(on.memory.activations_no_recompute, off.memory.activations_no_recompute);
}

}  // namespace
}  // namespace gtp::plan
