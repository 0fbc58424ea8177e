// The one source of layer kinds on its own: pattern symbols, bars, the MoE
// layer rule, and the layers of a model with and without a pattern.
#include "layers/layer_kind.h"

#include <string>

#include "gtest/gtest.h"

namespace gtp::layers {
namespace {

constexpr LayerKind kMamba{MixerKind::kMamba, FfnKind::kNone};
constexpr LayerKind kAttn{MixerKind::kAttention, FfnKind::kNone};
constexpr LayerKind kMlp{MixerKind::kNone, FfnKind::kMlp};
constexpr LayerKind kMoe{MixerKind::kNone, FfnKind::kMoe};
constexpr LayerKind kDense{MixerKind::kAttention, FfnKind::kMlp};
constexpr LayerKind kDenseMoe{MixerKind::kAttention, FfnKind::kMoe};

TEST(LayerKind, PatternSymbolsAndBars) {
  auto p = ParseLayerPattern("M*-|E-");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->layers, (std::vector<LayerKind>{kMamba, kAttn, kMlp, kMoe, kMlp}));
  EXPECT_EQ(p->bars, (std::vector<int>{3}));
  auto empty = ParseLayerPattern("");
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->layers.empty());
}

TEST(LayerKind, BadSymbolIsNamed) {
  auto p = ParseLayerPattern("M*x-");
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(p.status().message().find("'x' is none of M (Mamba)"), std::string::npos) << p.status();
}

TEST(LayerKind, MoeLayerRule) {
  EXPECT_FALSE((MoeLayerRule{false, 1, ""}.IsMoeLayer(0)));
  MoeLayerRule every2{true, 2, ""};
  EXPECT_TRUE(every2.IsMoeLayer(0));
  EXPECT_FALSE(every2.IsMoeLayer(1));
  EXPECT_TRUE(every2.IsMoeLayer(2));
  EXPECT_FALSE((MoeLayerRule{true, 0, ""}.IsMoeLayer(0)));
  MoeLayerRule pattern{true, 1, "-E"};  // the pattern wins over every_n
  EXPECT_FALSE(pattern.IsMoeLayer(0));
  EXPECT_TRUE(pattern.IsMoeLayer(1));
  EXPECT_FALSE(pattern.IsMoeLayer(2));  // beyond the pattern
}

TEST(LayerKind, LayersOfAModel) {
  auto dense = LayerKinds("", 3, {});
  ASSERT_TRUE(dense.ok());
  EXPECT_EQ(*dense, (std::vector<LayerKind>{kDense, kDense, kDense}));
  auto moe = LayerKinds("", 3, {true, 2, ""});
  ASSERT_TRUE(moe.ok());
  EXPECT_EQ(*moe, (std::vector<LayerKind>{kDenseMoe, kDense, kDenseMoe}));
  auto hybrid = LayerKinds("M|E", /*n_layer (not read)=*/7, {true, 1, ""});
  ASSERT_TRUE(hybrid.ok());
  EXPECT_EQ(*hybrid, (std::vector<LayerKind>{kMamba, kMoe}));
  EXPECT_TRUE(AnyMixer(*hybrid, MixerKind::kMamba));
  EXPECT_FALSE(AnyMixer(*hybrid, MixerKind::kAttention));
  EXPECT_TRUE(AnyFfn(*hybrid, FfnKind::kMoe));
  EXPECT_FALSE(AnyFfn(*dense, FfnKind::kMoe));
  EXPECT_FALSE(LayerKinds("M?", 2, {}).ok());
}

}  // namespace
}  // namespace gtp::layers
