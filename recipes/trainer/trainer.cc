#include "recipes/trainer/trainer.h"

#include <cuda_runtime_api.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/model_state.h"
#include "pipeline/runner.h"
#include "pipeline/schedule.h"
#include "comm/local/local_communicator.h"
#include "core/cuda_runtime.h"
#include "core/kernels/cpu.h"
#include "core/kernels/cuda.h"
#include "core/kernels/cudnn_engine.h"
#include "core/status.h"
#include "core/timeline.h"
#include "data/corpus.h"
#include "data/gpt_dataset.h"
#include "data/indexed_dataset.h"
#include "data/mock.h"
#include "data/sampler.h"
#include "layers/gpt.h"
#include "layers/inference/inference_session.h"
#include "layers/inference/sampling.h"
#include "optimizer/grad_buffer.h"
#include "optimizer/optimizer.h"
#include "parallel/parallel_config.h"
#include "parallel/process_groups.h"
#include "recipes/trainer/checkpointing.h"
#include "recipes/trainer/sampling.h"
#include "recipes/trainer/state.h"
#include "recipes/trainer/config.h"
#include "recipes/trainer/metrics.h"
#include "recipes/trainer/mfu.h"
#include "recipes/trainer/tensorboard/event_writer.h"
#include "recipes/trainer/token_dump.h"
#include "recipes/trainer/typed_config.h"
#include "recipes/trainer/world.h"

namespace gtp::recipes {

namespace {

// The one piece of process state: set by the signal handler, read by every
// rank at the end of each step (and agreed on with an all-reduce).
std::atomic<int> g_stop_signal{0};
void OnSignal(int sig) { g_stop_signal.store(sig); }

struct SignalGuard {
  struct sigaction old_term {}, old_int {};
  SignalGuard() {
    g_stop_signal.store(0);
    struct sigaction sa {};
    sa.sa_handler = OnSignal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, &old_term);
    sigaction(SIGINT, &sa, &old_int);
  }
  ~SignalGuard() {
    sigaction(SIGTERM, &old_term, nullptr);
    sigaction(SIGINT, &old_int, nullptr);
  }
};

std::atomic<bool> g_stopped_by_signal{false};

}  // namespace

namespace {

// One rank's whole run.
class RankRun {
 public:
  // `host` carries host-memory control traffic (loss, stop flag,
  // checkpoint metadata): the world itself for host backends, a UCX world
  // beside the NCCL one on GPUs. It must hold the same ranks as `world`.
  RankRun(const proto::Recipe& r, const RunOptions& o, comm::Communicator& world,
          comm::Communicator& host, const kernels::Exec& exec)
      : r_(r), o_(o), world_(world), host_(host), alloc_(*exec.alloc), exec_(exec) {}

  absl::Status Run() {
    GTP_RETURN_IF_ERROR(Setup());
    if (rank0()) Banner();
    GTP_ASSIGN_OR_RETURN(step_, ckpt_->Resume());
    if (r_.checkpoint().save_initial() && step_ == 0) GTP_RETURN_IF_ERROR(ckpt_->Save(step_, /*wait=*/true));
    const int64_t steps = r_.train().steps();
    const int64_t T = r_.model().seq_len();
    const int64_t tokens_per_step = s_->sampler->config().global_batch_size * T;
    auto t_start = std::chrono::steady_clock::now();
    int64_t first_step = step_;
    const int64_t trace_from = first_step + 2, trace_to = trace_from + r_.train().trace_steps();
    const bool graphs = UseCudaGraphs();
    for (; step_ < steps;) {
      auto t0 = std::chrono::steady_clock::now();
      tl_ = step_ >= trace_from && step_ < trace_to ? &timeline_ : nullptr;
      for (auto& part : s_->parts) {
        part->set_timeline(tl_);
        part->chain().exposed_comm().Reset();
      }
      s_->grads->set_timeline(tl_);
      if (s_->runner) s_->runner->set_timeline(tl_);
      s_->grads->exposed_comm().Reset();
      if (s_->expert_grads) s_->expert_grads->exposed_comm().Reset();
      if (tl_) tl_->Begin(absl::StrCat("step ", step_ + 1), exec_.stream);
      optimizer::StepStats st;
      if (graphs && step_ >= first_step + 2) {
        GTP_ASSIGN_OR_RETURN(st, GraphStep());
        if (tl_) tl_->End(exec_.stream);
      } else {
        GTP_RETURN_IF_ERROR(TrainStep());
        if (tl_) tl_->Begin("optimizer", exec_.stream);
        GTP_ASSIGN_OR_RETURN(st, s_->opt->Step());
        if (tl_) {
          tl_->End(exec_.stream);
          tl_->End(exec_.stream);
        }
      }
      // Read after the optimizer was enqueued: the loss is long computed by
      // then (the grad norm waited for the backward), so this costs no stall.
      GTP_ASSIGN_OR_RETURN(float loss, StepLoss());
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
      rec.bubble = s_->runner ? bubble_ : -1.0;
      if (has_moe()) {
        GTP_ASSIGN_OR_RETURN(rec.moe, layers::GptModel::FinishMoeStep(RawParts(), world_, s_->data->size(),
                                                            static_cast<int>(s_->sampler->num_micro_batches())));
      }
      if (rank0()) GTP_RETURN_IF_ERROR(metrics_->Step(rec, alloc_.stats(), world_.size(), t_start, first_step));
      if (r_.train().eval_every() > 0 && step_ % r_.train().eval_every() == 0) {
        GTP_ASSIGN_OR_RETURN(float vl, Evaluate(r_.train().eval_batches()));
        for (auto& part : s_->parts) part->ResetMoeStats();  // evaluation forwards are not the step's routing
        if (rank0()) GTP_RETURN_IF_ERROR(metrics_->Eval(step_, vl));
      }
      if (r_.train().sample_every() > 0 && step_ % r_.train().sample_every() == 0) {
        GTP_RETURN_IF_ERROR(text_sampler_.Print(s_->params, step_));
      }
      // Every rank must agree on stopping, or the next collective would hang.
      int32_t stop = g_stop_signal.load() != 0, any = 0;
      GTP_RETURN_IF_ERROR(
          comm::Run(host_.AllReduce(&stop, &any, 1, DType::kI32, comm::ReduceOp::kMax)));
      const bool periodic = r_.checkpoint().every() > 0 && step_ % r_.checkpoint().every() == 0;
      if (periodic || step_ == steps || any) {
        GTP_RETURN_IF_ERROR(ckpt_->Save(step_, /*wait=*/step_ == steps || any));
      }
      if (any) {
        g_stopped_by_signal.store(true);
        if (rank0()) {
          std::printf("\nstopped by signal after step %lld; checkpoint written to %s\n",
                      static_cast<long long>(step_), ckpt_->root().c_str());
        }
        return absl::OkStatus();
      }
    }
    if (rank0() && o_.progress_bar && first_step < steps) std::printf("\n");
    if (rank0() && first_step >= steps) {
      // Resumed at (or past) the last step: nothing trained, nothing saved.
      std::printf("nothing to train: the checkpoint in %s is at step %lld and train.steps is %lld "
                  "(raise train.steps to continue); nothing was saved\n",
                  ckpt_->root().c_str(), static_cast<long long>(first_step),
                  static_cast<long long>(steps));
    } else if (rank0()) {
      std::printf("done: %lld steps; checkpoint %s; metrics %s\n", static_cast<long long>(step_),
                  ckpt_->root().c_str(), metrics_->path().c_str());
    }
    return absl::OkStatus();
  }

 private:
  bool rank0() const { return world_.rank() == 0; }

  absl::Status Setup() {
    GTP_ASSIGN_OR_RETURN(s_, RankState::Build(r_, world_, host_, exec_));
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
    ckpt_ = std::make_unique<Checkpointer>(state, o_.run_dir + "/" + r_.checkpoint().dir());
    if (rank0()) {
      GTP_ASSIGN_OR_RETURN(metrics_, Metrics::Open(r_, o_));
    }
    return absl::OkStatus();
  }

  // " | attention cudnn 9.14.0" / " | attention flash" on cuda bf16.
  std::string AttentionNote() const {
    if (!exec_.is_cuda() || r_.train().precision() != "bf16") return "";
    if (exec_.attention == nullptr) return " | attention flash";
    const int64_t v = kernels::CudnnEngine::Version();
    return absl::StrCat(" | attention ", exec_.attention->name(), " ", v / 10000, ".",
                        (v / 100) % 100, ".", v % 100);
  }

  // The dense grid's rank order as resolved (and the expert grid's, when
  // the model has experts).
  std::string RankOrder() const {
    return has_moe() ? absl::StrCat(s_->order, ", experts ", s_->expert_order) : s_->order;
  }

  void Banner() {
    const auto& m = r_.model();
    int64_t total = 0;
    for (auto* p : s_->params.sharded) total += p->global_layout().global_rows * p->global_layout().global_cols;
    // Expert weights: each logical tensor once (every EP rank names the whole one).
    for (auto* p : s_->experts.sharded) {
      if (s_->pgs->RankIn("ep").value_or(0) == 0) {
        total += p->global_layout().global_rows * p->global_layout().global_cols;
      }
    }
    std::printf(
        "gtp %s | world %d (%s) | TP %d x GTP %d x DP %d%s (data lanes %d) | order %s | SP %s | "
        "%s on %s%s%s\n"
        "model: %d layers, C=%lld, heads=%lld, vocab=%lld, T=%lld, %s/%s, %.2fM weight params "
        "(%.2fM on this rank)\n"
        "train: %lld steps, global batch %lld x %lld tokens, micro-batch %lld, %s lr %.2e, "
        "data %s, seed %llu\n"
        "run dir: %s\n",
        r_.name().c_str(), world_.size(), world_.backend().c_str(), r_.parallel().tp(),
        r_.parallel().tp_num_weight_shards() / r_.parallel().tp(),
        world_.size() / r_.parallel().tp_num_weight_shards() / r_.parallel().pp() / r_.parallel().cp(),
        (absl::StrCat(r_.parallel().cp() > 1 ? absl::StrCat(" x CP ", r_.parallel().cp()) : "") +
         (r_.parallel().pp() > 1
             ? absl::StrCat(" x PP ", r_.parallel().pp(),
                            r_.parallel().vpp() > 1 ? absl::StrCat(" (VPP ", r_.parallel().vpp(), ")") : "")
             : std::string()))
            .c_str(),
        s_->data->size(), RankOrder().c_str(),
        r_.parallel().sequence_parallel() ? "on" : "off", r_.train().precision().c_str(),
        r_.train().device().c_str(), UseCudaGraphs() ? " | CUDA graphs" : "",
        (AttentionNote() + (r_.parallel().gtp_gather_dtype() == "fp8" ? " | fp8 GTP gathers" : "") +
         (r_.parallel().gtp_reduce_scatter_dtype() == "bf16" ? " | bf16 GTP reduce-scatter" : ""))
            .c_str(),
        m.n_layer(),
        static_cast<long long>(m.n_embd()), static_cast<long long>(m.n_head()),
        static_cast<long long>(m.vocab_size()), static_cast<long long>(m.seq_len()),
        m.norm().c_str(), m.activation().c_str(), total / 1e6, s_->local_params / 1e6,
        static_cast<long long>(r_.train().steps()),
        static_cast<long long>(s_->sampler->config().global_batch_size),
        static_cast<long long>(m.seq_len()), static_cast<long long>(r_.train().micro_batch()),
        r_.optim().matrices().c_str(), r_.optim().lr(), r_.data().source().c_str(),
        static_cast<unsigned long long>(r_.train().seed()), o_.run_dir.c_str());
    if (metrics_->tensorboard()) std::printf("tensorboard: %s\n", metrics_->tensorboard()->path().c_str());
    std::fflush(stdout);
  }

  // Host staging for one micro-batch: pinned on GPUs, so the copies are
  // asynchronous; `copied` marks when the device has read it.
  struct Staging {
    Tensor tok, tgt;
    std::optional<Event> copied;
  };

  // Tokens and targets of `samples` as [B, T] tensors on the exec's device.
  // On GPUs the host→device copies are enqueued without waiting; two staging
  // slots alternate, and a slot is refilled only after its last copy ran.
  // With `dst` (tokens, targets on the device) the copies land there instead
  // of in new tensors: the fixed buffers a captured CUDA graph reads.
  absl::StatusOr<std::pair<Tensor, Tensor>> Batch(const data::GptDataset& ds,
                                                  const std::vector<uint64_t>& samples,
                                                  const std::pair<Tensor, Tensor>* dst = nullptr) {
    const int64_t B = static_cast<int64_t>(samples.size()), T = r_.model().seq_len();
    Staging& slot = staging_slots_[next_slot_];
    next_slot_ = (next_slot_ + 1) % 2;
    if (!slot.tok.defined() || slot.tok.dim(0) != B) {
      Allocator& a = exec_.is_cuda() ? static_cast<Allocator&>(pinned_) : staging_;
      slot.tok = Tensor::Empty({B, T}, DType::kI32, a);
      slot.tgt = Tensor::Empty({B, T}, DType::kI32, a);
    }
    if (slot.copied) GTP_RETURN_IF_ERROR(slot.copied->Synchronize());
    host_tok_ = slot.tok;
    host_tgt_ = slot.tgt;
    ds.GetBatch(samples, host_tok_.data<int32_t>(), host_tgt_.data<int32_t>());
    if (&ds == s_->train.get()) GTP_RETURN_IF_ERROR(dump_.Append(host_tok_.data<int32_t>(), host_tgt_.data<int32_t>(), B * T));
    if (!exec_.is_cuda()) return std::make_pair(host_tok_, host_tgt_);
    Tensor tok = dst ? dst->first : exec_.Empty({B, T}, DType::kI32);
    Tensor tgt = dst ? dst->second : exec_.Empty({B, T}, DType::kI32);
    GTP_RETURN_IF_ERROR(Copy(host_tok_, tok, exec_.stream, /*sync=*/false));
    GTP_RETURN_IF_ERROR(Copy(host_tgt_, tgt, exec_.stream, /*sync=*/false));
    if (!slot.copied) {
      GTP_ASSIGN_OR_RETURN(slot.copied, Event::Create());
    }
    slot.copied->Record(exec_.stream);
    return std::make_pair(tok, tgt);
  }

  absl::Status WriteTrace() {
    const std::string rank =
        world_.size() > 1 ? absl::StrCat(".rank", world_.rank()) : std::string();
    const std::string path = absl::StrCat(o_.run_dir, "/trace", rank, ".json");
    GTP_RETURN_IF_ERROR(timeline_.WriteChromeTrace(path));
    if (rank0()) std::printf("step timeline written to %s\n", path.c_str());
    return absl::OkStatus();
  }

  // Forward/backward of every micro-batch of this step (enqueued; the losses
  // stay on the device until StepLoss).
  absl::Status TrainStep() {
    const int64_t B = r_.train().micro_batch(), T = r_.model().seq_len();
    const int64_t M = s_->sampler->num_micro_batches();
    if (s_->runner) {
      auto batch = [&](int m) -> absl::StatusOr<pipeline::MicroBatch> {
        GTP_ASSIGN_OR_RETURN(auto b, Batch(*s_->train, s_->sampler->MicroBatch(m)));
        // The runner keeps every in-flight micro-batch's data until its
        // backward; Batch's host tensors are a two-slot ring: copy them.
        if (exec_.is_cuda()) return pipeline::MicroBatch{b.first, b.second};
        pipeline::MicroBatch mb{exec_.Empty(b.first.shape(), DType::kI32),
                                exec_.Empty(b.second.shape(), DType::kI32)};
        GTP_RETURN_IF_ERROR(Copy(b.first, mb.tokens));
        GTP_RETURN_IF_ERROR(Copy(b.second, mb.targets));
        return mb;
      };
      // Never "last": an interleaved schedule finishes micro-batches out of
      // order, and with the overlap off FinishGradSync reduces every bucket.
      auto before = [&](int) {
        s_->grads->StartMicrobatch(/*last=*/false, B * T);
        if (s_->expert_grads) s_->expert_grads->StartMicrobatch(/*last=*/false, B * T);
      };
      GTP_ASSIGN_OR_RETURN(pipeline::StepTimes t, s_->runner->Step(static_cast<int>(M), batch, before));
      bubble_ = t.bubble();
      if (s_->pgs->Has("embd") && (*s_->pgs->Group("embd"))->is_member()) {
        GTP_ASSIGN_OR_RETURN(comm::Communicator * embd, s_->pgs->Get("embd"));
        for (auto& part : s_->parts) GTP_RETURN_IF_ERROR(part->SyncTiedEmbedding(*embd));
      }
      return absl::OkStatus();
    }
    for (int64_t m = 0; m < M; ++m) {
      s_->grads->StartMicrobatch(m == M - 1, B * T);
      if (s_->expert_grads) s_->expert_grads->StartMicrobatch(m == M - 1, B * T);
      const std::vector<uint64_t> samples = s_->sampler->MicroBatch(m);
      GTP_ASSIGN_OR_RETURN(auto batch, Batch(*s_->train, samples));
      Timeline::Scope span(tl_, absl::StrCat("micro-batch ", m), exec_.stream);
      GTP_RETURN_IF_ERROR(
          s_->model->ForwardAsync(batch.first, batch.second, /*backward_follows=*/true));
      GTP_RETURN_IF_ERROR(s_->model->Backward());
    }
    return absl::OkStatus();
  }

  // The MoE figures come from the whole model, whatever layers this rank holds.
  bool has_moe() const { return s_->has_moe(); }
  std::vector<layers::GptModel*> RawParts() const { return s_->RawParts(); }

  bool UseCudaGraphs() const {
    // MoE layers read their token counts on the host: not capturable.
    return exec_.is_cuda() && r_.train().cuda_graphs() == "on" && world_.size() == 1 &&
           s_->opt->CanEnqueueSteps() && !has_moe() && s_->runner == nullptr;
  }

  // One training step as a CUDA graph: the batches go into fixed device
  // buffers and the step's lr into the optimizer's page-locked scalars (both
  // outside the graph), then the graph — captured on the first call from the
  // same code the eager step runs (every micro-batch's forward and backward,
  // the optimizer's EnqueueStep) — is launched, and the optimizer's one read
  // ends the step.
  absl::StatusOr<optimizer::StepStats> GraphStep() {
    const int64_t B = r_.train().micro_batch(), T = r_.model().seq_len();
    const int64_t M = s_->sampler->num_micro_batches();
    if (graph_batches_.empty()) {
      for (int64_t m = 0; m < M; ++m) {
        graph_batches_.emplace_back(exec_.Empty({B, T}, DType::kI32), exec_.Empty({B, T}, DType::kI32));
      }
    }
    for (int64_t m = 0; m < M; ++m) {
      GTP_RETURN_IF_ERROR(Batch(*s_->train, s_->sampler->MicroBatch(m), &graph_batches_[m]).status());
    }
    s_->opt->PrepareStep();
    if (graph_exec_ == nullptr) {
      s_->model->set_timeline(nullptr);  // event records do not belong in the graph
      GTP_RETURN_IF_ERROR(CudaStatus(
          cudaStreamBeginCapture(exec_.stream, cudaStreamCaptureModeRelaxed), "capturing the step"));
      absl::Status st = [&]() -> absl::Status {
        for (int64_t m = 0; m < M; ++m) {
          s_->grads->StartMicrobatch(m == M - 1, B * T);
          GTP_RETURN_IF_ERROR(
              s_->model->ForwardAsync(graph_batches_[m].first, graph_batches_[m].second,
                                   /*backward_follows=*/true));
          GTP_RETURN_IF_ERROR(s_->model->Backward());
        }
        return s_->opt->EnqueueStep();
      }();
      cudaGraph_t graph = nullptr;
      const cudaError_t end = cudaStreamEndCapture(exec_.stream, &graph);
      if (st.ok()) st = CudaStatus(end, "ending the capture of the step");
      if (st.ok()) {
        cudaGraphExec_t exec = nullptr;
        st = CudaStatus(cudaGraphInstantiate(&exec, graph, 0), "instantiating the step's CUDA graph");
        graph_exec_.reset(exec);
      }
      if (graph != nullptr) cudaGraphDestroy(graph);
      if (!st.ok()) {
        return absl::Status(st.code(), absl::StrCat(st.message(),
                                                    " (train.cuda_graphs=off runs without graphs)"));
      }
      if (rank0()) std::printf("captured the training step as a CUDA graph\n");
    }
    Timeline::Scope span(tl_, "step (CUDA graph)", exec_.stream);
    GTP_RETURN_IF_ERROR(CudaStatus(cudaGraphLaunch(graph_exec_.get(), exec_.stream),
                                   "launching the step's CUDA graph"));
    return s_->opt->FinishStep();
  }

  // The global mean loss of the step TrainStep ran: one device read.
  absl::StatusOr<float> StepLoss() {
    const int64_t M = s_->sampler->num_micro_batches();
    layers::GptModel& head = *s_->parts.back();
    float sum = 0;
    if (head.has_head()) {
      GTP_ASSIGN_OR_RETURN(sum, head.TakeLossSum());
    }
    return MeanOverHeadRanks(head.has_head(), sum, M);
  }

  // The world mean of a loss that only the ranks holding the LM head (the
  // last pipeline stage) computed, as `sum` over `count` micro-batches: they
  // add sum / count, the others 0, over the host world (host memory: the
  // loss is a host scalar, never a buffer for the device communicators), and
  // every data lane has world / PP of them.
  absl::StatusOr<float> MeanOverHeadRanks(bool holds_head, float sum, int64_t count) {
    float x = holds_head ? static_cast<float>(sum / count) : 0.0f;
    if (host_.size() > 1) {
      GTP_RETURN_IF_ERROR(comm::Run(host_.AllReduce(&x, &x, 1, DType::kF32, comm::ReduceOp::kSum)));
    }
    return x / static_cast<float>(host_.size() / s_->pp->size());
  }

  // (public) EvaluateCheckpoint's run: the weights of the recipe's
  // checkpoint.init_from, then Evaluate over `samples` validation samples
  // (0: what the training run's evaluation covers on this layout). Rank 0
  // fills *out.
 public:
  absl::Status RunEvaluation(int64_t samples, EvalResult* out) {
    GTP_RETURN_IF_ERROR(Setup());
    GTP_RETURN_IF_ERROR(ckpt_->InitFrom(/*announce=*/false));
    const int64_t per_batch = r_.train().micro_batch() * s_->data->size();
    if (samples <= 0) samples = r_.train().eval_batches() * per_batch;
    if (samples % per_batch != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          samples, " validation samples do not split into whole micro-batches of ",
          r_.train().micro_batch(), " × ", s_->data->size(), " data lanes: give a multiple of ",
          per_batch));
    }
    GTP_ASSIGN_OR_RETURN(float loss, Evaluate(samples / per_batch));
    if (rank0()) {
      out->loss = loss;
      out->samples = samples;
      out->tokens = samples * r_.model().seq_len();
    }
    return absl::OkStatus();
  }

 private:
  // Mean loss over n micro-batches per lane of the validation split (no
  // gradient): validation samples 0 .. n·lanes·B − 1, the same samples on
  // every layout with as many of them.
  absl::StatusOr<float> Evaluate(int64_t n) {
    const int64_t B = r_.train().micro_batch();
    double sum = 0;
    if (n <= 0) return absl::InvalidArgumentError("evaluation needs at least one micro-batch");
    if (s_->runner) return EvaluatePipeline(B, n);
    for (int64_t i = 0; i < n; ++i) {
      std::vector<uint64_t> samples(B);
      for (int64_t b = 0; b < B; ++b) {
        samples[b] = ((i * s_->data->size() + s_->data->rank()) * B + b) % s_->valid->samples_per_epoch();
      }
      GTP_ASSIGN_OR_RETURN(auto batch, Batch(*s_->valid, samples));
      GTP_ASSIGN_OR_RETURN(float loss, s_->model->Forward(batch.first, batch.second));
      sum += loss;
    }
    float loss = static_cast<float>(sum / n);
    GTP_RETURN_IF_ERROR(
        comm::Run(host_.AllReduce(&loss, &loss, 1, DType::kF32, comm::ReduceOp::kMean)));
    return loss;
  }

  // Forward-only pipeline over the validation micro-batches: each rank runs
  // its chunks in virtual-stage order, every micro-batch per chunk.
  absl::StatusOr<float> EvaluatePipeline(int64_t B, int64_t n) {
    const int P = s_->pp->size(), s = s_->pp->rank(), V = P * static_cast<int>(s_->parts.size());
    const int next = (s + 1) % P, prev = (s + P - 1) % P;
    std::vector<std::pair<comm::WorkPtr, Tensor>> sends;
    for (size_t c = 0; c < s_->parts.size(); ++c) {
      layers::GptModel& part = *s_->parts[c];
      const int v = static_cast<int>(c) * P + s;
      for (int64_t i = 0; i < n; ++i) {
        std::vector<uint64_t> samples(B);
        for (int64_t b = 0; b < B; ++b) {
          samples[b] = ((i * s_->data->size() + s_->data->rank()) * B + b) % s_->valid->samples_per_epoch();
        }
        GTP_ASSIGN_OR_RETURN(auto batch, Batch(*s_->valid, samples));
        Tensor input;
        if (v > 0) {
          input = exec_.Empty({part.activation_rows(), r_.model().n_embd()}, part.config().block.dtype);
          GTP_RETURN_IF_ERROR(comm::Run(s_->pp->Recv(input.raw_data(), input.numel(), input.dtype(),
                                                  prev, static_cast<int>(v * n + i))));
        }
        GTP_ASSIGN_OR_RETURN(Tensor out, part.ForwardPart(batch.first, input, batch.second));
        part.DropActivations();
        if (v < V - 1) {
          GTP_ASSIGN_OR_RETURN(comm::WorkPtr w, s_->pp->Send(out.raw_data(), out.numel(), out.dtype(),
                                                          next, static_cast<int>((v + 1) * n + i)));
          sends.emplace_back(std::move(w), out);
        }
      }
    }
    for (auto& [w, t] : sends) GTP_RETURN_IF_ERROR(w->Wait());
    float sum = 0;
    if (s_->parts.back()->has_head()) {
      GTP_ASSIGN_OR_RETURN(sum, s_->parts.back()->TakeLossSum());
    }
    return MeanOverHeadRanks(s_->parts.back()->has_head(), sum, n);
  }

  const proto::Recipe& r_;
  const RunOptions& o_;
  comm::Communicator& world_;
  comm::Communicator& host_;
  Allocator& alloc_;
  kernels::Exec exec_;
  HeapAllocator staging_;
  PinnedHostAllocator pinned_;
  Staging staging_slots_[2];
  int next_slot_ = 0;
  Tensor host_tok_, host_tgt_;  // the slot Batch filled last
  TokenDump dump_{rank0() ? r_.train().dump_tokens() : std::string()};  // train.dump_tokens
  std::unique_ptr<Metrics> metrics_;  // rank 0
  // The model, its optimizer and its data (recipes/trainer/state.h).
  std::unique_ptr<RankState> s_;
  TextSampler text_sampler_{r_, host_, exec_, o_.progress_bar};  // train.sample_every
  double bubble_ = 0;  // the last step's pipeline bubble (time blocked receiving / step)
  std::unique_ptr<Checkpointer> ckpt_;
  int64_t step_ = 0;
  Timeline timeline_{exec_.is_cuda()};
  Timeline* tl_ = nullptr;  // &timeline_ during traced steps
  struct GraphExecDeleter {
    void operator()(cudaGraphExec_t g) const {
      if (g != nullptr) cudaGraphExecDestroy(g);
    }
  };
  std::unique_ptr<std::remove_pointer_t<cudaGraphExec_t>, GraphExecDeleter> graph_exec_;
  std::vector<std::pair<Tensor, Tensor>> graph_batches_;  // fixed token buffers the graph reads
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
  std::error_code ec;
  const bool existed = std::filesystem::exists(options.run_dir, ec);
  absl::Status st = TrainIn(
      recipe, options, [](RankRun& run) { return run.Run(); }, /*create_run_dir=*/true);
  // A run that failed before writing anything leaves no empty run directory
  // behind (one this process made; files in it, e.g. metrics, keep it).
  if (!st.ok() && !existed && std::filesystem::is_directory(options.run_dir, ec) &&
      std::filesystem::is_empty(options.run_dir, ec)) {
    std::filesystem::remove(options.run_dir, ec);
  }
  return st;
}

absl::StatusOr<EvalResult> EvaluateCheckpoint(const proto::Recipe& recipe,
                                              const std::string& checkpoint, int64_t samples) {
  proto::Recipe r = recipe;
  r.mutable_checkpoint()->set_init_from(checkpoint);
  r.mutable_checkpoint()->set_no_resume(true);
  r.mutable_train()->clear_tensorboard_dir();
  r.mutable_train()->clear_dump_tokens();
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
  // Check what can be checked before anything is written.
  {
    GTP_ASSIGN_OR_RETURN(const int world, WorldSize(recipe));
    // The whole layout, checked before the run directory exists.
    GTP_RETURN_IF_ERROR(CheckLayout(recipe, world));
    std::unique_ptr<data::GptDataset> t, v;
    GTP_RETURN_IF_ERROR(MakeDatasets(recipe, &t, &v));
    // An init_from that is not there fails before the run directory exists
    // (unless the run resumes its own checkpoint and never reads it).
    const std::string& from = recipe.checkpoint().init_from();
    const std::string own = options.run_dir + "/" + recipe.checkpoint().dir();
    if (!from.empty() && !std::filesystem::exists(from + "/metadata.pb") &&
        (recipe.checkpoint().no_resume() || !std::filesystem::exists(own + "/latest"))) {
      if (absl::Status st = checkpoint::LatestIteration(from).status(); !st.ok()) {
        return absl::Status(st.code(),
                            absl::StrCat("checkpoint.init_from ", from, ": ", st.message()));
      }
    }
  }
  std::error_code ec;
  if (create_run_dir) std::filesystem::create_directories(options.run_dir, ec);
  if (ec) return absl::PermissionDeniedError(absl::StrCat("cannot create ", options.run_dir, ": ", ec.message()));
  g_stopped_by_signal.store(false);
  SignalGuard guard;
  return RunOnRanks(recipe, [&](const RankWorld& w) {
    RankRun run(recipe, options, w.world, w.host, w.exec);
    return body(run);
  });
}
}  // namespace

}  // namespace gtp::recipes
