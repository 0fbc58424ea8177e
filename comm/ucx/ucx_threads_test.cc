// UCX worlds whose ranks are threads of this process (one UCP worker each,
// sharing an InMemoryStore). The multi-process tests are in
// ucx_multiprocess_test.cc.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "comm/testing/conformance.h"
#include "comm/ucx/ucx_communicator.h"
#include "core/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gtp::comm {
namespace {

using ::testing::HasSubstr;

// Runs fn on `n` threads, each with its rank's UCX world communicator.
std::vector<absl::Status> RunUcxThreads(int n, const std::function<absl::Status(Communicator&)>& fn,
                                        absl::Duration timeout = absl::Seconds(60),
                                        bool shared_memory = false, int lanes = 0) {
  static int world_id = 0;  // distinct store prefixes per world
  auto store = std::make_shared<InMemoryStore>();
  UcxOptions o;
  o.timeout = timeout;
  o.connect_timeout = absl::Seconds(20);
  o.store_prefix = absl::StrCat("w", world_id++);
  o.shared_memory = shared_memory;
  o.lanes = lanes;
  std::vector<absl::Status> results(n);
  std::vector<std::thread> ts;
  for (int r = 0; r < n; ++r) {
    ts.emplace_back([&, r] {
      auto world = CreateUcxWorld(store, r, n, o);
      if (!world.ok()) {
        results[r] = world.status();
        return;
      }
      results[r] = fn(**world);
    });
  }
  for (auto& t : ts) t.join();
  return results;
}

class UcxThreadsConformance : public ::testing::TestWithParam<int> {};

TEST_P(UcxThreadsConformance, AllCases) {
  testing::ConformanceOptions o;
  o.large = GetParam() == 3;
  auto results = RunUcxThreads(GetParam(), [&](Communicator& c) {
    return testing::RunConformance(c, o);
  });
  for (size_t r = 0; r < results.size(); ++r) EXPECT_TRUE(results[r].ok()) << "rank " << r << ": " << results[r];
}

INSTANTIATE_TEST_SUITE_P(World, UcxThreadsConformance, ::testing::Values(1, 2, 3, 4));

// The shared-memory data endpoints (UcxOptions::shared_memory) give the same
// results.
TEST(UcxThreadsSharedMemory, ConformanceHolds) {
  for (int n : {2, 3}) {
    SCOPED_TRACE(n);
    testing::ConformanceOptions o;
    o.large = n == 3;
    auto results = RunUcxThreads(
        n, [&](Communicator& c) { return testing::RunConformance(c, o); }, absl::Seconds(60),
        /*shared_memory=*/true);
    for (size_t r = 0; r < results.size(); ++r) {
      EXPECT_TRUE(results[r].ok()) << "rank " << r << ": " << results[r];
    }
  }
}

// Reductions big enough for many pieces per ring step (more than the
// piece-buffer window, odd tails): every element lands where it belongs.
// Small integers, so any summation order is exact; bf16 checks the widened
// partials. Shared memory on and off.
absl::Status CheckPipelinedReductions(Communicator& c) {
  const int n = c.size(), me = c.rank();
  for (DType dt : {DType::kF32, DType::kBF16}) {
    const int64_t count = (int64_t{9} << 20) / 4 + 333;  // per rank: 9 MiB of f32 partials
    const size_t es = SizeOf(dt);
    auto value = [](int rank, int64_t i) { return static_cast<float>((i * 7 + rank * 3) % 61); };
    auto put = [&](std::vector<char>& buf, int64_t i, float v) {
      if (dt == DType::kF32) {
        std::memcpy(buf.data() + i * 4, &v, 4);
      } else {
        uint16_t b = F32ToBF16Bits(v);
        std::memcpy(buf.data() + i * 2, &b, 2);
      }
    };
    auto get = [&](const std::vector<char>& buf, int64_t i) {
      if (dt == DType::kF32) {
        float v;
        std::memcpy(&v, buf.data() + i * 4, 4);
        return v;
      }
      uint16_t b;
      std::memcpy(&b, buf.data() + i * 2, 2);
      return BF16BitsToF32(b);
    };
    std::vector<char> send(n * count * es), out(count * es);
    for (int64_t i = 0; i < n * count; ++i) put(send, i, value(me, i));
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
      GTP_RETURN_IF_ERROR(Run(c.ReduceScatter(send.data(), out.data(), count, dt, op)));
      for (int64_t i = 0; i < count; ++i) {
        const int64_t g = me * count + i;
        float want = value(0, g);
        for (int r = 1; r < n; ++r) {
          want = op == ReduceOp::kSum ? want + value(r, g) : std::max(want, value(r, g));
        }
        if (get(out, i) != want) {
          return absl::InternalError(absl::StrCat(DTypeName(dt), " ", ReduceOpName(op),
                                                  " reduce_scatter: element ", i, " is ",
                                                  get(out, i), ", want ", want));
        }
      }
    }
    std::vector<char> all = send;  // in place
    GTP_RETURN_IF_ERROR(Run(c.AllReduce(all.data(), all.data(), n * count, dt, ReduceOp::kSum)));
    for (int64_t i = 0; i < n * count; ++i) {
      float want = 0;
      for (int r = 0; r < n; ++r) want += value(r, i);
      if (get(all, i) != want) {
        return absl::InternalError(absl::StrCat(DTypeName(dt), " all_reduce: element ", i, " is ",
                                                get(all, i), ", want ", want));
      }
    }
  }
  return absl::OkStatus();
}

// Large calls cut across lanes (UcxOptions::lanes) give the same bits as one
// lane: random f32 (where summation order shows), odd counts, in place and
// not; and the conformance suite holds with three lanes.
TEST(UcxThreadsLanes, SameBitsWhateverTheLanes) {
  const int n = 3;
  const int64_t count = (int64_t{3} << 20) / 4 + 37;  // per rank; 3 lanes of >= 512 KiB each
  auto input = [&](int rank, int64_t len) {
    std::vector<float> v(len);
    uint64_t x = 0x9e3779b97f4a7c15ull * (rank + 1);
    for (float& f : v) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      f = static_cast<float>(static_cast<int64_t>(x % 2000001) - 1000000) * 1.37e-3f;
    }
    return v;
  };
  // outputs[lanes][rank]: reduce-scatter, in-place reduce-scatter, all-reduce, all-gather.
  std::vector<std::vector<std::vector<float>>> outputs(2, std::vector<std::vector<float>>(n));
  for (int which : {0, 1}) {
    auto results = RunUcxThreads(
        n,
        [&](Communicator& c) -> absl::Status {
          std::vector<float>& got = outputs[which][c.rank()];
          std::vector<float> in = input(c.rank(), n * count), rs(count);
          GTP_RETURN_IF_ERROR(comm::Run(c.ReduceScatter(in.data(), rs.data(), count, DType::kF32,
                                                  ReduceOp::kSum)));
          got.insert(got.end(), rs.begin(), rs.end());
          std::vector<float> ip = in;
          GTP_RETURN_IF_ERROR(comm::Run(c.ReduceScatter(ip.data(), ip.data() + c.rank() * count, count,
                                                  DType::kF32, ReduceOp::kMean)));
          got.insert(got.end(), ip.begin() + c.rank() * count, ip.begin() + (c.rank() + 1) * count);
          std::vector<float> ar = in;
          GTP_RETURN_IF_ERROR(
              comm::Run(c.AllReduce(ar.data(), ar.data(), n * count, DType::kF32, ReduceOp::kSum)));
          got.insert(got.end(), ar.begin(), ar.end());
          std::vector<float> ag(n * count);
          GTP_RETURN_IF_ERROR(comm::Run(c.AllGather(in.data(), ag.data(), count, DType::kF32)));
          got.insert(got.end(), ag.begin(), ag.end());
          return absl::OkStatus();
        },
        absl::Seconds(60), false, which == 0 ? 1 : 3);
    for (int r = 0; r < n; ++r) ASSERT_TRUE(results[r].ok()) << "rank " << r << ": " << results[r];
  }
  for (int r = 0; r < n; ++r) {
    ASSERT_EQ(outputs[0][r].size(), outputs[1][r].size());
    int64_t differ = 0;
    for (size_t i = 0; i < outputs[0][r].size(); ++i) {
      differ += std::memcmp(&outputs[0][r][i], &outputs[1][r][i], 4) != 0;
    }
    EXPECT_EQ(differ, 0) << "rank " << r << ": elements that differ between 1 and 3 lanes";
  }
  // The reduce-scatter really is the sum (a reference in double, loose).
  std::vector<float> a = input(0, n * count), b = input(1, n * count), c = input(2, n * count);
  for (int64_t i = 0; i < count; i += 4099) {
    const double want = double(a[i]) + b[i] + c[i];
    EXPECT_NEAR(outputs[1][0][i], want, 1e-3) << i;
  }
  testing::ConformanceOptions o;
  o.large = true;
  auto results = RunUcxThreads(
      n, [&](Communicator& c) { return testing::RunConformance(c, o); }, absl::Seconds(60), false, 3);
  for (int r = 0; r < n; ++r) EXPECT_TRUE(results[r].ok()) << "rank " << r << ": " << results[r];
}

TEST(UcxThreads, PipelinedReductionsAreExact) {
  for (bool shm : {false, true}) {
    for (int n : {2, 3}) {
      SCOPED_TRACE(absl::StrCat("n=", n, " shared_memory=", shm));
      auto results = RunUcxThreads(n, CheckPipelinedReductions, absl::Seconds(60), shm);
      for (size_t r = 0; r < results.size(); ++r) {
        EXPECT_TRUE(results[r].ok()) << "rank " << r << ": " << results[r];
      }
    }
  }
}

// Every rank fails with `code` and a message holding each of `parts`.
void ExpectAll(const std::vector<absl::Status>& results, absl::StatusCode code,
               const std::vector<std::string>& parts) {
  for (size_t r = 0; r < results.size(); ++r) {
    EXPECT_EQ(results[r].code(), code) << "rank " << r << ": " << results[r];
    for (const auto& p : parts) {
      EXPECT_THAT(std::string(results[r].message()), HasSubstr(p)) << "rank " << r;
    }
  }
}

TEST(UcxThreads, ReportsIdentity) {
  auto results = RunUcxThreads(2, [](Communicator& c) -> absl::Status {
    if (c.backend() != "ucx" || c.name() != "world" || c.size() != 2 ||
        c.timeout() != absl::Seconds(7)) {
      return absl::InternalError(absl::StrCat("identity: ", c.backend(), " ", c.name()));
    }
    return absl::OkStatus();
  }, absl::Seconds(7));
  ExpectAll(results, absl::StatusCode::kOk, {});
}

TEST(UcxThreads, DifferentOpsFailEveryRank) {
  auto results = RunUcxThreads(3, [](Communicator& c) {
    std::vector<float> s(8, 1.0f), r(24);
    if (c.rank() == 2) return comm::Run(c.AllGather(s.data(), r.data(), 2, DType::kF32));
    return comm::Run(c.AllReduce(s.data(), r.data(), 2, DType::kF32, ReduceOp::kSum));
  });
  ExpectAll(results, absl::StatusCode::kInvalidArgument, {"group world (ucx)", "calls differ"});
}

TEST(UcxThreads, MismatchedAllToAllVCountsFail) {
  // Rank 0 sends 2 elements where rank 1 expects 1. Rank 1 sees it; rank 0's
  // own call may already have completed correctly, but the group is failed
  // for it too, so its next call reports the mismatch.
  auto results = RunUcxThreads(2, [](Communicator& c) {
    std::vector<float> s(8, 1.0f), r(8);
    std::vector<int64_t> sc = {1, c.rank() == 0 ? 2 : 1}, d = {0, 4}, rc = {1, 1};
    absl::Status st = comm::Run(c.AllToAllV(s.data(), sc, d, r.data(), rc, d, DType::kF32));
    if (!st.ok()) return st;
    return comm::Run(c.Barrier());
  });
  ExpectAll(results, absl::StatusCode::kInvalidArgument, {"all_to_allv", "calls differ"});
}

TEST(UcxThreads, MismatchedSendRecvFails) {
  auto results = RunUcxThreads(2, [](Communicator& c) {
    std::vector<float> b(8, 1.0f);
    if (c.rank() == 0) return comm::Run(c.Send(b.data(), 3, DType::kF32, 1, 4));
    return comm::Run(c.Recv(b.data(), 4, DType::kF32, 0, 4));
  }, absl::Seconds(2));
  // The receiver sees the mismatch; the sender's message went out eagerly
  // and completed (as an MPI send would).
  EXPECT_EQ(results[1].code(), absl::StatusCode::kInvalidArgument) << results[1];
  EXPECT_THAT(std::string(results[1].message()), HasSubstr("another count or dtype"));
}

TEST(UcxThreads, MismatchedSplitFails) {
  auto results = RunUcxThreads(2, [](Communicator& c) {
    return c.Split(c.rank() == 0 ? std::vector<std::vector<int>>{{0, 1}}
                                 : std::vector<std::vector<int>>{{1, 0}},
                   "g").status();
  });
  ExpectAll(results, absl::StatusCode::kInvalidArgument, {"split 'g'", "different groups"});
}

TEST(UcxThreads, BadArgumentsFailAtTheCall) {
  auto results = RunUcxThreads(1, [](Communicator& c) -> absl::Status {
    float x[4] = {};
    if (c.Send(x, 1, DType::kF32, 0, 1 << 24).status().code() != absl::StatusCode::kInvalidArgument)
      return absl::InternalError("tag 2^24 accepted");
    if (c.AllReduce(x, x, 1, DType::kF8E5M2, ReduceOp::kSum).status().code() !=
        absl::StatusCode::kInvalidArgument)
      return absl::InternalError("fp8 reduction accepted");
    // Rejected calls do not consume a sequence number: the group still works.
    return comm::Run(c.AllReduce(x, x, 4, DType::kF32, ReduceOp::kSum));
  });
  ExpectAll(results, absl::StatusCode::kOk, {});
}

TEST(UcxThreads, TimeoutNamesThePeerAndPoisonsTheGroup) {
  std::atomic<bool> done{false};
  absl::Duration took;
  auto results = RunUcxThreads(2, [&](Communicator& c) -> absl::Status {
    if (c.rank() == 1) {
      while (!done) absl::SleepFor(absl::Milliseconds(5));
      return absl::OkStatus();
    }
    float x = 1;
    absl::Time t0 = absl::Now();
    absl::Status st = comm::Run(c.AllReduce(&x, &x, 1, DType::kF32, ReduceOp::kSum));
    took = absl::Now() - t0;
    absl::Status after = c.Barrier().status();
    done = true;
    if (after.code() != st.code()) return absl::InternalError(absl::StrCat("after: ", after.ToString()));
    return st;
  }, absl::Milliseconds(300));
  EXPECT_EQ(results[0].code(), absl::StatusCode::kDeadlineExceeded) << results[0];
  EXPECT_THAT(std::string(results[0].message()), HasSubstr("waiting for peer 1 (world rank 1)"));
  EXPECT_THAT(std::string(results[0].message()), HasSubstr("timed out after 300ms"));
  EXPECT_GE(took, absl::Milliseconds(290));
  EXPECT_LT(took, absl::Seconds(3));
}

}  // namespace
}  // namespace gtp::comm
