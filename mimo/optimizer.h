// mimo/optimizer.h — one optimizer per module of a MimoModel under one
// global grad norm.
//
// Each module reduces its gradients over its own grid's groups (its own
// GradBuffer: the encoder's and the language model's dense params, and the
// language model's experts over the expert groups) and has its own
// DistributedOptimizer (AdamW or Muon). Step: every module computes its
// norm; the world sums the modules' squared norms (each contributed by its
// grid's first rank, so each is counted once whatever the layout); every
// optimizer clips and skips by that global norm, so all ranks agree whether
// the step succeeded.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "comm/communicator.h"
#include "mimo/model.h"
#include "optimizer/grad_buffer.h"
#include "optimizer/optimizer.h"

namespace gtp::mimo {

class MimoOptimizer {
 public:
  // Collective over world (Muon exchanges layouts); blocks.
  static absl::StatusOr<std::unique_ptr<MimoOptimizer>> Create(
      MimoModel& model, comm::Communicator& world, const kernels::Exec& exec,
      const optimizer::OptimizerConfig& encoder, const optimizer::OptimizerConfig& language);

  // Before each micro-batch's backward (see GradBuffer::StartMicrobatch).
  // Per-token normalisation (the language model's loss_reduction kSum):
  // `encoder_tokens` the valid targets of the samples this rank's encoder
  // lane encodes, `language_tokens` those of its language lane (each
  // ignored outside its grid); their sums over each grid's lanes agree.
  void StartMicrobatch(bool last, int64_t encoder_tokens = 0, int64_t language_tokens = 0);
  // The same for one module (MimoModel::Step's before_backward). Under
  // language PP the language micro-batches finish in the schedule's order:
  // pass last = false there (the reduction then runs in Step).
  void StartEncoderMicrobatch(bool last, int64_t tokens = 0);
  void StartLanguageMicrobatch(bool last, int64_t tokens = 0);
  // The step's stats are the same on every rank. Collective; blocks.
  absl::StatusOr<optimizer::StepStats> Step();

  // Null on ranks outside the module's grid.
  optimizer::DistributedOptimizer* encoder() { return enc_opt_.get(); }
  optimizer::DistributedOptimizer* language() { return lang_opt_.get(); }
  // The params each optimizer updates (empty outside the module's grid).
  const optimizer::ParamSet& encoder_params() const { return enc_params_; }
  const optimizer::ParamSet& language_params() const { return lang_params_; }
  const optimizer::ParamSet& language_experts() const { return experts_; }

 private:
  MimoOptimizer() = default;
  comm::Communicator* world_ = nullptr;
  kernels::Exec exec_;
  bool enc_leader_ = false, lang_leader_ = false;
  optimizer::ParamSet enc_params_, lang_params_, experts_;
  std::unique_ptr<optimizer::GradBuffer> enc_grads_, lang_grads_, expert_grads_;
  std::unique_ptr<optimizer::DistributedOptimizer> enc_opt_, lang_opt_;
};

}  // namespace gtp::mimo
