// UCX worlds whose ranks are processes launched by gtprun: the conformance
// suite at world sizes 2, 3, 4 and the fault scenarios. When RANK is set the
// binary runs one rank of the scenario named by argv[1]; otherwise it is the
// gtest driver that launches those ranks.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "comm/testing/conformance.h"
#include "comm/testing/multiprocess.h"
#include "comm/ucx/ucx_communicator.h"
#include "core/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gtp::comm {
namespace {

using ::testing::AnyOf;
using ::testing::HasSubstr;
using testing::CommandResult;
using testing::GtprunPath;
using testing::RunCommand;
using testing::SelfPath;

// ---- rank side ----------------------------------------------------------------------

int Rank() { return std::atoi(std::getenv("RANK")); }

// One line the driver parses: "RESULT code=<CODE> ms=<elapsed> msg=<message>".
void Report(const absl::Status& st, absl::Duration took) {
  std::printf("RESULT code=%s ms=%lld msg=%s\n", absl::StatusCodeToString(st.code()).c_str(),
              static_cast<long long>(absl::ToInt64Milliseconds(took)),
              std::string(st.message()).c_str());
  std::fflush(stdout);
}

UcxOptions Opts(absl::Duration timeout, absl::Duration connect = absl::Seconds(20)) {
  UcxOptions o;
  o.timeout = timeout;
  o.connect_timeout = connect;
  return o;
}

int RunRank(const std::string& scenario) {
  const int rank = Rank();
  if (scenario == "conformance") {
    auto world = CreateUcxWorldFromEnv(Opts(absl::Seconds(60)));
    if (!world.ok()) {
      Report(world.status(), absl::ZeroDuration());
      return 1;
    }
    testing::ConformanceOptions o;
    o.large = (*world)->size() != 4;
    absl::Status st = testing::RunConformance(**world, o);
    Report(st, absl::ZeroDuration());
    return st.ok() ? 0 : 1;
  }
  if (scenario == "exit_mid_collective") {
    auto world = CreateUcxWorldFromEnv(Opts(absl::Seconds(8)));
    GTP_CHECK_OK(world.status());
    std::vector<float> x(4 << 20, 1.0f);
    GTP_CHECK_OK(Run((*world)->Barrier()));
    if (rank == 1) {
      auto w = (*world)->AllReduce(x.data(), x.data(), x.size(), DType::kF32, ReduceOp::kSum);
      absl::SleepFor(absl::Milliseconds(5));
      std::_Exit(3);  // dies with the collective in flight
    }
    absl::Time t0 = absl::Now();
    absl::Status st = Run((*world)->AllReduce(x.data(), x.data(), x.size(), DType::kF32, ReduceOp::kSum));
    Report(st, absl::Now() - t0);
    return 0;
  }
  if (scenario == "never_joins") {
    if (rank == 2) {
      absl::SleepFor(absl::Seconds(3));
      return 0;
    }
    absl::Time t0 = absl::Now();
    auto world = CreateUcxWorldFromEnv(Opts(absl::Seconds(5), absl::Seconds(1)));
    Report(world.status(), absl::Now() - t0);
    return 0;
  }
  if (scenario == "skips_collective") {
    auto world = CreateUcxWorldFromEnv(Opts(absl::Seconds(1)));
    GTP_CHECK_OK(world.status());
    if (rank == 2) {
      absl::SleepFor(absl::Seconds(2));
      return 0;
    }
    float x = 1;
    absl::Time t0 = absl::Now();
    absl::Status st = Run((*world)->AllReduce(&x, &x, 1, DType::kF32, ReduceOp::kSum));
    Report(st, absl::Now() - t0);
    return 0;
  }
  if (scenario == "mismatch") {
    auto world = CreateUcxWorldFromEnv(Opts(absl::Seconds(10)));
    GTP_CHECK_OK(world.status());
    std::vector<float> x(16, 1.0f);
    absl::Time t0 = absl::Now();
    absl::Status st = Run((*world)->AllReduce(x.data(), x.data(), rank == 1 ? 5 : 4, DType::kF32,
                                              ReduceOp::kSum));
    Report(st, absl::Now() - t0);
    return 0;
  }
  if (scenario == "mismatch_large") {
    auto world = CreateUcxWorldFromEnv(Opts(absl::Seconds(10)));
    GTP_CHECK_OK(world.status());
    const int64_t count = (int64_t{3} << 20) + (rank == 1 ? 64 : 0);
    std::vector<float> x(count, 1.0f);
    absl::Time t0 = absl::Now();
    absl::Status st =
        Run((*world)->AllReduce(x.data(), x.data(), count, DType::kF32, ReduceOp::kSum));
    Report(st, absl::Now() - t0);
    return 0;
  }
  if (scenario == "wrong_port") {
    absl::Time t0 = absl::Now();
    auto world = CreateUcxWorldFromEnv(Opts(absl::Seconds(5), absl::Seconds(1)));
    Report(world.status(), absl::Now() - t0);
    return 0;
  }
  std::fprintf(stderr, "unknown scenario '%s'\n", scenario.c_str());
  return 2;
}

// ---- driver side --------------------------------------------------------------------

struct RankResult {
  std::string code;
  int64_t ms = -1;
  std::string msg;
};

// Parses "[rank k] RESULT ..." lines from gtprun's output.
std::map<int, RankResult> Results(const std::string& out) {
  std::map<int, RankResult> m;
  for (absl::string_view line : absl::StrSplit(out, '\n')) {
    int k;
    char code[64];
    long long ms;
    int consumed = 0;
    std::string l(line);
    if (std::sscanf(l.c_str(), "[rank %d] RESULT code=%63s ms=%lld msg=%n", &k, code, &ms,
                    &consumed) == 3 && consumed > 0) {
      m[k] = RankResult{code, ms, l.substr(consumed)};
    }
  }
  return m;
}

// `lanes` > 0 sets GTP_UCX_LANES for every rank (else the host's default).
CommandResult Launch(int n, const std::string& scenario, bool stop_on_failure = true,
                     int lanes = 0) {
  std::vector<std::pair<std::string, std::string>> env;
  if (lanes > 0) env.push_back({"GTP_UCX_LANES", absl::StrCat(lanes)});
  return RunCommand({GtprunPath(), absl::StrCat("--nproc=", n),
                     absl::StrCat("--stop_on_failure=", stop_on_failure ? "true" : "false"),
                     "--grace_period=2s", "--", SelfPath(), scenario},
                    env);
}

class UcxMultiprocess : public ::testing::TestWithParam<int> {};

TEST_P(UcxMultiprocess, Conformance) {
  CommandResult r = Launch(GetParam(), "conformance");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  auto res = Results(r.output);
  for (int k = 0; k < GetParam(); ++k) {
    EXPECT_EQ(res[k].code, "OK") << "rank " << k << ": " << res[k].msg;
  }
}

INSTANTIATE_TEST_SUITE_P(World, UcxMultiprocess, ::testing::Values(2, 3, 4));

TEST(UcxFaults, RankThatExitsMidCollective) {
  // One lane, and three (the 16 MiB all-reduce is cut across them: every
  // lane's part must end, with the dead rank named).
  for (int lanes : {1, 3}) {
    SCOPED_TRACE(absl::StrCat(lanes, " lane(s)"));
    CommandResult r = Launch(3, "exit_mid_collective", /*stop_on_failure=*/false, lanes);
    EXPECT_THAT(r.output, HasSubstr("rank 1 (pid"));
    EXPECT_THAT(r.output, HasSubstr("exit status 3"));
    auto res = Results(r.output);
    for (int k : {0, 2}) {
      ASSERT_TRUE(res.count(k)) << r.output;
      EXPECT_NE(res[k].code, "OK") << r.output;
      EXPECT_THAT(res[k].msg, HasSubstr("group world (ucx)"));
      EXPECT_THAT(res[k].msg, HasSubstr("all_reduce"));
      EXPECT_THAT(res[k].msg, HasSubstr("world rank 1"));
      EXPECT_LT(res[k].ms, 9000) << res[k].msg;  // bounded by the 8 s timeout
    }
    EXPECT_LT(r.elapsed, absl::Seconds(20));
  }
}

TEST(UcxFaults, RankThatNeverJoins) {
  CommandResult r = Launch(3, "never_joins");
  auto res = Results(r.output);
  for (int k : {0, 1}) {
    ASSERT_TRUE(res.count(k)) << r.output;
    EXPECT_EQ(res[k].code, "DEADLINE_EXCEEDED") << r.output;
    EXPECT_THAT(res[k].msg, HasSubstr("rank(s) [2] did not publish a UCX address within 1s"));
    EXPECT_GE(res[k].ms, 900);
    EXPECT_LT(res[k].ms, 4000);
  }
}

TEST(UcxFaults, RankThatSkipsACollective) {
  // Rank 2 is alive but never calls the all-reduce. In a ring the others
  // wait on their neighbours, so each names the peer it waits on; whoever
  // times out first tells the rest.
  CommandResult r = Launch(3, "skips_collective");
  auto res = Results(r.output);
  for (int k : {0, 1}) {
    ASSERT_TRUE(res.count(k)) << r.output;
    EXPECT_EQ(res[k].code, "DEADLINE_EXCEEDED") << r.output;
    EXPECT_THAT(res[k].msg, HasSubstr("group world (ucx)"));
    EXPECT_THAT(res[k].msg, HasSubstr("all_reduce(count=1, dtype=f32, op=sum) #0"));
    EXPECT_THAT(res[k].msg, HasSubstr("timed out after 1s"));
    EXPECT_THAT(res[k].msg, HasSubstr("waiting for peer"));
    // The heartbeats' diagnosis follows a timeout (rank 2 still beats while
    // it sleeps, or has just exited): it reads them twice, 3 periods apart.
    EXPECT_THAT(res[k].msg, AnyOf(HasSubstr("every other rank's heartbeat still runs"),
                                  HasSubstr("(world rank 2) is gone")));
    EXPECT_GE(res[k].ms, 900);
    EXPECT_LT(res[k].ms, 6000);  // 1 s timeout + 1.5 s diagnosis, on a loaded machine
  }
}

TEST(UcxFaults, MismatchedCountsFailEveryRank) {
  // A small call (one lane) and a large one cut across three lanes.
  for (const char* scenario : {"mismatch", "mismatch_large"}) {
    SCOPED_TRACE(scenario);
    CommandResult r = Launch(3, scenario, true, 3);
    auto res = Results(r.output);
    for (int k : {0, 1, 2}) {
      ASSERT_TRUE(res.count(k)) << r.output;
      EXPECT_EQ(res[k].code, "INVALID_ARGUMENT") << r.output;
      EXPECT_THAT(res[k].msg, HasSubstr("group world (ucx)"));
      EXPECT_LT(res[k].ms, 5000);
    }
  }
}

TEST(UcxFaults, WrongMasterPort) {
  // A port nobody listens on: rank 1 of 2 cannot reach the store.
  CommandResult r = RunCommand({SelfPath(), "wrong_port"},
                               {{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "1"},
                                {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "1"}});
  EXPECT_THAT(r.output, HasSubstr("RESULT code=UNAVAILABLE"));
  EXPECT_THAT(r.output, HasSubstr("could not connect to 127.0.0.1:1 within 1s"));
  EXPECT_THAT(r.output, HasSubstr("MASTER_ADDR/MASTER_PORT"));
  EXPECT_LT(r.elapsed, absl::Seconds(4));
}

}  // namespace
}  // namespace gtp::comm

int main(int argc, char** argv) {
  if (gtp::comm::testing::IsRankProcess()) {
    return gtp::comm::RunRank(argc > 1 ? argv[1] : "");
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
