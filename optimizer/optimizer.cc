#include "optimizer/optimizer.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/kernels/cpu.h"
#include "core/kernels/cuda.h"
#include "core/status.h"
#include "optimizer/grad_norm.h"
#include "optimizer/internal/adamw.h"
#include "optimizer/internal/device.h"
#include "optimizer/internal/muon.h"

namespace gtp::optimizer {

namespace ops = kernels::ops;

bool DefaultWeightDecay(const GradParam& p) { return p.dims >= 2; }

bool DefaultMuonParam(const GradParam& p) {
  if (p.sharded == nullptr || p.dims != 2) return false;
  for (const char* s : {"wte", "wpe", "embed", "lm_head"}) {
    if (absl::StrContains(p.name, s)) return false;
  }
  return true;
}

DistributedOptimizer::~DistributedOptimizer() = default;

absl::StatusOr<std::unique_ptr<DistributedOptimizer>> DistributedOptimizer::Create(
    std::vector<GradBuffer*> buffers, const parallel::ProcessGroupCollection& pgs,
    const kernels::Exec& exec, const OptimizerConfig& config) {
  (void)pgs;  // every group comes from the buffers, which read them from pgs
  if (buffers.empty()) return absl::InvalidArgumentError("DistributedOptimizer: no GradBuffer");
  GTP_RETURN_IF_ERROR(Validate(config.lr));
  std::unique_ptr<DistributedOptimizer> o(new DistributedOptimizer());
  o->config_ = config;
  if (!o->config_.decay_filter) o->config_.decay_filter = DefaultWeightDecay;
  if (!o->config_.muon_filter) o->config_.muon_filter = DefaultMuonParam;
  o->exec_ = exec;
  o->parts_.resize(buffers.size());
  for (size_t i = 0; i < buffers.size(); ++i) {
    if (buffers[i] == nullptr) return absl::InvalidArgumentError("DistributedOptimizer: null GradBuffer");
    GTP_RETURN_IF_ERROR(o->CreatePart(buffers[i], &o->parts_[i]));
  }
  return o;
}

absl::Status DistributedOptimizer::CreatePart(GradBuffer* grads, Part* part) {
  const kernels::Exec& exec = exec_;
  const bool scattered = grads->options().reduce == ReduceMode::kReduceScatter;
  if (scattered && !config_.distributed) {
    return absl::InvalidArgumentError(
        "DistributedOptimizer: distributed = false needs all-reduced gradients "
        "(GradBufferOptions::reduce = kAllReduce)");
  }
  if (scattered && config_.matrices == MatrixOptimizer::kMuon) {
    return absl::InvalidArgumentError(
        "DistributedOptimizer: Muon needs all-reduced gradients (GradBufferOptions::reduce = "
        "kAllReduce): each matrix's owner needs its whole reduced gradient");
  }
  part->grads = grads;
  const std::vector<GradParam>& params = grads->params();
  part->is_muon.assign(params.size(), 0);
  std::vector<int> muon_params;
  if (config_.matrices == MatrixOptimizer::kMuon) {
    for (size_t i = 0; i < params.size(); ++i) {
      if (!config_.muon_filter(params[i])) continue;
      if (params[i].sharded == nullptr) {
        return absl::InvalidArgumentError(absl::StrCat(
            "DistributedOptimizer: Muon supports GTP-sharded matrices only; ", params[i].name,
            " is replicated"));
      }
      part->is_muon[i] = 1;
      muon_params.push_back(static_cast<int>(i));
    }
  }

  part->adamw = internal::AdamWUpdater::Create(grads, part->is_muon, exec, config_.adamw,
                                               config_.distributed, config_.decay_filter);
  if (!muon_params.empty()) {
    GTP_ASSIGN_OR_RETURN(part->muon,
                         internal::MuonUpdater::Create(*grads, muon_params, exec, config_.muon));
  }
  return absl::OkStatus();
}

absl::Status DistributedOptimizer::Update(Part& part, float lr, int64_t t, float grad_scale,
                                          const float* device_scalars,
                                          const float* device_step) {
  part.adamw->Step(lr, t, grad_scale, device_scalars, device_step);
  if (part.muon) {
    GTP_RETURN_IF_ERROR(part.muon->Step(*part.grads, lr * config_.muon.lr_multiplier));
  }
  if (part.adamw->gather()) GTP_RETURN_IF_ERROR(part.adamw->Gather());
  MarkShardsUpdated(part);
  part.grads->ZeroGrad();
  return absl::OkStatus();
}

absl::StatusOr<StepStats> DistributedOptimizer::Step() {
  if (CanEnqueueSteps()) {
    PrepareStep();
    GTP_RETURN_IF_ERROR(EnqueueStep());
    return FinishStep();
  }
  GTP_ASSIGN_OR_RETURN(const double norm, GradNorm());
  return Step(norm);
}

absl::StatusOr<double> DistributedOptimizer::GradNorm() {
  for (Part& part : parts_) GTP_RETURN_IF_ERROR(part.grads->FinishGradSync());
  return GlobalGradNorm(Buffers());
}

absl::StatusOr<StepStats> DistributedOptimizer::Step(double grad_norm) {
  std::vector<const GradBuffer*> buffers;
  for (Part& part : parts_) {
    GTP_RETURN_IF_ERROR(part.grads->FinishGradSync());
    buffers.push_back(part.grads);
  }
  bool muon = false;
  for (const Part& part : parts_) muon |= part.muon != nullptr;
  StepStats stats;
  stats.grad_norm = grad_norm;
  stats.lr = LrAt(config_.lr, progress_.step);
  if (!std::isfinite(stats.grad_norm)) {
    ++progress_.num_skipped;
    stats.skipped = true;
    stats.step = progress_.step;
    for (Part& part : parts_) part.grads->ZeroGrad();
    return stats;
  }
  // Clipping: folded into the AdamW update (same bits as scaling the grads
  // first), unless Muon reads the grads too.
  float scale = 1.0f;
  if (config_.clip_grad > 0 && stats.grad_norm > config_.clip_grad) {
    scale = static_cast<float>(config_.clip_grad / (stats.grad_norm + 1e-6));
    if (muon) {
      for (const GradBuffer* g : buffers) ScaleGrads(*g, scale);
      scale = 1.0f;
    }
  }
  const int64_t t = progress_.step + 1;
  for (Part& part : parts_) GTP_RETURN_IF_ERROR(Update(part, stats.lr, t, scale));
  progress_.step = t;
  stats.step = t;
  return stats;
}

void DistributedOptimizer::MarkShardsUpdated(const Part& part) {
  for (const GradParam& gp : part.grads->params()) {
    if (gp.sharded != nullptr) gp.sharded->MarkUpdated();  // re-quantise an fp8 gather
  }
}

std::vector<const GradBuffer*> DistributedOptimizer::Buffers() const {
  std::vector<const GradBuffer*> buffers;
  for (const Part& part : parts_) buffers.push_back(part.grads);
  return buffers;
}

bool DistributedOptimizer::CanEnqueueSteps() const {
  for (const Part& part : parts_) {
    if (part.muon) return false;
  }
  return GradNormOnDeviceSupported(Buffers());
}

void DistributedOptimizer::PrepareStep() {
  if (!step_host_.defined()) {
    // Page-locked on CUDA: the copy EnqueueStep makes of it may be part of a
    // captured CUDA graph, which reads it at every replay.
    Allocator& a = exec_.is_cuda() ? static_cast<Allocator&>(pinned_) : host_alloc_;
    step_host_ = Tensor::Empty({3}, DType::kF32, a);
    step_dev_ = exec_.is_cuda() ? exec_.Empty({3}) : step_host_;
    norm_scalars_ = exec_.Zeros({3});
  }
  pending_lr_ = LrAt(config_.lr, progress_.step);
  pending_t_ = progress_.step + 1;
  kernels::AdamWParams hp;
  hp.lr = pending_lr_;
  hp.beta1 = config_.adamw.beta1;
  hp.beta2 = config_.adamw.beta2;
  hp.step = pending_t_;
  kernels::AdamWStepScalars(hp, step_host_.data<float>());
}

absl::Status DistributedOptimizer::EnqueueStep() {
  // The norm, the clip scale and the NaN/Inf skip are decided on the device
  // and AdamW reads them (and this step's lr and bias corrections) there:
  // nothing here waits, so the whole step can be captured in a CUDA graph.
  // A skipped step's update is a no-op on the device; FinishStep learns of
  // it (before the next step's lr and t).
  GTP_CHECK(step_host_.defined(), "EnqueueStep without PrepareStep");
  const std::vector<const GradBuffer*> buffers = Buffers();
  for (Part& part : parts_) GTP_RETURN_IF_ERROR(part.grads->FinishGradSync());
  if (exec_.is_cuda()) {
    GTP_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(step_dev_.raw_data(), step_host_.raw_data(),
                                             3 * sizeof(float), cudaMemcpyHostToDevice,
                                             exec_.stream));
  }
  GTP_RETURN_IF_ERROR(GlobalGradNormOnDevice(buffers, config_.clip_grad, norm_scalars_));
  // (No Muon here: CanEnqueueSteps. A skipped step regathers the params as they are.)
  for (Part& part : parts_) {
    GTP_RETURN_IF_ERROR(Update(part, pending_lr_, pending_t_, 1.0f, norm_scalars_.data<float>(),
                               step_dev_.data<float>()));
  }
  return absl::OkStatus();
}

absl::StatusOr<StepStats> DistributedOptimizer::FinishStep() {
  float host[3] = {0, 0, 0};
  GTP_RETURN_IF_ERROR(Copy(norm_scalars_, Tensor::Wrap(host, {3}, DType::kF32, Device::Cpu()),
                           exec_.stream, /*sync=*/true));
  StepStats stats;
  stats.lr = pending_lr_;
  stats.grad_norm = host[0];
  if (host[2] != 0.0f) {
    ++progress_.num_skipped;
    stats.skipped = true;
    stats.step = progress_.step;
    return stats;
  }
  progress_.step = pending_t_;
  stats.step = pending_t_;
  return stats;
}

std::vector<StateTensor> DistributedOptimizer::state_tensors() const {
  std::vector<StateTensor> out;
  for (const Part& part : parts_) {
    part.adamw->AppendState(&out);
    if (part.muon) part.muon->AppendState(*part.grads, &out);
  }
  return out;
}

int64_t DistributedOptimizer::state_bytes() const {
  int64_t b = 0;
  for (const Part& part : parts_) {
    b += part.adamw->state_bytes();
    if (part.muon) b += part.muon->state_bytes();
  }
  return b;
}

std::vector<MuonMatrixInfo> DistributedOptimizer::muon_matrices() const {
  std::vector<MuonMatrixInfo> out;
  for (const Part& part : parts_) {
    if (!part.muon) continue;
    for (MuonMatrixInfo& m : part.muon->matrices()) out.push_back(std::move(m));
  }
  return out;
}

int64_t DistributedOptimizer::muon_newton_schulz_calls() const {
  int64_t n = 0;
  for (const Part& part : parts_) {
    if (part.muon) n += part.muon->newton_schulz_calls();
  }
  return n;
}

}  // namespace gtp::optimizer
