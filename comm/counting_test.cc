// CountingCommunicator: exact byte counts per op kind over local ranks, the
// sub-communicators from Split count into the same counter, and the wrapped
// communicator still gives the conformance suite's results.
#include "comm/counting.h"

#include <memory>
#include <mutex>
#include <vector>

#include "comm/local/local_communicator.h"
#include "comm/testing/conformance.h"
#include "core/status.h"
#include "gtest/gtest.h"

namespace gtp::comm {
namespace {

TEST(CountingCommunicator, CountsTheBytesEachRankHandsToEveryOp) {
  constexpr int kRanks = 4;
  std::vector<std::shared_ptr<ByteCounter>> counters(kRanks);
  for (auto& c : counters) c = std::make_shared<ByteCounter>();
  absl::Status st = RunRanks(kRanks, [&](Communicator& w) -> absl::Status {
    CountingCommunicator c(&w, counters[w.rank()]);
    std::vector<float> f(4 * 10, 1.0f), g(4 * 10);
    std::vector<uint16_t> h(10);
    GTP_RETURN_IF_ERROR(comm::Run(c.AllGather(f.data(), g.data(), 10, DType::kF32)));        // 40 B
    GTP_RETURN_IF_ERROR(comm::Run(c.ReduceScatter(f.data(), g.data(), 10, DType::kF32, ReduceOp::kSum)));  // 160
    GTP_RETURN_IF_ERROR(comm::Run(c.AllReduce(f.data(), f.data(), 7, DType::kF32, ReduceOp::kSum)));       // 28
    GTP_RETURN_IF_ERROR(comm::Run(c.Broadcast(h.data(), 10, DType::kBF16, /*root=*/2)));      // 20 on rank 2
    GTP_RETURN_IF_ERROR(comm::Run(c.Barrier()));
    // A sub-communicator of ranks {0, 1} and {2, 3}: counted into the same counter.
    auto sub = c.Split({{0, 1}, {2, 3}}, "pair");
    if (!sub.ok()) return sub.status();
    GTP_RETURN_IF_ERROR(comm::Run((*sub)->AllGather(f.data(), g.data(), 5, DType::kF32)));    // +20
    return absl::OkStatus();
  });
  ASSERT_TRUE(st.ok()) << st;
  for (int r = 0; r < kRanks; ++r) {
    const ByteCounts b = counters[r]->Snapshot();
    EXPECT_EQ(b[OpKind::kAllGather], 40 + 20) << r;
    EXPECT_EQ(b[OpKind::kReduceScatter], 4 * 40) << r;
    EXPECT_EQ(b[OpKind::kAllReduce], 28) << r;
    EXPECT_EQ(b[OpKind::kBroadcast], r == 2 ? 20 : 0) << r;
    EXPECT_EQ(b.calls[static_cast<int>(OpKind::kBarrier)], 1) << r;
    EXPECT_EQ(b.calls[static_cast<int>(OpKind::kAllGather)], 2) << r;
  }
  counters[0]->Reset();
  EXPECT_EQ(counters[0]->Snapshot()[OpKind::kAllGather], 0);
}

TEST(CountingCommunicator, PassesTheConformanceSuite) {
  absl::Status st = RunRanks(3, [&](Communicator& w) -> absl::Status {
    CountingCommunicator c(&w, std::make_shared<ByteCounter>());
    return testing::RunConformance(c, {});
  });
  EXPECT_TRUE(st.ok()) << st;
}

}  // namespace
}  // namespace gtp::comm
