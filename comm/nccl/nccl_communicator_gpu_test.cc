// NCCL backend tests. They need a GPU and skip (with the reason) without
// one; the multi-rank ones need 2 GPUs and run their ranks as processes
// through gtprun (this binary re-executed with RANK set).
#include <cuda_runtime_api.h>
#include <unistd.h>

#include <cstdio>
#include <algorithm>
#include <cstdlib>
#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "comm/nccl/nccl_communicator.h"
#include "comm/testing/conformance.h"
#include "comm/testing/multiprocess.h"
#include "core/cuda_runtime.h"
#include "core/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gtp::comm {
namespace {

using ::testing::HasSubstr;

class CudaMemory : public testing::TestMemory {
 public:
  void* Alloc(size_t bytes) override {
    void* p = nullptr;
    GTP_CUDA_CHECK(cudaMalloc(&p, bytes));
    return p;
  }
  void Free(void* p) override { GTP_CUDA_CHECK(cudaFree(p)); }
  void Upload(void* dst, const void* src, size_t bytes) override {
    // A pageable-memory cudaMemcpy may return before the data lands; the
    // collectives run on non-blocking streams, so wait for it.
    GTP_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
    GTP_CUDA_CHECK(cudaDeviceSynchronize());
  }
  void Download(void* dst, const void* src, size_t bytes) override {
    GTP_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
  }
};

// A pipeline's first steps on two stages: stage 0 sends two micro-batches
// and receives the first gradient in one batch of three; stage 1 receives
// one micro-batch, sends its gradient, receives the second. NCCL makes a
// pair's connections inside the first group that uses it and pairs the two
// sides' connection messages by count: without ConnectPeers first, stage 0
// connects both directions where stage 1 connects one ("Message truncated",
// then a hang until the timeout). Values are checked on arrival.
absl::Status FirstBatchesDiffer(Communicator& w, bool connect, cudaStream_t compute) {
  if (w.size() != 2) return absl::InvalidArgumentError("needs 2 ranks");
  if (connect) GTP_RETURN_IF_ERROR(w.ConnectPeers({1 - w.rank()}));
  constexpr int64_t n = 1 << 16;
  std::vector<float> host(3 * n);
  for (int64_t i = 0; i < 3 * n; ++i) host[i] = static_cast<float>(i % 1000) * 0.5f + 1.0f;
  float* dev = nullptr;
  GTP_RETURN_IF_ERROR(CudaStatus(cudaMalloc(reinterpret_cast<void**>(&dev), 3 * n * 4), "cudaMalloc"));
  std::unique_ptr<float, void (*)(float*)> free_dev(dev, [](float* p) { cudaFree(p); });
  std::vector<float> out(3 * n, -1.0f);
  if (w.rank() == 0) {
    // a0 = host[0, n), a1 = host[n, 2n); g0 lands in [2n, 3n).
    GTP_RETURN_IF_ERROR(CudaStatus(cudaMemcpy(dev, host.data(), 2 * n * 4, cudaMemcpyHostToDevice), "copy"));
    GTP_RETURN_IF_ERROR(CudaStatus(cudaMemset(dev + 2 * n, 0, n * 4), "memset"));
    GTP_ASSIGN_OR_RETURN(WorkPtr s0, w.Send(dev, n, DType::kF32, 1, 0));
    GTP_ASSIGN_OR_RETURN(WorkPtr s1, w.Send(dev + n, n, DType::kF32, 1, 1));
    GTP_ASSIGN_OR_RETURN(WorkPtr r0, w.Recv(dev + 2 * n, n, DType::kF32, 1, 100));
    for (WorkPtr* x : {&r0, &s0, &s1}) GTP_RETURN_IF_ERROR((*x)->Synchronize());
    GTP_RETURN_IF_ERROR(CudaStatus(cudaMemcpy(out.data(), dev, 3 * n * 4, cudaMemcpyDeviceToHost), "copy"));
    for (int64_t i = 0; i < n; ++i) {
      if (out[2 * n + i] != 2.0f * host[i]) {
        return absl::InternalError(absl::StrCat("g0[", i, "] = ", out[2 * n + i], ", want ", 2.0f * host[i]));
      }
    }
    return absl::OkStatus();
  }
  GTP_RETURN_IF_ERROR(CudaStatus(cudaMemset(dev, 0, 3 * n * 4), "memset"));
  GTP_ASSIGN_OR_RETURN(WorkPtr r0, w.Recv(dev, n, DType::kF32, 0, 0));
  GTP_RETURN_IF_ERROR(r0->Synchronize());
  GTP_RETURN_IF_ERROR(CudaStatus(cudaMemcpy(out.data(), dev, n * 4, cudaMemcpyDeviceToHost), "copy"));
  for (float& v : out) v *= 2.0f;  // the "gradient": 2 · a0
  GTP_RETURN_IF_ERROR(CudaStatus(cudaMemcpy(dev + 2 * n, out.data(), n * 4, cudaMemcpyHostToDevice), "copy"));
  GTP_ASSIGN_OR_RETURN(WorkPtr s0, w.Send(dev + 2 * n, n, DType::kF32, 0, 100));
  GTP_ASSIGN_OR_RETURN(WorkPtr r1, w.Recv(dev + n, n, DType::kF32, 0, 1));
  for (WorkPtr* x : {&s0, &r1}) GTP_RETURN_IF_ERROR((*x)->Synchronize());
  GTP_RETURN_IF_ERROR(CudaStatus(cudaMemcpy(out.data(), dev, 2 * n * 4, cudaMemcpyDeviceToHost), "copy"));
  for (int64_t i = 0; i < 2 * n; ++i) {
    if (out[i] != host[i]) return absl::InternalError(absl::StrCat("a[", i, "] = ", out[i], ", want ", host[i]));
  }
  (void)compute;
  return absl::OkStatus();
}

// A collective captured into a CUDA graph and replayed: the captured call is
// kept off the watchdog and cannot be waited for by the host (Synchronize
// says so, naming the capture), Wait orders the compute stream inside the
// graph, and every launch reduces the input as it is at that launch. Inputs
// are small integers, so the f32 sums are exact whatever NCCL's order.
absl::Status CapturedAllReduce(Communicator& w, cudaStream_t compute) {
  constexpr int64_t n = 4096;
  float* dev = nullptr;
  GTP_RETURN_IF_ERROR(CudaStatus(cudaMalloc(reinterpret_cast<void**>(&dev), 2 * n * 4), "cudaMalloc"));
  std::unique_ptr<float, void (*)(float*)> free_dev(dev, [](float* p) { cudaFree(p); });
  float *x = dev, *y = dev + n;
  GTP_RETURN_IF_ERROR(CudaStatus(cudaStreamBeginCapture(compute, cudaStreamCaptureModeRelaxed), "capture"));
  absl::Status st = [&]() -> absl::Status {
    GTP_ASSIGN_OR_RETURN(WorkPtr sum, w.AllReduce(x, y, n, DType::kF32, ReduceOp::kSum));
    absl::Status sync = sum->Synchronize();
    if (sync.code() != absl::StatusCode::kFailedPrecondition ||
        sync.message().find("inside a CUDA graph capture") == absl::string_view::npos) {
      return absl::InternalError(absl::StrCat("Synchronize inside a capture returned ", sync.ToString()));
    }
    return sum->Wait();
  }();
  cudaGraph_t graph = nullptr;
  const cudaError_t end = cudaStreamEndCapture(compute, &graph);
  GTP_RETURN_IF_ERROR(st);
  GTP_RETURN_IF_ERROR(CudaStatus(end, "cudaStreamEndCapture"));
  std::unique_ptr<CUgraph_st, void (*)(cudaGraph_t)> own_graph(graph, [](cudaGraph_t g) { cudaGraphDestroy(g); });
  cudaGraphExec_t exec = nullptr;
  GTP_RETURN_IF_ERROR(CudaStatus(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate"));
  std::unique_ptr<CUgraphExec_st, void (*)(cudaGraphExec_t)> own_exec(exec, [](cudaGraphExec_t e) { cudaGraphExecDestroy(e); });
  const int p = w.size();
  std::vector<float> in(n), out(n);
  for (int launch = 1; launch <= 3; ++launch) {
    for (int64_t i = 0; i < n; ++i) in[i] = static_cast<float>((w.rank() + 1) * launch + i % 7);
    GTP_RETURN_IF_ERROR(CudaStatus(cudaMemcpy(x, in.data(), n * 4, cudaMemcpyHostToDevice), "copy"));
    GTP_RETURN_IF_ERROR(CudaStatus(cudaDeviceSynchronize(), "cudaDeviceSynchronize"));
    GTP_RETURN_IF_ERROR(CudaStatus(cudaGraphLaunch(exec, compute), "cudaGraphLaunch"));
    GTP_RETURN_IF_ERROR(CudaStatus(cudaStreamSynchronize(compute), "cudaStreamSynchronize"));
    GTP_RETURN_IF_ERROR(CudaStatus(cudaMemcpy(out.data(), y, n * 4, cudaMemcpyDeviceToHost), "copy"));
    for (int64_t i = 0; i < n; ++i) {
      const float want = static_cast<float>(launch * p * (p + 1) / 2 + p * (i % 7));
      if (out[i] != want) {
        return absl::InternalError(absl::StrCat("launch ", launch, ": y[", i, "] = ", out[i], ", want ", want));
      }
    }
  }
  // The communicator still works eagerly (and is watched) after the graph.
  GTP_ASSIGN_OR_RETURN(WorkPtr b, w.Barrier());
  return b->Synchronize();
}

int RunRank(const std::string& scenario) {
  // Ranks may share GPUs (gtprun's one-GPU mode).
  const int local = std::atoi(std::getenv("LOCAL_RANK")) % std::max(1, CudaDeviceCount());
  GTP_CUDA_CHECK(cudaSetDevice(local));
  auto compute = Stream::Create(local);
  GTP_CHECK_OK(compute.status());
  NcclOptions o;
  o.timeout = absl::Seconds(scenario == "first_batches_unconnected" ? 15 : 60);
  auto world = CreateNcclWorldFromEnv(compute->get(), o);
  if (!world.ok()) {
    std::printf("RESULT %s\n", world.status().ToString().c_str());
    return 1;
  }
  CudaMemory mem;
  testing::ConformanceOptions co;
  co.memory = &mem;
  absl::Status st =
      scenario == "conformance"                 ? testing::RunConformance(**world, co)
      : scenario == "first_batches"             ? FirstBatchesDiffer(**world, true, compute->get())
      : scenario == "first_batches_unconnected" ? FirstBatchesDiffer(**world, false, compute->get())
      : scenario == "graph"                     ? CapturedAllReduce(**world, compute->get())
                                                : absl::InvalidArgumentError("unknown scenario");
  std::printf("RESULT %s\n", st.ToString().c_str());
  return st.ok() ? 0 : 1;
}

#define REQUIRE_GPUS(n)                                                        \
  do {                                                                         \
    if (CudaDeviceCount() == 0) GTEST_SKIP() << NoGpuReason();                 \
    if (CudaDeviceCount() < (n)) GTEST_SKIP() << "needs " << (n) << " GPUs";   \
  } while (0)

// An NCCL world of one rank on GPU 0 (the stream outlives the communicator).
struct OneRank {
  Stream compute;
  std::unique_ptr<Communicator> world;
};
absl::StatusOr<OneRank> OneRankWorld() {
  GTP_ASSIGN_OR_RETURN(Stream compute, Stream::Create(0));
  GTP_ASSIGN_OR_RETURN(auto world,
                       CreateNcclWorld(std::make_shared<InMemoryStore>(), 0, 1, 0, compute.get()));
  return OneRank{std::move(compute), std::move(world)};
}

TEST(NcclCommunicator, ConformanceOnOneRank) {
  REQUIRE_GPUS(1);
  auto one = OneRankWorld();
  ASSERT_TRUE(one.ok()) << one.status();
  auto& world = one->world;
  EXPECT_EQ(world->backend(), "nccl");
  CudaMemory mem;
  testing::ConformanceOptions o;
  o.memory = &mem;
  absl::Status st = testing::RunConformance(*world, o);
  EXPECT_TRUE(st.ok()) << st;
}

// Two NCCL processes: on one GPU, gtprun shares it (each rank its own NCCL
// host, socket transport on loopback); on two, one each.
#define REQUIRE_GTPRUN()                                                                    \
  do {                                                                                      \
    REQUIRE_GPUS(1);                                                                        \
    if (access(testing::GtprunPath().c_str(), X_OK) != 0) {                                 \
      GTEST_SKIP() << "gtprun not found (" << testing::GtprunPath()                         \
                   << "); bundle //tools/gtprun:gtprun beside this test or set GTPRUN";     \
    }                                                                                       \
  } while (0)

TEST(NcclCommunicator, ConformanceOnTwoProcesses) {
  REQUIRE_GTPRUN();
  auto r = testing::RunCommand({testing::GtprunPath(), "--nproc=2", "--", testing::SelfPath(),
                                "conformance"},
                               {{"NCCL_NVLS_ENABLE", "0"}});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("[rank 0] RESULT OK"));
  EXPECT_THAT(r.output, HasSubstr("[rank 1] RESULT OK"));
}

TEST(NcclCommunicator, PipelineShapedFirstBatchesAfterConnectPeers) {
  REQUIRE_GTPRUN();
  auto r = testing::RunCommand({testing::GtprunPath(), "--nproc=2", "--", testing::SelfPath(),
                                "first_batches"},
                               {{"NCCL_NVLS_ENABLE", "0"}}, absl::Seconds(120));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("[rank 0] RESULT OK"));
  EXPECT_THAT(r.output, HasSubstr("[rank 1] RESULT OK"));
}

TEST(NcclCommunicator, CapturedInCudaGraphOnTwoProcesses) {
  REQUIRE_GTPRUN();
  auto r = testing::RunCommand({testing::GtprunPath(), "--nproc=2", "--", testing::SelfPath(), "graph"},
                               {{"NCCL_NVLS_ENABLE", "0"}}, absl::Seconds(120));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("[rank 0] RESULT OK"));
  EXPECT_THAT(r.output, HasSubstr("[rank 1] RESULT OK"));
}

// The named primitive, on raw NCCL communicators (one thread per GPU).
TEST(ReduceScatterF32Accumulate, MatchesF32ReferenceRoundedOnce) {
  REQUIRE_GPUS(1);
  const int n = std::min(CudaDeviceCount(), 2);
  std::vector<int> devs(n);
  for (int i = 0; i < n; ++i) devs[i] = i;
  std::vector<ncclComm_t> comms(n);
  ASSERT_EQ(ncclCommInitAll(comms.data(), n, devs.data()), ncclSuccess);
  const int64_t count = 1001;
  // Rank r, element i: 1 + (i % 7) / 256 + r / 64, in bf16; sums need more
  // than bf16's 8 bits but are exact in f32.
  auto value = [](int r, int64_t i) { return 1.0f + (i % 7) / 256.0f + r / 64.0f; };
  std::vector<std::vector<uint16_t>> got(n, std::vector<uint16_t>(count));
  std::vector<std::thread> ts;
  for (int r = 0; r < n; ++r) {
    ts.emplace_back([&, r] {
      GTP_CUDA_CHECK(cudaSetDevice(r));
      std::vector<uint16_t> host(n * count);
      for (int64_t i = 0; i < n * count; ++i) host[i] = F32ToBF16Bits(value(r, i));
      void *send, *recv;
      GTP_CUDA_CHECK(cudaMalloc(&send, host.size() * 2));
      GTP_CUDA_CHECK(cudaMalloc(&recv, count * 2));
      GTP_CUDA_CHECK(cudaMemcpy(send, host.data(), host.size() * 2, cudaMemcpyHostToDevice));
      GTP_CHECK_OK(ReduceScatterF32Accumulate(comms[r], n, send, recv, count, DType::kBF16,
                                              ReduceOp::kMean, nullptr));
      GTP_CUDA_CHECK(cudaMemcpy(got[r].data(), recv, count * 2, cudaMemcpyDeviceToHost));
      cudaFree(send);
      cudaFree(recv);
    });
  }
  for (auto& t : ts) t.join();
  for (auto c : comms) ncclCommDestroy(c);
  for (int r = 0; r < n; ++r) {
    for (int64_t i = 0; i < count; ++i) {
      float sum = 0;
      for (int q = 0; q < n; ++q) sum += BF16BitsToF32(F32ToBF16Bits(value(q, r * count + i)));
      ASSERT_EQ(got[r][i], F32ToBF16Bits(sum / n)) << "rank " << r << " element " << i;
    }
  }
}

TEST(NcclFaults, RankThatNeverJoinsTimesOut) {
  REQUIRE_GPUS(1);
  auto compute = Stream::Create(0);
  ASSERT_TRUE(compute.ok());
  NcclOptions o;
  o.connect_timeout = absl::Seconds(2);
  absl::Time t0 = absl::Now();
  // A world of 2 where rank 1 never shows up.
  auto world = CreateNcclWorld(std::make_shared<InMemoryStore>(), 0, 2, 0, compute->get(), o);
  absl::Duration took = absl::Now() - t0;
  ASSERT_FALSE(world.ok());
  EXPECT_EQ(world.status().code(), absl::StatusCode::kDeadlineExceeded) << world.status();
  EXPECT_THAT(std::string(world.status().message()), HasSubstr("did not complete within 2s"));
  EXPECT_LT(took, absl::Seconds(10));
}

// A host scalar handed to the device communicator (the trainer once
// broadcast its loss that way: NCCL ran on a stack address) is refused by
// name before anything is enqueued.
TEST(NcclCommunicator, RefusesHostMemory) {
  REQUIRE_GPUS(1);
  auto one = OneRankWorld();
  ASSERT_TRUE(one.ok()) << one.status();
  auto& world = one->world;
  float x = 1.0f;
  auto w = world->Broadcast(&x, 1, DType::kF32, 0);
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(w.status().message()), HasSubstr("buf is host memory"));
  std::vector<float> v(4, 1.0f);
  auto r = world->AllReduce(v.data(), v.data(), 4, DType::kF32, ReduceOp::kSum);
  EXPECT_FALSE(r.ok());
  float* dev = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&dev), 16), cudaSuccess);
  auto ok = world->AllReduce(dev, dev, 4, DType::kF32, ReduceOp::kSum);
  EXPECT_TRUE(ok.ok()) << ok.status();
  if (ok.ok()) {
    EXPECT_TRUE((*ok)->Synchronize().ok());
  }
  cudaFree(dev);
}

TEST(NcclCommunicator, FailsCleanlyWithoutAGpu) {
  if (CudaDeviceCount() > 0) GTEST_SKIP() << "a GPU is visible";
  auto world = CreateNcclWorld(std::make_shared<InMemoryStore>(), 0, 1, 0, nullptr);
  ASSERT_FALSE(world.ok());
  EXPECT_EQ(world.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(world.status().message()), HasSubstr("no CUDA device"));
}

}  // namespace
}  // namespace gtp::comm

int main(int argc, char** argv) {
  if (gtp::comm::testing::IsRankProcess()) return gtp::comm::RunRank(argc > 1 ? argv[1] : "");
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
