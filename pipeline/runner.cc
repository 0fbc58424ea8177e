#include "pipeline/runner.h"

#include <chrono>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "pipeline/schedule.h"

namespace gtp::pipeline {

PipelineRunner::PipelineRunner(std::vector<layers::GptModel*> chunks, comm::Communicator* pp,
                               const kernels::Exec& exec)
    : chunks_(std::move(chunks)), pp_(pp), exec_(exec) {}

absl::StatusOr<std::unique_ptr<PipelineRunner>> PipelineRunner::Create(
    std::vector<layers::GptModel*> chunks, comm::Communicator* pp, const kernels::Exec& exec) {
  if (chunks.empty()) return absl::InvalidArgumentError("pipeline: no model parts");
  const int P = pp->size(), s = pp->rank();
  std::vector<int> peers;
  for (int peer : {(s + P - 1) % P, (s + 1) % P}) {
    if (peer != s && (peers.empty() || peers.front() != peer)) peers.push_back(peer);
  }
  GTP_RETURN_IF_ERROR(pp->ConnectPeers(peers));
  return std::unique_ptr<PipelineRunner>(new PipelineRunner(std::move(chunks), pp, exec));
}

absl::StatusOr<StepTimes> PipelineRunner::Step(
    int M, const std::function<absl::StatusOr<MicroBatch>(int)>& batch,
    const std::function<void(int)>& before_backward,
    const std::function<void(int)>& after_first_backward) {
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  StepTimes times;
  const int P = pp_->size(), s = pp_->rank(), V = P * vpp();
  GTP_ASSIGN_OR_RETURN(std::vector<PipelineOp> ops, Schedule(P, s, vpp(), M));
  const int next = (s + 1) % P, prev = (s + P - 1) % P;
  auto tag = [M](int v, int mb, int grad) { return (v * M + mb) * 2 + grad; };
  struct InFlight {
    MicroBatch data;
    Tensor input;       // the received activations (empty on the first part)
    bool live = false;  // activations kept (backward follows at once)
  };
  std::map<std::pair<int, int>, InFlight> flight;  // (chunk, micro-batch)
  std::vector<std::pair<comm::WorkPtr, Tensor>> sends;
  std::vector<bool> started(M, false);
  auto recv = [&](int peer, int t, const layers::GptModel& part) -> absl::StatusOr<Tensor> {
    Tensor buf = exec_.Empty({part.activation_rows(), part.config().block.n_embd},
                             part.config().block.dtype);
    const auto w0 = Clock::now();
    Timeline::Scope span(timeline_, absl::StrCat("wait ", t % 2 ? "grad" : "act"), exec_.stream,
                         "pipeline");
    GTP_RETURN_IF_ERROR(comm::Run(pp_->Recv(buf.raw_data(), buf.numel(), buf.dtype(), peer, t)));
    times.wait_ms += std::chrono::duration<double, std::milli>(Clock::now() - w0).count();
    return buf;
  };
  auto send = [&](const Tensor& t, int peer, int tg) -> absl::Status {
    GTP_ASSIGN_OR_RETURN(comm::WorkPtr w, pp_->Send(t.raw_data(), t.numel(), t.dtype(), peer, tg));
    sends.emplace_back(std::move(w), t);
    return absl::OkStatus();
  };
  for (size_t i = 0; i < ops.size(); ++i) {
    const PipelineOp& op = ops[i];
    layers::GptModel& part = *chunks_[op.chunk];
    const int v = op.chunk * P + s;
    const std::pair<int, int> key{op.chunk, op.micro_batch};
    if (op.kind == PipelineOp::kForward) {
      InFlight f;
      GTP_ASSIGN_OR_RETURN(f.data, batch(op.micro_batch));
      if (v > 0) {
        GTP_ASSIGN_OR_RETURN(f.input, recv(prev, tag(v, op.micro_batch, 0), part));
      }
      // Keep the activations when this part's backward of the same
      // micro-batch is the next pass.
      Timeline::Scope span(timeline_, OpName(op), exec_.stream, "pipeline");
      const bool follows = i + 1 < ops.size() && ops[i + 1].kind == PipelineOp::kBackward &&
                           ops[i + 1].chunk == op.chunk && ops[i + 1].micro_batch == op.micro_batch;
      if (v == 0 && f.data.prefix.defined()) GTP_RETURN_IF_ERROR(part.SetPrefix(f.data.prefix));
      GTP_ASSIGN_OR_RETURN(Tensor out, part.ForwardPart(f.data.tokens, f.input, f.data.targets,
                                                        /*backward_follows=*/follows));
      if (pass_hook_) pass_hook_(op);
      if (v < V - 1) GTP_RETURN_IF_ERROR(send(out, next, tag(v + 1, op.micro_batch, 0)));
      f.live = follows;
      if (!follows) part.DropActivations();
      flight[key] = std::move(f);
      continue;
    }
    auto it = flight.find(key);
    if (it == flight.end()) return absl::InternalError("pipeline: backward before forward");
    InFlight& f = it->second;
    if (!started[op.micro_batch]) {
      started[op.micro_batch] = true;
      if (before_backward) before_backward(op.micro_batch);
    }
    Tensor dout;
    if (v < V - 1) {
      GTP_ASSIGN_OR_RETURN(dout, recv(next, tag(v, op.micro_batch, 1), part));
    }
    Timeline::Scope span(timeline_, OpName(op), exec_.stream, "pipeline");
    if (!f.live) {
      if (v == 0 && f.data.prefix.defined()) GTP_RETURN_IF_ERROR(part.SetPrefix(f.data.prefix));
      GTP_RETURN_IF_ERROR(part.ForwardPart(f.data.tokens, f.input, f.data.targets,
                                           /*backward_follows=*/true, /*recompute=*/true)
                              .status());
    }
    GTP_ASSIGN_OR_RETURN(Tensor dx, part.BackwardPart(dout));
    if (pass_hook_) pass_hook_(op);
    if (v == 0 && after_first_backward) after_first_backward(op.micro_batch);
    if (v > 0) GTP_RETURN_IF_ERROR(send(dx, prev, tag(v - 1, op.micro_batch, 1)));
    flight.erase(it);
  }
  for (auto& [w, t] : sends) GTP_RETURN_IF_ERROR(w->Wait());
  times.total_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  return times;
}

}  // namespace gtp::pipeline
