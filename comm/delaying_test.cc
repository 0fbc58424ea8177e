// DelayingCommunicator: an op's Wait returns no earlier than its start plus
// the delay, ops in flight together overlap (≈ d, not n·d), sub-communicators
// from Split are delayed too, and results are the inner backend's.
#include "comm/delaying.h"

#include <cstdio>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "comm/local/local_communicator.h"
#include "comm/testing/conformance.h"
#include "core/status.h"
#include "gtest/gtest.h"

namespace gtp::comm {
namespace {

constexpr absl::Duration kDelay = absl::Milliseconds(60);

TEST(DelayingCommunicator, WaitReturnsNoEarlierThanStartPlusDelay) {
  std::vector<absl::Duration> took(2);
  std::vector<bool> early_test(2);
  absl::Status st = RunRanks(2, [&](Communicator& w) -> absl::Status {
    DelayingCommunicator c(&w, kDelay);
    float x = 1.0f + w.rank(), y = 0;
    const absl::Time t0 = absl::Now();
    GTP_ASSIGN_OR_RETURN(WorkPtr work, c.AllReduce(&x, &y, 1, DType::kF32, ReduceOp::kSum));
    early_test[w.rank()] = work->Test();  // right after the start: not yet
    GTP_RETURN_IF_ERROR(work->Wait());
    took[w.rank()] = absl::Now() - t0;
    if (y != 3.0f) return absl::InternalError(absl::StrCat("got ", y));
    if (!work->Test()) return absl::InternalError("Test false after Wait");
    return absl::OkStatus();
  });
  ASSERT_TRUE(st.ok()) << st;
  for (int r = 0; r < 2; ++r) {
    std::printf("rank %d: one op with delay %s waited %s after its start\n", r,
                absl::FormatDuration(kDelay).c_str(), absl::FormatDuration(took[r]).c_str());
    EXPECT_FALSE(early_test[r]);
    EXPECT_GE(took[r], kDelay);
  }
}

TEST(DelayingCommunicator, OpsInFlightTogetherOverlap) {
  constexpr int kOps = 4;
  std::vector<absl::Duration> took(2);
  absl::Status st = RunRanks(2, [&](Communicator& w) -> absl::Status {
    DelayingCommunicator c(&w, kDelay);
    std::vector<float> x(16, 1.0f), g(32), y(16);
    const absl::Time t0 = absl::Now();
    std::vector<WorkPtr> works;
    GTP_ASSIGN_OR_RETURN(works.emplace_back(), c.AllGather(x.data(), g.data(), 16, DType::kF32));
    GTP_ASSIGN_OR_RETURN(works.emplace_back(),
                         c.ReduceScatter(g.data(), y.data(), 8, DType::kF32, ReduceOp::kSum));
    GTP_ASSIGN_OR_RETURN(works.emplace_back(),
                         c.AllReduce(x.data(), x.data(), 16, DType::kF32, ReduceOp::kSum));
    GTP_ASSIGN_OR_RETURN(works.emplace_back(), c.Barrier());
    for (auto& wk : works) GTP_RETURN_IF_ERROR(wk->Wait());
    took[w.rank()] = absl::Now() - t0;
    return absl::OkStatus();
  });
  ASSERT_TRUE(st.ok()) << st;
  for (int r = 0; r < 2; ++r) {
    std::printf("rank %d: %d ops started together finished in %s (delay %s each)\n", r, kOps,
                absl::FormatDuration(took[r]).c_str(), absl::FormatDuration(kDelay).c_str());
    EXPECT_GE(took[r], kDelay);
    EXPECT_LT(took[r], 2 * kDelay) << "serialised delays would take " << kOps * kDelay;
  }
}

TEST(DelayingCommunicator, SubCommunicatorsFromSplitAreDelayed) {
  std::vector<absl::Duration> took(4);
  absl::Status st = RunRanks(4, [&](Communicator& w) -> absl::Status {
    DelayingCommunicator c(&w, kDelay);
    GTP_ASSIGN_OR_RETURN(auto sub, c.Split({{0, 1}, {3, 2}}, "pair"));
    if (sub == nullptr || sub->size() != 2) return absl::InternalError("bad split");
    float x = 1.0f + w.rank(), y = 0;
    const absl::Time t0 = absl::Now();
    GTP_RETURN_IF_ERROR(comm::Run(sub->AllReduce(&x, &y, 1, DType::kF32, ReduceOp::kSum)));
    took[w.rank()] = absl::Now() - t0;
    const float want = w.rank() < 2 ? 3.0f : 7.0f;
    if (y != want) return absl::InternalError(absl::StrCat("got ", y, ", want ", want));
    return absl::OkStatus();
  });
  ASSERT_TRUE(st.ok()) << st;
  for (int r = 0; r < 4; ++r) EXPECT_GE(took[r], kDelay) << r;
}

TEST(DelayingCommunicator, SetDelayReachesSubCommunicators) {
  absl::Status st = RunRanks(2, [&](Communicator& w) -> absl::Status {
    DelayingCommunicator c(&w, kDelay);
    GTP_ASSIGN_OR_RETURN(auto sub, c.Split({{1, 0}}, "rev"));
    c.set_delay(absl::Milliseconds(7));
    auto& d = static_cast<DelayingCommunicator&>(*sub);
    if (d.delay() != absl::Milliseconds(7) || c.delay() != absl::Milliseconds(7)) {
      return absl::InternalError(absl::StrCat("delay ", absl::FormatDuration(d.delay())));
    }
    return absl::OkStatus();
  });
  EXPECT_TRUE(st.ok()) << st;
}

TEST(DelayingCommunicator, PassesTheConformanceSuite) {
  absl::Status st = RunRanks(3, [&](Communicator& w) -> absl::Status {
    DelayingCommunicator c(&w, absl::Microseconds(200));
    testing::ConformanceOptions o;
    o.large = false;
    return testing::RunConformance(c, o);
  });
  EXPECT_TRUE(st.ok()) << st;
}

}  // namespace
}  // namespace gtp::comm
