#include "layers/gpt.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/philox.h"
#include "core/status.h"
#include "layers/gpt_layout.h"

namespace gtp::layers {

namespace ops = kernels::ops;

GptConfig GptConfig::Gpt2(int64_t vocab, int64_t seq, int layers, int64_t embd, int64_t heads) {
  GptConfig c;
  c.vocab_size = vocab;
  c.max_seq_len = seq;
  c.n_layer = layers;
  c.block.n_embd = embd;
  c.block.n_head = heads;
  c.block.norm = NormKind::kLayerNorm;
  c.block.activation = Activation::kGelu;
  c.block.bias = true;
  c.tied_embeddings = true;
  c.learned_positions = true;
  return c;
}

int64_t GptConfig::padded_vocab() const {
  const int64_t m = std::max<int64_t>(1, vocab_pad_multiple);
  return (vocab_size + m - 1) / m * m;
}

namespace {

absl::Status Bad(const std::string& msg) { return absl::InvalidArgumentError(msg); }

template <typename T>
Tensor ToDevice(const kernels::Exec& e, const std::vector<T>& v, const Shape& s) {
  return HostToDevice(e, v, s, /*wait=*/true);
}

template <typename T>
std::vector<T> ToHost(const kernels::Exec& e, const Tensor& t) {
  return DeviceToHost<T>(e, t);
}

}  // namespace

bool Fp8Layer(const GptConfig& c, int l) {
  return c.block.fp8 && l >= c.fp8_bf16_first_layers && l < c.n_layer - c.fp8_bf16_last_layers;
}

absl::StatusOr<std::unique_ptr<GptModel>> GptModel::Create(
    const GptConfig& config, int64_t B, int64_t T, const parallel::ProcessGroupCollection& pgs,
    const kernels::Exec& exec, const GtpOptions& gtp_options) {
  std::unique_ptr<GptModel> m(new GptModel());
  // Where this rank's pieces go (layers/gpt_layout.h), before anything is built.
  GptRankPlace place;
  if (pgs.Has(parallel::groups::kCp) && (*pgs.Group(parallel::groups::kCp))->is_member()) {
    GTP_ASSIGN_OR_RETURN(comm::Communicator * cpg, pgs.Get(parallel::groups::kCp));
    place.cp = cpg->size();
    place.cp_rank = cpg->rank();
  }
  GTP_ASSIGN_OR_RETURN(m->tp_, pgs.Get(parallel::groups::kTp));
  GTP_ASSIGN_OR_RETURN(comm::Communicator * gtp, pgs.Get(parallel::groups::kGtp));
  place.tp = m->tp_->size();
  place.tp_rank = m->tp_->rank();
  GTP_ASSIGN_OR_RETURN(const GptLayout L, PlanGptLayout(config, B, T, place));
  m->config_ = L.config;
  GptConfig& c = m->config_;
  m->layers_ = L.layers;
  m->exec_ = exec;
  m->B_ = B;
  m->T_full_ = L.T_full;
  m->cp_ = place.cp;
  m->cp_rank_ = place.cp_rank;
  T = L.T_local;
  m->T_ = T;
  m->sp_ = L.sequence_parallel;
  const int64_t v_pad = L.vocab_padded;
  m->rows_local_ = L.rows_local;
  m->row0_ = L.row0;
  m->v_tp_ = L.vocab_local;
  m->vocab_start_ = L.vocab_start;
  m->v_real_ = L.vocab_real;
  m->chain_ = std::make_unique<GtpChain>(exec, gtp_options);
  const int64_t C = c.block.n_embd;
  const int first = L.first_layer, last = L.last_layer;
  const PipelinePart& pp = c.pipeline;
  const int tp = place.tp;
  const bool has_embed = L.has_embed, has_head = L.has_head;
  m->first_layer_ = first;

  const DType dt = c.block.dtype;
  const int64_t vstart = m->vocab_start_;
  const ShardedParam::GlobalLayout vocab_layout{v_pad, C, [vstart](int64_t r) { return vstart + r; }, 0};
  if (has_embed) {
    m->wte_ = std::make_unique<ShardedParam>("wte.weight", m->v_tp_, C, dt, gtp, m->chain_.get());
    m->wte_->set_gathered_in_backward(false);  // lookups' backward is a scatter-add
    // Tied: the LM head uses wte again after the last block (forward) and
    // before it (backward); the chain prefetches it there.
    if (c.tied_embeddings && has_head) m->chain_->set_tail(m->wte_.get());
    InitShardFromGlobal(*m->wte_, vocab_layout, c.block.seed, c.block.init_std);
    m->sharded_.push_back(m->wte_.get());
  }
  if (has_embed && c.learned_positions) {
    std::vector<float> pe(c.max_seq_len * C);
    const uint64_t key = KeyFromName("wpe.weight", c.block.seed);
    for (size_t i = 0; i < pe.size(); ++i) pe[i] = 0.5f * c.block.init_std * PhiloxNormal(key, i);
    m->wpe_ = ReplicatedParam{"wpe.weight", TensorFromHost(exec, pe.data(), {c.max_seq_len, C}, dt),
                              exec.Zeros({c.max_seq_len, C}), m->sp_,
                              {c.max_seq_len, C, [](int64_t r) { return r; }, 0}};
    m->replicated_.push_back(&m->wpe_);
    std::vector<int32_t> pos(m->rows_local_);
    for (int64_t i = 0; i < m->rows_local_; ++i) {
      pos[i] = static_cast<int32_t>(
          cp::GlobalPosition(m->T_full_, m->cp_, m->cp_rank_, (m->row0_ + i) % T));
    }
    m->pos_ids_ = ToDevice(exec, pos, {m->rows_local_});
  }
  if (c.prefix_len != 0 && has_embed) {
    if (c.prefix_len < 0 || c.prefix_len > T) {
      return Bad(absl::StrCat("prefix_len ", c.prefix_len, " must be in [0, T = ", T, "]"));
    }
    if (m->cp_ > 1) return Bad("prefix embeddings with context parallelism are not supported");
    std::vector<int32_t> map(m->rows_local_);
    for (int64_t i = 0; i < m->rows_local_; ++i) {
      const int64_t g = m->row0_ + i, b = g / T, t = g % T;
      map[i] = static_cast<int32_t>(t < c.prefix_len ? m->rows_local_ + b * c.prefix_len + t : i);
    }
    m->prefix_map_ = ToDevice(exec, map, {m->rows_local_});
  }
  for (int l = first; l < last; ++l) {
    TransformerConfig bc = c.block;
    bc.fp8 = Fp8Layer(c, l);
    GTP_ASSIGN_OR_RETURN(
        auto b, Block::Create(absl::StrCat("h.", l), bc, B, T, pgs, m->chain_.get(), L.layers[l]));
    const size_t first_sharded = m->sharded_.size(), first_expert = m->experts_.size();
    b->CollectParams(&m->sharded_, &m->replicated_, &m->experts_);
    if (b->moe()) {
      m->moe_layers_.push_back(b->moe());
      m->moe_layer_index_.push_back(l);
    }
    // A MoE layer's expert stacks (fc1, fc2) are gathered together, the
    // whole layer one param ahead (ShardedParam::set_prefetch_group).
    for (size_t i = first_expert; i < m->experts_.size(); ++i) m->experts_[i]->set_prefetch_group(l);
    // Recompute groups: a block's weights prefetch among themselves when it
    // is re-run (activation recompute, and the pipeline's stage recompute).
    if (c.block.recompute || pp.count > 1) {
      for (size_t i = first_sharded; i < m->sharded_.size(); ++i) m->sharded_[i]->set_recompute_group(l);
      for (size_t i = first_expert; i < m->experts_.size(); ++i) {
        m->experts_[i]->set_recompute_group(l);
      }
    }
    m->blocks_.push_back(std::move(b));
  }
  m->loss_acc_ = exec.Zeros({1});
  m->count_ = exec.Zeros({1});
  if (!has_head) return m;
  m->ln_f_ = std::make_unique<Norm>("ln_f", c.block, tp, exec);
  for (ReplicatedParam* p : m->ln_f_->params()) m->replicated_.push_back(p);
  if (!c.tied_embeddings || !has_embed) {
    // Untied: lm_head.weight. Tied with the embedding on another stage: this
    // stage's copy of wte.weight (same initial values, summed gradients).
    const bool copy = c.tied_embeddings;
    m->lm_head_ = std::make_unique<ShardedParam>(copy ? "wte.weight" : "lm_head.weight", m->v_tp_,
                                                 C, dt, gtp, m->chain_.get());
    m->lm_head_->set_tied_copy(copy);
    InitShardFromGlobal(*m->lm_head_, vocab_layout, c.block.seed, c.block.init_std);
    m->sharded_.push_back(m->lm_head_.get());
  }
  return m;
}

absl::StatusOr<Tensor> GptModel::EmbedForward(const Tensor& tokens, Direction dir) {
  const int64_t N = B_ * T_, C = config_.block.n_embd;
  // A pipeline recompute gathers on its own slot: a forward-slot prefetch
  // issued now would outlive this step's weights.
  GTP_ASSIGN_OR_RETURN(Tensor table, wte_->Materialize(dir));
  Tensor x = exec_.Empty({N, C}, config_.block.dtype);
  ops::EmbeddingForward(exec_, tokens, table.Slice(0, v_real_), x, vocab_start_);
  wte_->Release(dir);
  // Each TP rank looked up only its vocabulary slice: sum (SP: scatter rows).
  if (sp_) {
    GTP_ASSIGN_OR_RETURN(x, ReduceScatterRows(exec_, *tp_, x));
  } else {
    GTP_RETURN_IF_ERROR(AllReduceSum(*tp_, x));
  }
  if (config_.learned_positions) {
    Tensor pe = exec_.Empty({rows_local_, C}, config_.block.dtype);
    ops::EmbeddingForward(exec_, pos_ids_, wpe_.value, pe, 0);
    ops::Axpby(exec_, 1.0f, pe, 1.0f, x);
  }
  if (prefix_map_.defined()) {
    // x ← rows of [x; prefix] (prefix positions from the prefix).
    if (!prefix_.defined()) {
      return absl::FailedPreconditionError("a prefix model's forward needs SetPrefix first");
    }
    Tensor cat = exec_.Empty({rows_local_ + prefix_.dim(0), C}, x.dtype());
    ops::CopyInto(exec_, x, cat.Slice(0, rows_local_));
    ops::CopyInto(exec_, prefix_, cat.Slice(rows_local_, cat.dim(0)));
    ops::EmbeddingForward(exec_, prefix_map_, cat, x, 0);
  }
  return x;
}

absl::Status GptModel::SetPrefix(const Tensor& prefix) {
  if (!prefix_map_.defined()) {
    return absl::FailedPreconditionError("SetPrefix on a model without prefix_len (or not its first part)");
  }
  const int64_t P = B_ * config_.prefix_len, C = config_.block.n_embd;
  if (prefix.rank() != 2 || prefix.dim(0) != P || prefix.dim(1) != C) {
    return Bad(absl::StrCat("prefix must be [B·prefix_len = ", P, ", ", C, "], got ",
                            prefix.ToString()));
  }
  if (prefix.dtype() == config_.block.dtype) {
    prefix_ = prefix;
  } else {
    prefix_ = exec_.Empty({P, C}, config_.block.dtype);
    ops::Cast(exec_, prefix, prefix_);
  }
  return absl::OkStatus();
}

absl::Status GptModel::EmbedBackward(const Tensor& dx_in) {
  Tensor dx = dx_in;
  if (prefix_map_.defined()) {
    // The gradient of [x; prefix]: the embeddings' rows (0 at prefix
    // positions) and the prefix's.
    const int64_t P = B_ * config_.prefix_len, C = config_.block.n_embd;
    Tensor dcat = exec_.Zeros({rows_local_ + P, C}, DType::kF32);
    ops::EmbeddingBackward(exec_, prefix_map_, dx_in, dcat, 0);
    dx = dcat.Slice(0, rows_local_);
    prefix_grad_ = dcat.Slice(rows_local_, rows_local_ + P);
    if (sp_) GTP_RETURN_IF_ERROR(AllReduceSum(*tp_, prefix_grad_));
  }
  if (config_.learned_positions) ops::EmbeddingBackward(exec_, pos_ids_, dx, wpe_.grad, 0);
  Tensor dfull = dx;
  if (sp_) {
    GTP_ASSIGN_OR_RETURN(dfull, AllGatherRows(exec_, *tp_, dx));
  }
  bool fresh = false;
  Tensor wgrad = wte_->Wgrad(&fresh);
  if (fresh) ops::Fill(exec_, wgrad, 0.0f);
  ops::EmbeddingBackward(exec_, tokens_, dfull, wgrad.Slice(0, v_real_), vocab_start_);
  return wte_->ReduceGrad();
}

absl::Status GptModel::ForwardAsync(const Tensor& tokens, const Tensor& targets,
                                    bool backward_follows) {
  if (!has_embedding() || !has_head()) {
    return absl::FailedPreconditionError("ForwardAsync on a pipeline part: use ForwardPart");
  }
  return ForwardPart(tokens, Tensor(), targets, backward_follows).status();
}

absl::StatusOr<Tensor> GptModel::ForwardPart(const Tensor& tokens, const Tensor& input,
                                             const Tensor& targets, bool backward_follows,
                                             bool recompute) {
  const int64_t N = B_ * T_;
  const Direction dir = recompute ? Direction::kRecompute : Direction::kForward;
  Tensor x;
  if (has_embedding()) {
    const Tensor toks = LocalSequence(tokens);
    if (toks.numel() != N) {
      return Bad(absl::StrCat("tokens must have B·T = ", N, " elements, got ", tokens.ToString()));
    }
    tokens_ = toks.View({N});
    Timeline::Scope span(timeline_, "embed", exec_.stream);
    GTP_ASSIGN_OR_RETURN(x, EmbedForward(tokens_, dir));
  } else {
    if (input.rank() != 2 || input.dim(0) != rows_local_ || input.dim(1) != config_.block.n_embd) {
      return Bad(absl::StrCat("pipeline input must be [", rows_local_, ", ", config_.block.n_embd,
                              "], got ", input.ToString()));
    }
    x = input;
  }
  for (size_t l = 0; l < blocks_.size(); ++l) {
    Timeline::Scope span(timeline_, absl::StrCat("h.", first_layer_ + l, " fwd"), exec_.stream);
    GTP_ASSIGN_OR_RETURN(x, blocks_[l]->Forward(x, dir));
  }
  if (!has_head()) return x;
  const Tensor tgts = LocalSequence(targets);
  if (tgts.numel() != N) {
    return Bad(absl::StrCat("targets must have B·T = ", N, " elements, got ", targets.ToString()));
  }
  targets_ = tgts.View({N});
  // A recomputed micro-batch's loss was counted by its first forward.
  Tensor acc = recompute ? exec_.Zeros({1}) : loss_acc_;
  Timeline::Scope head_span(timeline_, "head+loss fwd", exec_.stream);
  Tensor h = ln_f_->Forward(x);
  if (sp_) {
    GTP_ASSIGN_OR_RETURN(h_f_, AllGatherRows(exec_, *tp_, h));
  } else {
    h_f_ = h;
  }
  ShardedParam* head = lm_head_ ? lm_head_.get() : wte_.get();
  GTP_ASSIGN_OR_RETURN(Tensor w, head->Materialize(dir, /*prefetch=*/lm_head_ != nullptr));
  if (const int64_t rows = HeadChunkRows(*head, backward_follows, recompute); rows > 0) {
    Timeline::Scope span(timeline_, "head+loss chunked", exec_.stream);
    GTP_RETURN_IF_ERROR(HeadChunked(w, *head, rows, acc));
    head->Release(dir);
    return Tensor();
  }
  // Over the padded vocabulary slice (v_tp_, a multiple of 128 / TP): aligned
  // rows for the GEMM and the loss kernels; the pad columns are masked there.
  logits_ = exec_.Empty({N, v_tp_}, config_.block.dtype);
  {
    Timeline::Scope span(timeline_, "lm_head gemm", exec_.stream);
    ops::Linear(exec_, h_f_, w.Slice(0, v_tp_), logits_);
  }
  head->Release(dir);
  Timeline::Scope ce_span(timeline_, "cross-entropy", exec_.stream);
  logits_are_grad_ = backward_follows && tp_->size() == 1;
  if (logits_are_grad_) {
    // Loss and its gradient in one pass; the gradient's scale (1 or
    // 1 / valid targets) is known before the backward.
    Tensor dloss = ForwardLossGrad(), loss = exec_.Empty({N});
    ops::CrossEntropyFused(exec_, logits_, targets_, dloss, loss, v_real_);
    ops::MaskedMeanAccumulate(exec_, loss, targets_, acc, count_);
    n_valid_ = -1;
    return Tensor();
  }
  // Vocab-parallel cross-entropy: max and target logit, then Σexp, over TP.
  row_max_ = exec_.Empty({N});
  sumexp_ = exec_.Empty({N});
  Tensor target_logit = exec_.Empty({N}), loss = exec_.Empty({N});
  ops::CrossEntropyStats(exec_, logits_, targets_, row_max_, target_logit, vocab_start_, v_real_);
  if (tp_->size() > 1) {
    GTP_RETURN_IF_ERROR(comm::Run(tp_->AllReduce(row_max_.raw_data(), row_max_.raw_data(), N,
                                                 DType::kF32, comm::ReduceOp::kMax)));
    GTP_RETURN_IF_ERROR(AllReduceSum(*tp_, target_logit));
  }
  ops::CrossEntropySumExp(exec_, logits_, row_max_, sumexp_, v_real_);
  GTP_RETURN_IF_ERROR(AllReduceSum(*tp_, sumexp_));
  ops::CrossEntropyLoss(exec_, row_max_, sumexp_, target_logit, targets_, loss);
  // On the device: count_ = valid targets, loss_acc_ += this lane's mean.
  ops::MaskedMeanAccumulate(exec_, loss, targets_, acc, count_);
  n_valid_ = -1;  // known on the device only
  return Tensor();
}

int64_t GptModel::HeadChunkRows(const ShardedParam& head, bool backward_follows,
                                bool recompute) const {
  const int64_t N = B_ * T_;
  const int64_t row_bytes = v_tp_ * static_cast<int64_t>(SizeOf(config_.block.dtype));
  // The forward may take the head's backward: the loss gradient is this
  // rank's alone (TP 1), the weight is whole here (tied, GTP 1, no SP) and
  // the forward is never re-run (a re-run would add the gradient twice).
  if (!backward_follows || recompute || lm_head_ != nullptr || tp_->size() != 1 || sp_ ||
      head.gtp_size() != 1 || config_.block.recompute || config_.head_chunk_bytes <= 0 ||
      N * row_bytes <= config_.head_chunk_bytes) {
    return 0;
  }
  // Equal chunks of whole 8-row groups, each within the budget where it can be.
  const int64_t chunks = (N * row_bytes + config_.head_chunk_bytes - 1) / config_.head_chunk_bytes;
  const int64_t rows = ((N + chunks - 1) / chunks + 7) / 8 * 8;
  return rows < N ? rows : 0;
}

Tensor GptModel::ForwardLossGrad() {
  Tensor dloss = exec_.Empty({B_ * T_});
  if (config_.loss_reduction == LossReduction::kSum) {
    ops::Fill(exec_, dloss, 1.0f);
  } else {
    ops::CountValid(exec_, targets_, count_);
    ops::FillReciprocal(exec_, count_, dloss);
  }
  return dloss;
}

absl::Status GptModel::HeadChunked(const Tensor& w, ShardedParam& head, int64_t rows,
                                   const Tensor& acc) {
  const int64_t N = B_ * T_, C = config_.block.n_embd;
  Tensor dloss = ForwardLossGrad(), loss = exec_.Empty({N});
  head_dh_ = exec_.Empty({N, C}, config_.block.dtype);
  Tensor logits = exec_.Empty({rows, v_tp_}, config_.block.dtype);
  const Tensor wv = w.Slice(0, v_tp_);
  bool fresh = false;
  Tensor wgrad = head.Wgrad(&fresh);
  for (int64_t r0 = 0; r0 < N; r0 += rows) {
    const int64_t r1 = std::min(N, r0 + rows);
    const Tensor lg = logits.Slice(0, r1 - r0), h = h_f_.Slice(r0, r1);
    ops::Linear(exec_, h, wv, lg);
    ops::CrossEntropyFused(exec_, lg, targets_.Slice(r0, r1), dloss.Slice(r0, r1),
                           loss.Slice(r0, r1), v_real_);
    ops::LinearBackwardData(exec_, lg, wv, head_dh_.Slice(r0, r1));
    // Every vocabulary row (pad rows get 0 from the zero pad columns).
    ops::LinearBackwardWeight(exec_, lg, h, wgrad.Slice(0, v_tp_), fresh && r0 == 0 ? 0.0f : 1.0f);
  }
  ops::MaskedMeanAccumulate(exec_, loss, targets_, acc, count_);
  n_valid_ = -1;
  h_f_ = Tensor();
  return absl::OkStatus();
}

Tensor GptModel::LocalSequence(const Tensor& full) const {
  if (cp_ == 1 || full.numel() != B_ * T_full_) return full;
  // Token ids are few: pick this rank's columns on the host.
  const std::vector<int32_t> host = ToHost<int32_t>(exec_, full);
  std::vector<int32_t> local(B_ * T_);
  const std::vector<int32_t> pos = cp::GlobalPositions(T_full_, cp_, cp_rank_);
  for (int64_t b = 0; b < B_; ++b)
    for (int64_t t = 0; t < T_; ++t) local[b * T_ + t] = host[b * T_full_ + pos[t]];
  return ToDevice(exec_, local, {B_, T_});
}

void GptModel::DropActivations() {
  for (auto& b : blocks_) b->DropActivations();
  if (ln_f_) ln_f_->DropActivations();
  h_f_ = logits_ = row_max_ = sumexp_ = head_dh_ = Tensor();
  logits_are_grad_ = false;
}

absl::Status GptModel::SyncTiedEmbedding(comm::Communicator& embd) {
  if (!tied_across_stages() || embd.size() == 1) return absl::OkStatus();
  ShardedParam* w = has_embedding() ? wte_.get() : lm_head_.get();
  if (w == nullptr) return absl::OkStatus();
  const Tensor& g = w->main_grad();  // (a deferred zero no backward wrote is written out)
  return AllReduceSum(embd, g);
}

absl::StatusOr<float> GptModel::Forward(const Tensor& tokens, const Tensor& targets) {
  const std::vector<float> before = ToHost<float>(exec_, loss_acc_);
  GTP_RETURN_IF_ERROR(ForwardAsync(tokens, targets));
  const std::vector<float> after = ToHost<float>(exec_, loss_acc_);
  n_valid_ = static_cast<int64_t>(ToHost<float>(exec_, count_)[0]);
  ops::Fill(exec_, loss_acc_, before[0]);  // a synchronous Forward leaves the sum alone
  return after[0] - before[0];
}

absl::StatusOr<float> GptModel::TakeLossSum() {
  const float sum = ToHost<float>(exec_, loss_acc_)[0];
  ops::Fill(exec_, loss_acc_, 0.0f);
  return sum;
}

absl::Status GptModel::Backward() {
  if (!has_embedding() || !has_head()) {
    return absl::FailedPreconditionError("Backward on a pipeline part: use BackwardPart");
  }
  return BackwardPart().status();
}

absl::StatusOr<Tensor> GptModel::BackwardPart(const Tensor& dout) {
  Tensor dx;
  if (has_head()) {
    GTP_ASSIGN_OR_RETURN(dx, HeadBackward());
  } else {
    if (dout.rank() != 2 || dout.dim(0) != rows_local_) {
      return Bad(absl::StrCat("pipeline output gradient must be [", rows_local_, ", C], got ",
                              dout.ToString()));
    }
    dx = dout;
  }
  for (size_t l = blocks_.size(); l-- > 0;) {
    Timeline::Scope span(timeline_, absl::StrCat("h.", first_layer_ + l, " bwd"), exec_.stream);
    GTP_ASSIGN_OR_RETURN(dx, blocks_[l]->Backward(dx));
  }
  if (has_embedding()) {
    Timeline::Scope span(timeline_, "embed bwd", exec_.stream);
    GTP_RETURN_IF_ERROR(EmbedBackward(dx));
    dx = Tensor();
  }
  GTP_RETURN_IF_ERROR(chain_->FinishBackward());
  return dx;
}

absl::StatusOr<Tensor> GptModel::HeadBackward() {
  const int64_t N = B_ * T_, C = config_.block.n_embd;
  if (head_dh_.defined()) {  // HeadChunked ran the head's backward in the forward
    Tensor dh = head_dh_;
    head_dh_ = Tensor();
    return ln_f_->Backward(dh);
  }
  if (!logits_.defined()) return absl::FailedPreconditionError("Backward without Forward");
  std::optional<Timeline::Scope> head_span;
  head_span.emplace(timeline_, "head+loss bwd", exec_.stream);
  // In place over the logits (not needed after this): one [N, V] buffer
  // less at the memory peak. Pad columns become 0.
  Tensor dlogits = logits_;
  if (!logits_are_grad_) {
    Tensor dloss = exec_.Empty({N});
    if (config_.loss_reduction == LossReduction::kSum) {
      ops::Fill(exec_, dloss, 1.0f);
    } else {
      ops::FillReciprocal(exec_, count_, dloss);  // 1 / valid targets (0 if none)
    }
    Timeline::Scope span(timeline_, "cross-entropy bwd", exec_.stream);
    ops::CrossEntropyBackward(exec_, logits_, row_max_, sumexp_, targets_, dloss, dlogits,
                              vocab_start_, v_real_);
  }
  logits_are_grad_ = false;
  logits_ = row_max_ = sumexp_ = Tensor();
  ShardedParam* head = lm_head_ ? lm_head_.get() : wte_.get();
  GTP_ASSIGN_OR_RETURN(Tensor w, head->Materialize(Direction::kBackward));
  Tensor dh = exec_.Empty({N, C}, config_.block.dtype);
  std::optional<Timeline::Scope> gemm_span;
  gemm_span.emplace(timeline_, "lm_head gemm bwd", exec_.stream);
  ops::LinearBackwardData(exec_, dlogits, w.Slice(0, v_tp_), dh);
  bool fresh = false;
  Tensor wgrad = head->Wgrad(&fresh);
  // Every vocabulary row (pad rows get 0 from the zero pad columns of dlogits).
  ops::LinearBackwardWeight(exec_, dlogits, h_f_, wgrad.Slice(0, v_tp_), fresh ? 0.0f : 1.0f);
  head->Release(Direction::kBackward);
  gemm_span.reset();
  if (lm_head_) GTP_RETURN_IF_ERROR(lm_head_->ReduceGrad());  // tied: after the embedding's part
  h_f_ = Tensor();
  // Leave the TP region of the head: partial dh over vocab slices.
  if (sp_) {
    GTP_ASSIGN_OR_RETURN(dh, ReduceScatterRows(exec_, *tp_, dh));
  } else {
    GTP_RETURN_IF_ERROR(AllReduceSum(*tp_, dh));
  }
  return ln_f_->Backward(dh);
}

absl::StatusOr<GptModel::MoeStats> GptModel::FinishMoeStep(comm::Communicator& world, int lanes,
                                                            int micro_batches) {
  return FinishMoeStep({this}, world, lanes, micro_batches);
}

absl::StatusOr<GptModel::MoeStats> GptModel::FinishMoeStep(const std::vector<GptModel*>& parts,
                                                            comm::Communicator& world, int lanes,
                                                            int micro_batches) {
  MoeStats st;
  if (parts.empty() || !parts[0]->config_.block.moe.enabled()) return st;
  const GptConfig& c = parts[0]->config_;
  const int E = c.block.moe.router.num_experts;
  // Every MoE layer of the whole model has a slot (pipeline stages hold
  // different layers): [L·E counts | dropped | aux | z], summed over the world.
  std::vector<int> slot(c.n_layer, -1);
  int L = 0;
  for (int l = 0; l < c.n_layer; ++l)
    if (parts[0]->layers_[l].ffn == FfnKind::kMoe) slot[l] = L++;
  if (L == 0) return st;
  std::vector<double> v(static_cast<size_t>(L) * E + 3, 0.0);
  for (GptModel* m : parts) {
    for (size_t i = 0; i < m->moe_layers_.size(); ++i) {
      moe::Router& r = m->moe_layers_[i]->router();
      const int s = slot[m->moe_layer_index_[i]];
      std::vector<double> counts = r.TakeCounts();
      for (int e = 0; e < E; ++e) v[s * E + e] += counts[e];
      moe::Router::Stats rs = r.TakeStats();
      v[L * E] += static_cast<double>(rs.dropped);
      v[L * E + 1] += rs.aux;
      v[L * E + 2] += rs.z;
    }
  }
  if (world.size() > 1) {
    const kernels::Exec& ex = parts[0]->exec_;
    std::vector<float> f(v.begin(), v.end());
    Tensor h = Tensor::Wrap(f.data(), {static_cast<int64_t>(f.size())}, DType::kF32, Device::Cpu());
    Tensor d = ex.Empty(h.shape(), DType::kF32);
    GTP_RETURN_IF_ERROR(Copy(h, d, ex.stream, true));
    GTP_RETURN_IF_ERROR(comm::Run(
        world.AllReduce(d.raw_data(), d.raw_data(), d.numel(), DType::kF32, comm::ReduceOp::kSum)));
    GTP_RETURN_IF_ERROR(Copy(d, h, ex.stream, true));
    v.assign(f.begin(), f.end());
  }
  st.tokens_min = v[0];
  double sum = 0;
  for (int i = 0; i < L * E; ++i) {
    st.tokens_min = std::min(st.tokens_min, v[i]);
    st.tokens_max = std::max(st.tokens_max, v[i]);
    sum += v[i];
  }
  st.tokens_mean = sum / (L * E);
  st.dropped = v[L * E];
  const double per = static_cast<double>(L) * std::max(1, lanes) * std::max(1, micro_batches);
  st.aux_loss = v[L * E + 1] / per;
  st.z_loss = v[L * E + 2] / per;
  for (GptModel* m : parts) {
    for (size_t i = 0; i < m->moe_layers_.size(); ++i) {
      moe::Router& r = m->moe_layers_[i]->router();
      if (!r.config().expert_bias) continue;
      const int s = slot[m->moe_layer_index_[i]];
      moe::UpdateExpertBias(r.config(), std::vector<double>(v.begin() + s * E, v.begin() + (s + 1) * E),
                            r.expert_bias().data());
    }
  }
  return st;
}

std::vector<std::pair<std::string, Tensor>> GptModel::moe_buffers() {
  std::vector<std::pair<std::string, Tensor>> out;
  for (moe::MoeLayer* m : moe_layers_) {
    moe::Router& r = m->router();
    if (!r.config().expert_bias) continue;
    out.emplace_back(r.name() + ".expert_bias",
                     Tensor::Wrap(r.expert_bias().data(),
                                  {static_cast<int64_t>(r.expert_bias().size())}, DType::kF32,
                                  Device::Cpu()));
  }
  return out;
}

void GptModel::ResetMoeStats() {
  for (moe::MoeLayer* m : moe_layers_) {
    m->router().TakeCounts();
    m->router().TakeStats();
  }
}

absl::Status GptModel::LoadGlobal(const std::string& name, const float* data, const Shape& shape) {
  std::vector<ShardedParam*> all = sharded_;
  all.insert(all.end(), experts_.begin(), experts_.end());
  for (ShardedParam* p : all) {
    if (p->name() != name) continue;
    const auto& L = p->global_layout();
    const bool vocab = (wte_ && p == wte_.get()) || (lm_head_ && p == lm_head_.get());
    const bool ok = shape.rank() == 2 && shape[1] == L.global_cols &&
                    (shape[0] == L.global_rows ||
                     (vocab && shape[0] == config_.vocab_size));
    if (!ok) {
      return absl::InvalidArgumentError(absl::StrCat("parameter ", name, " is [", L.global_rows,
                                                     ", ", L.global_cols, "], got ",
                                                     shape.ToString()));
    }
    std::vector<float> full(L.global_rows * L.global_cols, 0.0f);
    std::copy(data, data + shape.numel(), full.begin());
    LoadShardFromGlobal(*p, full.data());
    return absl::OkStatus();
  }
  for (ReplicatedParam* p : replicated_) {
    if (p->name != name) continue;
    if (p->tp_sharded) {
      if (shape.numel() != p->layout.global_rows) {
        return absl::InvalidArgumentError(absl::StrCat("parameter ", name, " has ",
                                                       p->layout.global_rows, " elements, got ",
                                                       shape.ToString()));
      }
      std::vector<float> slice(p->value.numel());
      for (int64_t r = 0; r < p->value.numel(); ++r) slice[r] = data[p->layout.row_map(r)];
      CopyFromHostF32(exec_, slice.data(), p->value);
      return absl::OkStatus();
    }
    if (shape != p->value.shape()) {
      return absl::InvalidArgumentError(absl::StrCat("parameter ", name, " is ",
                                                     p->value.shape().ToString(), ", got ",
                                                     shape.ToString()));
    }
    CopyFromHostF32(exec_, data, p->value);
    return absl::OkStatus();
  }
  return absl::NotFoundError(absl::StrCat("the model has no parameter named ", name));
}

}  // namespace gtp::layers
