// PlanGptLayout on its own: where a rank's pieces go for hybrid patterns with
// pipeline bars, context, tensor and sequence parallelism, and the named
// errors — every expected value worked out by hand from the rules in
// gpt_layout.h.
#include "layers/gpt_layout.h"

#include <string>

#include "gtest/gtest.h"

namespace gtp::layers {
namespace {

GptConfig Model(int64_t vocab = 256, int n_layer = 4) {
  return GptConfig::Gpt2(vocab, /*max_seq_len=*/64, n_layer, /*n_embd=*/16, /*n_head=*/2);
}

void ExpectError(const absl::StatusOr<GptLayout>& l, const std::string& text) {
  ASSERT_FALSE(l.ok());
  EXPECT_EQ(l.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(l.status().message().find(text), std::string::npos) << l.status();
}

TEST(GptLayout, PatternBarsBecomePipelineBoundaries) {
  GptConfig c = Model(256, /*n_layer=*/0);
  c.layer_pattern = "M*-|M-*";
  c.pipeline.count = 2;
  for (int part : {0, 1}) {
    c.pipeline.index = part;
    auto l = PlanGptLayout(c, 2, 8, {});
    ASSERT_TRUE(l.ok()) << l.status();
    EXPECT_EQ(l->config.n_layer, 6);
    EXPECT_EQ(l->config.block.n_layer, 6);
    EXPECT_EQ(l->config.pipeline.boundaries, (std::vector<int>{0, 3}));
    ASSERT_EQ(l->layers.size(), 6u);
    EXPECT_EQ(l->layers[0], (LayerKind{MixerKind::kMamba, FfnKind::kNone}));
    EXPECT_EQ(l->layers[1], (LayerKind{MixerKind::kAttention, FfnKind::kNone}));
    EXPECT_EQ(l->layers[2], (LayerKind{MixerKind::kNone, FfnKind::kMlp}));
    EXPECT_EQ(l->first_layer, part == 0 ? 0 : 3);
    EXPECT_EQ(l->last_layer, part == 0 ? 3 : 6);
    EXPECT_EQ(l->has_embed, part == 0);
    EXPECT_EQ(l->has_head, part == 1);
  }
  // Without a pattern the layers split evenly (or not at all).
  GptConfig even = Model(256, 6);
  even.pipeline = {2, 3, {}};
  auto l = PlanGptLayout(even, 2, 8, {});
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(l->first_layer, 4);
  EXPECT_EQ(l->last_layer, 6);
  ASSERT_EQ(l->layers.size(), 6u);  // every layer, attention + MLP
  for (const LayerKind& k : l->layers) EXPECT_EQ(k, LayerKind{});
}

TEST(GptLayout, OnePlaceDecidesEachLayersMixerAndFeedForward) {
  // Without a layer pattern: attention, and a MoE where moe.every_n picks.
  GptConfig every = Model(256, 4);
  every.block.moe.router.num_experts = 4;
  every.block.moe.every_n = 2;
  auto l = PlanGptLayout(every, 2, 8, {});
  ASSERT_TRUE(l.ok()) << l.status();
  ASSERT_EQ(l->layers.size(), 4u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(l->layers[i], (LayerKind{MixerKind::kAttention,
                                       i % 2 == 0 ? FfnKind::kMoe : FfnKind::kMlp}))
        << i;
  }
  // ... or moe.pattern.
  every.block.moe.pattern = "-EE-";
  l = PlanGptLayout(every, 2, 8, {});
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(l->layers[0].ffn, FfnKind::kMlp);
  EXPECT_EQ(l->layers[1].ffn, FfnKind::kMoe);
  EXPECT_EQ(l->layers[2].ffn, FfnKind::kMoe);
  EXPECT_EQ(l->layers[3].ffn, FfnKind::kMlp);
  // A layer pattern overrides both, and the config as built says the same.
  GptConfig hybrid = every;
  hybrid.n_layer = 0;
  hybrid.layer_pattern = "ME*-";
  l = PlanGptLayout(hybrid, 2, 8, {});
  ASSERT_TRUE(l.ok()) << l.status();
  ASSERT_EQ(l->layers.size(), 4u);
  EXPECT_EQ(l->layers[1], (LayerKind{MixerKind::kNone, FfnKind::kMoe}));
  EXPECT_EQ(l->layers[3], (LayerKind{MixerKind::kNone, FfnKind::kMlp}));
  EXPECT_EQ(l->config.block.moe.pattern, "-E--");
  hybrid.layer_pattern = "M*x";
  ExpectError(PlanGptLayout(hybrid, 2, 8, {}), "'x' is none of M (Mamba)");
}

TEST(GptLayout, ContextParallelKeepsTOverCpTokens) {
  auto l = PlanGptLayout(Model(), 2, 64, {.cp = 4, .cp_rank = 1});
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(l->T_full, 64);
  EXPECT_EQ(l->T_local, 16);
  EXPECT_EQ(l->rows_local, 2 * 16);
  ExpectError(PlanGptLayout(Model(), 2, 60, {.cp = 4}), "divisible by 2·CP = 8");
}

TEST(GptLayout, TensorParallelSplitsThePaddedVocabulary) {
  // vocab 300 padded to a multiple of 128: 384; TP3 → 128 rows a rank.
  auto l = PlanGptLayout(Model(300), 2, 8, {.tp = 3, .tp_rank = 2});
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(l->vocab_padded, 384);
  EXPECT_EQ(l->vocab_local, 128);
  EXPECT_EQ(l->vocab_start, 256);
  EXPECT_EQ(l->vocab_real, 300 - 256);
  auto first = PlanGptLayout(Model(300), 2, 8, {.tp = 3, .tp_rank = 0});
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first->vocab_real, 128);
  GptConfig odd = Model(300);
  odd.vocab_pad_multiple = 1;  // 300 over TP 7
  ExpectError(PlanGptLayout(odd, 2, 8, {.tp = 7}), "not divisible by TP = 7");
}

TEST(GptLayout, SequenceParallelSplitsRowsOnlyUnderTp) {
  GptConfig c = Model();
  c.block.sequence_parallel = true;
  auto l = PlanGptLayout(c, 2, 8, {.tp = 2, .tp_rank = 1});
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_TRUE(l->sequence_parallel);
  EXPECT_TRUE(l->config.block.sequence_parallel);
  EXPECT_EQ(l->rows_local, 8);
  EXPECT_EQ(l->row0, 8);
  auto one = PlanGptLayout(c, 2, 8, {});
  ASSERT_TRUE(one.ok());
  EXPECT_FALSE(one->sequence_parallel);  // nothing to split over
  EXPECT_FALSE(one->config.block.sequence_parallel);
  EXPECT_EQ(one->rows_local, 16);
  ExpectError(PlanGptLayout(c, 3, 5, {.tp = 2}), "B·T = 15 divisible by TP = 2");
}

TEST(GptLayout, PatternsAndPipelinesThatDoNotFitAreNamed) {
  GptConfig c = Model(256, 4);
  c.layer_pattern = "M*-M*-";
  ExpectError(PlanGptLayout(c, 2, 8, {}), "has 6 layers but n_layer is 4");
  c.n_layer = 0;
  c.layer_pattern = "M*|-M|*-";
  c.pipeline.count = 2;
  ExpectError(PlanGptLayout(c, 2, 8, {}), "3 pipeline segments for 2 parts");
  GptConfig moe = Model(256, 0);
  moe.layer_pattern = "M-E";
  ExpectError(PlanGptLayout(moe, 2, 8, {}), "MoE layers ('E') but block.moe has no experts");
  GptConfig uneven = Model(256, 5);
  uneven.pipeline.count = 2;
  ExpectError(PlanGptLayout(uneven, 2, 8, {}), "n_layer 5 is not divisible by the 2 pipeline stages");
  GptConfig long_seq = Model();
  ExpectError(PlanGptLayout(long_seq, 2, 128, {}), "sequence length 128 exceeds max_seq_len 64");
  GptConfig chunk = Model();
  chunk.head_chunk_bytes = -1;
  ExpectError(PlanGptLayout(chunk, 2, 8, {}), "head_chunk_bytes -1 must be >= 0");
}

}  // namespace
}  // namespace gtp::layers
