#include "recipes/vlm_mimo/captions.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "comm/host_values.h"
#include "core/status.h"
#include "layers/linear.h"
#include "parallel/process_groups.h"
#include "recipes/vlm_mimo/batches.h"

namespace gtp::recipes::vlm {

namespace {

using data::shapes::ShapesTask;

// Per row of the language model's last logits: the argmax over the real
// vocabulary across the TP group (every TP rank gets the same answer).
absl::StatusOr<std::vector<int32_t>> Argmax(const kernels::Exec& e, layers::GptModel& lm,
                                            comm::Communicator& tp) {
  const int64_t rows = lm.logits().dim(0), cols = lm.logits().dim(1);
  const std::vector<float> logits = layers::DeviceToHost<float>(e, lm.logits());
  std::vector<float> mine(rows * 2), all(rows * 2 * tp.size());
  for (int64_t r = 0; r < rows; ++r) {
    float best = -INFINITY;
    int64_t arg = -1;
    for (int64_t c = 0; c < lm.vocab_local(); ++c) {
      const float v = logits[r * cols + c];
      if (v > best) best = v, arg = lm.vocab_start() + c;
    }
    mine[2 * r] = best;
    mine[2 * r + 1] = static_cast<float>(arg);
  }
  GTP_RETURN_IF_ERROR(
      comm::AllGatherHost(tp, mine.data(), all.data(), rows * 2, DType::kF32, {e.alloc, e.stream}));
  std::vector<int32_t> out(rows);
  for (int64_t r = 0; r < rows; ++r) {
    float best = -INFINITY;
    for (int t = 0; t < tp.size(); ++t) {
      const float v = all[(t * rows + r) * 2];
      if (all[(t * rows + r) * 2 + 1] >= 0 && v > best) {
        best = v;
        out[r] = static_cast<int32_t>(all[(t * rows + r) * 2 + 1]);
      }
    }
  }
  return out;
}

// The examples travel to every rank in one sum over the world: per example
// [present, image, truth words 1..4, model words 1..4], only the first
// language lane's TP rank 0 writing.
constexpr int kExamples = 6, kExampleFloats = 10;

}  // namespace

absl::StatusOr<CaptionScores> CaptionUnseen(mimo::MimoModel& model, const ShapesTask& task,
                                            int64_t batches, comm::Communicator& world,
                                            comm::Communicator& host, const kernels::Exec& e) {
  comm::Communicator* tp = nullptr;
  if (model.has_language()) {
    GTP_ASSIGN_OR_RETURN(tp, model.language_grid().Get(parallel::groups::kTp));
  }
  const bool printer = world.rank() == model.language_grid().offset();  // lane 0, TP rank 0
  const int np = task.num_patches(), seq = task.sequence_length();
  const int64_t G = model.global_batch();
  // Correct captions, sizes, colours, shapes, images; then the examples.
  std::vector<float> sums(5 + kExamples * kExampleFloats, 0.0f);
  int examples = 0;
  for (int64_t bi = 0; bi < batches; ++bi) {
    std::vector<int32_t> tokens;  // this lane's tokens, filled as we decode
    std::vector<int32_t> pred;
    for (int j = 1; j <= ShapesTask::kCaptionLength - 2; ++j) {
      GTP_RETURN_IF_ERROR(
          ForwardBatch(model, task, e, data::shapes::kValid, bi * G, false, &tokens));
      if (!model.has_language()) continue;
      GTP_ASSIGN_OR_RETURN(pred, Argmax(e, *model.language(), *tp));
      if (j < ShapesTask::kCaptionLength - 2) {
        for (int64_t b = 0; b * seq < static_cast<int64_t>(tokens.size()); ++b) {
          tokens[b * seq + np + j + 1] = pred[b * seq + np + j];
        }
      }
    }
    if (!model.has_language() || tp->rank() != 0) continue;
    const auto r = model.LanguageSamples();
    for (int64_t b = 0; b < r.count; ++b) {
      const int64_t image = bi * G + r.first + b;
      const auto truth = task.Make(data::shapes::kValid, image).caption;
      const int32_t got[4] = {tokens[b * seq + np + 1], tokens[b * seq + np + 2],
                              tokens[b * seq + np + 3], pred[b * seq + np + 3]};
      bool ok = true;
      for (int k = 0; k < 4; ++k) ok &= got[k] == truth[1 + k];
      sums[0] += ok;
      for (int k = 0; k < 3; ++k) sums[1 + k] += got[1 + k] == truth[2 + k];
      sums[4] += 1;
      if (printer && examples < kExamples) {
        float* x = &sums[5 + kExampleFloats * examples++];
        x[0] = 1;
        x[1] = static_cast<float>(image);
        for (int k = 0; k < 4; ++k)
          x[2 + k] = static_cast<float>(truth[1 + k]), x[6 + k] = static_cast<float>(got[k]);
      }
    }
  }
  GTP_RETURN_IF_ERROR(
      comm::Run(host.AllReduce(sums.data(), sums.data(), static_cast<int64_t>(sums.size()),
                               DType::kF32, comm::ReduceOp::kSum)));
  CaptionScores s;
  s.images = static_cast<int64_t>(sums[4]);
  const double n = std::max(1.0f, sums[4]);
  s.exact = sums[0] / n, s.size = sums[1] / n, s.colour = sums[2] / n, s.shape = sums[3] / n;
  for (int i = 0; i < kExamples; ++i) {
    const float* x = &sums[5 + kExampleFloats * i];
    if (x[0] != 1) continue;
    int32_t truth[6] = {ShapesTask::kBos, 0, 0, 0, 0, ShapesTask::kEos},
            got[6] = {ShapesTask::kBos, 0, 0, 0, 0, ShapesTask::kEos};
    bool ok = true;
    for (int k = 0; k < 4; ++k) {
      truth[1 + k] = static_cast<int32_t>(x[2 + k]);
      got[1 + k] = static_cast<int32_t>(x[6 + k]);
      ok &= truth[1 + k] == got[1 + k];
    }
    s.examples.push_back(absl::StrCat("  image ", static_cast<int64_t>(x[1]), ": \"",
                                      ShapesTask::Decode(truth, 6), "\" -> model \"",
                                      ShapesTask::Decode(got, 6), "\"", ok ? "" : "  (wrong)"));
  }
  return s;
}

std::string FormatScores(const CaptionScores& s) {
  std::string out = absl::StrFormat(
      "captions of %d unseen images: %.1f%% exactly right (chance %.1f%%); size %.1f%% (chance "
      "50%%), "
      "colour %.1f%% (16.7%%), shape %.1f%% (25%%)\n",
      s.images, 100.0 * s.exact, 100.0 / 48, 100.0 * s.size, 100.0 * s.colour, 100.0 * s.shape);
  for (const std::string& e : s.examples) absl::StrAppend(&out, e, "\n");
  return out;
}

}  // namespace gtp::recipes::vlm
