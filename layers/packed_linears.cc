#include "layers/packed_linears.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status.h"

namespace gtp::layers {

namespace ops = kernels::ops;

namespace {

// The tensors as one matrix [Σ dim 0, rest] when they are consecutive blocks
// of rows of one storage (contiguous, same dtype and row length); else an
// undefined tensor.
Tensor Joined(const std::vector<Tensor>& t) {
  int64_t rows = 0;
  for (size_t i = 0; i < t.size(); ++i) {
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
  return t[0].Strided(shape, t[0].strides(), 0);
}

// The tensors as one matrix: joined where they already are, else copied
// into a new one (rows in order; counted in *copies).
Tensor Pack(const kernels::Exec& e, const std::vector<Tensor>& t, int* copies) {
  Tensor joined = Joined(t);
  if (joined.defined()) return joined;
  ++*copies;
  Shape shape = t[0].shape();
  shape[0] = 0;
  for (const Tensor& part : t) shape[0] += part.dim(0);
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

absl::StatusOr<std::unique_ptr<PackedLinears>> PackedLinears::Create(
    const std::vector<LinearConfig>& parts, bool packed,
    const parallel::ProcessGroupCollection& pgs, GtpChain* chain) {
  if (parts.size() < 2) {
    return absl::InvalidArgumentError("PackedLinears: at least two linears");
  }
  const LinearConfig& a = parts[0];
  for (const LinearConfig& c : parts) {
    if (!c.caller_reduces_input_grad || c.fused_parts != 1 || c.in_features != a.in_features ||
        c.bias != a.bias || c.dtype != a.dtype || c.fp8 != a.fp8 || c.f32_output != a.f32_output ||
        c.sequence_parallel != a.sequence_parallel) {
      return absl::InvalidArgumentError(absl::StrCat(c.name, ": the projections packed with ",
                                                     a.name, " must read one input the same way"));
    }
  }
  if (packed && a.fp8) {
    return absl::InvalidArgumentError(absl::StrCat(
        a.name,
        ": projections packed in one GEMM are not for FP8 GEMMs (they quantise per weight)"));
  }
  std::unique_ptr<PackedLinears> p(new PackedLinears());
  p->chain_ = chain;
  p->packed_ = packed;
  p->bias_ = a.bias;
  p->in_ = a.in_features;
  p->dtype_ = a.dtype;
  p->out_dtype_ = a.f32_output ? DType::kF32 : a.dtype;
  for (const LinearConfig& c : parts) {
    GTP_ASSIGN_OR_RETURN(std::unique_ptr<ColumnParallelLinear> l,
                         ColumnParallelLinear::Create(c, pgs, chain));
    p->first_.push_back(p->total_);
    p->rows_.push_back(l->out_features_tp());
    p->total_ += l->out_features_tp();
    p->linears_.push_back(std::move(l));
  }
  if (!packed) return p;

  const kernels::Exec& e = chain->exec();
  // One buffer for the shards (where a shard is the whole TP-local weight)
  // and one for the bias values: the GEMMs then read them as they are.
  bool whole = true;
  int64_t shard_rows = 0;
  for (const auto& l : p->linears_) {
    const ShardedParam& w = l->weight();
    whole = whole && w.gtp_size() == 1 && w.shard_rows() == w.rows();
    shard_rows += w.shard_rows();
  }
  if (whole) {  // the shards' views keep the buffer alive
    const Tensor storage = e.Zeros({shard_rows, p->in_}, p->dtype_);
    int64_t row = 0;
    for (const auto& l : p->linears_) {
      ShardedParam& w = l->weight();
      w.set_shard_storage(storage.Slice(row, row + w.shard_rows()));
      row += w.shard_rows();
    }
  }
  if (p->bias_) {
    const Tensor storage = e.Zeros({p->total_}, p->dtype_);  // kept alive by the values' views
    for (int i = 0; i < p->size(); ++i) {
      ReplicatedParam* b = p->part(i).bias();
      Tensor view = storage.Slice(p->first_[i], p->first_[i] + p->rows_[i]);
      ops::CopyInto(e, b->value, view);
      b->value = view;
    }
  }
  // The main grads side by side, in the parts' order, in an optimizer's buffer.
  for (const auto& l : p->linears_) l->weight().set_grad_group(p.get());
  return p;
}

absl::StatusOr<PackedLinears::Parts> PackedLinears::Forward(const Tensor& x, Direction dir,
                                                            kernels::fp8::Fp8SharedInput* shared) {
  Parts out;
  n_ = x.numel() / in_;
  if (!packed_) {
    for (const auto& l : linears_) {
      GTP_ASSIGN_OR_RETURN(Tensor y, l->Forward(x, dir, shared));
      out.part.push_back(std::move(y));
    }
    return out;
  }
  const kernels::Exec& e = exec();
  std::vector<Tensor> w;
  for (const auto& l : linears_) {
    GTP_ASSIGN_OR_RETURN(Tensor wi, l->weight().Materialize(dir));
    w.push_back(std::move(wi));
  }
  copies_ = 0;
  const Tensor weight = Pack(e, w, &copies_);
  Tensor bias;
  if (bias_) {
    std::vector<Tensor> b;
    for (const auto& l : linears_) b.push_back(l->bias()->value);
    bias = Pack(e, b, &copies_);
  }
  x_saved_ = x;
  out.all = e.Empty({n_, total_}, out_dtype_);
  ops::Linear(e, x.View({n_, in_}), weight, out.all, 0.0f, bias);
  for (const auto& l : linears_) l->weight().Release(dir);
  for (int i = 0; i < size(); ++i) {
    out.part.push_back(out.all.Strided({n_, rows_[i]}, {total_, 1}, first_[i]));
  }
  return out;
}

PackedLinears::Parts PackedLinears::NewGrads() const {
  const kernels::Exec& e = exec();
  Parts d;
  if (!packed_) {
    for (int64_t r : rows_) d.part.push_back(e.Empty({n_, r}, dtype_));
    return d;
  }
  d.all = e.Empty({n_, total_}, dtype_);
  for (size_t i = 0; i < rows_.size(); ++i) {
    d.part.push_back(d.all.Strided({n_, rows_[i]}, {total_, 1}, first_[i]));
  }
  return d;
}

absl::StatusOr<Tensor> PackedLinears::Backward(const Parts& grads) {
  GTP_CHECK(static_cast<int>(grads.part.size()) == size(), part(0).weight().name(),
            ": a gradient for each of the ", size(), " packed linears, got ", grads.part.size());
  if (!packed_) {
    // Reverse forward order keeps the GTP chain's order. One dx: the other
    // parts' input gradients are added into the last one's by their GEMMs
    // (fp8: their wgrads read the codes of xᵀ the forward made once).
    GTP_ASSIGN_OR_RETURN(Tensor dx, linears_.back()->Backward(grads.part.back()));
    for (int i = size() - 2; i >= 0; --i) {
      GTP_RETURN_IF_ERROR(linears_[i]->Backward(grads.part[i], dx).status());
    }
    return dx;
  }
  const kernels::Exec& e = exec();
  GTP_CHECK(grads.all.defined() && grads.all.shape() == Shape({n_, total_}) && x_saved_.defined(),
            part(0).weight().name(), ": a packed backward needs NewGrads' tensor after a forward");
  const Tensor& dy = grads.all;
  std::vector<Tensor> w(size());
  for (int i = size() - 1; i >= 0; --i) {  // the GTP chain's backward order
    GTP_ASSIGN_OR_RETURN(w[i], part(i).weight().Materialize(Direction::kBackward));
  }
  Tensor dx = e.Empty({n_, in_}, dtype_);
  ops::LinearBackwardData(e, dy, Pack(e, w, &copies_), dx);

  const Tensor x = x_saved_.View({n_, in_});
  std::vector<Tensor> g(size()), db;
  std::vector<char> fresh(size());
  bool same_fresh = true;
  for (int i = size() - 1; i >= 0; --i) {
    bool f = false;
    g[i] = part(i).weight().Wgrad(&f).Slice(0, rows_[i]);
    fresh[i] = f;
    same_fresh = same_fresh && fresh[i] == fresh[size() - 1];
  }
  if (bias_) {
    for (int i = 0; i < size(); ++i) db.push_back(part(i).bias()->grad);
  }
  // Each grad written in place where its parts are one matrix, else through
  // scratch whose blocks are then added (copied, when fresh) in.
  const Tensor dw = same_fresh ? Joined(g) : Tensor();
  const Tensor dbias = bias_ ? Joined(db) : Tensor();
  if (dw.defined()) {
    WeightAndBiasGrad(*chain_, dy, x, dw, fresh[0] ? 0.0f : 1.0f, dbias);
  } else {
    ++copies_;
    Tensor scratch = e.Empty({total_, in_});
    ops::LinearBackwardWeight(e, dy, x, scratch);
    if (dbias.defined()) BiasGrad(*chain_, dy, dbias);
    for (int i = 0; i < size(); ++i) {
      const Tensor block = scratch.Slice(first_[i], first_[i] + rows_[i]);
      if (fresh[i]) {
        ops::CopyInto(e, block, g[i]);
      } else {
        ops::Axpby(e, 1.0f, block, 1.0f, g[i]);
      }
    }
  }
  if (bias_ && !dbias.defined()) {
    ++copies_;
    Tensor scratch = e.Zeros({total_});
    BiasGrad(*chain_, dy, scratch);
    for (int i = 0; i < size(); ++i) {
      ops::Axpby(e, 1.0f, scratch.Slice(first_[i], first_[i] + rows_[i]), 1.0f, db[i]);
    }
  }
  for (int i = size() - 1; i >= 0; --i) part(i).weight().Release(Direction::kBackward);
  for (int i = size() - 1; i >= 0; --i) GTP_RETURN_IF_ERROR(part(i).weight().ReduceGrad());
  x_saved_ = Tensor();
  return dx;
}

void PackedLinears::DropActivations() {
  x_saved_ = Tensor();
  for (const auto& l : linears_) l->DropActivations();
}

}  // namespace gtp::layers
