#include "layers/gpt_layout.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status.h"

namespace gtp::layers {

namespace {
absl::Status Bad(const std::string& msg) { return absl::InvalidArgumentError(msg); }
}  // namespace

absl::StatusOr<GptLayout> PlanGptLayout(const GptConfig& config, int64_t B, int64_t T,
                                        const GptRankPlace& place) {
  GptLayout L;
  GptConfig& c = L.config;
  c = config;
  // Hybrid pattern: the kinds of the layers and the '|' boundaries.
  std::vector<LayerKind>& layers = L.layers;
  if (!c.layer_pattern.empty()) {
    GTP_ASSIGN_OR_RETURN(LayerPattern pattern, ParseLayerPattern(c.layer_pattern));
    layers = std::move(pattern.layers);
    const std::vector<int>& bars = pattern.bars;  // first layer after each '|'
    const int n = static_cast<int>(layers.size());
    if (c.n_layer != 0 && c.n_layer != n) {
      return Bad(absl::StrCat("layer_pattern \"", c.layer_pattern, "\" has ", n,
                              " layers but n_layer is ", c.n_layer, " (0 lets the pattern decide)"));
    }
    c.n_layer = n;
    if (c.pipeline.count > 1 && c.pipeline.boundaries.empty() && !bars.empty()) {
      if (static_cast<int>(bars.size()) + 1 != c.pipeline.count) {
        return Bad(absl::StrCat("layer_pattern \"", c.layer_pattern, "\" has ", bars.size() + 1,
                                " pipeline segments for ", c.pipeline.count, " parts (PP × VPP)"));
      }
      c.pipeline.boundaries = {0};
      for (int b : bars) c.pipeline.boundaries.push_back(b);
    }
    if (AnyFfn(layers, FfnKind::kMoe) && !c.block.moe.enabled()) {
      return Bad("layer_pattern has MoE layers ('E') but block.moe has no experts");
    }
    // The config as built names the same MoE layers in block.moe.pattern (a
    // layer pattern overrides moe.every_n and moe.pattern).
    if (c.block.moe.enabled()) {
      c.block.moe.pattern.clear();
      for (const LayerKind& k : layers) c.block.moe.pattern += k.ffn == FfnKind::kMoe ? 'E' : '-';
    }
  }
  c.block.n_layer = c.n_layer;
  c.block.loss_sum = c.loss_reduction == LossReduction::kSum;
  GTP_RETURN_IF_ERROR(c.block.moe.Validate(c.n_layer));
  L.T_full = T;
  // Context parallelism: this rank holds 2 of the sequence's 2·CP chunks
  // (layers/cp/ring_attention.h); its blocks see T/CP tokens per sequence
  // (MoE layers too: routing is per token; the router reduces its aux-loss
  // statistics over the lane's TP × CP ranks, layers/moe/router.h).
  if (place.cp > 1) {
    if (T % (2 * place.cp) != 0) {
      return Bad(absl::StrCat("context parallelism needs the sequence length ", T,
                              " divisible by 2·CP = ", 2 * place.cp));
    }
  }
  T /= place.cp;
  L.T_local = T;
  const int tp = place.tp, t = place.tp_rank;
  L.sequence_parallel = c.block.sequence_parallel && tp > 1;
  c.block.sequence_parallel = L.sequence_parallel;
  if (c.vocab_size <= 0 || c.n_layer <= 0 || c.block.n_embd <= 0) {
    return Bad("GptConfig needs vocab_size, n_layer and n_embd > 0");
  }
  if (c.fp8_bf16_first_layers < 0 || c.fp8_bf16_last_layers < 0 ||
      int64_t{c.fp8_bf16_first_layers} + c.fp8_bf16_last_layers > c.n_layer) {
    return Bad(absl::StrCat("fp8_bf16_first_layers (", c.fp8_bf16_first_layers,
                            ") and fp8_bf16_last_layers (", c.fp8_bf16_last_layers,
                            ") must be >= 0 and together at most n_layer (", c.n_layer, ")"));
  }
  if (c.head_chunk_bytes < 0) {
    return Bad(absl::StrCat("head_chunk_bytes ", c.head_chunk_bytes,
                            " must be >= 0 (0: the logits never chunked; default 512 MiB)"));
  }
  if (c.layer_pattern.empty()) {
    // Transformer layers: attention, then an MLP, or a MoE where block.moe
    // picks the layer.
    GTP_ASSIGN_OR_RETURN(layers, LayerKinds("", c.n_layer, c.block.moe.LayerRule()));
  }
  if (T > c.max_seq_len) {
    return Bad(absl::StrCat("sequence length ", T, " exceeds max_seq_len ", c.max_seq_len));
  }
  const int64_t v_pad = c.padded_vocab();
  if (v_pad % tp != 0) {
    return Bad(absl::StrCat("padded vocabulary ", v_pad, " (vocab_pad_multiple ",
                            c.vocab_pad_multiple, ") is not divisible by TP = ", tp));
  }
  const int64_t N = B * T;
  if (L.sequence_parallel && N % tp != 0) {
    return Bad(absl::StrCat("sequence parallelism needs B·T = ", N, " divisible by TP = ", tp));
  }
  L.rows_local = L.sequence_parallel ? N / tp : N;
  L.row0 = L.sequence_parallel ? t * L.rows_local : 0;
  L.vocab_padded = v_pad;
  L.vocab_local = v_pad / tp;
  L.vocab_start = t * L.vocab_local;
  L.vocab_real = std::clamp<int64_t>(c.vocab_size - L.vocab_start, 0, L.vocab_local);
  // Pipeline part: layers [first, last) (see PipelinePart).
  const PipelinePart& pp = c.pipeline;
  if (pp.count < 1 || pp.index < 0 || pp.index >= pp.count) {
    return Bad(absl::StrCat("pipeline part ", pp.index, " of ", pp.count));
  }
  int first = 0, last = c.n_layer;
  if (!pp.boundaries.empty()) {
    if (static_cast<int>(pp.boundaries.size()) != pp.count || pp.boundaries[0] != 0 ||
        !std::is_sorted(pp.boundaries.begin(), pp.boundaries.end()) ||
        pp.boundaries.back() >= c.n_layer ||
        std::adjacent_find(pp.boundaries.begin(), pp.boundaries.end()) != pp.boundaries.end()) {
      return Bad(absl::StrCat("pipeline boundaries must be ", pp.count,
                              " increasing first layers starting at 0, below n_layer ", c.n_layer));
    }
    first = pp.boundaries[pp.index];
    last = pp.index + 1 < pp.count ? pp.boundaries[pp.index + 1] : c.n_layer;
  } else {
    if (c.n_layer % pp.count != 0) {
      return Bad(absl::StrCat("n_layer ", c.n_layer, " is not divisible by the ", pp.count,
                              " pipeline stages (PP × VPP); set pipeline boundaries or change "
                              "the layer count"));
    }
    first = pp.index * (c.n_layer / pp.count);
    last = first + c.n_layer / pp.count;
  }
  L.first_layer = first;
  L.last_layer = last;
  L.has_embed = pp.index == 0;
  L.has_head = pp.index == pp.count - 1;
  return L;
}

}  // namespace gtp::layers
