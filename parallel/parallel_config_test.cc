#include "parallel/parallel_config.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace gtp::parallel {
namespace {

// Expects InvalidArgument whose message contains every one of `subs`.
void ExpectInvalid(const ParallelConfig& c, int world, const ModelFacts& facts,
                   const std::vector<std::string>& subs) {
  absl::Status s = c.Validate(world, facts);
  ASSERT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  for (const std::string& sub : subs) {
    EXPECT_NE(s.message().find(sub), absl::string_view::npos)
        << "missing '" << sub << "' in: " << s.message();
  }
}

TEST(ParallelConfig, DefaultsResolveToPlainDataParallel) {
  auto r = ParallelConfig{}.Resolve(8);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->world_size, 8);
  EXPECT_EQ(r->tp, 1);
  EXPECT_EQ(r->gtp(), 1);
  EXPECT_EQ(r->dp, 8);
  EXPECT_EQ(r->etp, 1);
  EXPECT_EQ(r->egtp(), 1);
  EXPECT_EQ(r->edp(), 8);
  EXPECT_EQ(r->order, kDefaultOrder);
  EXPECT_EQ(r->expert_order, kDefaultExpertOrder);
  EXPECT_TRUE(r->resolved());
  EXPECT_FALSE(ParallelConfig{}.resolved());
}

TEST(ParallelConfig, DerivesGtpFromWeightShards) {
  ParallelConfig c;
  c.tp = 2;
  c.tp_num_weight_shards = 8;
  c.pp = 2;
  c.ep = 2;
  auto r = c.Resolve(32);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->gtp(), 4);
  EXPECT_EQ(r->dp, 2);
  EXPECT_EQ(r->etp, 2);  // defaults to tp
  EXPECT_EQ(r->egtp(), 1);
  EXPECT_EQ(r->edp(), 4);  // 32 / (2·2·1·2)
  EXPECT_EQ(r->DenseSizes().Product(), 32);
  EXPECT_EQ(r->ExpertSizes().Product(), 32);
  EXPECT_EQ(r->ToString(),
            "world=32 tp=2 gtp=4 cp=1 dp=2 pp=2 sp=0 order=tp-gtp-cp-ep-dp-pp | expert etp=2 "
            "ep=2 egtp=1 edp=4 order=tp-cp-ep-gtp-dp-pp");
}

TEST(ParallelConfig, ExplicitDpMustMatch) {
  ParallelConfig c;
  c.tp = 2;
  c.dp = 2;
  EXPECT_TRUE(c.Validate(4).ok());
  ExpectInvalid(c, 16, {},
                {"TP·GTP·CP·DP·PP = 2·1·1·2·1 = 4 does not equal world size 16",
                 "(set dp = 8, or 0 to derive it)"});
}

TEST(ParallelConfig, WorldSizeFieldAndArgument) {
  ParallelConfig c;
  c.world_size = 16;
  EXPECT_TRUE(c.Validate().ok());
  EXPECT_TRUE(c.Validate(16).ok());
  ExpectInvalid(c, 8, {}, {"world_size 16 in the config differs from the actual world size 8"});
  ExpectInvalid(ParallelConfig{}, 0, {}, {"world size unknown"});
}

TEST(ParallelConfig, SequenceParallelWithTpOneIsANoOp) {
  ParallelConfig c;
  c.sequence_parallel = true;
  auto r = c.Resolve(4, ModelFacts{std::nullopt, 7, std::nullopt});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->sequence_parallel);
  c.tp = 2;
  r = c.Resolve(4);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->sequence_parallel);
}

// Each bad config gets its own specific message.
TEST(ParallelConfig, WorldNotDivisible) {
  ParallelConfig c;
  c.tp = 2;
  c.tp_num_weight_shards = 4;
  c.pp = 2;
  ExpectInvalid(c, 12, {}, {"world size 12 is not divisible by TP·GTP·CP·PP = 2·2·1·2 = 8"});
}

TEST(ParallelConfig, ShardsNotMultipleOfTp) {
  ParallelConfig c;
  c.tp = 4;
  c.tp_num_weight_shards = 6;
  ExpectInvalid(c, 24, {}, {"tp_num_weight_shards 6 is not a multiple of tp 4"});
  c.tp_num_weight_shards = 2;
  ExpectInvalid(c, 24, {}, {"tp_num_weight_shards 2 is not a multiple of tp 4"});
}

TEST(ParallelConfig, ExpertShardsNotMultipleOfEtp) {
  ParallelConfig c;
  c.etp = 2;
  c.expert_tp_num_weight_shards = 3;
  ExpectInvalid(c, 12, {}, {"expert_tp_num_weight_shards 3 is not a multiple of etp 2"});
}

TEST(ParallelConfig, EpDoesNotDivideExperts) {
  ParallelConfig c;
  c.ep = 4;
  ExpectInvalid(c, 8, ModelFacts{6, std::nullopt, std::nullopt},
                {"ep 4 does not divide num_experts 6"});
  ExpectInvalid(c, 8, ModelFacts{0, std::nullopt, std::nullopt},
                {"ep 4 > 1 but the model has no experts"});
  EXPECT_TRUE(c.Validate(8, ModelFacts{8, std::nullopt, std::nullopt}).ok());
}

TEST(ParallelConfig, ExpertGridWorldMismatch) {
  // Dense TP2·GTP4·DP3 on 24 ranks is fine; ETP (= TP = 2)·EP4·EGTP2 = 16 is not.
  ParallelConfig c;
  c.tp = 2;
  c.tp_num_weight_shards = 8;
  c.ep = 4;
  c.expert_tp_num_weight_shards = 4;
  ExpectInvalid(c, 24, {},
                {"expert grid does not fit the world",
                 "24 is not divisible by ETP·EP·EGTP·PP = 2·4·2·1 = 16"});
  c.etp = 1;
  c.expert_tp_num_weight_shards = 2;
  EXPECT_TRUE(c.Validate(24).ok());
}

TEST(ParallelConfig, ContextParallelNeedsEvenChunks) {
  ParallelConfig c;
  c.cp = 2;
  ExpectInvalid(c, 4, ModelFacts{std::nullopt, 1001, std::nullopt},
                {"seq_length 1001 is not divisible by 2·CP = 4"});
  ExpectInvalid(c, 4, ModelFacts{std::nullopt, 1002, std::nullopt},
                {"seq_length 1002 is not divisible by 2·CP = 4"});
  EXPECT_TRUE(c.Validate(4, ModelFacts{std::nullopt, 1024, std::nullopt}).ok());
  // CP = 1 only needs nothing.
  EXPECT_TRUE(ParallelConfig{}.Validate(4, ModelFacts{std::nullopt, 1001, std::nullopt}).ok());
}

TEST(ParallelConfig, SequenceParallelNeedsTokensDivisibleByTp) {
  ParallelConfig c;
  c.tp = 4;
  c.cp = 2;
  c.sequence_parallel = true;
  ExpectInvalid(c, 8, ModelFacts{std::nullopt, 100, std::nullopt},
                {"tokens per CP rank (seq_length / CP = 50) must be divisible by tp 4"});
  EXPECT_TRUE(c.Validate(8, ModelFacts{std::nullopt, 104, std::nullopt}).ok());
}

TEST(ParallelConfig, HeadsNotDivisibleByTp) {
  ParallelConfig c;
  c.tp = 8;
  ExpectInvalid(c, 8, ModelFacts{std::nullopt, std::nullopt, 12},
                {"num_attention_heads 12 is not divisible by tp 8"});
}

TEST(ParallelConfig, OrderErrors) {
  ParallelConfig c;
  c.order = "tp-xp-dp";
  ExpectInvalid(c, 4, {}, {"dense order 'tp-xp-dp': unknown axis 'xp'"});
  c.order = "tp-dp-tp";
  ExpectInvalid(c, 4, {}, {"dense order 'tp-dp-tp': axis 'tp' appears more than once"});
  c.order = kDefaultOrder;
  c.expert_order = "tp-ep-ep-dp";
  ExpectInvalid(c, 4, {}, {"expert order 'tp-ep-ep-dp': axis 'ep' appears more than once"});
  // An axis of size > 1 missing from the order.
  ParallelConfig d;
  d.tp = 2;
  d.tp_num_weight_shards = 4;
  d.order = "tp-cp-dp-pp";
  ExpectInvalid(d, 8, {}, {"dense grid: axis 'gtp' has size 2 but is missing from order"});
  ParallelConfig e;
  e.ep = 2;
  e.expert_order = "tp-dp-pp";
  ExpectInvalid(e, 8, {}, {"expert grid", "axis 'ep' has size 2 but is missing"});
}

TEST(ParallelConfig, PipelineGroupsMustAgree) {
  ParallelConfig c;
  c.pp = 2;
  c.ep = 2;
  c.expert_order = "pp-tp-cp-ep-gtp-dp";  // pp fastest on the expert grid only
  ExpectInvalid(c, 8, {},
                {"give different pipeline groups",
                 "rank 1 is on stage 0 of the dense "
                 "grid but stage 1 of the expert grid"});
}

TEST(ParallelConfig, BadDegrees) {
  ParallelConfig c;
  c.tp = 0;
  c.pp = -1;
  c.dp = -2;
  ExpectInvalid(c, 8, {},
                {"tp must be >= 1 (got 0)", "pp must be >= 1 (got -1)",
                 "dp must be >= 1, or 0 to derive it (got -2)"});
}

TEST(ParallelConfig, ReportsEveryProblemAtOnce) {
  ParallelConfig c;
  c.tp = 2;
  c.ep = 3;
  ExpectInvalid(c, 10, ModelFacts{4, std::nullopt, std::nullopt},
                {"expert grid does not fit the world", "ep 3 does not divide num_experts 4"});
  // Shard, order and model-fact problems together.
  ParallelConfig d;
  d.tp = 4;
  d.tp_num_weight_shards = 6;
  d.cp = 2;
  d.ep = 3;
  d.order = "tp-gtp-xp";
  absl::Status s = d.Validate(12, ModelFacts{8, 1001, std::nullopt});
  EXPECT_EQ(s.message(),
            "invalid parallel config: tp_num_weight_shards 6 is not a multiple of tp 4 (GTP = "
            "tp_num_weight_shards / TP must be a whole number); dense order 'tp-gtp-xp': unknown "
            "axis 'xp' (known axes: tp, gtp, cp, ep, dp, pp); ep 3 does not divide num_experts 8 "
            "(each EP rank holds num_experts / EP experts); seq_length 1001 is not divisible by "
            "2·CP = 4 (context parallelism splits each sequence into 2·CP chunks for causal load "
            "balance)");
}

// The expert grid always agrees with the dense grid on world and pp groups
// for default orders, over many valid configs.
TEST(ParallelConfigProperty, ExpertGridConsistentWithDense) {
  int checked = 0;
  for (int world : {1, 2, 4, 6, 8, 12, 16, 24, 32, 48, 64, 128, 256}) {
    for (int tp = 1; tp <= world; tp *= 2) {
      for (int pp : {1, 2, 4}) {
        for (int ep : {1, 2, 4, 8}) {
          for (int egtp : {1, 2}) {
            ParallelConfig c;
            c.tp = tp;
            c.tp_num_weight_shards = tp * (world % (tp * 2 * pp) == 0 ? 2 : 1);
            c.pp = pp;
            c.ep = ep;
            c.etp = 1;
            c.expert_tp_num_weight_shards = egtp;
            auto r = c.Resolve(world);
            const bool fits = world % (tp * pp) == 0 && world % (ep * egtp * pp) == 0;
            ASSERT_EQ(r.ok(), fits) << c.ToString() << " world " << world << ": " << r.status();
            if (!fits) continue;
            auto d = r->DenseGrid();
            auto e = r->ExpertGrid();
            ASSERT_TRUE(d.ok() && e.ok());
            EXPECT_EQ(d->world_size(), world);
            EXPECT_EQ(e->world_size(), world);
            EXPECT_EQ(*d->GetRanks("pp"), *e->GetRanks("pp")) << r->ToString();
            ++checked;
          }
        }
      }
    }
  }
  EXPECT_GT(checked, 200);
}

}  // namespace
}  // namespace gtp::parallel
