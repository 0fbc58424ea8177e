// mimo/model.h — a vision-language model trained across two module grids:
// the vision encoder (layers/vision) on one grid, the GPT language model
// (layers/gpt) on another, joined by the bridge (mimo/bridge.h). DESIGN.md §7.
//
//   encoder lane s:  patches of its samples → VisionEncoder → [B_enc·Np, C]
//   bridge:          encoder lanes → language lanes (fan-in / fan-out / 1:1)
//   language lane d: SetPrefix(image rows) → GptModel on [image | caption]
//   backward:        language → prefix gradient → bridge → encoder
//
// Samples: a step's global batch is defined on the language grid: lane d of
// D reads samples [d·B, (d+1)·B) of each micro-batch (B per lane); encoder
// lane s of S reads [s·B_enc, (s+1)·B_enc) with B_enc = B·D/S — the samples
// of the language lanes it feeds, in order (fan-in: a part of one language
// lane; fan-out: k whole lanes). SampleRange() says which; every forward
// checks that the sample ids that reach a language lane are the ones it
// reads (the bridge carries them), so a loader that disagrees is an error,
// not silently wrong training.
//
// Loss normalisation (config.language.loss_reduction):
//  - kMean (default): each language lane's mean loss; the language grid's
//    gradient sync averages over its D lanes, the encoder's over its S
//    lanes, so the prefix gradient each encoder lane receives is scaled by
//    S/D — the encoder's gradient is that of the same mean (a fan-in lane
//    would otherwise get k times too little).
//  - kSum (per-token): each lane differentiates its summed loss and both
//    modules' gradient buffers sum and divide once by the global number of
//    valid targets (MimoOptimizer with LossNormalization::kPerToken; the
//    encoder lanes count the targets of the samples they encode, which add
//    up to the language grid's count). No scale; the GTP chains reduce by
//    sum (set here).
//
// Every method is collective over `world` (every rank calls it, in the same
// order) and blocks. Either grid may be a single rank; the grids may be
// disjoint (covering the world) or identical (colocated).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/allocator.h"
#include "core/kernels/ops.h"
#include "layers/gpt.h"
#include "layers/vision/vision_encoder.h"
#include "mimo/bridge.h"
#include "parallel/hyper_comm_grid.h"

namespace gtp::mimo {

struct MimoConfig {
  layers::vision::VisionEncoderConfig encoder;  // out_dim is set to language's n_embd
  layers::GptConfig language;                   // prefix_len is set to encoder.num_patches
};

class MimoModel {
 public:
  // B: samples per language lane per micro-batch; T: language positions per
  // sample (num_patches + caption). InvalidArgument naming the problem (bad
  // grids, B·D not divisible by S, model configs). Collective; blocks.
  static absl::StatusOr<std::unique_ptr<MimoModel>> Create(
      const MimoConfig& config, const parallel::HyperCommGrid& encoder,
      const parallel::HyperCommGrid& language, comm::Communicator& world, int64_t B, int64_t T,
      const kernels::Exec& exec, Allocator& host, const layers::GtpOptions& gtp = {});

  bool has_encoder() const { return encoder_ != nullptr; }
  bool has_language() const { return language_ != nullptr; }
  // Samples of one micro-batch this rank's encoder / language lane reads:
  // [first, first + count) of the micro-batch's global batch (B·D samples).
  struct Range {
    int64_t first = 0, count = 0;
  };
  Range EncoderSamples() const;
  Range LanguageSamples() const;
  int64_t global_batch() const { return B_ * num_language_lanes_; }

  // One micro-batch. patches [B_enc·Np, patch_dim] on encoder ranks (else
  // ignored), tokens/targets [B, T] on language ranks (else ignored);
  // `sample_ids` the global ids of this rank's encoder samples (encoder
  // ranks) and of its language samples (language ranks; on a colocated rank
  // both, concatenated encoder first). Adds the language lane's mean loss
  // to the language model's accumulator.
  // `train` false: an evaluation forward (no Backward follows; the language
  // model's logits() stay valid).
  absl::Status Forward(const Tensor& patches, const Tensor& tokens, const Tensor& targets,
                       const std::vector<int64_t>& encoder_ids,
                       const std::vector<int64_t>& language_ids, bool train = true);
  // Backward of the last Forward: language, bridge, encoder.
  absl::Status Backward();

  const parallel::HyperCommGrid& encoder_grid() const { return *enc_grid_; }
  const parallel::HyperCommGrid& language_grid() const { return *lang_grid_; }
  layers::vision::VisionEncoder* encoder() { return encoder_.get(); }
  layers::GptModel* language() { return language_.get(); }
  const MimoConfig& config() const { return config_; }

 private:
  MimoModel() = default;
  MimoConfig config_;
  kernels::Exec exec_;
  Allocator* host_ = nullptr;
  const parallel::HyperCommGrid* enc_grid_ = nullptr;
  const parallel::HyperCommGrid* lang_grid_ = nullptr;
  int64_t B_ = 0, B_enc_ = 0, Np_ = 0;
  int num_encoder_lanes_ = 1, num_language_lanes_ = 1;
  int encoder_lane_ = -1, language_lane_ = -1;
  std::unique_ptr<Bridge> features_, ids_;  // the image rows, the sample ids (i32 pairs)
  std::unique_ptr<layers::vision::VisionEncoder> encoder_;
  std::unique_ptr<layers::GptModel> language_;
  LaneBatch received_;  // what the language lane got (for the backward's split)
};

}  // namespace gtp::mimo
