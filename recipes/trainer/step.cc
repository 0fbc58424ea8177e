#include "recipes/trainer/step.h"

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "core/cuda_runtime.h"
#include "core/status.h"

namespace gtp::recipes {

StepRunner::StepRunner(RankState& s, BatchStager& batches, bool rank0)
    : s_(s), batches_(batches), r_(s.recipe), world_(s.world), host_(s.host), exec_(s.exec),
      rank0_(rank0) {}

StepRunner::~StepRunner() {
  if (graph_exec_ != nullptr) cudaGraphExecDestroy(graph_exec_);
}

// Forward/backward of every micro-batch of this step (enqueued; the losses
// stay on the device until StepLoss).
absl::Status StepRunner::Accumulate() {
  const int64_t B = r_.train().micro_batch(), T = r_.model().seq_len();
  const int64_t M = s_.sampler->num_micro_batches();
  if (s_.runner) {
    auto batch = [&](int m) -> absl::StatusOr<pipeline::MicroBatch> {
      GTP_ASSIGN_OR_RETURN(auto b, batches_.Batch(*s_.train, s_.sampler->MicroBatch(m)));
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
      s_.grads->StartMicrobatch(/*last=*/false, B * T);
      if (s_.expert_grads) s_.expert_grads->StartMicrobatch(/*last=*/false, B * T);
    };
    GTP_ASSIGN_OR_RETURN(pipeline::StepTimes t, s_.runner->Step(static_cast<int>(M), batch, before));
    bubble_ = t.bubble();
    if (s_.pgs->Has(parallel::groups::kEmbd) && (*s_.pgs->Group(parallel::groups::kEmbd))->is_member()) {
      GTP_ASSIGN_OR_RETURN(comm::Communicator * embd, s_.pgs->Get(parallel::groups::kEmbd));
      for (auto& part : s_.parts) GTP_RETURN_IF_ERROR(part->SyncTiedEmbedding(*embd));
    }
    return absl::OkStatus();
  }
  for (int64_t m = 0; m < M; ++m) {
    s_.grads->StartMicrobatch(m == M - 1, B * T);
    if (s_.expert_grads) s_.expert_grads->StartMicrobatch(m == M - 1, B * T);
    const std::vector<uint64_t> samples = s_.sampler->MicroBatch(m);
    GTP_ASSIGN_OR_RETURN(auto batch, batches_.Batch(*s_.train, samples));
    Timeline::Scope span(tl_, absl::StrCat("micro-batch ", m), exec_.stream);
    GTP_RETURN_IF_ERROR(
        s_.model->ForwardAsync(batch.first, batch.second, /*backward_follows=*/true));
    GTP_RETURN_IF_ERROR(s_.model->Backward());
  }
  return absl::OkStatus();
}

namespace {

// Why this run's step cannot be captured as a CUDA graph ("": it can).
std::string WhyNoGraphs(const kernels::Exec& exec, const comm::Communicator& world,
                        const RankState& s) {
  if (!exec.is_cuda()) return "train.device is cpu";
  // Several ranks: NCCL collectives are captured into the graph (the
  // communicator keeps captured calls off its watchdog; GraphStep bounds each
  // launch with a watched barrier). Host backends would read on the host.
  if (world.size() > 1 && world.backend() != "nccl") {
    return absl::StrCat("the world's backend is ", world.backend(), " (graphs need NCCL or one rank)");
  }
  if (!s.opt->CanEnqueueSteps()) {
    return "the optimizer reads values on the host during its step (Muon, or a host-side "
           "grad-norm group)";
  }
  // Each CP rank picks its tokens of the batch on the host (a device gather
  // would make it capturable; not built).
  if (s.recipe.parallel().cp() > 1) return "context parallelism picks each rank's tokens on the host";
  // MoE layers read their token counts on the host.
  if (s.has_moe()) return "MoE layers read their token counts on the host";
  if (s.runner != nullptr) return "the pipeline schedule waits on the host";
  return "";
}

}  // namespace

bool StepRunner::UseCudaGraphs() const {
  return r_.train().cuda_graphs() != "off" && WhyNoGraphs(exec_, world_, s_).empty();
}

absl::Status StepRunner::CheckCudaGraphs() const {
  if (r_.train().cuda_graphs() != "on") return absl::OkStatus();
  const std::string why = WhyNoGraphs(exec_, world_, s_);
  if (why.empty()) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("train.cuda_graphs=on, but this step cannot be captured as a CUDA graph: ", why,
                   " (train.cuda_graphs=auto uses graphs where they are built, off never)"));
}

// One training step as a CUDA graph: the batches go into fixed device
// buffers and the step's lr into the optimizer's page-locked scalars (both
// outside the graph), then the graph — captured on the first call from the
// same code the eager step runs (every micro-batch's forward and backward,
// the optimizer's EnqueueStep) — is launched, and the optimizer's one read
// ends the step.
absl::StatusOr<optimizer::StepStats> StepRunner::GraphStep() {
  const int64_t B = r_.train().micro_batch(), T = r_.model().seq_len();
  const int64_t M = s_.sampler->num_micro_batches();
  if (graph_batches_.empty()) {
    for (int64_t m = 0; m < M; ++m) {
      graph_batches_.emplace_back(exec_.Empty({B, T}, DType::kI32), exec_.Empty({B, T}, DType::kI32));
    }
  }
  for (int64_t m = 0; m < M; ++m) {
    GTP_RETURN_IF_ERROR(batches_.Batch(*s_.train, s_.sampler->MicroBatch(m), &graph_batches_[m]).status());
  }
  s_.opt->PrepareStep();
  if (graph_exec_ == nullptr) {
    // The graph bakes in each wgrad GEMM's beta (0 for a grad ZeroGrad left to
    // its first write): capture only after a step's ZeroGrad (the eager steps
    // before the first graph step), so every replay starts where it did.
    GTP_CHECK(s_.grads->zeroed() && (s_.expert_grads == nullptr || s_.expert_grads->zeroed()),
              "GraphStep: capturing before the optimizer's first ZeroGrad (run a step eagerly "
              "first)");
    s_.model->set_timeline(nullptr);  // event records do not belong in the graph
    GTP_RETURN_IF_ERROR(CudaStatus(
        cudaStreamBeginCapture(exec_.stream, cudaStreamCaptureModeRelaxed), "capturing the step"));
    absl::Status st = [&]() -> absl::Status {
      for (int64_t m = 0; m < M; ++m) {
        s_.grads->StartMicrobatch(m == M - 1, B * T);
        GTP_RETURN_IF_ERROR(
            s_.model->ForwardAsync(graph_batches_[m].first, graph_batches_[m].second,
                                 /*backward_follows=*/true));
        GTP_RETURN_IF_ERROR(s_.model->Backward());
      }
      return s_.opt->EnqueueStep();
    }();
    cudaGraph_t graph = nullptr;
    const cudaError_t end = cudaStreamEndCapture(exec_.stream, &graph);
    if (st.ok()) st = CudaStatus(end, "ending the capture of the step");
    if (st.ok()) {
      cudaGraphExec_t exec = nullptr;
      st = CudaStatus(cudaGraphInstantiate(&exec, graph, 0), "instantiating the step's CUDA graph");
      graph_exec_ = exec;
    }
    if (graph != nullptr) cudaGraphDestroy(graph);
    if (!st.ok()) {
      return absl::Status(st.code(), absl::StrCat(st.message(),
                                                  " (train.cuda_graphs=off runs without graphs)"));
    }
    if (rank0_) std::printf("captured the training step as a CUDA graph\n");
  }
  Timeline::Scope span(tl_, "step (CUDA graph)", exec_.stream);
  GTP_RETURN_IF_ERROR(CudaStatus(cudaGraphLaunch(graph_exec_, exec_.stream),
                                 "launching the step's CUDA graph"));
  if (world_.size() > 1) {
    // The graph's collectives are not watched one by one: a barrier over the
    // world, ordered after the graph and waited within the communicator's
    // timeout, ends the step with an error naming the group when a peer
    // died or hangs (the host never blocks on the graph unbounded).
    absl::Status fenced = [&]() -> absl::Status {
      GTP_ASSIGN_OR_RETURN(comm::WorkPtr w, world_.Barrier());
      return w->Synchronize();
    }();
    if (!fenced.ok()) {
      return absl::Status(fenced.code(), absl::StrCat("the step's CUDA graph did not complete on every rank: ",
                                                      fenced.message()));
    }
  }
  return s_.opt->FinishStep();
}

// The global mean loss of the step TrainStep ran: one device read.
absl::StatusOr<float> StepRunner::Loss() {
  const int64_t M = s_.sampler->num_micro_batches();
  layers::GptModel& head = *s_.parts.back();
  float sum = 0;
  if (head.has_head()) {
    GTP_ASSIGN_OR_RETURN(sum, head.TakeLossSum());
  }
  return MeanOverHeadRanks(host_, s_.pp->size(), head.has_head(), sum, M);
}

// The world mean of a loss that only the ranks holding the LM head (the
// last pipeline stage) computed, as `sum` over `count` micro-batches: they
// add sum / count, the others 0, over the host world (host memory: the
// loss is a host scalar, never a buffer for the device communicators), and
// every data lane has world / PP of them.
absl::StatusOr<float> MeanOverHeadRanks(comm::Communicator& host_, int pp_size, bool holds_head,
                                      float sum, int64_t count) {
  float x = holds_head ? static_cast<float>(sum / count) : 0.0f;
  if (host_.size() > 1) {
    GTP_RETURN_IF_ERROR(comm::Run(host_.AllReduce(&x, &x, 1, DType::kF32, comm::ReduceOp::kSum)));
  }
  return x / static_cast<float>(host_.size() / pp_size);
}

}  // namespace gtp::recipes
