#include "recipes/trainer/trainer.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "comm/communicator.h"
#include "core/status.h"
#include "core/timeline.h"
#include "layers/gpt.h"
#include "recipes/trainer/banner.h"
#include "recipes/trainer/batches.h"
#include "recipes/trainer/checkpointing.h"
#include "recipes/trainer/evaluation.h"
#include "recipes/trainer/metrics.h"
#include "recipes/trainer/preflight.h"
#include "recipes/trainer/run_lock.h"
#include "recipes/trainer/sampling.h"
#include "recipes/trainer/state.h"
#include "recipes/trainer/step.h"
#include "recipes/trainer/step_boundary.h"
#include "recipes/trainer/stop_signals.h"
#include "recipes/trainer/world.h"

namespace gtp::recipes {

namespace {

// Whether the last Train ended on a signal (StoppedBySignal).
std::atomic<bool> g_stopped_by_signal{false};

// One rank's whole run.
class RankRun {
 public:
  // `host` carries host-memory control traffic (loss, stop flag,
  // checkpoint metadata): the world itself for host backends, a UCX world
  // beside the NCCL one on GPUs. It must hold the same ranks as `world`.
  // `has_results` (may be null) turns true once the run has something to
  // keep: a step's metrics line or a checkpoint.
  RankRun(const proto::Recipe& r, const RunOptions& o, comm::Communicator& world,
          comm::Communicator& host, const kernels::Exec& exec, std::atomic<bool>* has_results)
      : r_(r),
        o_(o),
        world_(world),
        host_(host),
        alloc_(*exec.alloc),
        exec_(exec),
        has_results_(has_results) {}

  absl::Status Run() {
    GTP_RETURN_IF_ERROR(Setup());
    if (rank0()) PrintBanner(*s_, o_, step_runner_->UseCudaGraphs(), *metrics_);
    GTP_ASSIGN_OR_RETURN(step_, ckpt_->Resume());
    // From here a signal stops the run at a step boundary with a checkpoint.
    StopSignals::Defer(true);
    if (rank0()) GTP_RETURN_IF_ERROR(metrics_->ResumeAt(step_));
    if (r_.checkpoint().save_initial() && step_ == 0) {
      GTP_RETURN_IF_ERROR(ckpt_->Save(step_, /*wait=*/true));
      MarkResults();
    }
    const int64_t steps = r_.train().steps();
    const int64_t T = r_.model().seq_len();
    const int64_t tokens_per_step = s_->sampler->config().global_batch_size * T;
    auto t_start = std::chrono::steady_clock::now();
    int64_t first_step = step_;
    const int64_t trace_from = first_step + 2, trace_to = trace_from + r_.train().trace_steps();
    const bool graphs = step_runner_->UseCudaGraphs();
    for (; step_ < steps;) {
      auto t0 = std::chrono::steady_clock::now();
      tl_ = step_ >= trace_from && step_ < trace_to ? &timeline_ : nullptr;
      for (auto& part : s_->parts) {
        part->set_timeline(tl_);
        part->chain().exposed_comm().Reset();
      }
      s_->grads->set_timeline(tl_);
      if (s_->runner) s_->runner->set_timeline(tl_);
      step_runner_->set_timeline(tl_);
      s_->grads->exposed_comm().Reset();
      if (s_->expert_grads) s_->expert_grads->exposed_comm().Reset();
      if (tl_) tl_->Begin(absl::StrCat("step ", step_ + 1), exec_.stream);
      optimizer::StepStats st;
      if (graphs && step_ >= first_step + 2) {
        GTP_ASSIGN_OR_RETURN(st, step_runner_->GraphStep());
        if (tl_) tl_->End(exec_.stream);
      } else {
        GTP_RETURN_IF_ERROR(step_runner_->Accumulate());
        if (tl_) tl_->Begin("optimizer", exec_.stream);
        GTP_ASSIGN_OR_RETURN(st, s_->opt->Step());
        if (tl_) {
          tl_->End(exec_.stream);
          tl_->End(exec_.stream);
        }
      }
      // Read after the optimizer was enqueued: the loss is long computed by
      // then (the grad norm waited for the backward), so this costs no stall.
      GTP_ASSIGN_OR_RETURN(float loss, step_runner_->Loss());
      s_->sampler->Advance();
      ++step_;
      if (st.skipped && s_->opt->progress().num_skipped > r_.train().max_skipped_steps()) {
        return absl::AbortedError(absl::StrCat("stopping: ", s_->opt->progress().num_skipped,
                                               " steps had a NaN/Inf gradient norm (limit ",
                                               r_.train().max_skipped_steps(), ")"));
      }
      const double ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      if (tl_) {
        GTP_RETURN_IF_ERROR(timeline_.Collect());
        if (step_ == trace_to || step_ == steps) GTP_RETURN_IF_ERROR(WriteTrace());
      }
      double comm_ms = s_->grads->exposed_comm().ms();
      for (auto& part : s_->parts) comm_ms += part->chain().exposed_comm().ms();
      if (s_->expert_grads) comm_ms += s_->expert_grads->exposed_comm().ms();
      StepRecord rec{step_, loss, st.lr, st.grad_norm, st.skipped, ms, tokens_per_step / (ms / 1e3),
                     comm_ms};
      rec.bubble = -1.0;
      if (s_->runner) {
        // Every stage's share of the step spent waiting, averaged over the
        // ranks (rank 0's alone hid the other stages' waits).
        float bubble = static_cast<float>(step_runner_->bubble());
        GTP_RETURN_IF_ERROR(
            comm::Run(host_.AllReduce(&bubble, &bubble, 1, DType::kF32, comm::ReduceOp::kMean)));
        rec.bubble = bubble;
      }
      if (has_moe()) {
        GTP_ASSIGN_OR_RETURN(rec.moe, layers::GptModel::FinishMoeStep(RawParts(), world_, s_->data->size(),
                                                            static_cast<int>(s_->sampler->num_micro_batches())));
      }
      if (rank0()) GTP_RETURN_IF_ERROR(metrics_->Step(rec, alloc_.stats(), world_.size(), t_start, first_step));
      MarkResults();
      if (r_.train().eval_every() > 0 && step_ % r_.train().eval_every() == 0) {
        absl::StatusOr<float> vl = Evaluate(*s_, *batches_, r_.train().eval_batches(), StopSignals::Requested);
        for (auto& part : s_->parts) part->ResetMoeStats();  // evaluation forwards are not the step's routing
        // Cancelled: a signal; the agreement below stops the run with a checkpoint.
        if (!vl.ok() && !absl::IsCancelled(vl.status())) return vl.status();
        if (vl.ok() && rank0()) GTP_RETURN_IF_ERROR(metrics_->Eval(step_, *vl));
      }
      if (r_.train().sample_every() > 0 && step_ % r_.train().sample_every() == 0) {
        GTP_RETURN_IF_ERROR(text_sampler_.Print(s_->params, step_));
      }
      GTP_ASSIGN_OR_RETURN(const StepBoundary b,
                           AtStepBoundary(host_, step_, steps, r_.checkpoint().every()));
      if (b.save && !r_.checkpoint().disable()) {
        GTP_RETURN_IF_ERROR(ckpt_->Save(step_, b.wait));
        if (rank0() && !b.stop) {
          std::printf("%scheckpoint: step %lld %s %s\n", o_.progress_bar ? "\n" : "",
                      static_cast<long long>(step_),
                      b.wait || !r_.checkpoint().async_save() ? "saved to"
                                                              : "saving in the background to",
                      ckpt_->root().c_str());
        }
      }
      if (b.stop) {
        g_stopped_by_signal.store(true);
        if (rank0()) PrintStoppedBySignal(step_, SavedRoot());
        return absl::OkStatus();
      }
    }
    if (rank0() && o_.progress_bar && first_step < steps) std::printf("\n");
    // Resumed at (or past) the last step: nothing trained, nothing saved.
    // (Nothing to train names the checkpoint it resumed from, written or not.)
    if (rank0()) {
      PrintRunEnd(first_step, step_, steps, first_step >= steps ? ckpt_->root() : SavedRoot(),
                  metrics_->path(), "");
    }
    return absl::OkStatus();
  }

 private:
  bool rank0() const { return world_.rank() == 0; }
  // Where this run's checkpoints go; "" when it writes none (checkpoint.disable).
  std::string SavedRoot() const { return r_.checkpoint().disable() ? std::string() : ckpt_->root(); }
  void MarkResults() {
    if (has_results_ != nullptr) has_results_->store(true);
  }

  absl::Status Setup() {
    GTP_ASSIGN_OR_RETURN(s_, RankState::Build(r_, world_, host_, exec_));
    batches_ = std::make_unique<BatchStager>(r_, exec_, s_->train.get(),
                                             rank0() ? r_.train().dump_tokens() : std::string());
    step_runner_ = std::make_unique<StepRunner>(*s_, *batches_, rank0());
    GTP_RETURN_IF_ERROR(step_runner_->CheckCudaGraphs());
    TrainingState state;
    state.recipe = &r_;
    state.world = &world_;
    state.host = &host_;
    state.exec = &exec_;
    state.pgs = s_->pgs.get();
    state.parts = RawParts();
    state.params = &s_->params;
    state.experts = &s_->experts;
    state.opt = s_->opt.get();
    state.sampler = s_->sampler.get();
    state.order = s_->order;
    state.expert_order = s_->expert_order;
    // An evaluation (no run dir) has no checkpoint directory of its own.
    ckpt_ = std::make_unique<Checkpointer>(
        state, o_.run_dir.empty() ? std::string() : o_.run_dir + "/" + r_.checkpoint().dir());
    if (rank0() && !o_.run_dir.empty()) {  // (an evaluation writes nothing)
      GTP_ASSIGN_OR_RETURN(metrics_, Metrics::Open(r_, o_));
    }
    return absl::OkStatus();
  }

  absl::Status WriteTrace() {
    const std::string rank =
        world_.size() > 1 ? absl::StrCat(".rank", world_.rank()) : std::string();
    const std::string path = absl::StrCat(o_.run_dir, "/trace", rank, ".json");
    GTP_RETURN_IF_ERROR(timeline_.WriteChromeTrace(path));
    if (rank0()) std::printf("step timeline written to %s\n", path.c_str());
    return absl::OkStatus();
  }

  // The MoE figures come from the whole model, whatever layers this rank holds.
  bool has_moe() const { return s_->has_moe(); }
  std::vector<layers::GptModel*> RawParts() const { return s_->RawParts(); }

  // (public) EvaluateCheckpoint's run: the weights of the recipe's
  // checkpoint.init_from, then Evaluate over `samples` validation samples
  // (0: what the training run's evaluation covers on this layout). Rank 0
  // fills *out.
 public:
  absl::Status RunEvaluation(int64_t samples, EvalResult* out) {
    GTP_RETURN_IF_ERROR(Setup());
    // Micro-batches per lane, checked before the weights load.
    GTP_ASSIGN_OR_RETURN(const int64_t n, EvalMicroBatches(*s_, samples));
    GTP_RETURN_IF_ERROR(ckpt_->InitFrom(/*announce=*/false));
    StopSignals::Defer(true);  // a signal ends the evaluation between micro-batches
    GTP_ASSIGN_OR_RETURN(float loss, Evaluate(*s_, *batches_, n, StopSignals::Requested));
    if (rank0()) {
      out->loss = loss;
      out->samples = n * r_.train().micro_batch() * s_->data->size();
      out->tokens = out->samples * r_.model().seq_len();
    }
    return absl::OkStatus();
  }

 private:
  const proto::Recipe& r_;
  const RunOptions& o_;
  comm::Communicator& world_;
  comm::Communicator& host_;
  Allocator& alloc_;
  kernels::Exec exec_;
  std::unique_ptr<Metrics> metrics_;  // rank 0
  // Before s_: on CPU the model keeps the last batch's staging tensors,
  // which the stager's allocator must outlive.
  std::unique_ptr<BatchStager> batches_;
  // The model, its optimizer and its data (recipes/trainer/state.h).
  std::unique_ptr<RankState> s_;
  TextSampler text_sampler_{r_, host_, exec_, o_.progress_bar};  // train.sample_every
  std::unique_ptr<StepRunner> step_runner_;  // reads s_ and batches_
  std::unique_ptr<Checkpointer> ckpt_;
  int64_t step_ = 0;
  Timeline timeline_{exec_.is_cuda()};
  Timeline* tl_ = nullptr;  // &timeline_ during traced steps
  std::atomic<bool>* has_results_;
};

}  // namespace

bool StoppedBySignal() { return g_stopped_by_signal.load(); }

namespace {
// Runs `body` on every rank of the recipe's world (threads, a launcher's
// processes, or one GPU); `create_run_dir` makes options.run_dir first.
absl::Status TrainIn(const proto::Recipe& recipe, const RunOptions& options,
                     const std::function<absl::Status(RankRun&)>& body, bool create_run_dir);
}  // namespace

absl::Status Train(const proto::Recipe& recipe, const RunOptions& options) {
  return TrainIn(
      recipe, options, [](RankRun& run) { return run.Run(); }, /*create_run_dir=*/true);
}

absl::StatusOr<EvalResult> EvaluateCheckpoint(const proto::Recipe& recipe,
                                              const std::string& checkpoint, int64_t samples) {
  proto::Recipe r = recipe;
  r.mutable_checkpoint()->set_init_from(checkpoint);
  r.mutable_checkpoint()->set_no_resume(true);
  r.mutable_train()->clear_tensorboard_dir();
  r.mutable_train()->clear_dump_tokens();
  r.mutable_train()->set_sample_every(0);
  RunOptions options;
  options.run_dir = "";  // nothing is written
  EvalResult result;
  GTP_RETURN_IF_ERROR(TrainIn(
      r, options, [&](RankRun& run) { return run.RunEvaluation(samples, &result); },
      /*create_run_dir=*/false));
  return result;
}

namespace {

absl::Status TrainIn(const proto::Recipe& recipe, const RunOptions& options,
                     const std::function<absl::Status(RankRun&)>& body, bool create_run_dir) {
  // What can be checked before anything is written (recipes/trainer/preflight.h).
  GTP_RETURN_IF_ERROR(Preflight(recipe, options));
  auto run = [&](std::atomic<bool>& has_results) -> absl::Status {
    g_stopped_by_signal.store(false);
    StopSignals signals;
    return RunOnRanks(recipe, [&](const RankWorld& w) {
      RankRun run(recipe, options, w.world, w.host, w.exec, &has_results);
      return body(run);
    });
  };
  // The run directory, its lock and a failed start's clean-up (run_lock.h).
  if (create_run_dir) return InRunDir(options.run_dir, UnderLauncher(recipe), run);
  std::atomic<bool> has_results{false};
  return run(has_results);
}
}  // namespace

}  // namespace gtp::recipes
