#include "layers/vision/vision_encoder.h"

#include "absl/strings/str_cat.h"
#include "core/philox.h"
#include "core/status.h"

namespace gtp::layers::vision {

namespace ops = kernels::ops;

namespace {

absl::Status Bad(const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("vision encoder: ", what));
}

ReplicatedParam Replicated(const kernels::Exec& e, const std::string& name, int64_t rows,
                           int64_t cols, DType dt, float std, uint64_t seed) {
  std::vector<float> v(static_cast<size_t>(rows * cols), 0.0f);
  if (std > 0) {
    const uint64_t key = KeyFromName(name, seed);
    for (size_t i = 0; i < v.size(); ++i) v[i] = std * PhiloxNormal(key, i);
  }
  const Shape shape = cols == 1 ? Shape{rows} : Shape{rows, cols};
  return ReplicatedParam{name, TensorFromHost(e, v.data(), shape, dt), e.Zeros(shape), false,
                         {rows, cols, [](int64_t r) { return r; }, 0}};
}

}  // namespace

absl::StatusOr<std::unique_ptr<VisionEncoder>> VisionEncoder::Create(
    const VisionEncoderConfig& config, int64_t B, const parallel::ProcessGroupCollection& pgs,
    const kernels::Exec& exec, const GtpOptions& gtp_options) {
  VisionEncoderConfig c = config;
  if (c.patch_dim <= 0 || c.num_patches <= 0 || c.n_layer < 0 || c.block.n_embd <= 0 ||
      c.out_dim <= 0 || B <= 0) {
    return Bad(absl::StrCat("needs patch_dim, num_patches, n_embd, out_dim and B > 0 (got ",
                            c.patch_dim, ", ", c.num_patches, ", ", c.block.n_embd, ", ",
                            c.out_dim, ", ", B, ")"));
  }
  if (pgs.Has(parallel::groups::kCp) && (*pgs.Group(parallel::groups::kCp))->is_member() && (*pgs.Get(parallel::groups::kCp))->size() > 1) {
    return Bad("context parallelism is not supported");
  }
  c.block.causal = false;
  c.block.sequence_parallel = false;
  c.block.n_layer = std::max(1, c.n_layer);
  if (c.projector_hidden <= 0) c.projector_hidden = c.out_dim;
  std::unique_ptr<VisionEncoder> m(new VisionEncoder());
  m->config_ = c;
  m->exec_ = exec;
  m->B_ = B;
  m->chain_ = std::make_unique<GtpChain>(exec, gtp_options);
  GTP_ASSIGN_OR_RETURN(comm::Communicator * tp, pgs.Get(parallel::groups::kTp));
  const int64_t C = c.block.n_embd, Np = c.num_patches;
  const DType dt = c.block.dtype;
  const uint64_t seed = c.block.seed;
  m->patch_w_ = Replicated(exec, c.prefix + "patch.weight", C, c.patch_dim, dt, c.block.init_std, seed);
  m->patch_b_ = Replicated(exec, c.prefix + "patch.bias", C, 1, dt, 0.0f, seed);
  m->pos_ = Replicated(exec, c.prefix + "pos.weight", Np, C, dt, c.block.init_std, seed);
  m->replicated_ = {&m->patch_w_, &m->patch_b_, &m->pos_};
  std::vector<int32_t> pos(B * Np);
  for (int64_t r = 0; r < B * Np; ++r) pos[r] = static_cast<int32_t>(r % Np);
  m->pos_ids_ = HostToDevice(exec, pos, {B * Np});
  for (int l = 0; l < c.n_layer; ++l) {
    GTP_ASSIGN_OR_RETURN(auto b, Block::Create(absl::StrCat(c.prefix, "h.", l), c.block, B, Np, pgs,
                                               m->chain_.get()));
    b->CollectParams(&m->sharded_, &m->replicated_);
    m->blocks_.push_back(std::move(b));
  }
  m->ln_post_ = std::make_unique<Norm>(c.prefix + "ln_post", c.block, tp->size(), exec);
  for (ReplicatedParam* p : m->ln_post_->params()) m->replicated_.push_back(p);
  LinearConfig fc{c.prefix + "proj.fc", C, c.projector_hidden};
  fc.init_std = c.block.init_std;
  fc.seed = seed;
  fc.dtype = dt;
  GTP_ASSIGN_OR_RETURN(m->fc_, ColumnParallelLinear::Create(fc, pgs, m->chain_.get()));
  LinearConfig out{c.prefix + "proj.out", c.projector_hidden, c.out_dim};
  out.init_std = c.block.init_std;
  out.seed = seed;
  out.dtype = dt;
  GTP_ASSIGN_OR_RETURN(m->out_, RowParallelLinear::Create(out, pgs, m->chain_.get()));
  m->sharded_.push_back(&m->fc_->weight());
  m->sharded_.push_back(&m->out_->weight());
  if (ReplicatedParam* b = m->fc_->bias()) m->replicated_.push_back(b);
  if (ReplicatedParam* b = m->out_->bias()) m->replicated_.push_back(b);
  return m;
}

absl::StatusOr<Tensor> VisionEncoder::Forward(const Tensor& patches) {
  const kernels::Exec& e = exec_;
  const int64_t N = B_ * config_.num_patches, C = config_.block.n_embd;
  if (patches.rank() != 2 || patches.dim(0) != N || patches.dim(1) != config_.patch_dim) {
    return Bad(absl::StrCat("patches must be [B·Np = ", N, ", ", config_.patch_dim, "], got ",
                            patches.ToString()));
  }
  const DType dt = config_.block.dtype;
  if (patches.dtype() == dt) {
    patches_ = patches;
  } else {
    patches_ = e.Empty(patches.shape(), dt);
    ops::Cast(e, patches, patches_);
  }
  Tensor x = e.Empty({N, C}, dt);
  ops::Linear(e, patches_, patch_w_.value, x, 0.0f, patch_b_.value);
  Tensor pe = e.Empty({N, C}, dt);
  ops::EmbeddingForward(e, pos_ids_, pos_.value, pe, 0);
  ops::Axpby(e, 1.0f, pe, 1.0f, x);
  for (auto& b : blocks_) {
    GTP_ASSIGN_OR_RETURN(x, b->Forward(x));
  }
  Tensor h = ln_post_->Forward(x);
  GTP_ASSIGN_OR_RETURN(Tensor a, fc_->ForwardGelu(h, Direction::kForward, &pre_));
  return out_->Forward(a);
}

absl::Status VisionEncoder::Backward(const Tensor& dout_in) {
  const kernels::Exec& e = exec_;
  if (!patches_.defined()) return absl::FailedPreconditionError("vision encoder: Backward without Forward");
  Tensor dout = dout_in;
  if (dout.dtype() != config_.block.dtype) {
    dout = e.Empty(dout_in.shape(), config_.block.dtype);
    ops::Cast(e, dout_in, dout);
  }
  GTP_ASSIGN_OR_RETURN(Tensor dpre, out_->BackwardDGelu(dout, pre_));
  pre_ = Tensor();
  GTP_ASSIGN_OR_RETURN(Tensor dh, fc_->Backward(dpre));
  Tensor dx = ln_post_->Backward(dh);
  for (size_t l = blocks_.size(); l-- > 0;) {
    GTP_ASSIGN_OR_RETURN(dx, blocks_[l]->Backward(dx));
  }
  ops::EmbeddingBackward(e, pos_ids_, dx, pos_.grad, 0);
  Tensor db = e.Empty({config_.block.n_embd}, DType::kF32);
  ops::LinearBackwardWeightBGrad(e, dx, patches_, patch_w_.grad, 1.0f, db);
  ops::Axpby(e, 1.0f, db, 1.0f, patch_b_.grad);
  patches_ = Tensor();
  return chain_->FinishBackward();
}

void VisionEncoder::DropActivations() {
  patches_ = pre_ = Tensor();
  for (auto& b : blocks_) b->DropActivations();
  ln_post_->DropActivations();
  fc_->DropActivations();
  out_->DropActivations();
}

}  // namespace gtp::layers::vision
