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

// `t` (host) on e's device, copied on e's stream.
absl::StatusOr<Tensor> OnExec(const kernels::Exec& e, const Tensor& t) {
  if (!e.is_cuda()) return t;
  GTP_ASSIGN_OR_RETURN(Tensor d, Tensor::TryEmpty(t.shape(), t.dtype(), *e.alloc));
  GTP_RETURN_IF_ERROR(Copy(t, d, e.stream, /*sync=*/true));
  return d;
}

// `t` (on e's device, or undefined) on the host, after e's stream.
absl::StatusOr<Tensor> OnHost(const kernels::Exec& e, const Tensor& t, Allocator& host) {
  if (!e.is_cuda() || !t.defined()) return t;
  Tensor h = Tensor::Empty(t.shape(), t.dtype(), host);
  GTP_RETURN_IF_ERROR(Copy(t, h, e.stream, /*sync=*/true));
  return h;
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
  // Pipeline parallelism: the language module only.
  const int P = language.config().pp, vpp = config.language_vpp;
  if (encoder.config().pp != 1) {
    return Bad(absl::StrCat("the encoder grid has pp = ", encoder.config().pp,
                            ": the vision encoder has no pipeline split (set its pp to 1; the "
                            "language grid may have PP)"));
  }
  if (vpp < 1 || (vpp > 1 && P == 1)) {
    return Bad(absl::StrCat("language_vpp = ", vpp, " needs a language grid with pp > 1 (got pp = ",
                            P, "); use language_vpp = 1"));
  }
  // The bridges: image rows, and the sample ids that check the loaders.
  // Both on the model's device (the ids go there and back: a device-memory
  // world moves nothing else).
  BridgeOptions bo;
  bo.cuda_stream = exec.stream;
  GTP_ASSIGN_OR_RETURN(Bridge f,
                       Bridge::Create("mimo.features", encoder, language, world, *exec.alloc, bo));
  m->features_ = std::make_unique<Bridge>(std::move(f));
  bo.tag_base = Bridge::kDefaultTagBase + 8;
  GTP_ASSIGN_OR_RETURN(Bridge i,
                       Bridge::Create("mimo.ids", encoder, language, world, *exec.alloc, bo));
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
    // Pipeline: this rank's chunks, virtual stages c·PP + stage.
    GTP_ASSIGN_OR_RETURN(comm::Communicator * pp, pgs->Get(parallel::groups::kPp));
    for (int c = 0; c < vpp; ++c) {
      layers::GptConfig lc = m->config_.language;
      lc.pipeline.index = c * P + pp->rank();
      lc.pipeline.count = P * vpp;
      GTP_ASSIGN_OR_RETURN(auto part, layers::GptModel::Create(lc, B, T, *pgs, exec, g));
      m->parts_.push_back(std::move(part));
    }
    if (P > 1) {
      GTP_ASSIGN_OR_RETURN(m->runner_,
                           pipeline::PipelineRunner::Create(m->language_parts(), pp, exec));
    }
  }
  return m;
}

std::vector<layers::GptModel*> MimoModel::language_parts() const {
  std::vector<layers::GptModel*> raw;
  for (const auto& p : parts_) raw.push_back(p.get());
  return raw;
}

layers::GptModel* MimoModel::language_head() {
  for (const auto& p : parts_) {
    if (p->has_head()) return p.get();
  }
  return nullptr;
}

MimoModel::Range MimoModel::EncoderSamples() const {
  if (encoder_lane_ < 0) return {};
  return {encoder_lane_ * B_enc_, B_enc_};
}

MimoModel::Range MimoModel::LanguageSamples() const {
  if (language_lane_ < 0) return {};
  return {language_lane_ * B_, B_};
}

absl::Status MimoModel::EncodeAndBridge(const Tensor& patches,
                                        const std::vector<int64_t>& encoder_ids,
                                        const std::vector<int64_t>& language_ids,
                                        LaneBatch* received) {
  LaneBatch out, ids;
  if (has_encoder()) {
    if (static_cast<int64_t>(encoder_ids.size()) != B_enc_) {
      return Bad(absl::StrCat("encoder lane ", encoder_lane_, " was given ", encoder_ids.size(),
                              " sample ids for ", B_enc_, " samples"));
    }
    GTP_ASSIGN_OR_RETURN(out.data, encoder_->Forward(patches));
    out.sample_rows.assign(B_enc_, Np_);
    GTP_ASSIGN_OR_RETURN(ids.data, OnExec(exec_, IdsTensor(encoder_ids, *host_)));
    ids.sample_rows.assign(B_enc_, 1);
  }
  GTP_ASSIGN_OR_RETURN(LaneBatch got_ids, ids_->Forward(ids));
  GTP_ASSIGN_OR_RETURN(*received, features_->Forward(out));
  // Only the language model's first stage receives (and checks).
  if (!has_language() || !received->data.defined()) return absl::OkStatus();
  GTP_ASSIGN_OR_RETURN(const Tensor arrived_host, OnHost(exec_, got_ids.data, *host_));
  const std::vector<int64_t> arrived = IdsFrom(arrived_host);
  if (arrived != language_ids) {
    std::string a, b;
    for (int64_t v : arrived) absl::StrAppend(&a, a.empty() ? "" : ",", v);
    for (int64_t v : language_ids) absl::StrAppend(&b, b.empty() ? "" : ",", v);
    return absl::FailedPreconditionError(absl::StrCat(
        "mimo: language lane ", language_lane_, " reads samples [", b,
        "] but the encoder lanes feeding it encoded [", a,
        "]: the loaders disagree (see MimoModel::EncoderSamples / LanguageSamples)"));
  }
  return absl::OkStatus();
}

absl::Status MimoModel::BridgeBackAndEncode(const Tensor& prefix_grad, const LaneBatch& received,
                                            const Tensor* recompute_patches) {
  LaneBatch grad;
  if (prefix_grad.defined()) {
    // Scaled so the encoder's lane mean is the language lanes' mean (see
    // the file comment).
    grad.data = prefix_grad;
    const bool per_token = config_.language.loss_reduction == layers::LossReduction::kSum;
    const float scale = per_token ? 1.0f
                                  : static_cast<float>(num_encoder_lanes_) /
                                        static_cast<float>(num_language_lanes_);
    if (scale != 1.0f) {
      Tensor scaled = exec_.Empty(grad.data.shape(), DType::kF32);
      ops::Axpby(exec_, scale, grad.data, 0.0f, scaled);
      grad.data = scaled;
    }
    grad.sample_rows = received.sample_rows;
    grad.parts = received.parts;
  }
  GTP_ASSIGN_OR_RETURN(LaneBatch back, features_->Backward(grad));
  if (!has_encoder()) return absl::OkStatus();
  if (recompute_patches != nullptr) {
    GTP_RETURN_IF_ERROR(encoder_->Forward(*recompute_patches).status());
  }
  return encoder_->Backward(back.data);
}

absl::Status MimoModel::Forward(const Tensor& patches, const Tensor& tokens, const Tensor& targets,
                                const std::vector<int64_t>& encoder_ids,
                                const std::vector<int64_t>& language_ids, bool train) {
  if (runner_ != nullptr || language_pp() > 1) {
    return absl::FailedPreconditionError(
        "mimo: Forward/Backward on a language grid with PP > 1: use MimoModel::Step");
  }
  GTP_RETURN_IF_ERROR(EncodeAndBridge(patches, encoder_ids, language_ids, &received_));
  if (!has_language()) return absl::OkStatus();
  GTP_RETURN_IF_ERROR(language()->SetPrefix(received_.data));
  return language()->ForwardAsync(tokens, targets, /*backward_follows=*/train);
}

absl::Status MimoModel::Backward() {
  if (language_pp() > 1) {
    return absl::FailedPreconditionError(
        "mimo: Forward/Backward on a language grid with PP > 1: use MimoModel::Step");
  }
  Tensor prefix_grad;
  if (has_language()) {
    GTP_RETURN_IF_ERROR(language()->Backward());
    prefix_grad = language()->prefix_grad();
  }
  const LaneBatch received = std::move(received_);
  received_ = LaneBatch();
  return BridgeBackAndEncode(prefix_grad, received, nullptr);
}

absl::Status MimoModel::Step(int M, const std::function<absl::StatusOr<MimoBatch>(int)>& batch,
                             const std::function<void(Module, int)>& before_backward) {
  if (M < 1) return Bad(absl::StrCat("Step needs at least one micro-batch, got ", M));
  if (runner_ != nullptr || language_pp() > 1) return PipelineStep(M, batch, before_backward);
  for (int m = 0; m < M; ++m) {
    GTP_ASSIGN_OR_RETURN(MimoBatch b, batch(m));
    GTP_RETURN_IF_ERROR(Forward(b.patches, b.tokens, b.targets, b.encoder_ids, b.language_ids));
    if (before_backward) {
      if (has_language()) before_backward(Module::kLanguage, m);
      if (has_encoder()) before_backward(Module::kEncoder, m);
    }
    GTP_RETURN_IF_ERROR(Backward());
  }
  return absl::OkStatus();
}

absl::Status MimoModel::PipelineStep(int M,
                                     const std::function<absl::StatusOr<MimoBatch>(int)>& batch,
                                     const std::function<void(Module, int)>& before_backward) {
  // 1. Every micro-batch through the encoder and the bridge (with M > 1
  //    the encoder drops each micro-batch's activations and recomputes them
  //    in 3.: it holds one micro-batch at a time).
  std::vector<MimoBatch> data(M);
  std::vector<LaneBatch> received(M);
  for (int m = 0; m < M; ++m) {
    GTP_ASSIGN_OR_RETURN(data[m], batch(m));
    GTP_RETURN_IF_ERROR(
        EncodeAndBridge(data[m].patches, data[m].encoder_ids, data[m].language_ids, &received[m]));
    if (has_encoder() && M > 1) encoder_->DropActivations();
  }
  // 2. The language model's pipeline schedule; the first stage keeps each
  //    micro-batch's prefix gradient.
  std::vector<Tensor> prefix_grads(M);
  if (has_language()) {
    layers::GptModel* first = language();
    const bool takes_prefix = first->config().pipeline.index == 0;
    auto micro = [&](int m) -> absl::StatusOr<pipeline::MicroBatch> {
      pipeline::MicroBatch b{data[m].tokens, data[m].targets};
      if (takes_prefix) b.prefix = received[m].data;
      return b;
    };
    auto before = [&](int m) {
      if (before_backward) before_backward(Module::kLanguage, m);
    };
    auto after_first = [&](int m) {
      if (takes_prefix) prefix_grads[m] = first->prefix_grad();
    };
    GTP_RETURN_IF_ERROR(runner_->Step(M, micro, before, after_first).status());
    GTP_ASSIGN_OR_RETURN(const parallel::ProcessGroupCollection* pgs, lang_grid_->groups());
    if (pgs->Has(parallel::groups::kEmbd) && (*pgs->Group(parallel::groups::kEmbd))->is_member()) {
      GTP_ASSIGN_OR_RETURN(comm::Communicator * embd, pgs->Get(parallel::groups::kEmbd));
      for (auto& part : parts_) GTP_RETURN_IF_ERROR(part->SyncTiedEmbedding(*embd));
    }
  }
  // 3. Every micro-batch's prefix gradient back to the encoder, which
  //    recomputes that micro-batch's forward (M > 1), in order 0..M-1.
  for (int m = 0; m < M; ++m) {
    if (has_encoder() && before_backward) before_backward(Module::kEncoder, m);
    GTP_RETURN_IF_ERROR(BridgeBackAndEncode(prefix_grads[m], received[m],
                                            M > 1 ? &data[m].patches : nullptr));
  }
  return absl::OkStatus();
}

}  // namespace gtp::mimo
