// layers/gpt_layout.h — where a GptModel's pieces go on one rank, planned
// from the config and the rank's place in its TP and CP groups before
// anything is built. Pure (no communicator, no device): the layout rules are
// tested on their own (gpt_layout_test) and GptModel::Create builds from the
// plan.
//
//   layer kinds     every layer's mixer and feed-forward (LayerKind), by the
//                   one rule (layers/layer_kind.h): from the hybrid pattern's
//                   symbols ("M*-|M-*": also n_layer and pipeline boundaries
//                   from '|'), or attention + an MLP, or a MoE where
//                   block.moe picks the layer (every_n / pattern)
//   context par.    this rank's T / CP tokens of each sequence (2 of 2·CP chunks)
//   tensor par.     the padded vocabulary split over TP; with sequence
//                   parallelism (only when TP > 1) the rows B·T split too
//   pipeline        part `index` of `count`: layers [first, last), the
//                   embedding on part 0, the head on the last
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "layers/gpt.h"
#include "layers/layer_kind.h"
#include "layers/sublayer.h"
#include "layers/transformer.h"

namespace gtp::layers {

// This rank's place: its TP group's size and rank, and its CP group's (1, 0
// when the rank has no CP group).
struct GptRankPlace {
  int tp = 1, tp_rank = 0;
  int cp = 1, cp_rank = 0;
};

struct GptLayout {
  // The config as built: n_layer from the pattern, pipeline boundaries from
  // its '|', the MoE pattern from its 'E', sequence parallelism only where
  // TP > 1, block.n_layer and block.loss_sum filled in.
  GptConfig config;
  // Every layer of the model (n_layer, not only this part's): what
  // Block::Create builds for it.
  std::vector<LayerKind> layers;
  int64_t T_full = 0, T_local = 0;  // tokens per sequence: whole, and this rank's (T / CP)
  bool sequence_parallel = false;
  int64_t rows_local = 0, row0 = 0;  // activation rows held (B·T_local, / TP under SP), first row
  int64_t vocab_padded = 0, vocab_local = 0, vocab_start = 0, vocab_real = 0;  // the TP split
  int first_layer = 0, last_layer = 0;  // this pipeline part's layers [first, last)
  bool has_embed = false, has_head = false;
};

// InvalidArgument naming the setting when the config does not fit the place
// (a pattern whose layer count or segments disagree, T not divisible by 2·CP,
// a padded vocabulary not divisible by TP, B·T not divisible by TP under SP,
// layers that do not split over the pipeline parts, ...).
absl::StatusOr<GptLayout> PlanGptLayout(const GptConfig& config, int64_t B, int64_t T,
                                        const GptRankPlace& place);

}  // namespace gtp::layers
