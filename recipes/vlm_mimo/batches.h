// recipes/vlm_mimo/batches.h — one micro-batch of the shapes task through
// the MIMO model: each rank makes the samples its encoder lane and its
// language lane read (MimoModel::EncoderSamples / LanguageSamples; a sample
// is a pure function of seed, split and index, so no rank draws another's)
// and runs the model's forward on them.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "core/kernels/ops.h"
#include "data/shapes/shapes.h"
#include "mimo/model.h"

namespace gtp::recipes::vlm {

// The forward of global samples [base, base + G) of `split` (G = the
// model's global batch). `tokens_host` (language ranks; may be null): when
// empty it gets this lane's tokens [B, T]; when filled its tokens are fed
// instead of the task's (greedy decoding writes its words there).
// `train` false: an evaluation forward (MimoModel::Forward). Collective
// over the world; blocks.
absl::Status ForwardBatch(mimo::MimoModel& model, const data::shapes::ShapesTask& task,
                          const kernels::Exec& e, data::shapes::Split split, int64_t base,
                          bool train, std::vector<int32_t>* tokens_host);

}  // namespace gtp::recipes::vlm
