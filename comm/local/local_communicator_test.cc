#include "comm/local/local_communicator.h"

#include <atomic>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "comm/internal/ops.h"
#include "comm/testing/conformance.h"
#include "core/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gtp::comm {
namespace {

using ::testing::HasSubstr;

// ---- conformance: every case x world sizes 1..8 ----------------------------------

struct Param {
  int world;
  std::string name;
};
void PrintTo(const Param& p, std::ostream* os) { *os << p.name << " on " << p.world << " ranks"; }

class LocalConformance : public ::testing::TestWithParam<Param> {};

TEST_P(LocalConformance, MatchesSequentialReference) {
  const Param& p = GetParam();
  const testing::ConformanceCase* c = nullptr;
  for (const auto& x : testing::ConformanceCases()) {
    if (x.name == p.name) c = &x;
  }
  ASSERT_NE(c, nullptr);
  testing::ConformanceOptions o;
  o.rank_order_reductions = true;
  // 1 MiB+ sizes on a few world sizes keep the suite fast on 2 cores.
  o.large = p.world == 1 || p.world == 3 || p.world == 8;
  LocalOptions lo;
  lo.timeout = absl::Seconds(60);
  absl::Status st = RunRanks(p.world, [&](Communicator& comm) { return c->run(comm, o); }, lo);
  EXPECT_TRUE(st.ok()) << st;
}

std::vector<Param> AllParams() {
  std::vector<Param> v;
  for (const auto& c : testing::ConformanceCases()) {
    for (int w = 1; w <= 8; ++w) v.push_back({w, c.name});
  }
  return v;
}

INSTANTIATE_TEST_SUITE_P(Cases, LocalConformance, ::testing::ValuesIn(AllParams()),
                         [](const ::testing::TestParamInfo<Param>& info) {
                           return absl::StrCat(info.param.name, "_W", info.param.world);
                         });

// ---- behaviour -------------------------------------------------------------------

LocalOptions Short(absl::Duration t = absl::Milliseconds(300)) {
  LocalOptions o;
  o.timeout = t;
  return o;
}

// By tag (the contract) a receive gets the send with its tag; with
// p2p_pair_by_order (NCCL's rule) it pairs with the sender's next message,
// and a tag that differs fails both sides by name (over NCCL it would land
// in the wrong buffer). Rank 0 sends tag 1 then tag 2; rank 1 receives tag
// 2 first.
TEST(LocalCommunicator, PairsPointToPointByTagOrByOrder) {
  for (bool by_order : {false, true}) {
    LocalOptions o;
    o.p2p_pair_by_order = by_order;
    o.timeout = absl::Seconds(5);
    float got_first = 0, got_second = 0;
    absl::Status st = RunRanks(
        2,
        [&](Communicator& c) -> absl::Status {
          if (c.rank() == 0) {
            float a = 1.0f, b = 2.0f;
            GTP_ASSIGN_OR_RETURN(WorkPtr w1, c.Send(&a, 1, DType::kF32, 1, /*tag=*/1));
            GTP_ASSIGN_OR_RETURN(WorkPtr w2, c.Send(&b, 1, DType::kF32, 1, /*tag=*/2));
            GTP_RETURN_IF_ERROR(w1->Wait());
            return w2->Wait();
          }
          GTP_RETURN_IF_ERROR(comm::Run(c.Recv(&got_first, 1, DType::kF32, 0, /*tag=*/2)));
          return comm::Run(c.Recv(&got_second, 1, DType::kF32, 0, /*tag=*/1));
        },
        o);
    if (by_order) {
      EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
      EXPECT_NE(st.message().find("tag 1"), std::string::npos) << st;
      EXPECT_NE(st.message().find("has tag 2"), std::string::npos) << st;
      continue;
    }
    ASSERT_TRUE(st.ok()) << st;
    EXPECT_EQ(got_first, 2.0f);
    EXPECT_EQ(got_second, 1.0f);
  }
}

// The conformance send/recv case posts by order where the backend pairs by
// order (p2p_pairs_by_tag false): it must pass both ways.
TEST(LocalCommunicator, SendRecvConformanceUnderPairByOrder) {
  const testing::ConformanceCase* c = nullptr;
  for (const auto& x : testing::ConformanceCases()) {
    if (x.name == "SendRecv") c = &x;
  }
  ASSERT_NE(c, nullptr);
  LocalOptions lo;
  lo.timeout = absl::Seconds(60);
  lo.p2p_pair_by_order = true;
  for (int world : {2, 3}) {
    absl::Status st = RunRanks(
        world,
        [&](Communicator& comm) -> absl::Status {
          if (comm.p2p_pairs_by_tag()) return absl::InternalError("pairs by tag");
          return c->run(comm, testing::ConformanceOptions{});
        },
        lo);
    EXPECT_TRUE(st.ok()) << "world " << world << ": " << st;
  }
}

TEST(LocalCommunicator, ReportsIdentity) {
  auto comms = CreateLocalWorld(3, Short());
  ASSERT_EQ(comms.size(), 3u);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(comms[r]->rank(), r);
    EXPECT_EQ(comms[r]->size(), 3);
    EXPECT_EQ(comms[r]->name(), "world");
    EXPECT_EQ(comms[r]->backend(), "local");
    EXPECT_EQ(comms[r]->timeout(), absl::Milliseconds(300));
  }
}

TEST(LocalCommunicator, ProgressDoesNotNeedWait) {
  // Rank 0 issues the all-reduce, then blocks on a recv that rank 1 sends
  // only after its own all-reduce completed: needs progress without Wait.
  absl::Status st = RunRanks(2, [](Communicator& c) -> absl::Status {
    float x = 1.0f + c.rank(), y = 0;
    GTP_ASSIGN_OR_RETURN(WorkPtr ar, c.AllReduce(&x, &y, 1, DType::kF32, ReduceOp::kSum));
    if (c.rank() == 0) {
      float got = 0;
      GTP_RETURN_IF_ERROR(comm::Run(c.Recv(&got, 1, DType::kF32, 1, 0)));
      if (got != 3.0f) return absl::InternalError(absl::StrCat("recv got ", got));
      return ar->Wait();
    }
    GTP_RETURN_IF_ERROR(ar->Wait());
    return comm::Run(c.Send(&y, 1, DType::kF32, 0, 0));
  }, Short(absl::Seconds(10)));
  EXPECT_TRUE(st.ok()) << st;
}

TEST(LocalCommunicator, TestTurnsTrueWhenAllArrive) {
  auto comms = CreateLocalWorld(2, Short(absl::Seconds(5)));
  float a = 1, b = 2, ra = 0, rb = 0;
  auto w0 = comms[0]->AllReduce(&a, &ra, 1, DType::kF32, ReduceOp::kSum);
  ASSERT_TRUE(w0.ok());
  EXPECT_FALSE((*w0)->Test());
  auto w1 = comms[1]->AllReduce(&b, &rb, 1, DType::kF32, ReduceOp::kSum);
  ASSERT_TRUE(w1.ok());
  // The communication thread completes it without anyone waiting.
  absl::Time deadline = absl::Now() + absl::Seconds(5);
  while (!(*w0)->Test() && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(1));
  EXPECT_TRUE((*w0)->Test());
  EXPECT_EQ(ra, 3.0f);
  EXPECT_TRUE((*w1)->Wait().ok());
  EXPECT_TRUE((*w1)->Test());
  EXPECT_EQ(rb, 3.0f);
}

TEST(LocalCommunicator, WorksOutliveTheirWorldWithoutHanging) {
  // Ops started on every rank, communicators destroyed before anyone
  // waited: the works still complete (and the communication thread exits
  // when the last of them is dropped).
  std::vector<float> in(1 << 16, 1.0f), out0(1 << 16), out1(1 << 16);
  std::vector<WorkPtr> works;
  {
    auto comms = CreateLocalWorld(2, Short(absl::Seconds(5)));
    auto w0 = comms[0]->AllReduce(in.data(), out0.data(), in.size(), DType::kF32, ReduceOp::kSum);
    auto w1 = comms[1]->AllReduce(in.data(), out1.data(), in.size(), DType::kF32, ReduceOp::kSum);
    float s = 0, r = 0;
    auto ws = comms[0]->Send(&s, 1, DType::kF32, 1, 0);
    auto wr = comms[1]->Recv(&r, 1, DType::kF32, 0, 0);
    ASSERT_TRUE(w0.ok() && w1.ok() && ws.ok() && wr.ok());
    works.push_back(std::move(*w0));
    works.push_back(std::move(*w1));
    works.push_back(std::move(*ws));
    works.push_back(std::move(*wr));
  }  // Depart waits for the queued copies that use the departing rank's buffers
  for (auto& w : works) EXPECT_TRUE(w->Wait().ok());
  EXPECT_EQ(out0[12345], 2.0f);
  EXPECT_EQ(out1[0], 2.0f);
  works.clear();
}

TEST(LocalCommunicator, OpsCompleteOutOfWaitOrder) {
  // Several collectives in flight on two sub-groups, waited in reverse.
  absl::Status st = RunRanks(4, [](Communicator& c) -> absl::Status {
    GTP_ASSIGN_OR_RETURN(auto sub, c.Split({{0, 1}, {2, 3}}, "pair"));
    std::vector<float> x(8, 1.0f + c.rank()), y(8 * 4), z(8);
    GTP_ASSIGN_OR_RETURN(WorkPtr a, c.AllGather(x.data(), y.data(), 8, DType::kF32));
    GTP_ASSIGN_OR_RETURN(WorkPtr b, sub->AllReduce(x.data(), z.data(), 8, DType::kF32, ReduceOp::kSum));
    GTP_ASSIGN_OR_RETURN(WorkPtr d, c.Barrier());
    GTP_RETURN_IF_ERROR(d->Wait());
    GTP_RETURN_IF_ERROR(b->Wait());
    GTP_RETURN_IF_ERROR(a->Wait());
    const float pair_sum = c.rank() < 2 ? 3.0f : 7.0f;
    if (z[7] != pair_sum || y[8 * 3] != 4.0f) {
      return absl::InternalError(absl::StrCat("got ", z[7], ", ", y[8 * 3]));
    }
    return absl::OkStatus();
  }, Short(absl::Seconds(10)));
  EXPECT_TRUE(st.ok()) << st;
}

TEST(LocalCommunicator, RejectsBadArgumentsAtTheCall) {
  auto comms = CreateLocalWorld(2, Short());
  float x[8] = {};
  auto bad = [](absl::StatusOr<WorkPtr> w) { return w.status(); };
  EXPECT_EQ(bad(comms[0]->AllGather(x, x, -1, DType::kF32)).code(),
            absl::StatusCode::kInvalidArgument);
  absl::Status fp8 = bad(comms[0]->AllReduce(x, x, 2, DType::kF8E4M3, ReduceOp::kSum));
  EXPECT_EQ(fp8.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(fp8.message()), HasSubstr("cannot be reduced"));
  EXPECT_EQ(bad(comms[0]->Broadcast(x, 1, DType::kF32, 2)).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad(comms[0]->Send(x, 1, DType::kF32, -1)).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad(comms[0]->Recv(x, 1, DType::kF32, 1, 1 << 24)).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad(comms[0]->AllToAll(x, x + 1, 2, DType::kF32)).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad(comms[0]->AllToAllV(x, {1}, {0, 0}, x + 4, {1, 1}, {0, 1}, DType::kF32)).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(comms[0]->Split({{0, 0}}, "dup").status().code(), absl::StatusCode::kInvalidArgument);
}

// Runs `fn` on 2..n ranks and expects every rank to fail with `code` and a
// message containing each of `parts`.
void ExpectAllRanksFail(int n, const std::function<absl::Status(Communicator&)>& fn,
                        absl::StatusCode code, const std::vector<std::string>& parts,
                        absl::Duration timeout = absl::Milliseconds(500)) {
  std::vector<absl::Status> results(n);
  absl::Status all = RunRanks(n, [&](Communicator& c) {
    results[c.rank()] = fn(c);
    return absl::OkStatus();
  }, Short(timeout));
  ASSERT_TRUE(all.ok()) << all;
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(results[r].code(), code) << "rank " << r << ": " << results[r];
    for (const auto& p : parts) {
      EXPECT_THAT(std::string(results[r].message()), HasSubstr(p)) << "rank " << r;
    }
  }
}

TEST(LocalCommunicator, MismatchedCountFailsEveryRank) {
  ExpectAllRanksFail(3, [](Communicator& c) {
    std::vector<float> s(8, 1.0f), r(8);
    return comm::Run(c.AllReduce(s.data(), r.data(), c.rank() == 1 ? 5 : 4, DType::kF32, ReduceOp::kSum));
  }, absl::StatusCode::kInvalidArgument, {"group world", "differs across ranks", "count"});
}

TEST(LocalCommunicator, MismatchedOpFailsEveryRank) {
  ExpectAllRanksFail(2, [](Communicator& c) {
    std::vector<float> s(8, 1.0f), r(8);
    if (c.rank() == 0) return comm::Run(c.AllGather(s.data(), r.data(), 2, DType::kF32));
    return comm::Run(c.AllReduce(s.data(), r.data(), 2, DType::kF32, ReduceOp::kSum));
  }, absl::StatusCode::kInvalidArgument, {"all_gather", "all_reduce"});
}

TEST(LocalCommunicator, MismatchedDtypeAndReduceOpFail) {
  ExpectAllRanksFail(2, [](Communicator& c) {
    std::vector<float> s(8, 1.0f), r(8);
    return comm::Run(c.ReduceScatter(s.data(), r.data(), 2, c.rank() ? DType::kBF16 : DType::kF32,
                               ReduceOp::kSum));
  }, absl::StatusCode::kInvalidArgument, {"dtype"});
  ExpectAllRanksFail(2, [](Communicator& c) {
    std::vector<float> s(8, 1.0f), r(8);
    return comm::Run(c.AllReduce(s.data(), r.data(), 2, DType::kF32,
                           c.rank() ? ReduceOp::kMax : ReduceOp::kSum));
  }, absl::StatusCode::kInvalidArgument, {"reduce op"});
}

TEST(LocalCommunicator, MismatchedAllToAllVCountsFail) {
  ExpectAllRanksFail(2, [](Communicator& c) {
    std::vector<float> s(8, 1.0f), r(8);
    std::vector<int64_t> sc = {1, c.rank() == 0 ? 2 : 1}, d = {0, 4}, rc = {1, 1};
    return comm::Run(c.AllToAllV(s.data(), sc, d, r.data(), rc, d, DType::kF32));
  }, absl::StatusCode::kInvalidArgument, {"rank 0 sends 2 elements to rank 1", "expects 1"});
}

TEST(LocalCommunicator, MismatchedSendRecvFails) {
  ExpectAllRanksFail(2, [](Communicator& c) {
    std::vector<float> b(8, 1.0f);
    if (c.rank() == 0) return comm::Run(c.Send(b.data(), 3, DType::kF32, 1, 4));
    return comm::Run(c.Recv(b.data(), 4, DType::kF32, 0, 4));
  }, absl::StatusCode::kInvalidArgument, {"count=3", "count=4"});
}

TEST(LocalCommunicator, MismatchedSplitFails) {
  ExpectAllRanksFail(2, [](Communicator& c) {
    return c.Split(c.rank() == 0 ? std::vector<std::vector<int>>{{0, 1}}
                                 : std::vector<std::vector<int>>{{1, 0}},
                   "g").status();
  }, absl::StatusCode::kInvalidArgument, {"split"});
}

// ---- faults: bounded time, clear message -------------------------------------------

TEST(LocalFaults, RankThatNeverJoinsTimesOutNamingIt) {
  // Ranks 0 and 1 all-reduce; rank 2 never calls it (but stays alive).
  std::vector<absl::Status> results(3);
  std::vector<absl::Duration> took(3);
  std::atomic<bool> release{false};
  absl::Status all = RunRanks(3, [&](Communicator& c) {
    if (c.rank() == 2) {
      while (!release) absl::SleepFor(absl::Milliseconds(5));
      return absl::OkStatus();
    }
    float x = 1, y = 0;
    absl::Time t0 = absl::Now();
    results[c.rank()] = comm::Run(c.AllReduce(&x, &y, 1, DType::kF32, ReduceOp::kSum));
    took[c.rank()] = absl::Now() - t0;
    if (c.rank() == 0) release = true;
    return absl::OkStatus();
  }, Short(absl::Milliseconds(400)));
  ASSERT_TRUE(all.ok()) << all;
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(results[r].code(), absl::StatusCode::kDeadlineExceeded) << results[r];
    EXPECT_THAT(std::string(results[r].message()), HasSubstr("group world"));
    EXPECT_THAT(std::string(results[r].message()), HasSubstr("all_reduce"));
    EXPECT_THAT(std::string(results[r].message()), HasSubstr("rank(s) [2]"));
    EXPECT_GE(took[r], absl::Milliseconds(350));
    EXPECT_LT(took[r], absl::Seconds(3));
  }
}

TEST(LocalFaults, RankThatExitsMidCollectiveFailsPeersPromptly) {
  // Rank 1 issues the all-gather, then exits without waiting (its
  // communicator is destroyed): rank 0, arriving later, must fail at once.
  std::vector<absl::Status> results(3);
  absl::Duration took;
  absl::Status all = RunRanks(3, [&](Communicator& c) -> absl::Status {
    std::vector<float> s(4, 1.0f), r(12);
    if (c.rank() == 1) {
      auto w = c.AllGather(s.data(), r.data(), 4, DType::kF32);
      return absl::AbortedError("rank 1 crashed");
    }
    if (c.rank() == 0) absl::SleepFor(absl::Milliseconds(100));
    absl::Time t0 = absl::Now();
    results[c.rank()] = comm::Run(c.AllGather(s.data(), r.data(), 4, DType::kF32));
    if (c.rank() == 0) took = absl::Now() - t0;
    return absl::OkStatus();
  }, Short(absl::Seconds(20)));
  EXPECT_EQ(all.code(), absl::StatusCode::kAborted);
  EXPECT_THAT(std::string(all.message()), HasSubstr("rank 1: ABORTED: rank 1 crashed"));
  for (int r : {0, 2}) {
    EXPECT_EQ(results[r].code(), absl::StatusCode::kUnavailable) << results[r];
    EXPECT_THAT(std::string(results[r].message()), HasSubstr("rank 1"));
    EXPECT_THAT(std::string(results[r].message()), HasSubstr("group world"));
  }
  EXPECT_LT(took, absl::Seconds(2));  // far below the 20 s timeout
}

TEST(LocalFaults, UnmatchedRecvTimesOutNamingPeer) {
  std::vector<absl::Status> results(2);
  absl::Status all = RunRanks(2, [&](Communicator& c) {
    float x = 0;
    if (c.rank() == 0) results[0] = comm::Run(c.Recv(&x, 1, DType::kF32, 1, 7));
    else absl::SleepFor(absl::Milliseconds(400));
    return absl::OkStatus();
  }, Short(absl::Milliseconds(200)));
  ASSERT_TRUE(all.ok()) << all;
  EXPECT_EQ(results[0].code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(std::string(results[0].message()), HasSubstr("recv"));
  EXPECT_THAT(std::string(results[0].message()), HasSubstr("rank 1"));
  EXPECT_THAT(std::string(results[0].message()), HasSubstr("tag=7"));
}

TEST(LocalFaults, CommunicatorUnusableAfterError) {
  auto comms = CreateLocalWorld(2, Short(absl::Milliseconds(100)));
  float x = 1, y = 0;
  auto w = comms[0]->AllReduce(&x, &y, 1, DType::kF32, ReduceOp::kSum);
  ASSERT_TRUE(w.ok());
  EXPECT_EQ((*w)->Wait().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(comms[1]->Barrier().status().code(), absl::StatusCode::kDeadlineExceeded);
}

}  // namespace
}  // namespace gtp::comm

namespace gtp::comm {
namespace {

// One line per distinct error with its ranks folded in (the same message
// used to be repeated once per rank).
TEST(RunRanks, FoldsTheRanksOfOneError) {
  absl::Status st = RunRanks(6, [](Communicator& c) -> absl::Status {
    if (c.rank() == 4) return absl::InvalidArgumentError("bad setting x");
    if (c.rank() == 5) return absl::OkStatus();
    return absl::FailedPreconditionError("same on every rank");
  });
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(st.message(),
            "ranks 0-3: FAILED_PRECONDITION: same on every rank; rank 4: INVALID_ARGUMENT: bad setting x");
  EXPECT_EQ(internal::RankList({0, 1, 3, 5, 6, 7}), "ranks 0, 1, 3, 5-7");
  EXPECT_EQ(internal::RankList({2}), "rank 2");
}

}  // namespace
}  // namespace gtp::comm
