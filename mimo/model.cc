#include "mimo/model.h"

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "layers/linear.h"
#include "mimo/grids.h"

namespace gtp::mimo {

namespace ops = kernels::ops;

namespace {

absl::Status Bad(const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("mimo: ", what));
}

// Sample ids as a host i32 [n, 2] tensor (low, high words), one row each.
Tensor IdsTensor(const std::vector<int64_t>& ids, Allocator& host) {
  Tensor t = Tensor::Empty({static_cast<int64_t>(ids.size()), 2}, DType::kI32, host);
  for (size_t i = 0; i < ids.size(); ++i) {
    t.data<int32_t>()[2 * i] = static_cast<int32_t>(ids[i] & 0xffffffff);
    t.data<int32_t>()[2 * i + 1] = static_cast<int32_t>(ids[i] >> 32);
  }
  return t;
}

std::vector<int64_t> IdsFrom(const Tensor& t) {
  std::vector<int64_t> ids(t.defined() ? t.dim(0) : 0);
  for (size_t i = 0; i < ids.size(); ++i) {
    ids[i] = static_cast<int64_t>(static_cast<uint32_t>(t.data<int32_t>()[2 * i])) |
             (static_cast<int64_t>(t.data<int32_t>()[2 * i + 1]) << 32);
  }
  return ids;
}

}  // namespace

absl::StatusOr<std::unique_ptr<MimoModel>> MimoModel::Create(
    const MimoConfig& config, const parallel::HyperCommGrid& encoder,
    const parallel::HyperCommGrid& language, comm::Communicator& world, int64_t B, int64_t T,
    const kernels::Exec& exec, Allocator& host, const layers::GtpOptions& gtp) {
  GTP_RETURN_IF_ERROR(ValidateModuleGrids({&encoder, &language}, world.size()));
  std::unique_ptr<MimoModel> m(new MimoModel());
  m->config_ = config;
  m->config_.encoder.out_dim = config.language.block.n_embd;
  m->config_.language.prefix_len = config.encoder.num_patches;
  m->exec_ = exec;
  m->host_ = &host;
  layers::GtpOptions g = gtp;
  const bool per_token = config.language.loss_reduction == layers::LossReduction::kSum;
  g.grad_reduce = per_token ? comm::ReduceOp::kSum : comm::ReduceOp::kMean;
  m->enc_grid_ = &encoder;
  m->lang_grid_ = &language;
  m->B_ = B;
  m->Np_ = config.encoder.num_patches;
  m->num_encoder_lanes_ = encoder.num_data_lanes();
  m->num_language_lanes_ = language.num_data_lanes();
  const int64_t G = B * m->num_language_lanes_;
  if (B <= 0 || G % m->num_encoder_lanes_ != 0) {
    return Bad(absl::StrCat("the global batch of ", G, " samples (", B, " per language lane × ",
                            m->num_language_lanes_, " lanes) does not split over ",
                            m->num_encoder_lanes_, " encoder lanes"));
  }
  m->B_enc_ = G / m->num_encoder_lanes_;
  // The bridges: image rows, and the sample ids that check the loaders.
  GTP_ASSIGN_OR_RETURN(Bridge f, Bridge::Create("mimo.features", encoder, language, world, host));
  m->features_ = std::make_unique<Bridge>(std::move(f));
  GTP_ASSIGN_OR_RETURN(Bridge i, Bridge::Create("mimo.ids", encoder, language, world, host,
                                                Bridge::kDefaultTagBase + 8));
  m->ids_ = std::make_unique<Bridge>(std::move(i));
  if (encoder.is_member()) {
    GTP_ASSIGN_OR_RETURN(m->encoder_lane_, encoder.DataLane(world.rank()));
    GTP_ASSIGN_OR_RETURN(const parallel::ProcessGroupCollection* pgs, encoder.groups());
    GTP_ASSIGN_OR_RETURN(m->encoder_, layers::vision::VisionEncoder::Create(m->config_.encoder,
                                                                            m->B_enc_, *pgs, exec, g));
  }
  if (language.is_member()) {
    GTP_ASSIGN_OR_RETURN(m->language_lane_, language.DataLane(world.rank()));
    GTP_ASSIGN_OR_RETURN(const parallel::ProcessGroupCollection* pgs, language.groups());
    GTP_ASSIGN_OR_RETURN(m->language_,
                         layers::GptModel::Create(m->config_.language, B, T, *pgs, exec, g));
  }
  return m;
}

MimoModel::Range MimoModel::EncoderSamples() const {
  if (encoder_lane_ < 0) return {};
  return {encoder_lane_ * B_enc_, B_enc_};
}

MimoModel::Range MimoModel::LanguageSamples() const {
  if (language_lane_ < 0) return {};
  return {language_lane_ * B_, B_};
}

absl::Status MimoModel::Forward(const Tensor& patches, const Tensor& tokens, const Tensor& targets,
                                const std::vector<int64_t>& encoder_ids,
                                const std::vector<int64_t>& language_ids, bool train) {
  LaneBatch out, ids;
  if (has_encoder()) {
    if (static_cast<int64_t>(encoder_ids.size()) != B_enc_) {
      return Bad(absl::StrCat("encoder lane ", encoder_lane_, " was given ", encoder_ids.size(),
                              " sample ids for ", B_enc_, " samples"));
    }
    GTP_ASSIGN_OR_RETURN(out.data, encoder_->Forward(patches));
    out.sample_rows.assign(B_enc_, Np_);
    ids.data = IdsTensor(encoder_ids, *host_);
    ids.sample_rows.assign(B_enc_, 1);
  }
  GTP_ASSIGN_OR_RETURN(LaneBatch got_ids, ids_->Forward(ids));
  GTP_ASSIGN_OR_RETURN(received_, features_->Forward(out));
  if (!has_language()) return absl::OkStatus();
  const std::vector<int64_t> arrived = IdsFrom(got_ids.data);
  if (arrived != language_ids) {
    std::string a, b;
    for (int64_t v : arrived) absl::StrAppend(&a, a.empty() ? "" : ",", v);
    for (int64_t v : language_ids) absl::StrAppend(&b, b.empty() ? "" : ",", v);
    return absl::FailedPreconditionError(absl::StrCat(
        "mimo: language lane ", language_lane_, " reads samples [", b,
        "] but the encoder lanes feeding it encoded [", a,
        "]: the loaders disagree (see MimoModel::EncoderSamples / LanguageSamples)"));
  }
  GTP_RETURN_IF_ERROR(language_->SetPrefix(received_.data));
  return language_->ForwardAsync(tokens, targets, /*backward_follows=*/train);
}

absl::Status MimoModel::Backward() {
  LaneBatch grad;
  if (has_language()) {
    GTP_RETURN_IF_ERROR(language_->Backward());
    // Scaled so the encoder's lane mean is the language lanes' mean (see
    // the file comment).
    grad.data = language_->prefix_grad();
    const bool per_token = config_.language.loss_reduction == layers::LossReduction::kSum;
    const float scale = per_token ? 1.0f
                                  : static_cast<float>(num_encoder_lanes_) /
                                        static_cast<float>(num_language_lanes_);
    if (scale != 1.0f) {
      Tensor scaled = exec_.Empty(grad.data.shape(), DType::kF32);
      ops::Axpby(exec_, scale, grad.data, 0.0f, scaled);
      grad.data = scaled;
    }
    grad.sample_rows = received_.sample_rows;
    grad.parts = received_.parts;
  }
  GTP_ASSIGN_OR_RETURN(LaneBatch back, features_->Backward(grad));
  received_ = LaneBatch();
  if (!has_encoder()) return absl::OkStatus();
  return encoder_->Backward(back.data);
}

}  // namespace gtp::mimo
