#include "plan/model.h"

#include "gtest/gtest.h"
#include "plan/round_cluster_testing.h"
#include "plan/step.h"
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

// A table in which every op the blocks use is one measured point, so each
// kernel's time is linear in its work (one point: its throughput) with a
// rate of its own: a block's time is Σ rate_op · work_op, by hand. The scan
// has three shape classes: P·N = 256 at one rate, 16 and 8192 (on both sides
// of it, 16 nearer an unclassed query) 100× slower.
struct Rates {
  double gemm = 1e-15, gemm32 = 1e-14, cast = 1e-12, ew = 2e-12, ew32 = 3e-12, conv_f = 4e-12, conv_b = 5e-12,
         gnorm_f = 6e-12, gnorm_b = 7e-12, soft_f = 8e-12, soft_b = 9e-12, scan256 = 1e-13, scan8192 = 1e-11,
         gg = 2e-15, ggw = 3e-15, route_f = 1e-11, route_b = 2e-11, perm = 3e-11, scat = 4e-11, comb_f = 5e-11,
         comb_b = 6e-11, sync = 2e-5, norm = 1.5e-12;
};
CostModel Linear(const Rates& q) {
  CostModel m(Round());
  auto row = [](Op op, const char* dt, const char* shape, double work, double rate) {
    const bool c = IsComputeOp(op);
    return Measurement{op, dt, shape, c ? work : 0, c ? 0 : work, work * rate};
  };
  m.Add({row(Op::kGemm, "bf16", "x", 1e9, q.gemm), row(Op::kGemm, "f32", "x", 1e9, q.gemm32),
         row(Op::kCast, "bf16", "x", 1e6, q.cast), row(Op::kElementwise, "bf16", "x", 1e6, q.ew),
         row(Op::kElementwise, "f32", "x", 1e6, q.ew32), row(Op::kNorm, "bf16", "x", 1e6, q.norm),
         row(Op::kConv1dFwd, "f32", "x", 1e6, q.conv_f), row(Op::kConv1dBwd, "f32", "x", 1e6, q.conv_b),
         row(Op::kGatedNormFwd, "f32", "x", 1e6, q.gnorm_f), row(Op::kGatedNormBwd, "f32", "x", 1e6, q.gnorm_b),
         row(Op::kSoftplusFwd, "f32", "x", 1e6, q.soft_f), row(Op::kSoftplusBwd, "f32", "x", 1e6, q.soft_b),
         row(Op::kSsmFwd, "f32", "p=16,n=16", 1e9, q.scan256), row(Op::kSsmBwd, "f32", "p=16,n=16", 1e9, q.scan256),
         row(Op::kSsmFwd, "f32", "p=64,n=128", 1e9, q.scan8192),
         row(Op::kSsmBwd, "f32", "p=64,n=128", 1e9, q.scan8192), row(Op::kSsmFwd, "f32", "p=4,n=4", 1e9, q.scan8192),
         row(Op::kSsmBwd, "f32", "p=4,n=4", 1e9, q.scan8192), row(Op::kGroupedGemm, "bf16", "x", 1e9, q.gg),
         row(Op::kGroupedGemmWgrad, "bf16", "x", 1e9, q.ggw), row(Op::kMoeRouteFwd, "f32", "x", 1e6, q.route_f),
         row(Op::kMoeRouteBwd, "f32", "x", 1e6, q.route_b), row(Op::kMoePermute, "bf16", "x", 1e6, q.perm),
         row(Op::kMoeScatterAdd, "bf16", "x", 1e6, q.scat), row(Op::kMoeCombineFwd, "bf16", "x", 1e6, q.comb_f),
         row(Op::kMoeCombineBwd, "bf16", "x", 1e6, q.comb_b), Measurement{Op::kHostSync, "f32", "x", 0, 0, q.sync}});
  return m;
}

// The Mamba-2 block, kernel by kernel as layers/mamba/mamba_mixer.cc
// launches them: C = 256, d_inner 512 = 32 heads × P 16, N 16, 1 group,
// K 4; B = 2, T = 128 (N = 256 tokens), bf16, one GPU. The scan takes class
// P·N = 256's rate (classes 16 and 8192 are 100× slower).
TEST(Model, MambaBlockByHand) {
  recipes::proto::Recipe r = Load("tools/plan/gpt_megatron2021.pbtxt",
                                  {"model.layer_pattern=M-", "model.n_layer=2", "model.n_embd=256", "model.n_head=4",
                                   "model.seq_len=128", "model.recompute=false", "model.mamba.head_dim=16",
                                   "model.mamba.d_state=16", "model.mamba.expand=2", "model.mamba.d_conv=4",
                                   "parallel.world_size=1", "train.micro_batch=2", "train.global_batch=2"});
  const Rates q;
  const CostModel cost = Linear(q);
  absl::StatusOr<Layout> l = LayoutFromRecipe(r);
  ASSERT_TRUE(l.ok()) << l.status();
  absl::StatusOr<ModelCost> mc = CostModelOf(r, *l, cost);
  ASSERT_TRUE(mc.ok()) << mc.status();
  ASSERT_EQ(mc->blocks[0].kind, 'M');
  const BlockCost& b = mc->blocks[0];
  const double C = 256, N = 256, Di = 512, H = 32, GN = 16, K = 4;
  // The pre-norm half (LayerNorm with bias here): norm 2·2·N·C bytes, residual 3·2·N·C.
  const double norm_f = q.norm * 4 * N * C + q.ew * 6 * N * C, norm_b = q.norm * 8 * N * C;
  // GEMMs: in_proj (z, x, B, C, dt) and out_proj, 2·N·C·out FLOPs each; backward twice.
  const double gemm_flops = 2 * N * C * (2 * Di + 2 * GN + H) + 2 * N * Di * C;
  // Casts (6 B an element): in_proj's five outputs, the ten SSM params, the norm's output.
  const double cast_in = N * (2 * Di + 2 * GN + H), params = Di * K + 2 * GN * K + Di + 2 * GN + 3 * H + Di;
  const double scan = 7 * N * H * 16 * 16;
  const double fwd = q.gemm * gemm_flops + q.cast * 6 * (cast_in + params + N * Di) + q.soft_f * 8 * N * H +
                     q.ew32 * 8 * H + q.conv_f * 8 * N * (Di + 2 * GN) + q.scan256 * scan +
                     q.gnorm_f * 12 * N * Di + norm_f;
  const double bwd = q.gemm * 2 * gemm_flops + q.cast * 6 * (N * Di + cast_in) + q.gnorm_b * 20 * N * Di +
                     q.scan256 * 2 * scan + q.ew32 * 8 * H + q.conv_b * 12 * N * (Di + 2 * GN) +
                     q.soft_b * 12 * N * H + norm_b;
  EXPECT_NEAR(b.fwd_compute, fwd, 1e-9 * fwd);
  EXPECT_NEAR(b.bwd_compute, bwd, 1e-9 * bwd);
  // Every kernel it used is in the table.
  for (const auto& [op, dt] : mc->kernels) EXPECT_TRUE(cost.Calibrated(op, dt)) << OpName(op) << " " << dt;
  EXPECT_EQ(mc->kernels.count({Op::kConv1dBwd, "f32"}), 1u);
}

// The MoE block as layers/moe launches it: C = 256, 4 experts of hidden 512,
// top-2, GELU, N = 256 tokens, bf16, one GPU, dropless (one host read).
TEST(Model, MoeBlockByHand) {
  recipes::proto::Recipe r = Load("tools/plan/gpt_megatron2021.pbtxt",
                                  {"model.n_layer=1", "model.n_embd=256", "model.n_head=4", "model.seq_len=128",
                                   "model.recompute=false", "model.moe.num_experts=4", "model.moe.top_k=2",
                                   "model.moe.ffn_hidden=512", "parallel.world_size=1", "train.micro_batch=2",
                                   "train.global_batch=2"});
  const Rates q;
  const CostModel cost = Linear(q);
  absl::StatusOr<Layout> l = LayoutFromRecipe(r);
  ASSERT_TRUE(l.ok()) << l.status();
  absl::StatusOr<ModelCost> mc = CostModelOf(r, *l, cost);
  ASSERT_TRUE(mc.ok()) << mc.status();
  ASSERT_EQ(mc->blocks[1].kind, 'E');
  const BlockCost& b = mc->blocks[1];
  const double C = 256, N = 256, E = 4, k = 2, He = 512, R = N * k;
  const double norm_f = q.norm * 4 * N * C + q.ew * 6 * N * C, norm_b = q.norm * 8 * N * C;
  const double experts = 2 * R * He * C;  // FLOPs of fc1 (= fc2)
  const double fwd = q.cast * 6 * N * C + q.gemm32 * 2 * N * E * C + q.route_f * (4 * N * E + 20 * R) + q.sync +
                     q.perm * (4 * R * C + 4 * R) + q.gg * 2 * experts + q.ew * 2 * R * (He + He) +
                     q.comb_f * (2 * (N + R) * C + 8 * R) + norm_f;
  const double bwd = q.comb_b * (2 * (N + 2 * R) * C + 8 * R) + q.gg * 2 * experts + q.ggw * 2 * experts +
                     q.ew * 4 * R * (He + He) + q.ew32 * 4 * N * C + q.scat * (10 * R * C + 4 * R) +
                     q.route_b * (8 * N * E + 12 * R) + q.gemm32 * 2 * 2 * N * E * C + q.ew32 * 12 * N * C +
                     q.cast * 6 * N * C + norm_b;
  EXPECT_NEAR(b.fwd_compute, fwd, 1e-9 * fwd);
  EXPECT_NEAR(b.bwd_compute, bwd, 1e-9 * bwd);
  // Padded to capacity: no host read of the counts.
  recipes::proto::Recipe padded = r;
  padded.mutable_model()->mutable_moe()->set_capacity_factor(1.0f);
  padded.mutable_model()->mutable_moe()->set_pad_to_capacity(true);
  absl::StatusOr<ModelCost> mp = CostModelOf(padded, *l, cost);
  ASSERT_TRUE(mp.ok()) << mp.status();
  EXPECT_NEAR(b.fwd_compute - mp->blocks[1].fwd_compute, q.sync, 1e-12);
}

// An op missing from the table is named in the prediction, which is then
// not calibrated; with it the prediction is.
TEST(Model, MissingKernelsAreReportedUncalibrated) {
  recipes::proto::Recipe r = Load("tools/plan/gpt_megatron2021.pbtxt",
                                  {"model.layer_pattern=M-", "model.n_layer=2", "model.n_embd=256", "model.n_head=4",
                                   "model.seq_len=128", "parallel.world_size=1", "train.micro_batch=2",
                                   "train.global_batch=2", "model.recompute=false"});
  absl::StatusOr<Layout> l = LayoutFromRecipe(r);
  ASSERT_TRUE(l.ok());
  CostModel full = Linear(Rates());
  full.Add({{Op::kAdamW, "f32", "x", 0, 1e6, 1e-6}});
  absl::StatusOr<Prediction> p = Predict(r, *l, full);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_TRUE(p->calibrated);
  EXPECT_TRUE(p->uncalibrated.empty());
  // The same table without the conv rows (the state of a table written before them).
  CostModel partial(Round());
  const Rates q;
  partial.Add({{Op::kGemm, "bf16", "x", 1e9, 0, 1e-6}, {Op::kCast, "bf16", "x", 0, 1e6, 1e-6},
               {Op::kElementwise, "bf16", "x", 0, 1e6, 1e-6}, {Op::kElementwise, "f32", "x", 0, 1e6, 1e-6},
               {Op::kNorm, "bf16", "x", 0, 1e6, 1e-6}, {Op::kGatedNormFwd, "f32", "x", 0, 1e6, 1e-6},
               {Op::kGatedNormBwd, "f32", "x", 0, 1e6, 1e-6}, {Op::kSoftplusFwd, "f32", "x", 0, 1e6, 1e-6},
               {Op::kSoftplusBwd, "f32", "x", 0, 1e6, 1e-6}, {Op::kSsmFwd, "f32", "p=16,n=16", 1e9, 0, 1e-6},
               {Op::kSsmBwd, "f32", "p=16,n=16", 1e9, 0, 1e-6}, {Op::kAdamW, "f32", "x", 0, 1e6, 1e-6}});
  p = Predict(r, *l, partial);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_FALSE(p->calibrated);
  EXPECT_EQ(p->uncalibrated, (std::vector<std::string>{"conv1d_fwd f32", "conv1d_bwd f32"}));
  (void)q;
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
