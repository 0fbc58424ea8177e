// The pipeline runner. runner_test: every stage posts its point-to-point
// calls in its neighbours' order (NCCL's pairing rule). The bubble tests run
// as //pipeline:runner_bubble_benchmark (timing, by hand): with passes made
// compute-balanced by a hook that sleeps f ms per forward and 2f per
// backward (the tiny model's own compute is far below that), each stage's
// measured bubble — time blocked receiving over the step — is 1F1B's
// (P − 1)/(M + P − 1) within a few percent, and interleaving (vpp 2, each
// chunk half the time) lowers it.
#include <chrono>
#include <cstdio>
#include <mutex>
#include <thread>
#include <vector>

#include "comm/local/local_communicator.h"
#include "gtest/gtest.h"
#include "parallel/parallel_config.h"
#include "parallel/process_groups.h"
#include "pipeline/runner.h"

namespace gtp::pipeline {
namespace {

// Two steps of P stages × vpp chunks over M micro-batches on threads; the
// sum over stages of the second step's bubble into *bubble_sum. by_order:
// point-to-point paired as NCCL pairs it (comm/local p2p_pair_by_order,
// which fails any pair whose tags differ).
absl::Status RunSteps(int P, int vpp, int M, double f_ms, bool by_order, double* bubble_sum) {
  std::mutex mu;
  double& sum = *bubble_sum;
  comm::LocalOptions lo;
  lo.p2p_pair_by_order = by_order;
  lo.timeout = absl::Seconds(60);
  return comm::RunRanks(P, [&](comm::Communicator& w) -> absl::Status {
    parallel::ParallelConfig pc;
    pc.pp = P;
    GTP_ASSIGN_OR_RETURN(auto pgs, parallel::ProcessGroupCollection::Build(pc, w));
    GTP_ASSIGN_OR_RETURN(comm::Communicator * pp, pgs.Get("pp"));
    HeapAllocator host;
    kernels::Exec exec = kernels::Exec::Cpu(host);
    std::vector<std::unique_ptr<layers::GptModel>> parts;
    std::vector<layers::GptModel*> raw;
    for (int c = 0; c < vpp; ++c) {
      layers::GptConfig cfg = layers::GptConfig::Gpt2(64, 8, P * vpp, 8, 2);
      cfg.pipeline.index = c * P + pp->rank();
      cfg.pipeline.count = P * vpp;
      GTP_ASSIGN_OR_RETURN(auto m, layers::GptModel::Create(cfg, 1, 8, pgs, exec));
      raw.push_back(m.get());
      parts.push_back(std::move(m));
    }
    GTP_ASSIGN_OR_RETURN(std::unique_ptr<PipelineRunner> runner_ptr,
                         PipelineRunner::Create(raw, pp, exec));
    PipelineRunner& runner = *runner_ptr;
    const double chunk_f = f_ms / vpp;
    if (f_ms > 0) runner.set_pass_hook([chunk_f](const PipelineOp& op) {
      const double ms = op.kind == PipelineOp::kForward ? chunk_f : 2 * chunk_f;
      std::this_thread::sleep_for(std::chrono::microseconds(static_cast<int64_t>(ms * 1000)));
    });
    auto batch = [&](int) -> absl::StatusOr<MicroBatch> {
      MicroBatch b{Tensor::Zeros({1, 8}, DType::kI32, host), Tensor::Zeros({1, 8}, DType::kI32, host)};
      return b;
    };
    StepTimes t;
    for (int step = 0; step < 2; ++step) {
      GTP_ASSIGN_OR_RETURN(t, runner.Step(M, batch));
    }
    std::lock_guard<std::mutex> l(mu);
    sum += t.bubble();
    return absl::OkStatus();
  });
}

// The mean over stages of the measured bubble of one step (the second of
// two: the first warms the buffer caches).
double MeasuredBubble(int P, int vpp, int M, double f_ms) {
  double sum = 0;
  absl::Status st = RunSteps(P, vpp, M, f_ms, /*by_order=*/false, &sum);
  EXPECT_TRUE(st.ok()) << st;
  std::printf("PP %d, VPP %d, %d micro-batches: measured bubble %.3f (simulated %.3f)\n", P, vpp,
              M, sum / P, SimulatedBubble(P, vpp, M, f_ms / vpp, 2 * f_ms / vpp));
  return sum / P;
}

// NCCL pairs a peer pair's messages by order, not tag: every stage must post
// its sends and receives to each neighbour in the order the neighbour posts
// the other side, 1F1B and interleaved, the wrap from the last stage to the
// first included. Paired by order on threads, a pair whose tags differ
// fails by name, so this passes only when the orders agree everywhere.
TEST(PipelineRunner, EveryStagePostsInItsNeighboursOrder) {
  for (int P : {2, 3, 4}) {
    for (int vpp : {1, 2, 3}) {
      for (int M : {P, 2 * P, 2 * P + 1}) {
        if (vpp > 1 && M % P != 0) continue;  // interleaving needs M a multiple of P
        double unused = 0;
        absl::Status st = RunSteps(P, vpp, M, 0.0, /*by_order=*/true, &unused);
        EXPECT_TRUE(st.ok()) << "P " << P << " vpp " << vpp << " M " << M << ": " << st;
      }
    }
  }
}

TEST(PipelineRunner, OneF1BBubbleIsTheClosedForm) {
  for (auto [P, M] : {std::pair{2, 4}, std::pair{4, 8}}) {
    const double want = (P - 1.0) / (M + P - 1.0);
    const double got = MeasuredBubble(P, 1, M, 20.0);
    EXPECT_NEAR(got, want, 0.04) << "P " << P << " M " << M;
  }
}

TEST(PipelineRunner, InterleavingLowersTheBubble) {
  const double plain = MeasuredBubble(2, 1, 4, 20.0);
  const double inter = MeasuredBubble(2, 2, 4, 20.0);
  EXPECT_NEAR(inter, SimulatedBubble(2, 2, 4, 10.0, 20.0), 0.04);
  EXPECT_LT(inter, plain - 0.03);
}

}  // namespace
}  // namespace gtp::pipeline
