#include "layers/qkv_projection.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status.h"

namespace gtp::layers {

namespace ops = kernels::ops;

namespace {

// The three tensors as one matrix [Σ dim 0, rest] when they are consecutive
// blocks of rows of one storage (contiguous, same dtype and row length);
// else an undefined tensor.
Tensor Joined(const Tensor (&t)[3]) {
  int64_t rows = 0;
  for (int i = 0; i < 3; ++i) {
    if (!t[i].defined() || !t[i].is_contiguous() || t[i].storage() != t[0].storage() ||
        t[i].dtype() != t[0].dtype() || t[i].rank() != t[0].rank() ||
        t[i].numel() / t[i].dim(0) != t[0].numel() / t[0].dim(0)) {
      return Tensor();
    }
    if (i > 0 && t[i].offset() != t[i - 1].offset() + t[i - 1].numel()) return Tensor();
    rows += t[i].dim(0);
  }
  Shape shape = t[0].shape();
  shape[0] = rows;
  Shape strides = t[0].strides();
  return t[0].Strided(shape, strides, 0);
}

// The three tensors as one matrix: joined where they already are, else
// copied into a new one (rows in order; counted in *copies).
Tensor Pack(const kernels::Exec& e, const Tensor (&t)[3], int* copies) {
  Tensor joined = Joined(t);
  if (joined.defined()) return joined;
  ++*copies;
  Shape shape = t[0].shape();
  shape[0] = t[0].dim(0) + t[1].dim(0) + t[2].dim(0);
  Tensor packed = e.Empty(shape, t[0].dtype());
  int64_t row = 0;
  for (const Tensor& part : t) {
    ops::CopyInto(e, part, packed.Slice(row, row + part.dim(0)));
    row += part.dim(0);
  }
  return packed;
}

// db (f32 [R]) += Σ_rows dy — as WeightAndBiasGrad sums it on each device.
void BiasGrad(GtpChain& chain, const Tensor& dy, const Tensor& db) {
  if (chain.exec().is_cuda()) {
    ops::ColumnSumAccumulate(chain.exec(), dy, db);
  } else {
    AccumulateBiasGrad(chain, dy, db);
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<QkvProjection>> QkvProjection::Create(
    const LinearConfig& q, const LinearConfig& k, const LinearConfig& v, bool packed,
    const parallel::ProcessGroupCollection& pgs, GtpChain* chain) {
  for (const LinearConfig* c : {&q, &k, &v}) {
    if (!c->caller_reduces_input_grad || c->fused_parts != 1 || c->f32_output ||
        c->in_features != q.in_features || c->bias != q.bias || c->dtype != q.dtype ||
        c->fp8 != q.fp8 || c->sequence_parallel != q.sequence_parallel) {
      return absl::InvalidArgumentError(
          absl::StrCat(c->name, ": q, k and v projections must read one input the same way"));
    }
  }
  if (packed && q.fp8) {
    return absl::InvalidArgumentError(absl::StrCat(
        q.name, ": q, k and v packed in one GEMM is not for FP8 GEMMs (they quantise per weight)"));
  }
  std::unique_ptr<QkvProjection> p(new QkvProjection());
  p->chain_ = chain;
  p->packed_ = packed;
  p->in_ = q.in_features;
  p->dtype_ = q.dtype;
  GTP_ASSIGN_OR_RETURN(p->q_, ColumnParallelLinear::Create(q, pgs, chain));
  GTP_ASSIGN_OR_RETURN(p->k_, ColumnParallelLinear::Create(k, pgs, chain));
  GTP_ASSIGN_OR_RETURN(p->v_, ColumnParallelLinear::Create(v, pgs, chain));
  for (int i = 0; i < 3; ++i) p->rows_[i] = p->part(i)->out_features_tp();
  p->total_ = p->rows_[0] + p->rows_[1] + p->rows_[2];
  if (!packed) return p;

  const kernels::Exec& e = chain->exec();
  // One buffer for the shards (where a shard is the whole TP-local weight)
  // and one for the bias values: the GEMMs then read them as they are.
  bool whole = true;
  int64_t shard_rows = 0;
  for (int i = 0; i < 3; ++i) {
    const ShardedParam& w = p->part(i)->weight();
    whole = whole && w.gtp_size() == 1 && w.shard_rows() == w.rows();
    shard_rows += w.shard_rows();
  }
  if (whole) {
    p->weight_storage_ = e.Zeros({shard_rows, p->in_}, p->dtype_);
    int64_t row = 0;
    for (int i = 0; i < 3; ++i) {
      ShardedParam& w = p->part(i)->weight();
      w.set_shard_storage(p->weight_storage_.Slice(row, row + w.shard_rows()));
      row += w.shard_rows();
    }
  }
  if (q.bias) {
    p->bias_storage_ = e.Zeros({p->total_}, p->dtype_);
    int64_t row = 0;
    for (int i = 0; i < 3; ++i) {
      ReplicatedParam* b = p->part(i)->bias();
      Tensor view = p->bias_storage_.Slice(row, row + p->rows_[i]);
      ops::CopyInto(e, b->value, view);
      b->value = view;
      row += p->rows_[i];
    }
  }
  // The main grads side by side, in q, k, v order, in an optimizer's buffer.
  for (int i = 0; i < 3; ++i) p->part(i)->weight().set_grad_group(p.get());
  return p;
}

absl::StatusOr<QkvProjection::Parts> QkvProjection::Forward(const Tensor& x, Direction dir,
                                                            kernels::fp8::Fp8SharedInput* shared) {
  Parts out;
  n_ = x.numel() / in_;
  if (!packed_) {
    GTP_ASSIGN_OR_RETURN(out.q, q_->Forward(x, dir, shared));
    GTP_ASSIGN_OR_RETURN(out.k, k_->Forward(x, dir, shared));
    GTP_ASSIGN_OR_RETURN(out.v, v_->Forward(x, dir, shared));
    return out;
  }
  const kernels::Exec& e = exec();
  Tensor w[3];
  for (int i = 0; i < 3; ++i) {
    GTP_ASSIGN_OR_RETURN(w[i], part(i)->weight().Materialize(dir));
  }
  copies_ = 0;
  const Tensor weight = Pack(e, w, &copies_);
  Tensor bias;
  if (q_->bias() != nullptr) {
    bias = Pack(e, {q_->bias()->value, k_->bias()->value, v_->bias()->value}, &copies_);
  }
  x_saved_ = x;
  out.all = e.Empty({n_, total_}, dtype_);
  ops::Linear(e, x.View({n_, in_}), weight, out.all, 0.0f, bias);
  for (int i = 0; i < 3; ++i) part(i)->weight().Release(dir);
  out.q = out.all.Strided({n_, rows_[0]}, {total_, 1}, 0);
  out.k = out.all.Strided({n_, rows_[1]}, {total_, 1}, rows_[0]);
  out.v = out.all.Strided({n_, rows_[2]}, {total_, 1}, rows_[0] + rows_[1]);
  return out;
}

QkvProjection::Parts QkvProjection::NewGrads() const {
  const kernels::Exec& e = exec();
  Parts d;
  const int64_t n = n_;
  if (!packed_) {
    d.q = e.Empty({n, rows_[0]}, dtype_);
    d.k = e.Empty({n, rows_[1]}, dtype_);
    d.v = e.Empty({n, rows_[2]}, dtype_);
    return d;
  }
  d.all = e.Empty({n, total_}, dtype_);
  d.q = d.all.Strided({n, rows_[0]}, {total_, 1}, 0);
  d.k = d.all.Strided({n, rows_[1]}, {total_, 1}, rows_[0]);
  d.v = d.all.Strided({n, rows_[2]}, {total_, 1}, rows_[0] + rows_[1]);
  return d;
}

absl::StatusOr<Tensor> QkvProjection::Backward(const Parts& grads) {
  if (!packed_) {
    // Reverse forward order (v, k, q) keeps the GTP chain's order. One dx:
    // k's and q's input gradients are added into v's by their GEMMs (fp8:
    // their wgrads read the codes of xᵀ the forward made once for all three).
    GTP_ASSIGN_OR_RETURN(Tensor dx, v_->Backward(grads.v));
    GTP_RETURN_IF_ERROR(k_->Backward(grads.k, dx).status());
    GTP_RETURN_IF_ERROR(q_->Backward(grads.q, dx).status());
    return dx;
  }
  const kernels::Exec& e = exec();
  GTP_CHECK(grads.all.defined() && grads.all.shape() == Shape({n_, total_}) && x_saved_.defined(),
            q_->weight().name(), ": packed q/k/v backward needs NewGrads' tensor after a forward");
  const Tensor& dy = grads.all;
  Tensor w[3];
  for (int i = 2; i >= 0; --i) {  // v, k, q: the GTP chain's backward order
    GTP_ASSIGN_OR_RETURN(w[i], part(i)->weight().Materialize(Direction::kBackward));
  }
  Tensor dx = e.Empty({n_, in_}, dtype_);
  ops::LinearBackwardData(e, dy, Pack(e, w, &copies_), dx);

  const Tensor x = x_saved_.View({n_, in_});
  Tensor g[3];
  bool fresh[3];
  for (int i = 2; i >= 0; --i) g[i] = part(i)->weight().Wgrad(&fresh[i]).Slice(0, rows_[i]);
  Tensor db[3];
  const bool bias = q_->bias() != nullptr;
  if (bias) {
    for (int i = 0; i < 3; ++i) db[i] = part(i)->bias()->grad;
  }
  // Each grad written in place where its three parts are one matrix, else
  // through scratch whose blocks are then added (copied, when fresh) in.
  const Tensor dw = fresh[0] == fresh[1] && fresh[1] == fresh[2] ? Joined(g) : Tensor();
  const Tensor dbias = bias ? Joined(db) : Tensor();
  if (dw.defined()) {
    WeightAndBiasGrad(*chain_, dy, x, dw, fresh[0] ? 0.0f : 1.0f, dbias);
  } else {
    ++copies_;
    Tensor scratch = e.Empty({total_, in_});
    ops::LinearBackwardWeight(e, dy, x, scratch);
    if (dbias.defined()) BiasGrad(*chain_, dy, dbias);
    int64_t row = 0;
    for (int i = 0; i < 3; ++i) {
      const Tensor block = scratch.Slice(row, row + rows_[i]);
      if (fresh[i]) {
        ops::CopyInto(e, block, g[i]);
      } else {
        ops::Axpby(e, 1.0f, block, 1.0f, g[i]);
      }
      row += rows_[i];
    }
  }
  if (bias && !dbias.defined()) {
    ++copies_;
    Tensor scratch = e.Zeros({total_});
    BiasGrad(*chain_, dy, scratch);
    int64_t row = 0;
    for (int i = 0; i < 3; ++i) {
      ops::Axpby(e, 1.0f, scratch.Slice(row, row + rows_[i]), 1.0f, db[i]);
      row += rows_[i];
    }
  }
  for (int i = 2; i >= 0; --i) part(i)->weight().Release(Direction::kBackward);
  for (int i = 2; i >= 0; --i) GTP_RETURN_IF_ERROR(part(i)->weight().ReduceGrad());
  x_saved_ = Tensor();
  return dx;
}

void QkvProjection::DropActivations() {
  x_saved_ = Tensor();
  q_->DropActivations();
  k_->DropActivations();
  v_->DropActivations();
}

}  // namespace gtp::layers
