// NCCL backend tests. They need a GPU and skip (with the reason) without
// one; the multi-rank ones need 2 GPUs and run their ranks as processes
// through gtprun (this binary re-executed with RANK set).
#include <cuda_runtime_api.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
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

int RunRank(const std::string& scenario) {
  const int local = std::atoi(std::getenv("LOCAL_RANK"));
  GTP_CUDA_CHECK(cudaSetDevice(local));
  auto compute = Stream::Create(local);
  GTP_CHECK_OK(compute.status());
  NcclOptions o;
  o.timeout = absl::Seconds(60);
  auto world = CreateNcclWorldFromEnv(compute->get(), o);
  if (!world.ok()) {
    std::printf("RESULT %s\n", world.status().ToString().c_str());
    return 1;
  }
  CudaMemory mem;
  testing::ConformanceOptions co;
  co.memory = &mem;
  absl::Status st = scenario == "conformance" ? testing::RunConformance(**world, co)
                                              : absl::InvalidArgumentError("unknown scenario");
  std::printf("RESULT %s\n", st.ToString().c_str());
  return st.ok() ? 0 : 1;
}

#define REQUIRE_GPUS(n)                                                        \
  do {                                                                         \
    if (CudaDeviceCount() == 0) GTEST_SKIP() << NoGpuReason();                 \
    if (CudaDeviceCount() < (n)) GTEST_SKIP() << "needs " << (n) << " GPUs";   \
  } while (0)

TEST(NcclCommunicator, ConformanceOnOneRank) {
  REQUIRE_GPUS(1);
  auto compute = Stream::Create(0);
  ASSERT_TRUE(compute.ok()) << compute.status();
  auto world = CreateNcclWorld(std::make_shared<InMemoryStore>(), 0, 1, 0, compute->get());
  ASSERT_TRUE(world.ok()) << world.status();
  EXPECT_EQ((*world)->backend(), "nccl");
  CudaMemory mem;
  testing::ConformanceOptions o;
  o.memory = &mem;
  absl::Status st = testing::RunConformance(**world, o);
  EXPECT_TRUE(st.ok()) << st;
}

TEST(NcclCommunicator, ConformanceOnTwoProcesses) {
  REQUIRE_GPUS(2);
  if (access(testing::GtprunPath().c_str(), X_OK) != 0) {
    GTEST_SKIP() << "gtprun not found (" << testing::GtprunPath()
                 << "); bundle //tools/gtprun:gtprun beside this test or set GTPRUN";
  }
  auto r = testing::RunCommand({testing::GtprunPath(), "--nproc=2", "--", testing::SelfPath(),
                                "conformance"},
                               {{"NCCL_NVLS_ENABLE", "0"}});
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
