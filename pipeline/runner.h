// pipeline/runner.h — drives one rank's model parts through a pipeline
// schedule (pipeline/schedule.h) for one training step.
//
//   GTP_ASSIGN_OR_RETURN(auto runner, PipelineRunner::Create(chunks, pp_group, exec));
//   GTP_ASSIGN_OR_RETURN(auto t, runner->Step(M, batch, before_backward));  // chunks[c]: virtual stage c·P + stage
//
// Activations between stages travel point-to-point over the "pp" group
// (shape [rows, C] in the model dtype, known on both sides; tag from the
// receiving virtual stage and the micro-batch); sends are asynchronous and
// waited at the end of the step, receives block (that wait is the bubble).
// Stage recompute: a part keeps only each in-flight micro-batch's input
// and re-runs its forward (on the recompute gather slot) right before that
// micro-batch's backward — except when the backward follows the forward at
// once (the last stage in 1F1B), where the activations are used as they are.
// The layers hold the activations of one micro-batch at a time; this is what
// lets 1F1B keep several in flight.
// Threading: the rank's training thread.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "comm/communicator.h"
#include "core/kernels/ops.h"
#include "core/timeline.h"
#include "layers/gpt.h"
#include "pipeline/schedule.h"

namespace gtp::pipeline {

// One micro-batch's data: tokens and targets i32 [B, T] (read by the first
// and the last part). They must stay valid until the step ends (a stage
// re-reads them when it recomputes the micro-batch).
struct MicroBatch {
  Tensor tokens, targets;
  // Prefix rows for the first virtual stage's part (GptModel::SetPrefix,
  // vision-language models): set before each of its forwards of this
  // micro-batch, the recompute included. Undefined: no prefix.
  Tensor prefix;
};

struct StepTimes {
  double total_ms = 0;
  double wait_ms = 0;  // blocked receiving activations or gradients
  double bubble() const { return total_ms > 0 ? wait_ms / total_ms : 0.0; }
};


class PipelineRunner {
 public:
  // chunks: this rank's parts in chunk order (vpp = chunks.size()); pp: the
  // pipeline group (its rank is the stage). Not owned. Connects this stage
  // with its neighbours (the previous and next stage, which for interleaved
  // schedules include the wrap from the last stage to the first) before the
  // first step: the stages' first batches of sends and receives differ, and
  // NCCL needs the connections made alike on both sides
  // (Communicator::ConnectPeers). Every stage posts its sends and receives
  // to a neighbour in the order the neighbour posts the other side (NCCL
  // pairs by order, not tag; runner_test checks it for 1F1B and interleaved
  // schedules). Collective over pp; blocks.
  static absl::StatusOr<std::unique_ptr<PipelineRunner>> Create(
      std::vector<layers::GptModel*> chunks, comm::Communicator* pp, const kernels::Exec& exec);

  // One step of M micro-batches. batch(m) is asked for every micro-batch on
  // every stage (only the first and last parts read it); before_backward(m)
  // runs before this rank's first backward pass of micro-batch m (e.g.
  // GradBuffer::StartMicrobatch); after_first_backward(m) right after the
  // first virtual stage's backward of micro-batch m on the rank holding it
  // (where its prefix_grad() is that micro-batch's). The last part's losses
  // accumulate in its model (TakeLossSum). Collective over pp; blocks.
  absl::StatusOr<StepTimes> Step(int M, const std::function<absl::StatusOr<MicroBatch>(int)>& batch,
                                 const std::function<void(int)>& before_backward = nullptr,
                                 const std::function<void(int)>& after_first_backward = nullptr);

  // Records each pass ("F c.m" / "B c.m") and each blocking receive
  // ("wait …", the bubble) on `t`'s "pipeline" track (null: none). Not owned.
  void set_timeline(Timeline* t) { timeline_ = t; }

  // Test hook: called after each pass's compute (e.g. to sleep, standing in
  // for a compute-balanced model's passes).
  void set_pass_hook(std::function<void(const PipelineOp&)> hook) { pass_hook_ = std::move(hook); }

 private:
  PipelineRunner(std::vector<layers::GptModel*> chunks, comm::Communicator* pp,
                 const kernels::Exec& exec);
  int vpp() const { return static_cast<int>(chunks_.size()); }
  std::vector<layers::GptModel*> chunks_;
  comm::Communicator* pp_;
  kernels::Exec exec_;
  std::function<void(const PipelineOp&)> pass_hook_;
  Timeline* timeline_ = nullptr;
};

}  // namespace gtp::pipeline
