#include "layers/transformer.h"

#include <cmath>
#include <optional>

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "layers/mamba/mamba_mixer.h"
#include "layers/moe_feed_forward.h"

namespace gtp::layers {

namespace ops = kernels::ops;

absl::StatusOr<Tensor> EnterTpRegion(const kernels::Exec& e, comm::Communicator& tp, bool sp,
                                     const Tensor& x) {
  if (sp) return AllGatherRows(e, tp, x);
  return x;
}

absl::StatusOr<Tensor> ExitTpRegionGrad(const kernels::Exec& e, comm::Communicator& tp, bool sp,
                                        const Tensor& dx) {
  if (sp) return ReduceScatterRows(e, tp, dx);
  GTP_RETURN_IF_ERROR(AllReduceSum(tp, dx));
  return dx;
}

namespace {

absl::Status Divisible(const std::string& what, int64_t n, int64_t by, const std::string& by_what) {
  if (by <= 0 || n % by != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " = ", n, " is not divisible by ", by_what, " = ", by));
  }
  return absl::OkStatus();
}

LinearConfig Lin(const std::string& name, const TransformerConfig& c, int64_t in, int64_t out,
                 float std, bool caller_reduces) {
  LinearConfig l;
  l.name = name;
  l.in_features = in;
  l.out_features = out;
  l.bias = c.bias;
  l.sequence_parallel = c.sequence_parallel;
  l.init_std = std;
  l.seed = c.seed;
  l.caller_reduces_input_grad = caller_reduces;
  l.dtype = c.dtype;
  l.fp8 = c.fp8;
  l.fp8_wgrad = c.fp8_wgrad;
  return l;
}

float ProjStd(const TransformerConfig& c) {
  return c.init_std / std::sqrt(2.0f * static_cast<float>(c.n_layer));
}

}  // namespace

// ---- Norm ----------------------------------------------------------------------------

Norm::Norm(const std::string& name, const TransformerConfig& c, int tp, const kernels::Exec& e)
    : kind_(c.norm), eps_(c.norm_eps), exec_(e) {
  const bool tp_sum = c.sequence_parallel && tp > 1;
  const ShardedParam::GlobalLayout whole{c.n_embd, 1, [](int64_t r) { return r; }, 0};
  const std::vector<float> ones(c.n_embd, 1.0f);
  w_ = ReplicatedParam{name + ".weight", TensorFromHost(e, ones.data(), {c.n_embd}, c.dtype),
                       e.Zeros({c.n_embd}), tp_sum, whole};
  if (kind_ == NormKind::kLayerNorm && c.bias) {
    b_ = ReplicatedParam{name + ".bias", e.Zeros({c.n_embd}, c.dtype), e.Zeros({c.n_embd}), tp_sum,
                         whole};
  }
}

Tensor Norm::Forward(const Tensor& x) {
  const int64_t rows = x.numel() / x.dim(-1);
  x_ = x;
  rstd_ = exec_.Empty({rows});
  Tensor y = exec_.Empty(x.shape(), x.dtype());
  if (kind_ == NormKind::kLayerNorm) {
    mean_ = exec_.Empty({rows});
    ops::LayerNormForward(exec_, x, w_.value, b_.value, y, mean_, rstd_, eps_);
  } else {
    ops::RMSNormForward(exec_, x, w_.value, y, rstd_, eps_);
  }
  return y;
}

Tensor Norm::Backward(const Tensor& dy, const Tensor& dresidual) {
  Tensor dx = exec_.Empty(x_.shape(), x_.dtype());
  if (kind_ == NormKind::kLayerNorm) {
    ops::LayerNormBackward(exec_, dy, x_, w_.value, mean_, rstd_, dx, w_.grad, b_.grad, dresidual);
  } else {
    ops::RMSNormBackward(exec_, dy, x_, w_.value, rstd_, dx, w_.grad, dresidual);
  }
  x_ = mean_ = rstd_ = Tensor();
  return dx;
}

std::vector<ReplicatedParam*> Norm::params() {
  std::vector<ReplicatedParam*> p{&w_};
  if (b_.value.defined()) p.push_back(&b_);
  return p;
}

// ---- Attention -------------------------------------------------------------------------

absl::StatusOr<std::unique_ptr<Attention>> Attention::Create(
    const std::string& name, const TransformerConfig& c, int64_t B, int64_t T,
    const parallel::ProcessGroupCollection& pgs, GtpChain* chain) {
  std::unique_ptr<Attention> a(new Attention());
  a->config_ = c;
  a->B_ = B;
  a->T_ = T;
  a->chain_ = chain;
  GTP_ASSIGN_OR_RETURN(a->tp_, pgs.Get(parallel::groups::kTp));
  const int tp = a->tp_->size();
  GTP_RETURN_IF_ERROR(Divisible("n_embd", c.n_embd, c.n_head, "n_head"));
  GTP_RETURN_IF_ERROR(Divisible("n_head", c.n_head, c.kv_heads(), "n_kv_head"));
  GTP_RETURN_IF_ERROR(Divisible("n_kv_head", c.kv_heads(), tp, "the tensor-parallel size"));
  a->hs_ = c.n_embd / c.n_head;
  if (c.rope && a->hs_ % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "RoPE rotates channel pairs: the head size n_embd / n_head = ", c.n_embd, " / ", c.n_head,
        " = ", a->hs_, " must be even (model.n_embd, model.n_head; or model.rope=false)"));
  }
  a->nh_tp_ = c.n_head / tp;
  a->nkv_tp_ = c.kv_heads() / tp;
  // Context parallelism: T is this rank's share of the sequence.
  if (pgs.Has(parallel::groups::kCp) && (*pgs.Group(parallel::groups::kCp))->is_member()) {
    GTP_ASSIGN_OR_RETURN(comm::Communicator * cp, pgs.Get(parallel::groups::kCp));
    if (cp->size() > 1) {
      if (!c.causal) {
        return absl::InvalidArgumentError(
            absl::StrCat(name,
                         ": bidirectional attention (causal = false) is not supported with context "
                         "parallelism (cp = ",
                         cp->size(), "): ring attention is causal only"));
      }
      a->ring_ = std::make_unique<cp::RingAttention>(cp, B, T * cp->size(), a->nh_tp_, a->nkv_tp_,
                                                     a->hs_, chain->exec());
    }
  }
  // q, k and v in one GEMM per pass where the attention reads them in place
  // (TransformerConfig::packing): the fused bf16 attention and RoPE
  // take them as token-strided views.
  const bool packable = c.dtype == DType::kBF16 && !c.fp8 && a->ring_ == nullptr;
  const bool packed = PacksOn(c.packing, packable, chain->exec());
  const int64_t kv = c.kv_heads() * a->hs_;
  GTP_ASSIGN_OR_RETURN(
      a->qkv_, PackedLinears::Create({Lin(name + ".q", c, c.n_embd, c.n_embd, c.init_std, true),
                                      Lin(name + ".k", c, c.n_embd, kv, c.init_std, true),
                                      Lin(name + ".v", c, c.n_embd, kv, c.init_std, true)},
                                     packed, pgs, chain));
  GTP_ASSIGN_OR_RETURN(
      a->o_, RowParallelLinear::Create(Lin(name + ".o", c, c.n_embd, c.n_embd, ProjStd(c), false),
                                       pgs, chain));
  return a;
}

Tensor Attention::Heads(const Tensor& rows, int64_t heads) const {
  const int64_t pitch = rows.strides()[0];
  return rows.Strided({B_, T_, heads, hs_}, {T_ * pitch, pitch, hs_, 1});
}

Tensor Attention::QkHeads(const Tensor& packed) const {
  const int64_t heads = nh_tp_ + nkv_tp_;
  return Heads(packed.Strided({packed.dim(0), heads * hs_}, {packed.dim(1), 1}), heads);
}

absl::StatusOr<Tensor> Attention::Forward(const Tensor& h, const Tensor& residual, Direction dir) {
  const kernels::Exec& e = chain_->exec();
  Timeline* tl = chain_->timeline();
  GTP_ASSIGN_OR_RETURN(Tensor hin, EnterTpRegion(e, *tp_, config_.sequence_parallel, h));
  {
    Timeline::Scope span(tl, "qkv", e.stream);
    kernels::fp8::Fp8SharedInput hin_fp8(e);  // fp8: hin quantised once (both ways) for q, k, v
    GTP_ASSIGN_OR_RETURN(qkv_out_, qkv_->Forward(hin, dir, &hin_fp8));
  }
  std::optional<Timeline::Scope> core_span;
  core_span.emplace(tl, "attention", e.stream);
  Tensor q = Heads(qkv_out_.part[0], nh_tp_);
  Tensor k = Heads(qkv_out_.part[1], nkv_tp_);
  Tensor v = Heads(qkv_out_.part[2], nkv_tp_);
  // Under CP the rows are two chunks of the sequence: rotate by their global positions.
  const Tensor pos = ring_ ? ring_->positions() : Tensor();
  if (config_.rope && qkv_->packed()) {  // q and k side by side: one rotation in place
    const Tensor qk = QkHeads(qkv_out_.all);
    ops::RopeForward(e, qk, qk, config_.rope_theta, pos);
  } else if (config_.rope) {  // in place: backward needs only the rotated q, k
    ops::RopeForward(e, q, q, config_.rope_theta, pos);
    ops::RopeForward(e, k, k, config_.rope_theta, pos);
  }
  Tensor y = e.Empty({B_, T_, nh_tp_, hs_}, config_.dtype);
  if (ring_) {
    // The ring runs in f32 (bf16 activations are widened and y rounded once).
    auto f32 = [&](const Tensor& t) {
      if (t.dtype() == DType::kF32) return t;
      Tensor w = e.Empty(t.shape(), DType::kF32);
      ops::Cast(e, t, w);
      return w;
    };
    Tensor y32 = config_.dtype == DType::kF32 ? y : e.Empty(y.shape(), DType::kF32);
    GTP_RETURN_IF_ERROR(ring_->Forward(f32(q), f32(k), f32(v), y32));
    if (config_.dtype != DType::kF32) ops::Cast(e, y32, y);
  } else if (config_.dtype == DType::kBF16) {
    lse_ = e.Empty({B_, nh_tp_, T_});
    ops::FlashAttentionForward(e, q, k, v, y, lse_, config_.causal);
    y_ = y;
  } else {
    att_ = e.Empty({B_, nh_tp_, T_, T_});
    ops::AttentionForward(e, q, k, v, y, att_, config_.causal);
  }
  core_span.reset();
  Timeline::Scope span(tl, "o", e.stream);
  return o_->Forward(y.View({B_ * T_, nh_tp_ * hs_}), dir, residual);
}

void Attention::DropActivations() {
  qkv_out_ = PackedLinears::Parts();
  att_ = y_ = lse_ = Tensor();
  if (ring_) ring_->DropActivations();
  qkv_->DropActivations();
  o_->DropActivations();
}

absl::StatusOr<Tensor> Attention::Backward(const Tensor& dout) {
  const kernels::Exec& e = chain_->exec();
  Timeline* tl = chain_->timeline();
  std::optional<Timeline::Scope> span;
  span.emplace(tl, "o bwd", e.stream);
  GTP_ASSIGN_OR_RETURN(Tensor dy, o_->Backward(dout));
  span.emplace(tl, "attention bwd", e.stream);
  const DType dt = config_.dtype;
  const PackedLinears::Parts grads = qkv_->NewGrads();
  const Tensor dq = Heads(grads.part[0], nh_tp_);
  const Tensor dk = Heads(grads.part[1], nkv_tp_);
  const Tensor dv = Heads(grads.part[2], nkv_tp_);
  const Tensor q = Heads(qkv_out_.part[0], nh_tp_);
  const Tensor k = Heads(qkv_out_.part[1], nkv_tp_);
  const Tensor v = Heads(qkv_out_.part[2], nkv_tp_);
  const Tensor dout4 = dy.View({B_, T_, nh_tp_, hs_});
  if (ring_ && dt == DType::kF32) {
    GTP_RETURN_IF_ERROR(ring_->Backward(dout4, dq, dk, dv));
  } else if (ring_) {
    Tensor d32 = e.Empty(dout4.shape(), DType::kF32), dq32 = e.Empty(dq.shape(), DType::kF32),
           dk32 = e.Empty(dk.shape(), DType::kF32), dv32 = e.Empty(dv.shape(), DType::kF32);
    ops::Cast(e, dout4, d32);
    GTP_RETURN_IF_ERROR(ring_->Backward(d32, dq32, dk32, dv32));
    ops::Cast(e, dq32, dq);
    ops::Cast(e, dk32, dk);
    ops::Cast(e, dv32, dv);
  } else if (dt == DType::kBF16) {
    ops::FlashAttentionBackward(e, dout4, q, k, v, y_, lse_, dq, dk, dv, config_.causal);
  } else {
    ops::AttentionBackward(e, dout4, q, k, v, att_, dq, dk, dv, config_.causal);
  }
  qkv_out_ = PackedLinears::Parts();
  att_ = y_ = lse_ = Tensor();
  if (config_.rope && qkv_->packed()) {
    const Tensor dqk = QkHeads(grads.all);
    ops::RopeBackward(e, dqk, dqk, config_.rope_theta);
  } else if (config_.rope) {
    const Tensor pos = ring_ ? ring_->positions() : Tensor();
    ops::RopeBackward(e, dq, dq, config_.rope_theta, pos);
    ops::RopeBackward(e, dk, dk, config_.rope_theta, pos);
  }
  span.emplace(tl, "qkv bwd", e.stream);
  GTP_ASSIGN_OR_RETURN(Tensor dh, qkv_->Backward(grads));
  return ExitTpRegionGrad(e, *tp_, config_.sequence_parallel, dh);
}

void Attention::CollectParams(std::vector<ShardedParam*>* sharded,
                              std::vector<ReplicatedParam*>* repl) {
  sharded->push_back(&qkv_->part(0).weight());
  sharded->push_back(&qkv_->part(1).weight());
  sharded->push_back(&qkv_->part(2).weight());
  sharded->push_back(&o_->weight());
  for (ReplicatedParam* b :
       {qkv_->part(0).bias(), qkv_->part(1).bias(), qkv_->part(2).bias(), o_->bias()})
    if (b) repl->push_back(b);
}

// ---- Mlp -------------------------------------------------------------------------------

absl::StatusOr<std::unique_ptr<Mlp>> Mlp::Create(const std::string& name,
                                                 const TransformerConfig& c,
                                                 const parallel::ProcessGroupCollection& pgs,
                                                 GtpChain* chain) {
  std::unique_ptr<Mlp> m(new Mlp());
  m->config_ = c;
  m->chain_ = chain;
  GTP_ASSIGN_OR_RETURN(m->tp_, pgs.Get(parallel::groups::kTp));
  const int64_t H = c.hidden();
  const bool glu = c.activation == Activation::kSwiGlu;
  LinearConfig fc = Lin(name + ".fc", c, c.n_embd, glu ? 2 * H : H, c.init_std, true);
  fc.fused_parts = glu ? 2 : 1;  // SwiGLU: [gate; up]
  GTP_ASSIGN_OR_RETURN(m->fc_, ColumnParallelLinear::Create(fc, pgs, chain));
  GTP_ASSIGN_OR_RETURN(m->proj_, RowParallelLinear::Create(
                                     Lin(name + ".proj", c, H, c.n_embd, ProjStd(c), false), pgs, chain));
  // cuBLASLt's GELU epilogue approximates tanh (~1e-5 relative): fine for
  // bf16, not for the f32 reference path, which keeps the exact kernels on
  // CUDA. (On the CPU the fused loops are the unfused arithmetic.)
  m->fused_gelu_ = !glu && (!chain->exec().is_cuda() ||
                            (c.dtype == DType::kBF16 && (H / m->tp_->size()) % 8 == 0));
  m->gelu_in_fp8_quant_ = !glu && m->fc_->fp8_both_ways() && m->proj_->fp8_both_ways();
  return m;
}

absl::StatusOr<Tensor> Mlp::Forward(const Tensor& h, const Tensor& residual, Direction dir) {
  const kernels::Exec& e = chain_->exec();
  Timeline* tl = chain_->timeline();
  GTP_ASSIGN_OR_RETURN(Tensor hin, EnterTpRegion(e, *tp_, config_.sequence_parallel, h));
  std::optional<Timeline::Scope> span;
  const bool glu = config_.activation == Activation::kSwiGlu;
  if (gelu_in_fp8_quant_) {
    // fc's output (pre_act_, kept for the backward) straight into proj,
    // whose quantiser applies GELU as it reads it.
    span.emplace(tl, "fc", e.stream);
    GTP_ASSIGN_OR_RETURN(pre_act_, fc_->Forward(hin, dir));
    span.emplace(tl, "gelu+proj", e.stream);
    return proj_->ForwardOfGelu(pre_act_, dir, residual);
  }
  if (fused_gelu_) {
    // GELU inside the fc GEMM's epilogue (pre_act_ saved for the backward).
    span.emplace(tl, "fc+gelu", e.stream);
    GTP_ASSIGN_OR_RETURN(Tensor act, fc_->ForwardGelu(hin, dir, &pre_act_));
    span.emplace(tl, "proj", e.stream);
    return proj_->Forward(act, dir, residual);
  }
  span.emplace(tl, "fc", e.stream);
  GTP_ASSIGN_OR_RETURN(pre_act_, fc_->Forward(hin, dir));  // SwiGLU: [N, gate|up]
  span.emplace(tl, "act", e.stream);
  const int64_t n = pre_act_.dim(0);
  Tensor act = e.Empty({n, glu ? pre_act_.dim(1) / 2 : pre_act_.dim(1)}, pre_act_.dtype());
  if (glu) {
    ops::SwiGluForward(e, pre_act_, act);
  } else {
    ops::GeluForward(e, pre_act_, act);
  }
  span.emplace(tl, "proj", e.stream);
  return proj_->Forward(act, dir, residual);
}

void Mlp::DropActivations() {
  pre_act_ = Tensor();
  fc_->DropActivations();
  proj_->DropActivations();
}

absl::StatusOr<Tensor> Mlp::Backward(const Tensor& dout) {
  const kernels::Exec& e = chain_->exec();
  Timeline* tl = chain_->timeline();
  std::optional<Timeline::Scope> span;
  if (gelu_in_fp8_quant_) {
    // proj's input gradient is the gradient at GELU's output; fc's quantiser
    // applies GELU's derivative as it reads it.
    span.emplace(tl, "proj bwd", e.stream);
    GTP_ASSIGN_OR_RETURN(Tensor dact, proj_->Backward(dout));
    span.emplace(tl, "gelu+fc bwd", e.stream);
    GTP_ASSIGN_OR_RETURN(Tensor dh, fc_->BackwardThroughGelu(dact, pre_act_));
    pre_act_ = Tensor();
    return ExitTpRegionGrad(e, *tp_, config_.sequence_parallel, dh);
  }
  if (fused_gelu_) {
    // GELU's backward inside proj's input-gradient GEMM: dpre directly.
    span.emplace(tl, "proj+gelu bwd", e.stream);
    GTP_ASSIGN_OR_RETURN(Tensor dpre, proj_->BackwardDGelu(dout, pre_act_));
    pre_act_ = Tensor();
    span.emplace(tl, "fc bwd", e.stream);
    GTP_ASSIGN_OR_RETURN(Tensor dh, fc_->Backward(dpre));
    return ExitTpRegionGrad(e, *tp_, config_.sequence_parallel, dh);
  }
  span.emplace(tl, "proj bwd", e.stream);
  GTP_ASSIGN_OR_RETURN(Tensor dact, proj_->Backward(dout));
  span.emplace(tl, "act bwd", e.stream);
  Tensor dpre = e.Empty(pre_act_.shape(), pre_act_.dtype());
  if (config_.activation == Activation::kSwiGlu) {
    ops::SwiGluBackward(e, dact, pre_act_, dpre);
  } else {
    ops::GeluBackward(e, dact, pre_act_, dpre);
  }
  pre_act_ = Tensor();
  span.emplace(tl, "fc bwd", e.stream);
  GTP_ASSIGN_OR_RETURN(Tensor dh, fc_->Backward(dpre));
  return ExitTpRegionGrad(e, *tp_, config_.sequence_parallel, dh);
}

void Mlp::CollectParams(std::vector<ShardedParam*>* sharded, std::vector<ReplicatedParam*>* repl,
                        std::vector<ShardedParam*>* /*experts*/) {
  sharded->push_back(&fc_->weight());
  sharded->push_back(&proj_->weight());
  for (ReplicatedParam* b : {fc_->bias(), proj_->bias()})
    if (b) repl->push_back(b);
}

// ---- Block -----------------------------------------------------------------------------

namespace {

// The mixer `kind` names (null for kNone).
absl::StatusOr<std::unique_ptr<Mixer>> CreateMixer(MixerKind kind, const std::string& name,
                                                   const TransformerConfig& c, int64_t B, int64_t T,
                                                   const parallel::ProcessGroupCollection& pgs,
                                                   GtpChain* chain) {
  switch (kind) {
    case MixerKind::kNone:
      return nullptr;
    case MixerKind::kAttention:
      return Attention::Create(name + ".attn", c, B, T, pgs, chain);
    case MixerKind::kMamba: {
      mamba::MambaConfig mc = c.mamba;
      mc.d_model = c.n_embd;
      mc.seed = c.seed;
      mc.init_std = c.init_std;
      mc.out_std = ProjStd(c);
      mc.dtype = c.dtype;
      mc.fp8 = c.fp8;
      mc.fp8_wgrad = c.fp8_wgrad;
      mc.sequence_parallel = c.sequence_parallel;
      mc.packing = c.packing;
      return mamba::MambaMixer::Create(name + ".mixer", mc, B, T, pgs, chain);
    }
  }
  return absl::InternalError("unknown mixer kind");
}

// The feed-forward `kind` names (null for kNone).
absl::StatusOr<std::unique_ptr<FeedForward>> CreateFeedForward(
    FfnKind kind, const std::string& name, const TransformerConfig& c, int64_t B, int64_t T,
    const parallel::ProcessGroupCollection& pgs, GtpChain* chain) {
  switch (kind) {
    case FfnKind::kNone:
      return nullptr;
    case FfnKind::kMlp:
      return Mlp::Create(name + ".mlp", c, pgs, chain);
    case FfnKind::kMoe:
      return MoeFeedForward::Create(name + ".moe", c, B, T, pgs, chain);
  }
  return absl::InternalError("unknown feed-forward kind");
}

}  // namespace

absl::StatusOr<std::unique_ptr<Block>> Block::Create(const std::string& name,
                                                     const TransformerConfig& c, int64_t B,
                                                     int64_t T,
                                                     const parallel::ProcessGroupCollection& pgs,
                                                     GtpChain* chain, LayerKind kind) {
  if (kind.mixer == MixerKind::kNone && kind.ffn == FfnKind::kNone) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": a layer needs a mixer or a feed-forward"));
  }
  std::unique_ptr<Block> b(new Block());
  b->exec_ = chain->exec();
  b->chain_ = chain;
  b->recompute_ = c.recompute;
  GTP_ASSIGN_OR_RETURN(comm::Communicator * tp, pgs.Get(parallel::groups::kTp));
  if (kind.mixer != MixerKind::kNone) {
    b->ln1_ = std::make_unique<Norm>(name + ".ln1", c, tp->size(), b->exec_);
    GTP_ASSIGN_OR_RETURN(b->mixer_, CreateMixer(kind.mixer, name, c, B, T, pgs, chain));
  }
  if (kind.ffn != FfnKind::kNone) {
    b->ln2_ = std::make_unique<Norm>(name + ".ln2", c, tp->size(), b->exec_);
    GTP_ASSIGN_OR_RETURN(b->ffn_, CreateFeedForward(kind.ffn, name, c, B, T, pgs, chain));
  }
  return b;
}

absl::StatusOr<Tensor> Block::Run(const Tensor& x, Direction dir) {
  Timeline* tl = chain_->timeline();
  std::optional<Timeline::Scope> span;
  Tensor a = x;
  if (mixer_) {  // the mixer half: x1 = x + mixer(ln1(x))
    span.emplace(tl, "ln1", exec_.stream);
    Tensor h1 = ln1_->Forward(x);
    span.reset();
    GTP_ASSIGN_OR_RETURN(a, mixer_->Forward(h1, /*residual=*/x, dir));
  }
  if (!ffn_) return a;
  span.emplace(tl, "residual+ln2", exec_.stream);
  Tensor h2 = ln2_->Forward(a);
  span.reset();
  return ffn_->Forward(h2, /*residual=*/a, dir);  // x2 = x1 + ffn
}

void Block::DropActivations() {
  if (ln1_) ln1_->DropActivations();
  if (mixer_) mixer_->DropActivations();
  if (ln2_) ln2_->DropActivations();
  if (ffn_) ffn_->DropActivations();
}

absl::StatusOr<Tensor> Block::Forward(const Tensor& x, Direction dir) {
  GTP_ASSIGN_OR_RETURN(Tensor y, Run(x, dir));
  if (recompute_) {
    x_in_ = x;
    DropActivations();
  }
  return y;
}

absl::StatusOr<Tensor> Block::Backward(const Tensor& dx2) {
  if (recompute_) {
    // Re-create the activations this block dropped (bit-identical: the
    // kernels are deterministic), gathering weights on the recompute chain.
    GTP_RETURN_IF_ERROR(Run(x_in_, Direction::kRecompute).status());
    x_in_ = Tensor();
  }
  Timeline* tl = chain_->timeline();
  std::optional<Timeline::Scope> span;
  Tensor dx1 = dx2;
  if (ffn_) {
    GTP_ASSIGN_OR_RETURN(Tensor dm, ffn_->Backward(dx2));
    span.emplace(tl, "ln2+residual bwd", exec_.stream);
    dx1 = ln2_->Backward(dm, /*dresidual=*/dx2);  // dx1 = LN2ᵀ(dm) + dx2
    span.reset();
  }
  if (!mixer_) return dx1;
  GTP_ASSIGN_OR_RETURN(Tensor da, mixer_->Backward(dx1));
  span.emplace(tl, "ln1+residual bwd", exec_.stream);
  return ln1_->Backward(da, /*dresidual=*/dx1);  // dx = LN1ᵀ(da) + dx1
}

void Block::CollectParams(std::vector<ShardedParam*>* sharded,
                          std::vector<ReplicatedParam*>* repl,
                          std::vector<ShardedParam*>* experts) {
  if (ln1_) {
    for (ReplicatedParam* p : ln1_->params()) repl->push_back(p);
  }
  if (mixer_) mixer_->CollectParams(sharded, repl);
  if (ln2_) {
    for (ReplicatedParam* p : ln2_->params()) repl->push_back(p);
  }
  if (ffn_) ffn_->CollectParams(sharded, repl, experts);
}

}  // namespace gtp::layers
