#include "layers/layer_kind.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

namespace gtp::layers {

absl::StatusOr<LayerKind> LayerKindOf(char symbol) {
  switch (symbol) {
    case 'M': return LayerKind{MixerKind::kMamba, FfnKind::kNone};
    case '*': return LayerKind{MixerKind::kAttention, FfnKind::kNone};
    case '-': return LayerKind{MixerKind::kNone, FfnKind::kMlp};
    case 'E': return LayerKind{MixerKind::kNone, FfnKind::kMoe};
  }
  return absl::InvalidArgumentError(absl::StrCat("layer pattern symbol '", std::string(1, symbol),
                                                 "' is none of M (Mamba), * (attention), - (MLP), "
                                                 "E (MoE), | (pipeline boundary)"));
}

absl::StatusOr<LayerPattern> ParseLayerPattern(std::string_view pattern) {
  LayerPattern p;
  for (char ch : pattern) {
    if (ch == '|') {
      p.bars.push_back(static_cast<int>(p.layers.size()));
      continue;
    }
    absl::StatusOr<LayerKind> k = LayerKindOf(ch);
    if (!k.ok()) return k.status();
    p.layers.push_back(*k);
  }
  return p;
}

bool MoeLayerRule::IsMoeLayer(int layer) const {
  if (!enabled) return false;
  if (!pattern.empty()) return layer < static_cast<int>(pattern.size()) && pattern[layer] == 'E';
  return every_n > 0 && layer % every_n == 0;
}

absl::StatusOr<std::vector<LayerKind>> LayerKinds(std::string_view layer_pattern, int n_layer,
                                                  const MoeLayerRule& moe) {
  if (!layer_pattern.empty()) {
    absl::StatusOr<LayerPattern> p = ParseLayerPattern(layer_pattern);
    if (!p.ok()) return p.status();
    return std::move(p->layers);
  }
  std::vector<LayerKind> layers;
  for (int l = 0; l < n_layer; ++l) {
    layers.push_back({MixerKind::kAttention, moe.IsMoeLayer(l) ? FfnKind::kMoe : FfnKind::kMlp});
  }
  return layers;
}

bool AnyMixer(const std::vector<LayerKind>& layers, MixerKind kind) {
  return std::any_of(layers.begin(), layers.end(), [&](const LayerKind& k) { return k.mixer == kind; });
}

bool AnyFfn(const std::vector<LayerKind>& layers, FfnKind kind) {
  return std::any_of(layers.begin(), layers.end(), [&](const LayerKind& k) { return k.ffn == kind; });
}

}  // namespace gtp::layers
