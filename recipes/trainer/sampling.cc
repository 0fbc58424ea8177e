#include "recipes/trainer/sampling.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "comm/local/local_communicator.h"
#include "core/status.h"
#include "layers/inference/inference_session.h"
#include "layers/layer_kind.h"
#include "layers/inference/sampling.h"
#include "layers/linear.h"
#include "recipes/trainer/config.h"
#include "recipes/trainer/typed_config.h"

namespace gtp::recipes {

absl::Status CheckSampling(const proto::Recipe& r) {
  const auto& t = r.train();
  if (t.sample_every() <= 0) return absl::OkStatus();
  GTP_ASSIGN_OR_RETURN(const std::vector<layers::LayerKind> kinds, LayerKindsOf(r.model()));
  if (r.model().moe().num_experts() > 0 || layers::AnyMixer(kinds, layers::MixerKind::kMamba)) {
    return absl::InvalidArgumentError(
        "train.sample_every: MoE and Mamba models cannot be sampled yet (train.sample_every=0 "
        "turns sampling off; tools/generate samples a dense checkpoint)");
  }
  // (A longer prompt was cut to the context and printed whole, as if continued.)
  const int64_t T = r.model().seq_len();
  if (static_cast<int64_t>(t.sample_prompt().size()) > T) {
    return absl::InvalidArgumentError(absl::StrCat("train.sample_prompt is ",
                                                   t.sample_prompt().size(),
                                                   " bytes (a token each) but the model's "
                                                   "context (model.seq_len) is ",
                                                   T, ": give a prompt of at most ", T, " bytes"));
  }
  return absl::OkStatus();
}

absl::Status TextSampler::Print(const optimizer::ParamSet& params_, int64_t step_) {
  const auto& t = r_.train();
  if (sample_model_ == nullptr) {
    GTP_RETURN_IF_ERROR(CheckSampling(r_));
    sample_world_ = comm::CreateLocalWorld(1);
    GTP_ASSIGN_OR_RETURN(auto pgs, parallel::ProcessGroupCollection::Build(
                                       parallel::ParallelConfig{}, *sample_world_[0]));
    sample_pgs_ = std::make_unique<parallel::ProcessGroupCollection>(std::move(pgs));
    layers::GptConfig mc = ModelConfig(r_);
    mc.block.dtype = DType::kF32;
    mc.block.sequence_parallel = false;
    mc.block.recompute = false;
    GTP_ASSIGN_OR_RETURN(sample_model_, layers::GptModel::Create(mc, 1, 1, *sample_pgs_,
                                                                 kernels::Exec::Cpu(staging_)));
  }
  std::vector<std::pair<std::string, Shape>> names;
  for (const layers::ShardedParam* p : sample_model_->sharded_params()) {
    const auto& L = p->global_layout();
    names.emplace_back(p->name(), Shape{L.global_rows, L.global_cols});
  }
  for (const layers::ReplicatedParam* p : sample_model_->replicated_params()) {
    names.emplace_back(p->name, p->value.shape());
  }
  for (const auto& [name, shape] : names) {
    std::vector<float> g(shape.numel(), -INFINITY);
    for (const layers::ShardedParam* p : params_.sharded) {
      if (p->name() == name) layers::StoreShardToGlobal(*p, p->shard(), g.data());
    }
    for (const layers::ReplicatedParam* p : params_.replicated) {
      if (p->name != name) continue;
      Tensor host = Tensor::Empty(p->value.shape(), p->value.dtype(), staging_);
      GTP_RETURN_IF_ERROR(Copy(p->value, host, exec_.stream, /*sync=*/true));
      const int64_t rows = p->value.dim(0), cols = p->value.numel() / std::max<int64_t>(1, rows);
      const int64_t gcols = std::max<int64_t>(1, p->layout.global_cols);
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t gr = p->layout.row_map ? p->layout.row_map(r) : r;
        for (int64_t c = 0; c < cols; ++c) {
          const int64_t i = r * cols + c;
          g[gr * gcols + p->layout.col_offset + c] = host.dtype() == DType::kF32
                                                         ? host.data<float>()[i]
                                                         : ToF32(host.data<bf16>()[i]);
        }
      }
    }
    GTP_RETURN_IF_ERROR(comm::Run(host_.AllReduce(g.data(), g.data(),
                                                  static_cast<int64_t>(g.size()), DType::kF32,
                                                  comm::ReduceOp::kMax)));
    if (!(host_.rank() == 0)) continue;
    if (std::find(g.begin(), g.end(), -INFINITY) != g.end()) {
      return absl::InternalError(absl::StrCat("train.sample_every: no rank holds all of ", name));
    }
    GTP_RETURN_IF_ERROR(sample_model_->LoadGlobal(name, g.data(), shape));
  }
  if (!(host_.rank() == 0)) return absl::OkStatus();
  GTP_ASSIGN_OR_RETURN(auto session, layers::inference::InferenceSession::Create(
                                         *sample_model_, sample_model_->config().max_seq_len));
  std::vector<int32_t> ids;
  for (unsigned char ch : t.sample_prompt()) ids.push_back(ch);
  if (ids.empty()) ids.push_back('\n');  // (CheckSampling: the prompt fits the context)
  layers::inference::SamplingOptions so;
  so.seed = t.seed();
  std::string text = t.sample_prompt();
  GTP_ASSIGN_OR_RETURN(std::vector<float> logits, session->Append(ids));
  logits.erase(logits.begin(), logits.end() - session->vocab_size());
  const int64_t n = t.sample_tokens() > 0 ? t.sample_tokens() : 64;
  for (int64_t i = 0; i < n; ++i) {
    const int32_t next = layers::inference::SampleToken(logits, so, i);
    text += next < 256 ? std::string(1, static_cast<char>(next)) : absl::StrCat("<", next, ">");
    if (i + 1 == n || session->length() == session->max_len()) break;
    GTP_ASSIGN_OR_RETURN(logits, session->Append({next}));
  }
  std::printf("%sstep %5lld  sample: %s\n", progress_bar_ ? "\n" : "",
              static_cast<long long>(step_), text.c_str());
  return absl::OkStatus();
}

}  // namespace gtp::recipes
