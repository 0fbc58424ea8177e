// recipes/vlm_mimo/captions.h — the recipe's evaluation: greedy captions of
// unseen (validation-split) images. After "<bos> a" each next word is the
// language model's argmax, fed back; the model is causal, so the earlier
// positions keep their values. Scored word by word against the truth.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "comm/communicator.h"
#include "core/kernels/ops.h"
#include "data/shapes/shapes.h"
#include "mimo/model.h"

namespace gtp::recipes::vlm {

struct CaptionScores {
  int64_t images = 0;
  // Fractions of `images`: the whole caption right, and each content word.
  double exact = 0, size = 0, colour = 0, shape = 0;
  // Up to six lines `image 3: "a small red square" -> model "a small red cross"  (wrong)`
  // (the first language lane's first images).
  std::vector<std::string> examples;
};

// Captions `batches` validation batches of the model's global batch
// (images [0, batches · G)). Every rank gets the same scores and examples
// (reduced over `host`, the host-memory world). Collective; blocks.
absl::StatusOr<CaptionScores> CaptionUnseen(mimo::MimoModel& model,
                                            const data::shapes::ShapesTask& task, int64_t batches,
                                            comm::Communicator& world, comm::Communicator& host,
                                            const kernels::Exec& e);

// "captions of 64 unseen images: 15.6% exactly right (chance 2.1%); size ..." and the examples.
std::string FormatScores(const CaptionScores& s);

}  // namespace gtp::recipes::vlm
