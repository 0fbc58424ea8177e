// Global grad norm: equals the single-rank norm under layouts that mix
// replicated params (LayerNorm weights/biases, row-parallel biases, the
// position table — copies on every GTP and TP rank), TP-sharded replicated
// params (column-parallel biases) and GTP-sharded matrices, in both reduce
// modes — and the replicated part is large enough that counting it GTP (or
// TP) times would fail the test. Also: clipping, and NaN/Inf skipping.
#include "optimizer/grad_norm.h"

#include <cmath>
#include <limits>
#include <mutex>
#include <vector>

#include "comm/local/local_communicator.h"
#include "gtest/gtest.h"
#include "layers/linear.h"
#include "parallel/parallel_config.h"
#include "optimizer/optimizer.h"
#include "optimizer/testing/train_harness.h"

namespace gtp::optimizer {
namespace {

testing::RunConfig NormConfig(const testing::Layout& l, ReduceMode mode) {
  testing::RunConfig c;
  c.model = testing::SmallModel(/*llama=*/false);
  c.layout = l;
  c.steps = 2;
  c.buffer.reduce = mode;
  c.buffer.bucket_elements = 800;
  c.gtp.alignment = 3;  // padded shards: padding must not count
  c.opt.lr = {LrDecay::kConstant, 1e-2f};
  return c;
}

TEST(GlobalGradNorm, MatchesSingleRankWhenReplicatedAndShardedParamsMix) {
  // Single rank: the norm, and the replicated params' share of it.
  testing::RunConfig rc = NormConfig({"single"}, ReduceMode::kReduceScatter);
  std::vector<double> repl_sq;
  rc.before_step = [&](testing::RankContext& ctx, int) {
    ASSERT_TRUE(ctx.grads->FinishGradSync().ok());
    double s = 0;
    for (const GradParam& p : ctx.grads->params()) {
      if (p.replicated == nullptr) continue;
      const float* g = ctx.grads->data().data<float>() + p.offset;
      for (int64_t i = 0; i < p.numel; ++i) s += double(g[i]) * g[i];
    }
    repl_sq.push_back(s);
  };
  const testing::RunResult ref = testing::Train(rc);
  ASSERT_TRUE(ref.status.ok()) << ref.status;
  ASSERT_EQ(repl_sq.size(), 2u);
  for (int s = 0; s < 2; ++s) {
    const double n = ref.stats[s].grad_norm;
    // Counting the replicated part k times instead of once moves the norm
    // to √(n² + (k−1)·r²): make sure that is far outside the tolerance.
    const double wrong = std::sqrt(n * n + repl_sq[s]);
    ASSERT_GT(wrong - n, 1e-3 * n) << "replicated params too small for this test to bite";
  }
  for (ReduceMode mode : {ReduceMode::kReduceScatter, ReduceMode::kAllReduce}) {
    for (const testing::Layout& l :
         {testing::Layout{"DP2_GTP2", 1, 2, 2}, testing::Layout{"GTP4", 1, 4, 1},
          testing::Layout{"TP2_GTP2", 2, 2, 1}, testing::Layout{"TP2_DP2", 2, 1, 2},
          testing::Layout{"TP2_GTP2_DP2", 2, 2, 2}}) {
      const testing::RunResult got = testing::Train(NormConfig(l, mode));
      ASSERT_TRUE(got.status.ok()) << l.name << ": " << got.status;
      for (int s = 0; s < 2; ++s) {
        EXPECT_NEAR(got.stats[s].grad_norm, ref.stats[s].grad_norm, 2e-5 * ref.stats[s].grad_norm)
            << l.name << (mode == ReduceMode::kAllReduce ? " all-reduce" : " reduce-scatter")
            << " step " << s;
      }
    }
  }
}

TEST(ClipGradNorm, ScalesTheGlobalNormToTheLimit) {
  testing::RunConfig c = NormConfig({"TP2_GTP2", 2, 2, 1}, ReduceMode::kReduceScatter);
  c.steps = 1;
  std::mutex mu;
  std::vector<std::pair<double, double>> seen;
  c.before_step = [&](testing::RankContext& ctx, int) {
    ASSERT_TRUE(ctx.grads->FinishGradSync().ok());
    absl::StatusOr<double> before = ClipGradNorm(*ctx.grads, 0.25);
    ASSERT_TRUE(before.ok()) << before.status();
    absl::StatusOr<double> after = GlobalGradNorm(*ctx.grads);
    ASSERT_TRUE(after.ok());
    std::lock_guard<std::mutex> lock(mu);
    seen.push_back({*before, *after});
  };
  ASSERT_TRUE(testing::Train(c).status.ok());
  ASSERT_EQ(seen.size(), 4u);
  for (auto [before, after] : seen) {
    EXPECT_GT(before, 0.5);
    EXPECT_NEAR(after, 0.25, 1e-5);
  }
}

// A NaN in one TP rank's copy of a TP-replicated param (never reduced with
// the other copy) still skips the step on every rank.
TEST(DistributedOptimizer, NanInAnUncountedReplicaStillSkips) {
  testing::RunConfig c = NormConfig({"TP2_GTP2", 2, 2, 1}, ReduceMode::kReduceScatter);
  c.steps = 1;
  c.before_step = [&](testing::RankContext& ctx, int) {
    ASSERT_TRUE(ctx.grads->FinishGradSync().ok());
    if (ctx.pgs->RankIn("tp").value() != 1 || ctx.pgs->RankIn("gtp").value() != 1) return;
    for (const GradParam& p : ctx.grads->params()) {
      if (p.replicated != nullptr && !p.tp_sharded) {
        ctx.grads->data().data<float>()[p.offset] = std::numeric_limits<float>::quiet_NaN();
        return;
      }
    }
  };
  const testing::RunResult r = testing::Train(c);
  ASSERT_TRUE(r.status.ok()) << r.status;
  for (int64_t n : r.num_skipped) EXPECT_EQ(n, 1);
}

TEST(DistributedOptimizer, SkipsAndCountsStepsWithNonFiniteGradients) {
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    // Two steps with a poisoned gradient on one rank at step 1 end where one
    // clean step ends.
    testing::RunConfig c = NormConfig({"DP2_GTP2", 1, 2, 2}, ReduceMode::kReduceScatter);
    c.before_step = [&](testing::RankContext& ctx, int step) {
      if (step != 1 || ctx.world_rank != 3) return;
      // Before FinishGradSync: the reduction spreads it to its owner.
      float* g = ctx.grads->data().data<float>();
      g[ctx.grads->params()[2].offset] = bad;
    };
    const testing::RunResult r = testing::Train(c);
    ASSERT_TRUE(r.status.ok()) << r.status;
    EXPECT_FALSE(r.stats[0].skipped);
    EXPECT_TRUE(r.stats[1].skipped);
    EXPECT_FALSE(std::isfinite(r.stats[1].grad_norm));
    EXPECT_EQ(r.stats[1].step, 1);
    for (int64_t n : r.num_skipped) EXPECT_EQ(n, 1);
    testing::RunConfig one = NormConfig({"DP2_GTP2", 1, 2, 2}, ReduceMode::kReduceScatter);
    one.steps = 1;
    const testing::RunResult ref = testing::Train(one);
    ASSERT_TRUE(ref.status.ok());
    EXPECT_EQ(testing::CompareParams(r.params, ref.params, 1e-30, 0).worst, 0.0);
  }
}

// One rank: the norm, clip scale and skip are decided on the device
// (GlobalGradNormOnDevice, AdamW reading them) — the same outcome as the
// host path: the poisoned step is skipped and counted, the params are those
// of the one clean step, and the norm reported is not finite.
TEST(DistributedOptimizer, OnDeviceDecisionSkipsAndCountsLikeTheHostPath) {
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    testing::RunConfig c = NormConfig({"single", 1, 1, 1}, ReduceMode::kReduceScatter);
    c.before_step = [&](testing::RankContext& ctx, int step) {
      if (step != 1) return;
      ctx.grads->data().data<float>()[ctx.grads->params()[2].offset] = bad;
    };
    const testing::RunResult r = testing::Train(c);
    ASSERT_TRUE(r.status.ok()) << r.status;
    EXPECT_FALSE(r.stats[0].skipped);
    EXPECT_TRUE(r.stats[1].skipped);
    EXPECT_FALSE(std::isfinite(r.stats[1].grad_norm));
    EXPECT_EQ(r.stats[1].step, 1);
    EXPECT_EQ(r.num_skipped[0], 1);
    testing::RunConfig one = NormConfig({"single", 1, 1, 1}, ReduceMode::kReduceScatter);
    one.steps = 1;
    const testing::RunResult ref = testing::Train(one);
    ASSERT_TRUE(ref.status.ok());
    EXPECT_EQ(testing::CompareParams(r.params, ref.params, 1e-30, 0).worst, 0.0);
  }
}

// The device decision reports the host path's norm: the same model and
// data with clipping active on one rank (device path) and over two GTP ranks
// (host path; the norm is layout-invariant).
TEST(GlobalGradNormOnDevice, MatchesTheHostNorm) {
  testing::RunConfig c = NormConfig({"single", 1, 1, 1}, ReduceMode::kReduceScatter);
  c.opt.clip_grad = 1e-3;  // always clipping
  testing::RunConfig h = NormConfig({"GTP2", 1, 2, 1}, ReduceMode::kReduceScatter);
  h.opt.clip_grad = 1e-3;
  const testing::RunResult dev = testing::Train(c), host = testing::Train(h);
  ASSERT_TRUE(dev.status.ok()) << dev.status;
  ASSERT_TRUE(host.status.ok()) << host.status;
  ASSERT_EQ(dev.stats.size(), host.stats.size());
  for (size_t i = 0; i < dev.stats.size(); ++i) {
    EXPECT_FALSE(dev.stats[i].skipped);
    ASSERT_TRUE(std::isfinite(dev.stats[i].grad_norm));
    EXPECT_GT(dev.stats[i].grad_norm, 1e-3);  // so the clip scale was in play
    EXPECT_NEAR(dev.stats[i].grad_norm, host.stats[i].grad_norm, 1e-5 * host.stats[i].grad_norm);
  }
}

// Dense and expert buffers together: on 4 ranks with dense DP4 and an expert
// grid of EP2 × EGTP2, each expert matrix lives GTP-sharded on its EP rank's
// EGTP pair. The expert buffer reduces over edp/etp/egtp and its norm sums
// over ep: every element of both buffers counts once.
TEST(GlobalGradNorm, DenseAndExpertBuffersCountEveryElementOnce) {
  constexpr int64_t kRows = 6, kCols = 4;
  HeapAllocator host;
  std::mutex mu;
  std::vector<double> norms;
  absl::Status st = comm::RunRanks(4, [&](comm::Communicator& w) -> absl::Status {
    parallel::ParallelConfig pc;
    pc.ep = 2;
    pc.expert_tp_num_weight_shards = 2;  // EGTP2, EDP1
    parallel::ModelFacts facts;
    facts.num_experts = 2;
    GTP_ASSIGN_OR_RETURN(auto pgs, parallel::ProcessGroupCollection::Build(pc, w, facts));
    GTP_ASSIGN_OR_RETURN(comm::Communicator * gtp, pgs.Get("gtp"));
    GTP_ASSIGN_OR_RETURN(comm::Communicator * egtp, pgs.Get("egtp"));
    GTP_ASSIGN_OR_RETURN(int e, pgs.RankIn("ep"));
    const kernels::Exec exec = kernels::Exec::Cpu(host);
    layers::GtpChain chain(exec, {});
    layers::ShardedParam dense("dense.w", 4, 4, DType::kF32, gtp, &chain);
    dense.set_global_layout({4, 4, [](int64_t r) { return r; }, 0});
    layers::ReplicatedParam norm{"norm.weight", exec.Zeros({5}), exec.Zeros({5})};
    layers::ShardedParam expert("experts.w", kRows, kCols, DType::kF32, egtp, &chain);
    expert.set_global_layout({kRows, kCols, [](int64_t r) { return r; }, 0});
    GTP_ASSIGN_OR_RETURN(auto dg, GradBuffer::Create({{&dense}, {&norm}}, pgs, exec));
    GradBufferOptions eo;
    eo.groups = {"edp", "etp", "egtp", "data_cp", {"ep", "pp"}};
    GTP_ASSIGN_OR_RETURN(auto eg, GradBuffer::Create({{&expert}, {}}, pgs, exec, eo));
    // Same dense grads on every rank; expert e's element i is 1e-3·(1 + 100e + i).
    for (int i = 0; i < 5; ++i) norm.grad.data<float>()[i] = 0.1f * (i + 1);
    for (int i = 0; i < 16; ++i) dense.main_grad().data<float>()[i] = 0.01f * i;
    for (int64_t r = 0; r < expert.shard_rows(); ++r) {
      for (int64_t c = 0; c < kCols; ++c) {
        const int64_t i = (expert.shard_row_begin() + r) * kCols + c;
        expert.main_grad().data<float>()[r * kCols + c] = 1e-3f * (1 + 100 * e + i);
      }
    }
    GTP_RETURN_IF_ERROR(dg->FinishGradSync());
    GTP_RETURN_IF_ERROR(eg->FinishGradSync());
    GTP_ASSIGN_OR_RETURN(double n, GlobalGradNorm({dg.get(), eg.get()}));
    GTP_ASSIGN_OR_RETURN(auto opt, DistributedOptimizer::Create({dg.get(), eg.get()}, pgs, exec, {}));
    GTP_ASSIGN_OR_RETURN(StepStats s, opt->Step());
    EXPECT_NEAR(s.grad_norm, n, 1e-9 * n);
    EXPECT_GT(opt->state_bytes(), 0);
    std::lock_guard<std::mutex> lock(mu);
    norms.push_back(n);
    return absl::OkStatus();
  });
  ASSERT_TRUE(st.ok()) << st;
  double want = 0;
  for (int i = 0; i < 5; ++i) want += std::pow(0.1 * (i + 1), 2);
  for (int i = 0; i < 16; ++i) want += std::pow(0.01 * i, 2);
  for (int e = 0; e < 2; ++e) {
    for (int i = 0; i < kRows * kCols; ++i) want += std::pow(1e-3 * (1 + 100 * e + i), 2);
  }
  for (double n : norms) EXPECT_NEAR(n, std::sqrt(want), 1e-6 * std::sqrt(want));
}

}  // namespace
}  // namespace gtp::optimizer
