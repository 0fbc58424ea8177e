#include "recipes/vlm_mimo/batches.h"

#include "layers/linear.h"

namespace gtp::recipes::vlm {

absl::Status ForwardBatch(mimo::MimoModel& model, const data::shapes::ShapesTask& task,
                          const kernels::Exec& e, data::shapes::Split split, int64_t base,
                          bool train, std::vector<int32_t>* tokens_host) {
  Tensor patches, tokens, targets;
  std::vector<int64_t> enc_ids, lang_ids;
  if (model.has_encoder()) {
    const auto r = model.EncoderSamples();
    const auto b = task.MakeBatch(split, base + r.first, r.count);
    // [B_enc·Np, patch_dim]
    patches = layers::TensorFromHost(e, b.patches.data(),
                                     {r.count * task.num_patches(), task.patch_dim()}, DType::kF32);
    enc_ids = b.ids;
  }
  if (model.has_language()) {
    const auto r = model.LanguageSamples();
    const auto b = task.MakeBatch(split, base + r.first, r.count);
    if (tokens_host != nullptr && tokens_host->empty()) *tokens_host = b.tokens;
    // [B, T] each
    tokens = layers::HostToDevice(e, tokens_host ? *tokens_host : b.tokens,
                                  {r.count, task.sequence_length()});
    targets = layers::HostToDevice(e, b.targets, {r.count, task.sequence_length()});
    lang_ids = b.ids;
  }
  return model.Forward(patches, tokens, targets, enc_ids, lang_ids, train);
}

}  // namespace gtp::recipes::vlm
