// ExposedComm on CUDA: a Wait only orders the compute stream, so the stall
// is measured with events on the device. The "communication" here is a
// kernel that spins d ms on a side stream; the compute stream is kept busy
// (or not) by another spinning kernel before the Wait.
#include <chrono>

#include "absl/status/status.h"
#include "comm/communicator.h"
#include "comm/exposed_comm.h"
#include "comm/testing/spin.h"
#include "core/cuda_runtime.h"
#include "gtest/gtest.h"

namespace gtp::comm {
namespace {

// A collective that takes `ms` on a side stream; Wait orders `compute` after it.
class SpinWork : public Work {
 public:
  SpinWork(cudaStream_t side, cudaStream_t compute, double ms) : compute_(compute) {
    GTP_CUDA_CHECK(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming));
    testing::Spin(side, ms);
    GTP_CUDA_CHECK(cudaEventRecord(done_, side));
  }
  ~SpinWork() override { cudaEventDestroy(done_); }
  absl::Status Wait(absl::Duration) override {
    GTP_CUDA_CHECK(cudaStreamWaitEvent(compute_, done_, 0));
    return absl::OkStatus();
  }
  bool Test() override { return cudaEventQuery(done_) == cudaSuccess; }

 private:
  cudaStream_t compute_;
  cudaEvent_t done_ = nullptr;
};

class ExposedCommGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (CudaDeviceCount() == 0) GTEST_SKIP() << NoGpuReason();
    GTP_CUDA_CHECK(cudaStreamCreateWithFlags(&compute_, cudaStreamNonBlocking));
    GTP_CUDA_CHECK(cudaStreamCreateWithFlags(&side_, cudaStreamNonBlocking));
  }
  void TearDown() override {
    if (compute_ != nullptr) cudaStreamDestroy(compute_);
    if (side_ != nullptr) cudaStreamDestroy(side_);
  }
  // ms of exposed communication for a collective of comm_ms while the compute
  // stream is busy for compute_ms before the Wait.
  double Exposed(int comm_ms, int compute_ms, int64_t* waits) {
    ExposedComm x;
    x.set_stream(compute_);
    if (compute_ms > 0) testing::Spin(compute_, compute_ms);
    SpinWork w(side_, compute_, comm_ms);
    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_TRUE(x.Wait(w, nullptr, "gather", "w").ok());
    // The Wait itself did not block the host for the communication.
    const double host_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_LT(host_ms, comm_ms / 2.0);
    GTP_CUDA_CHECK(cudaStreamSynchronize(compute_));
    *waits = x.waits();
    const double ms = x.ms();
    x.Reset();
    EXPECT_EQ(x.ms(), 0.0);
    return ms;
  }
  cudaStream_t compute_ = nullptr, side_ = nullptr;
};

TEST_F(ExposedCommGpu, AnIdleStreamWaitingCountsTheCommunication) {
  int64_t waits = 0;
  const double ms = Exposed(/*comm_ms=*/40, /*compute_ms=*/0, &waits);
  EXPECT_EQ(waits, 1);
  EXPECT_GT(ms, 30.0);
  EXPECT_LT(ms, 200.0);
}

TEST_F(ExposedCommGpu, CommunicationHiddenBehindComputeCountsAlmostNothing) {
  int64_t waits = 0;
  // The compute before the Wait (80 ms) outlasts the communication (20 ms).
  const double ms = Exposed(/*comm_ms=*/20, /*compute_ms=*/80, &waits);
  EXPECT_EQ(waits, 1);
  EXPECT_GE(ms, 0.0);
  EXPECT_LT(ms, 10.0);
}

TEST_F(ExposedCommGpu, PartlyHiddenCountsTheRest) {
  int64_t waits = 0;
  const double ms = Exposed(/*comm_ms=*/90, /*compute_ms=*/30, &waits);
  EXPECT_GT(ms, 40.0);  // ≈ 60 ms
  EXPECT_LT(ms, 85.0);
}

TEST_F(ExposedCommGpu, FinishedCommunicationIsNotAWait) {
  ExposedComm x;
  x.set_stream(compute_);
  SpinWork w(side_, compute_, 1.0);
  GTP_CUDA_CHECK(cudaStreamSynchronize(side_));
  ASSERT_TRUE(x.Wait(w, nullptr, "gather", "w").ok());
  EXPECT_EQ(x.waits(), 0);
  EXPECT_EQ(x.ms(), 0.0);
}

}  // namespace
}  // namespace gtp::comm
