// layers/layer_kind.h — which layer is what: the one source of layer kinds.
//
// A layer has a token mixer (attention or the Mamba-2 mixer), a feed-forward
// (an MLP or a mixture of experts), or both (LayerKind). Every place that
// needs to know a model's layers asks here: the layout plan
// (PlanGptLayout, layers/gpt_layout.h) that decides what Block::Create
// builds, MoeConfig::IsMoeLayer, and above this package the trainer's recipe
// checks, its FLOP count and the tools that refuse hybrid or MoE models
// (recipes/trainer/config.h: LayerKindsOf).
//
//   pattern    Megatron's hybrid layer pattern, one symbol a layer, each one
//              half alone with its own pre-norm and residual: 'M' Mamba-2,
//              '*' attention, '-' an MLP, 'E' a MoE; '|' a pipeline boundary
//   otherwise  n_layer transformer layers, attention and an MLP, or a MoE
//              where the MoE rule picks the layer (every_n, or a pattern of
//              'E' / '-' a layer)
//
// Pure and small: no tensors, no communicators (tested in layer_kind_test).
#pragma once

#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace gtp::layers {

enum class MixerKind { kNone, kAttention, kMamba };
enum class FfnKind { kNone, kMlp, kMoe };

// What one layer holds. The default is a transformer layer.
struct LayerKind {
  MixerKind mixer = MixerKind::kAttention;
  FfnKind ffn = FfnKind::kMlp;
  bool operator==(const LayerKind& o) const { return mixer == o.mixer && ffn == o.ffn; }
  bool operator!=(const LayerKind& o) const { return !(*this == o); }
};

// The layer a hybrid pattern symbol names: 'M' a Mamba-2 mixer, '*'
// attention, '-' an MLP, 'E' a MoE. InvalidArgument for any other symbol.
absl::StatusOr<LayerKind> LayerKindOf(char symbol);

// A hybrid pattern read: its layers, and the first layer after each '|'.
struct LayerPattern {
  std::vector<LayerKind> layers;
  std::vector<int> bars;
};
// InvalidArgument naming the first symbol that is none of M * - E |.
absl::StatusOr<LayerPattern> ParseLayerPattern(std::string_view pattern);

// Which transformer layers are MoE layers (without a hybrid pattern): none
// unless `enabled`; layer l when `pattern` (one 'E' or '-' a layer) has an
// 'E' there, or else when l % every_n == 0 (Megatron's moe_layer_freq).
struct MoeLayerRule {
  bool enabled = false;
  int every_n = 1;
  std::string_view pattern;
  bool IsMoeLayer(int layer) const;
};

// Every layer of a model: the hybrid pattern's when there is one (n_layer
// is then not read), else n_layer transformer layers with a MoE where `moe`
// picks the layer. InvalidArgument for a bad pattern symbol.
absl::StatusOr<std::vector<LayerKind>> LayerKinds(std::string_view layer_pattern, int n_layer,
                                                  const MoeLayerRule& moe);

// Whether any of `layers` has this mixer / feed-forward.
bool AnyMixer(const std::vector<LayerKind>& layers, MixerKind kind);
bool AnyFfn(const std::vector<LayerKind>& layers, FfnKind kind);

}  // namespace gtp::layers
