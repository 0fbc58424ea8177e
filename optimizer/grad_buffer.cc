#include "optimizer/grad_buffer.h"

#include <algorithm>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "optimizer/internal/device.h"

namespace gtp::optimizer {

namespace ops = kernels::ops;

namespace {

// A GTP-1 weight: its main grad is its wgrad GEMM's output, so ZeroGrad
// leaves the zeroing to that GEMM's first write (ShardedParam::DeferGradZero).
bool ZeroDeferred(const GradParam& gp) {
  return gp.sharded != nullptr && gp.sharded->gtp_size() == 1;
}

// Bucket lengths are multiples of R·kAlign elements, so every replicate
// rank's slice starts 64-byte aligned.
constexpr int64_t kAlign = 16;

int64_t RoundUp(int64_t n, int64_t unit) { return (n + unit - 1) / unit * unit; }

absl::Status FinishedTwice(const GradParam& gp) {
  return absl::FailedPreconditionError(absl::StrCat(
      "GradBuffer: ", gp.name, " finished its gradient twice in one synchronising micro-batch "
      "(mark earlier micro-batches with StartMicrobatch(/*last=*/false))"));
}

}  // namespace

Tensor GradParam::value() const {
  if (sharded != nullptr) return sharded->shard().View({numel});
  return replicated->value.View({numel});
}

absl::StatusOr<std::unique_ptr<GradBuffer>> GradBuffer::Create(
    const ParamSet& params, const parallel::ProcessGroupCollection& pgs,
    const kernels::Exec& exec, const GradBufferOptions& options) {
  if (params.sharded.empty() && params.replicated.empty()) {
    return absl::InvalidArgumentError("GradBuffer: no parameters");
  }
  if (options.bucket_elements <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("GradBuffer: bucket_elements must be > 0, got ", options.bucket_elements));
  }
  std::unique_ptr<GradBuffer> g(new GradBuffer());
  g->options_ = options;
  g->exec_ = exec;
  if (exec.is_cuda()) g->exposed_.set_stream(exec.stream);
  const GradGroups& names = options.groups;
  GTP_ASSIGN_OR_RETURN(g->replicate_, pgs.Get(names.replicate));
  GTP_ASSIGN_OR_RETURN(g->tp_, pgs.Get(names.tp));
  GTP_ASSIGN_OR_RETURN(g->gtp_, pgs.Get(names.gtp));
  if (options.normalization == LossNormalization::kPerToken) {
    GTP_ASSIGN_OR_RETURN(g->data_cp_, pgs.Get(names.data_cp));
  }
  for (const std::string& name : names.distinct) {
    if (!pgs.Has(name)) continue;
    GTP_ASSIGN_OR_RETURN(comm::Communicator * c, pgs.Get(name));
    if (c->size() > 1) g->distinct_.push_back(c);
  }
  const int R = g->replicate_->size();
  const int64_t unit = R * kAlign;

  // Params in buffer order: the sharded ones reversed, except that a run of
  // one grad group keeps its listed order (its fused GEMM writes the run's
  // grads as one matrix: ShardedParam::set_grad_group).
  std::vector<layers::ShardedParam*> sharded(params.sharded.rbegin(), params.sharded.rend());
  for (size_t i = 0; i < sharded.size();) {
    size_t j = i + 1;
    const void* key = sharded[i]->grad_group();
    while (key != nullptr && j < sharded.size() && sharded[j]->grad_group() == key) ++j;
    std::reverse(sharded.begin() + i, sharded.begin() + j);
    i = j;
  }
  std::set<const void*> seen;
  for (layers::ShardedParam* p : sharded) {
    if (!seen.insert(p).second) {
      return absl::InvalidArgumentError(absl::StrCat("GradBuffer: ", p->name(), " listed twice"));
    }
    GradParam gp;
    gp.name = p->name();
    gp.sharded = p;
    gp.numel = p->shard_rows() * p->cols();
    gp.tp_sharded = true;
    gp.dims = 2;
    g->params_.push_back(gp);
  }
  const size_t num_sharded = g->params_.size();
  for (int pass = 0; pass < 2; ++pass) {  // the TP-summed ones first
    for (layers::ReplicatedParam* p : params.replicated) {
      if (p->grad_needs_tp_sum != (pass == 0)) continue;
      if (!seen.insert(p).second) {
        return absl::InvalidArgumentError(absl::StrCat("GradBuffer: ", p->name, " listed twice"));
      }
      if (p->grad.dtype() != DType::kF32 || p->grad.shape() != p->value.shape()) {
        return absl::InvalidArgumentError(absl::StrCat("GradBuffer: ", p->name,
                                                       " needs an f32 grad shaped like its value"));
      }
      GradParam gp;
      gp.name = p->name;
      gp.replicated = p;
      gp.numel = p->value.numel();
      gp.tp_sharded = p->tp_sharded;
      gp.dims = p->value.rank();
      g->params_.push_back(gp);
    }
  }

  // Buckets: runs of whole params, sharded and replicated kept apart.
  int64_t offset = 0;
  auto close_bucket = [&](Bucket& b) {
    if (b.params.empty()) return;
    int64_t used = 0;
    for (int i : b.params) used += g->params_[i].numel;
    b.numel = RoundUp(used, unit);
    b.index = static_cast<int>(g->buckets_.size());
    offset = b.offset + b.numel;
    g->buckets_.push_back(b);
  };
  for (int region = 0; region < 2; ++region) {
    const size_t begin = region == 0 ? 0 : num_sharded;
    const size_t end = region == 0 ? num_sharded : g->params_.size();
    if (region == 1) g->replicated_begin_ = offset;
    Bucket cur;
    cur.offset = offset;
    cur.replicated = region == 1;
    int64_t fill = 0;
    // Param i's grad group (null: none). A group's run goes into one bucket
    // whole: the bucket closes, if at all, before the run's first member.
    auto group = [&](size_t i) {
      const layers::ShardedParam* p = g->params_[i].sharded;
      return p != nullptr ? p->grad_group() : nullptr;
    };
    for (size_t i = begin; i < end; ++i) {
      GradParam& gp = g->params_[i];
      const void* key = group(i);
      const bool continues_run = key != nullptr && i > begin && group(i - 1) == key;
      int64_t run = gp.numel;
      for (size_t j = i + 1; key != nullptr && j < end && group(j) == key; ++j) {
        run += g->params_[j].numel;
      }
      if (!continues_run && !cur.params.empty() && fill + run > options.bucket_elements) {
        close_bucket(cur);
        cur = Bucket();
        cur.offset = offset;
        cur.replicated = region == 1;
        fill = 0;
      }
      gp.offset = cur.offset + fill;
      gp.bucket = static_cast<int>(g->buckets_.size());
      fill += gp.numel;
      cur.params.push_back(static_cast<int>(i));
      if (gp.replicated != nullptr && gp.replicated->grad_needs_tp_sum) {
        g->tp_sum_end_ = gp.offset + gp.numel;
      }
    }
    close_bucket(cur);
  }
  if (g->tp_sum_end_ < g->replicated_begin_) g->tp_sum_end_ = g->replicated_begin_;

  // Move the grads into the buffer.
  g->data_ = exec.Zeros({std::max<int64_t>(offset, 1)});
  for (size_t i = 0; i < g->params_.size(); ++i) {
    GradParam& gp = g->params_[i];
    Tensor view = g->data_.Slice(gp.offset, gp.offset + gp.numel);
    if (gp.sharded != nullptr) {
      gp.sharded->set_main_grad_storage(view.View({gp.sharded->shard_rows(), gp.sharded->cols()}));
      GradBuffer* self = g.get();
      const int index = static_cast<int>(i);
      gp.sharded->set_ready_hook([self, index](layers::ShardedParam&) { self->OnParamReady(index); });
      gp.sharded->set_grad_write_hook(
          [self, index](layers::ShardedParam&) { self->OnGradWrite(index); });
    } else {
      Tensor shaped = view.View(gp.replicated->value.shape());
      ops::CopyInto(exec, gp.replicated->grad, shaped);
      gp.replicated->grad = shaped;
    }
  }
  // What ZeroGrad fills: every param but the GTP-1 sharded ones (their
  // zeroing is deferred to their first wgrad), a run of neighbours (params_
  // ascend in offset) as one range over the padding between them.
  bool extend = false;
  for (const GradParam& gp : g->params_) {
    if (ZeroDeferred(gp)) {
      extend = false;
    } else if (extend) {
      g->zero_ranges_.back().second = gp.offset + gp.numel;
    } else {
      g->zero_ranges_.emplace_back(gp.offset, gp.offset + gp.numel);
      extend = true;
    }
  }
  g->state_.resize(g->buckets_.size());
  g->param_ready_.assign(g->params_.size(), 0);
  return g;
}

GradBuffer::~GradBuffer() {
  for (GradParam& gp : params_) {
    if (gp.sharded != nullptr) {
      gp.sharded->set_ready_hook(nullptr);
      gp.sharded->set_grad_write_hook(nullptr);
    }
  }
}

void GradBuffer::Record(GradSyncEvent::Kind kind, int bucket, const std::string& param) {
  if (tracing_) trace_.push_back(GradSyncEvent{kind, bucket, param, seq_++});
}

void GradBuffer::StartMicrobatch(bool last, int64_t num_tokens) {
  GTP_CHECK(!finished_, "GradBuffer::StartMicrobatch after FinishGradSync: call ZeroGrad (or "
                        "the optimizer's Step) first");
  ++num_microbatches_;
  local_tokens_ += num_tokens;
  sync_ = last;
  if (last) {
    std::fill(param_ready_.begin(), param_ready_.end(), 0);
    for (BucketState& s : state_) s.ready = 0;
  }
}

void GradBuffer::OnParamReady(int param) {
  const GradParam& gp = params_[param];
  Record(GradSyncEvent::kParamReady, gp.bucket, gp.name);
  if (!sync_) return;
  if (param_ready_[param]) {
    if (deferred_error_.ok()) {
      deferred_error_ = FinishedTwice(gp);
    }
    return;
  }
  param_ready_[param] = 1;
  BucketState& s = state_[gp.bucket];
  ++s.ready;
  if (options_.overlap && !s.issued &&
      s.ready == static_cast<int>(buckets_[gp.bucket].params.size())) {
    absl::Status st = IssueBucket(gp.bucket);
    if (!st.ok() && deferred_error_.ok()) deferred_error_ = st;
  }
}

void GradBuffer::OnGradWrite(int param) {
  if (!sync_ || !param_ready_[param]) return;
  // A second synchronising backward (a misuse FinishGradSync reports): the
  // param's bucket may be reducing the very memory about to be written.
  const GradParam& gp = params_[param];
  if (deferred_error_.ok()) {
    deferred_error_ = FinishedTwice(gp);
  }
  BucketState& s = state_[gp.bucket];
  if (s.work) {
    // Only to end the reduction's use of the memory; the misuse above is
    // what FinishGradSync reports.
    s.work->Wait().IgnoreError();
    s.work.reset();
  }
}

absl::Status GradBuffer::IssueBucket(int b) {
  BucketState& s = state_[b];
  GTP_CHECK(!s.issued, "bucket ", b, " issued twice");
  s.issued = true;
  const Bucket& bucket = buckets_[b];
  if (options_.on_bucket_issue) options_.on_bucket_issue(bucket);
  Record(GradSyncEvent::kBucketIssued, b, "");
  const int R = replicate_->size();
  if (R == 1) return absl::OkStatus();
  const comm::ReduceOp op = options_.normalization == LossNormalization::kMean
                                ? comm::ReduceOp::kMean
                                : comm::ReduceOp::kSum;
  float* base = data_.data<float>() + bucket.offset;
  absl::StatusOr<comm::WorkPtr> w;
  if (options_.reduce == ReduceMode::kReduceScatter) {
    const int64_t count = bucket.numel / R;
    w = replicate_->ReduceScatter(base, base + replicate_->rank() * count, count, DType::kF32, op);
  } else {
    w = replicate_->AllReduce(base, base, bucket.numel, DType::kF32, op);
  }
  if (!w.ok()) {
    return internal::Annotate(w.status(), absl::StrCat("reducing gradient bucket ", b), replicate_);
  }
  s.work = std::move(w).value();
  return absl::OkStatus();
}

absl::Status GradBuffer::FinishGradSync() {
  if (finished_) return absl::OkStatus();
  GTP_RETURN_IF_ERROR(deferred_error_);
  const bool mean = options_.normalization == LossNormalization::kMean;
  // A deferred grad no backward wrote is zero (before its bucket reduces).
  for (GradParam& gp : params_) {
    if (gp.sharded != nullptr) gp.sharded->FillUnwrittenGrad();
  }
  for (const Bucket& b : buckets_) {
    if (!b.replicated && !state_[b.index].issued) GTP_RETURN_IF_ERROR(IssueBucket(b.index));
  }
  const int64_t end = data_.numel();
  float* base = data_.data<float>();
  Timeline* tl = exec_.is_cuda() ? nullptr : timeline_;  // host-clock spans only
  // A synchronous collective: all of it is exposed.
  auto timed = [&](absl::StatusOr<comm::WorkPtr> w, const char* what) {
    if (!w.ok()) return w.status();
    return exposed_.Wait(**w, tl, "all-reduce", what);
  };
  if (tp_sum_end_ > replicated_begin_ && tp_->size() > 1) {
    GTP_RETURN_IF_ERROR(internal::Annotate(
        timed(tp_->AllReduce(base + replicated_begin_, base + replicated_begin_,
                             tp_sum_end_ - replicated_begin_, DType::kF32, comm::ReduceOp::kSum),
              "sequence-parallel grads (tp)"),
        "summing sequence-parallel gradients", tp_));
  }
  if (end > replicated_begin_ && gtp_->size() > 1 && !buckets_.empty() && buckets_.back().replicated) {
    GTP_RETURN_IF_ERROR(internal::Annotate(
        timed(gtp_->AllReduce(base + replicated_begin_, base + replicated_begin_,
                              end - replicated_begin_, DType::kF32,
                              mean ? comm::ReduceOp::kMean : comm::ReduceOp::kSum),
              "replicated grads (gtp)"),
        "reducing replicated gradients", gtp_));
  }
  for (const Bucket& b : buckets_) {
    if (b.replicated) GTP_RETURN_IF_ERROR(IssueBucket(b.index));
  }
  for (const Bucket& b : buckets_) {
    BucketState& s = state_[b.index];
    if (s.work != nullptr) {
      const char* what = options_.reduce == ReduceMode::kReduceScatter ? "reduce-scatter"
                                                                        : "all-reduce";
      GTP_RETURN_IF_ERROR(internal::Annotate(
          exposed_.Wait(*s.work, tl, what, absl::StrCat("bucket ", b.index)),
          absl::StrCat("reducing gradient bucket ", b.index), replicate_));
      s.work.reset();
    }
    Record(GradSyncEvent::kBucketDone, b.index, "");
  }

  double factor = 1.0 / std::max(1, num_microbatches_);
  global_tokens_ = 0;
  if (!mean) {
    std::vector<int64_t> tokens{local_tokens_};
    GTP_RETURN_IF_ERROR(internal::Annotate(
        internal::AllReduceHostI64(exec_, data_cp_, &tokens, comm::ReduceOp::kSum),
        "summing token counts", data_cp_));
    global_tokens_ = tokens[0];
    if (global_tokens_ <= 0) {
      return absl::FailedPreconditionError(
          "per-token normalisation: no tokens counted (pass each micro-batch's valid-target "
          "count to GradBuffer::StartMicrobatch)");
    }
    factor = 1.0 / static_cast<double>(global_tokens_);
  }
  if (factor != 1.0) {
    for (const Bucket& b : buckets_) {
      auto [lo, hi] = valid_range(b.index);
      Tensor v = data_.Slice(lo, hi);
      ops::Axpby(exec_, static_cast<float>(factor), v, 0.0f, v);
    }
  }
  finished_ = true;
  return absl::OkStatus();
}

void GradBuffer::ZeroGrad() {
  for (BucketState& s : state_) {
    // A work left by a failed iteration: drop it (the communicator is
    // unusable after an error anyway).
    s = BucketState();
  }
  for (auto [lo, hi] : zero_ranges_) ops::Fill(exec_, data_.Slice(lo, hi), 0.0f);
  zeroed_ = true;
  for (GradParam& gp : params_) {
    if (ZeroDeferred(gp)) gp.sharded->DeferGradZero();
  }
  std::fill(param_ready_.begin(), param_ready_.end(), 0);
  sync_ = true;
  num_microbatches_ = 0;
  local_tokens_ = 0;
  finished_ = false;
  deferred_error_ = absl::OkStatus();
}

std::pair<int64_t, int64_t> GradBuffer::shard_range(int b) const {
  const Bucket& bucket = buckets_[b];
  const int64_t count = bucket.numel / replicate_->size();
  const int64_t lo = bucket.offset + replicate_->rank() * count;
  return {lo, lo + count};
}

std::pair<int64_t, int64_t> GradBuffer::valid_range(int b) const {
  if (options_.reduce == ReduceMode::kReduceScatter) return shard_range(b);
  const Bucket& bucket = buckets_[b];
  return {bucket.offset, bucket.offset + bucket.numel};
}

}  // namespace gtp::optimizer
