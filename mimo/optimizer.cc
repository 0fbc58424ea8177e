#include "mimo/optimizer.h"

#include <cmath>

#include "comm/host_values.h"
#include "core/status.h"

namespace gtp::mimo {

namespace {

optimizer::GradBufferOptions BufferOptions(const optimizer::OptimizerConfig& c, bool per_token) {
  optimizer::GradBufferOptions o;
  if (c.matrices == optimizer::MatrixOptimizer::kMuon) o.reduce = optimizer::ReduceMode::kAllReduce;
  if (per_token) o.normalization = optimizer::LossNormalization::kPerToken;
  return o;
}

}  // namespace

absl::StatusOr<std::unique_ptr<MimoOptimizer>> MimoOptimizer::Create(
    MimoModel& model, comm::Communicator& world, const kernels::Exec& exec,
    const optimizer::OptimizerConfig& encoder, const optimizer::OptimizerConfig& language) {
  std::unique_ptr<MimoOptimizer> m(new MimoOptimizer());
  m->world_ = &world;
  m->exec_ = exec;
  const bool per_token = model.config().language.loss_reduction == layers::LossReduction::kSum;
  if (model.has_encoder()) {
    layers::vision::VisionEncoder& enc = *model.encoder();
    m->enc_params_ = {enc.sharded_params(), enc.replicated_params()};
    GTP_ASSIGN_OR_RETURN(const parallel::ProcessGroupCollection* pgs, model.encoder_grid().groups());
    GTP_ASSIGN_OR_RETURN(m->enc_grads_, optimizer::GradBuffer::Create(m->enc_params_, *pgs, exec,
                                                                      BufferOptions(encoder, per_token)));
    GTP_ASSIGN_OR_RETURN(m->enc_opt_, optimizer::DistributedOptimizer::Create(m->enc_grads_.get(),
                                                                              *pgs, exec, encoder));
    m->enc_leader_ = world.rank() == model.encoder_grid().offset();
  }
  if (model.has_language()) {
    // Every pipeline part this rank holds (one without PP).
    std::vector<layers::ShardedParam*> experts;
    for (layers::GptModel* part : model.language_parts()) {
      const auto& s = part->sharded_params();
      const auto& r = part->replicated_params();
      const auto& e = part->expert_params();
      m->lang_params_.sharded.insert(m->lang_params_.sharded.end(), s.begin(), s.end());
      m->lang_params_.replicated.insert(m->lang_params_.replicated.end(), r.begin(), r.end());
      experts.insert(experts.end(), e.begin(), e.end());
    }
    GTP_ASSIGN_OR_RETURN(const parallel::ProcessGroupCollection* pgs, model.language_grid().groups());
    optimizer::GradBufferOptions go = BufferOptions(language, per_token);
    // A pipeline's tied embedding sums its stages' gradients before the
    // data-parallel reduction (GptModel::SyncTiedEmbedding, after the
    // schedule): no overlap.
    if (model.language_pp() > 1) go.overlap = false;
    GTP_ASSIGN_OR_RETURN(m->lang_grads_, optimizer::GradBuffer::Create(m->lang_params_, *pgs, exec, go));
    std::vector<optimizer::GradBuffer*> buffers = {m->lang_grads_.get()};
    if (!experts.empty()) {
      m->experts_.sharded = experts;
      optimizer::GradBufferOptions eo = go;
      eo.groups = {"edp", "etp", "egtp", "data_cp", {"ep", "pp"}};
      GTP_ASSIGN_OR_RETURN(m->expert_grads_, optimizer::GradBuffer::Create(m->experts_, *pgs, exec, eo));
      buffers.push_back(m->expert_grads_.get());
    }
    GTP_ASSIGN_OR_RETURN(m->lang_opt_,
                         optimizer::DistributedOptimizer::Create(buffers, *pgs, exec, language));
    m->lang_leader_ = world.rank() == model.language_grid().offset();
  }
  return m;
}

void MimoOptimizer::StartMicrobatch(bool last, int64_t encoder_tokens, int64_t language_tokens) {
  StartEncoderMicrobatch(last, encoder_tokens);
  StartLanguageMicrobatch(last, language_tokens);
}

void MimoOptimizer::StartEncoderMicrobatch(bool last, int64_t tokens) {
  if (enc_grads_) enc_grads_->StartMicrobatch(last, tokens);
}

void MimoOptimizer::StartLanguageMicrobatch(bool last, int64_t tokens) {
  for (optimizer::GradBuffer* g : {lang_grads_.get(), expert_grads_.get()}) {
    if (g != nullptr) g->StartMicrobatch(last, tokens);
  }
}

absl::StatusOr<optimizer::StepStats> MimoOptimizer::Step() {
  // [encoder norm², language norm²], each from its grid's first rank.
  HeapAllocator host;
  Tensor sq = Tensor::Empty({2}, DType::kF32, host);
  sq.data<float>()[0] = sq.data<float>()[1] = 0.0f;
  if (enc_opt_) {
    GTP_ASSIGN_OR_RETURN(const double n, enc_opt_->GradNorm());
    if (enc_leader_) sq.data<float>()[0] = static_cast<float>(n * n);
  }
  if (lang_opt_) {
    GTP_ASSIGN_OR_RETURN(const double n, lang_opt_->GradNorm());
    if (lang_leader_) sq.data<float>()[1] = static_cast<float>(n * n);
  }
  GTP_RETURN_IF_ERROR(comm::AllReduceHost(*world_, sq.raw_data(), 2, DType::kF32,
                                          comm::ReduceOp::kSum, {exec_.alloc, exec_.stream}));
  const double norm =
      std::sqrt(static_cast<double>(sq.data<float>()[0]) + static_cast<double>(sq.data<float>()[1]));
  optimizer::StepStats stats;
  for (optimizer::DistributedOptimizer* o : {enc_opt_.get(), lang_opt_.get()}) {
    if (o == nullptr) continue;
    GTP_ASSIGN_OR_RETURN(stats, o->Step(norm));
  }
  stats.grad_norm = norm;
  return stats;
}

}  // namespace gtp::mimo
