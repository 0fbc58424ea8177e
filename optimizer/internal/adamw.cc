#include "optimizer/internal/adamw.h"

#include <algorithm>
#include <utility>

#include "core/kernels/cpu.h"
#include "core/kernels/cuda.h"
#include "core/status.h"
#include "optimizer/internal/device.h"

namespace gtp::optimizer::internal {

std::unique_ptr<AdamWUpdater> AdamWUpdater::Create(
    GradBuffer* grads, const std::vector<char>& is_muon, const kernels::Exec& exec,
    const AdamWConfig& config, bool distributed,
    const std::function<bool(const GradParam&)>& decay) {
  std::unique_ptr<AdamWUpdater> u(new AdamWUpdater(grads, exec, config));
  u->is_muon_ = is_muon;
  const std::vector<GradParam>& params = grads->params();
  // This rank's slice of every bucket (or all of it).
  int64_t n_state = 0, n_master = 0;
  for (const Bucket& b : grads->buckets()) {
    auto [lo, hi] = distributed ? grads->shard_range(b.index)
                                : std::make_pair(b.offset, b.offset + b.numel);
    for (int i : b.params) {
      if (is_muon[i]) continue;
      const GradParam& p = params[i];
      const int64_t a = std::max(lo, p.offset), z = std::min(hi, p.offset + p.numel);
      if (a >= z) continue;
      Segment s;
      s.param = i;
      s.bucket = b.index;
      s.buffer_offset = a;
      s.local = a - p.offset;
      s.n = z - a;
      s.state_offset = n_state;
      n_state += s.n;
      s.master_offset = -1;
      if (p.value().dtype() != DType::kF32) {
        s.master_offset = n_master;
        n_master += s.n;
      }
      s.decay = decay(p);
      u->segments_.push_back(s);
    }
  }
  if (n_state > 0) {
    u->exp_avg_ = exec.Zeros({n_state});
    u->exp_avg_sq_ = exec.Zeros({n_state});
  }
  if (n_master > 0) {
    u->master_ = exec.Empty({n_master});
    for (const Segment& s : u->segments_) {
      if (s.master_offset < 0) continue;
      CastInto(exec, params[s.param].value().Slice(s.local, s.local + s.n),
               u->master_.Slice(s.master_offset, s.master_offset + s.n));
    }
  }
  // Decided from the buffer's params, not this rank's segments (a rank may
  // own only padding): every replicate rank must join the gathers.
  const bool any_adamw = std::count(is_muon.begin(), is_muon.end(), 0) > 0;
  u->gather_ = distributed && grads->replicate()->size() > 1 && any_adamw;
  u->BuildTable();
  return u;
}

void AdamWUpdater::BuildTable() {
  const std::vector<GradParam>& params = grads_->params();
  const Tensor& g = grads_->data();
  for (const Segment& s : segments_) {
    kernels::AdamWSegment a;
    Tensor p = s.master_offset >= 0 ? master_.Slice(s.master_offset, s.master_offset + s.n)
                                    : params[s.param].value().Slice(s.local, s.local + s.n);
    a.p = p.data<float>();
    // A bf16 param gets its rounded copy in the same pass (unless the update
    // is all-gathered first: Gather casts then).
    if (s.master_offset >= 0 && !gather_) {
      Tensor v = params[s.param].value().Slice(s.local, s.local + s.n);
      GTP_CHECK(v.dtype() == DType::kBF16, "AdamW: params are f32 or bf16, ",
                params[s.param].name, " is ", DTypeName(v.dtype()));
      a.p_bf16 = v.data<bf16>();
    }
    a.g = g.data<float>() + s.buffer_offset;
    a.m = exp_avg_.data<float>() + s.state_offset;
    a.v = exp_avg_sq_.data<float>() + s.state_offset;
    a.n = s.n;
    a.weight_decay = s.decay ? config_.weight_decay : 0.0f;
    table_.push_back(a);
  }
  if (!exec_.is_cuda() || table_.empty()) return;
  const std::vector<kernels::cuda::AdamWChunk> chunks =
      kernels::cuda::AdamWChunks(table_.data(), static_cast<int>(table_.size()));
  num_chunks_ = static_cast<int>(chunks.size());
  auto upload = [&](const void* src, int64_t bytes) {
    Tensor d = exec_.Empty({bytes}, DType::kU8);
    GTP_CHECK_OK(Copy(Tensor::Wrap(const_cast<void*>(src), {bytes}, DType::kU8, Device::Cpu()), d,
                      exec_.stream, /*sync=*/true));
    return d;
  };
  table_dev_ = upload(table_.data(), table_.size() * sizeof(kernels::AdamWSegment));
  chunks_dev_ = upload(chunks.data(), chunks.size() * sizeof(kernels::cuda::AdamWChunk));
}

void AdamWUpdater::Step(float lr, int64_t t, float grad_scale, const float* device_scalars,
                        const float* device_step) const {
  if (table_.empty()) return;
  kernels::AdamWParams hp;
  hp.lr = lr;
  hp.beta1 = config_.beta1;
  hp.beta2 = config_.beta2;
  hp.eps = config_.eps;
  hp.step = t;
  hp.grad_scale = grad_scale;
  hp.device_scalars = device_scalars;
  hp.device_step = device_step;
  if (exec_.is_cuda()) {
    kernels::cuda::AdamWMulti(static_cast<const kernels::AdamWSegment*>(table_dev_.raw_data()),
                              static_cast<const kernels::cuda::AdamWChunk*>(chunks_dev_.raw_data()),
                              num_chunks_, hp, exec_.stream);
  } else {
    kernels::cpu::AdamWMulti(table_.data(), static_cast<int>(table_.size()), hp);
  }
}

absl::Status AdamWUpdater::Gather() const {
  // The grad buffer is done with its gradients: use it as the staging area.
  const std::vector<GradParam>& params = grads_->params();
  const Tensor& buf = grads_->data();
  for (const Segment& s : segments_) {
    Tensor src = s.master_offset >= 0 ? master_.Slice(s.master_offset, s.master_offset + s.n)
                                      : params[s.param].value().Slice(s.local, s.local + s.n);
    CastInto(exec_, src, buf.Slice(s.buffer_offset, s.buffer_offset + s.n));
  }
  comm::Communicator* rep = grads_->replicate();
  std::vector<comm::WorkPtr> works;
  std::vector<char> has_adamw(grads_->buckets().size(), 0);
  for (size_t i = 0; i < params.size(); ++i) {
    if (!is_muon_[i]) has_adamw[params[i].bucket] = 1;
  }
  for (const Bucket& b : grads_->buckets()) {
    if (!has_adamw[b.index]) continue;
    const int64_t count = b.numel / rep->size();
    float* base = buf.data<float>() + b.offset;
    GTP_ASSIGN_OR_RETURN(comm::WorkPtr w,
                         rep->AllGather(base + rep->rank() * count, base, count, DType::kF32));
    works.push_back(std::move(w));
  }
  for (comm::WorkPtr& w : works) {
    GTP_RETURN_IF_ERROR(Annotate(w->Wait(), "gathering updated parameters", rep));
  }
  for (size_t i = 0; i < params.size(); ++i) {
    if (is_muon_[i]) continue;
    const GradParam& p = params[i];
    CastInto(exec_, buf.Slice(p.offset, p.offset + p.numel), p.value());
  }
  return absl::OkStatus();
}

void AdamWUpdater::AppendState(std::vector<StateTensor>* out) const {
  for (const Segment& s : segments_) {
    const std::string& name = grads_->params()[s.param].name;
    out->push_back({name, "exp_avg", s.local, exp_avg_.Slice(s.state_offset, s.state_offset + s.n)});
    out->push_back(
        {name, "exp_avg_sq", s.local, exp_avg_sq_.Slice(s.state_offset, s.state_offset + s.n)});
    if (s.master_offset >= 0) {
      out->push_back({name, "master", s.local, master_.Slice(s.master_offset, s.master_offset + s.n)});
    }
  }
}

int64_t AdamWUpdater::state_bytes() const {
  int64_t b = 0;
  for (const Tensor* t : {&exp_avg_, &exp_avg_sq_, &master_}) {
    if (t->defined()) b += t->nbytes();
  }
  return b;
}

}  // namespace gtp::optimizer::internal
