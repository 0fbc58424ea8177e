#include "recipes/trainer/mfu.h"

#include "gtest/gtest.h"

namespace gtp::recipes {
namespace {

ModelShape Gpt2Small() {
  ModelShape m;
  m.vocab_size = 50257;
  m.seq_len = 1024;
  m.n_layer = 12;
  m.n_embd = 768;
  m.n_head = 12;
  return m;
}

TEST(Mfu, Gpt2SmallFlopPerToken) {
  const ModelShape m = Gpt2Small();
  // GPT-2 small has 124,439,808 parameters; less wpe (1024·768) that is 123,653,376.
  EXPECT_EQ(NonPositionParams(m), 124439808 - 1024 * 768);
  // 6·123,653,376 + 12·12·768·1024 = 741,920,256 + 113,246,208.
  EXPECT_DOUBLE_EQ(TrainingFlopPerToken(m), 855166464.0);
  // nanoGPT's 8.554e8 counts the vocabulary padded to 50304; within 0.1%.
  EXPECT_NEAR(TrainingFlopPerToken(m), 8.554e8, 8.554e8 * 1e-3);
}

TEST(Mfu, LlamaStyleByHand) {
  ModelShape m;
  m.vocab_size = 32000;
  m.seq_len = 2048;
  m.n_layer = 2;
  m.n_embd = 256;
  m.n_head = 8;
  m.n_kv_head = 2;  // HS 32: k, v have 64 channels
  m.ffn_hidden = 688;
  m.swiglu = true;
  m.rmsnorm = true;
  m.bias = false;
  m.tied_embeddings = false;
  // wte + lm_head: 2·32000·256 = 16,384,000
  // per layer: q, o 2·256·256 = 131,072; k, v 2·64·256 = 32,768;
  //            fc [2·688, 256] = 352,256; proj [256, 688] = 176,128; 2 norms 512
  //            = 692,736
  // final norm 256.
  const int64_t n = 16384000 + 2 * 692736 + 256;
  EXPECT_EQ(NonPositionParams(m), n);
  EXPECT_DOUBLE_EQ(TrainingFlopPerToken(m), 6.0 * n + 12.0 * 2 * 256 * 2048);
}

TEST(Mfu, MoeCountsTheActiveExperts) {
  // GPT-2 small with MoE in layers 0, 2, ..., 10 (every_n 2): 8 experts of
  // hidden 1536, top-2, a shared expert of 768, no expert biases.
  ModelShape m = Gpt2Small();
  m.moe_layers = 6;
  m.num_experts = 8;
  m.top_k = 2;
  m.moe_hidden = 1536;
  m.shared_hidden = 768;
  const int64_t dense_mlp = 768 * 3072 + 3072 + 3072 * 768 + 768;
  const int64_t moe_mlp = 2 * (768 * 1536 + 1536 * 768) +        // two experts
                          (768 * 768 + 768 + 768 * 768 + 768) +  // the shared expert (biases)
                          8 * 768;                               // the router
  EXPECT_EQ(NonPositionParams(m), NonPositionParams(Gpt2Small()) + 6 * (moe_mlp - dense_mlp));
}

TEST(Mfu, PeakAndRatio) {
  proto::Train t;
  EXPECT_EQ(PeakFlops(t), 0.0);
  t.set_device("cuda");
  EXPECT_EQ(PeakFlops(t), 989e12);
  t.set_peak_tflops(100);
  EXPECT_EQ(PeakFlops(t), 100e12);
  // 8.55e8 FLOP/token at 100k tokens/s on a 989 TFLOP/s GPU: 8.6%.
  EXPECT_NEAR(Mfu(855166464.0, 1e5, 989e12), 0.08647, 1e-5);
  EXPECT_EQ(Mfu(1, 1, 0), 0.0);
}

// A hybrid "M*-" stack (one Mamba, one attention, one MLP block, each with
// its LayerNorm), GPT-2 style, C = 64, T = 32, the Mamba defaults (N 16,
// conv 4, expand 2, head dim 16, 1 group: Di 128, 8 heads). By hand:
//   embedding 256·64 = 16384; norms 4 × 128 (3 blocks + final);
//   attention 4 × (64·64 + 64) = 16640; MLP (64·256 + 256) + (256·64 + 64) = 33088;
//   Mamba in_proj 64·(128 + 128 + 16 + 16 + 8) = 18944, conv (128 + 32)·(4 + 1) = 800,
//   dt_bias/A_log/D 3·8 = 24, norm 128, out_proj 128·64 = 8192: 28088.
// FLOP: 6·94712 + 12·1·64·32 (one attention block) + 21·1·128·16 (the scan).
TEST(Mfu, HybridCountsEachBlockKind) {
  proto::Model p;
  p.set_vocab_size(256);
  p.set_seq_len(32);
  p.set_n_layer(3);
  p.set_n_embd(64);
  p.set_n_head(4);
  p.set_layer_pattern("M*-");
  const ModelShape m = ShapeOf(p);
  EXPECT_EQ(m.mamba_blocks, 1);
  EXPECT_EQ(m.attn_blocks, 1);
  EXPECT_EQ(m.mlp_blocks, 1);
  EXPECT_EQ(NonPositionParams(m), 94712);
  EXPECT_DOUBLE_EQ(TrainingFlopPerToken(m), 6.0 * 94712 + 12.0 * 64 * 32 + 21.0 * 128 * 16);
  // Without the pattern the same three layers count as 3 × (2 norms + attention + MLP).
  p.clear_layer_pattern();
  EXPECT_EQ(NonPositionParams(ShapeOf(p)), 16384 + 3 * (256 + 16640 + 33088) + 128);
}

TEST(Mfu, ShapeOfRecipe) {
  proto::Model p;
  p.set_vocab_size(256);
  p.set_n_embd(64);
  p.set_activation("swiglu");
  p.set_norm("rmsnorm");
  p.set_no_bias(true);
  p.set_untied_embeddings(true);
  const ModelShape m = ShapeOf(p);
  EXPECT_EQ(m.vocab_size, 256);
  EXPECT_EQ(m.n_embd, 64);
  EXPECT_TRUE(m.swiglu);
  EXPECT_TRUE(m.rmsnorm);
  EXPECT_FALSE(m.bias);
  EXPECT_FALSE(m.tied_embeddings);
}

}  // namespace
}  // namespace gtp::recipes
