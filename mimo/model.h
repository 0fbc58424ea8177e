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
// Pipeline parallelism in the language module (its grid's pp > 1, optional
// virtual stages MimoConfig::language_vpp, boundaries from
// config.language.pipeline.boundaries or `|` in its layer pattern): Step()
// first runs every micro-batch's encoder forward and bridge transfer (the
// prefix rows land on the language model's first stage), then the language
// model's pipeline schedule (pipeline/runner.h: 1F1B or interleaved), then
// every micro-batch's prefix gradient back through the bridge to the
// encoder, which recomputes that micro-batch's forward just before its
// backward (it holds one micro-batch's activations at a time; the recompute
// is the same arithmetic, so gradients are those of one pass). The encoder
// grid has pp = 1 (the vision encoder has no pipeline split), so a
// language PP grid is always disjoint from the encoder's.
//
// Every method is collective over `world` (every rank calls it, in the same
// order) and blocks. Either grid may be a single rank; the grids may be
// disjoint (covering the world) or identical (colocated).
#pragma once

#include <functional>
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
#include "pipeline/runner.h"

namespace gtp::mimo {

struct MimoConfig {
  layers::vision::VisionEncoderConfig encoder;  // out_dim is set to language's n_embd
  layers::GptConfig language;                   // prefix_len is set to encoder.num_patches
  // Model chunks per language pipeline stage (interleaved schedule when > 1;
  // needs the language grid's pp > 1).
  int language_vpp = 1;
};

// One micro-batch of one rank's data for MimoModel::Step (see Forward for
// what each field is and where it matters).
struct MimoBatch {
  Tensor patches, tokens, targets;
  std::vector<int64_t> encoder_ids, language_ids;
};

enum class Module { kEncoder, kLanguage };

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
  bool has_language() const { return !parts_.empty(); }
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
  // Forward/Backward need a language grid without PP (use Step).
  absl::Status Backward();

  // One training step of M micro-batches, any language PP: every
  // micro-batch's forward and backward through both modules (see the file
  // comment for the order under PP). batch(m) is called once per
  // micro-batch, in order, on every rank; what it returns must stay valid
  // until Step returns. before_backward(module, m) runs before this rank's
  // first backward of micro-batch m in that module (e.g. the matching
  // MimoOptimizer::Start*Microbatch; under language PP their order is the
  // schedule's, so pass last = false there). The language losses
  // accumulate in language_head()'s accumulator.
  absl::Status Step(int M, const std::function<absl::StatusOr<MimoBatch>(int)>& batch,
                    const std::function<void(Module, int)>& before_backward);

  const parallel::HyperCommGrid& encoder_grid() const { return *enc_grid_; }
  const parallel::HyperCommGrid& language_grid() const { return *lang_grid_; }
  layers::vision::VisionEncoder* encoder() { return encoder_.get(); }
  // The language model's first part on this rank (the whole model without
  // PP; the prefix-taking part on the first stage); null off the grid.
  layers::GptModel* language() { return parts_.empty() ? nullptr : parts_.front().get(); }
  // Every language part this rank holds, in chunk order (empty off the grid).
  std::vector<layers::GptModel*> language_parts() const;
  // The part holding the LM head (and the loss), or null on this rank.
  layers::GptModel* language_head();
  int language_pp() const { return lang_grid_->config().pp; }
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
  std::vector<std::unique_ptr<layers::GptModel>> parts_;  // language chunks
  std::unique_ptr<pipeline::PipelineRunner> runner_;      // language PP > 1
  LaneBatch received_;  // what the language lane got (for the backward's split)

  // The encoder's forward and both bridges for one micro-batch; `received`
  // gets the language lane's prefix rows (first stage) after the sample-id
  // check.
  absl::Status EncodeAndBridge(const Tensor& patches, const std::vector<int64_t>& encoder_ids,
                               const std::vector<int64_t>& language_ids, LaneBatch* received);
  // The prefix gradient through the bridge and the encoder's backward.
  // `prefix_grad` is the first stage's gradient (undefined elsewhere),
  // `received` that micro-batch's forward output.
  absl::Status BridgeBackAndEncode(const Tensor& prefix_grad, const LaneBatch& received,
                                   const Tensor* recompute_patches);
  absl::Status PipelineStep(int M, const std::function<absl::StatusOr<MimoBatch>(int)>& batch,
                            const std::function<void(Module, int)>& before_backward);
};

}  // namespace gtp::mimo
