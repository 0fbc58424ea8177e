#include "comm/env/launch_env.h"

#include <map>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gtp::comm {
namespace {

using ::testing::HasSubstr;

EnvLookup Env(std::map<std::string, std::string> m) {
  return [m](const std::string& k) -> std::optional<std::string> {
    auto it = m.find(k);
    if (it == m.end()) return std::nullopt;
    return it->second;
  };
}

TEST(LaunchEnv, ReadsTorchrunVariables) {
  auto e = ReadLaunchEnv(Env({{"RANK", "2"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "1"},
                              {"MASTER_ADDR", "10.0.0.1"}, {"MASTER_PORT", "29501"}}));
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->rank, 2);
  EXPECT_EQ(e->world_size, 4);
  EXPECT_EQ(e->local_rank, 1);
  EXPECT_EQ(e->master_addr, "10.0.0.1");
  EXPECT_EQ(e->master_port, 29501);
  EXPECT_EQ(e->source, "torchrun");
  EXPECT_EQ(e->ToString(), "rank 2/4 (local 1) master 10.0.0.1:29501 via torchrun");
}

TEST(LaunchEnv, ReadsSlurmVariablesWithDefaults) {
  auto e = ReadLaunchEnv(Env({{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "8"}, {"SLURM_LOCALID", "1"},
                              {"SLURM_STEP_NODELIST", "gpu[03-04,9],cpu1"},
                              {"SLURM_JOB_ID", "123456"}}));
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->rank, 5);
  EXPECT_EQ(e->world_size, 8);
  EXPECT_EQ(e->local_rank, 1);
  EXPECT_EQ(e->master_addr, "gpu03");
  EXPECT_EQ(e->master_port, 29500 + 456);
  EXPECT_EQ(e->source, "slurm");
}

TEST(LaunchEnv, TorchrunVariablesWinOverSlurm) {
  auto e = ReadLaunchEnv(Env({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"LOCAL_RANK", "0"},
                              {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1234"},
                              {"SLURM_PROCID", "3"}, {"SLURM_NTASKS", "4"}}));
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->rank, 0);
  EXPECT_EQ(e->source, "torchrun");
}

void ExpectError(std::map<std::string, std::string> m, const std::string& part) {
  auto e = ReadLaunchEnv(Env(std::move(m)));
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(e.status().message()), HasSubstr(part));
}

TEST(LaunchEnv, ClearErrorsForMissingOrBadValues) {
  ExpectError({}, "RANK is not set");
  ExpectError({{"RANK", "x"}, {"WORLD_SIZE", "2"}}, "RANK='x' is not an integer");
  ExpectError({{"RANK", "0"}}, "WORLD_SIZE is not set");
  ExpectError({{"RANK", "2"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "0"}}, "RANK=2 must be in [0, WORLD_SIZE=2)");
  ExpectError({{"RANK", "0"}, {"WORLD_SIZE", "0"}, {"LOCAL_RANK", "0"}}, "WORLD_SIZE=0 must be >= 1");
  ExpectError({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "0"}}, "MASTER_ADDR is not set");
  ExpectError({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "0"}, {"MASTER_ADDR", "h"}},
              "MASTER_PORT is not set");
  ExpectError({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "0"}, {"MASTER_ADDR", "h"},
               {"MASTER_PORT", "70000"}},
              "MASTER_PORT=70000 is not in [1, 65535]");
  ExpectError({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}}, "SLURM_LOCALID is not set");
}

TEST(LaunchEnv, StoreFdForRankZeroOnly) {
  std::map<std::string, std::string> m = {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "0"},
                                          {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "29501"}};
  auto none = ReadLaunchEnv(Env(m));
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->store_fd, -1);
  m["GTP_STORE_FD"] = "5";
  auto given = ReadLaunchEnv(Env(m));
  ASSERT_TRUE(given.ok()) << given.status();
  EXPECT_EQ(given->store_fd, 5);
  m["GTP_STORE_FD"] = "-2";
  EXPECT_THAT(std::string(ReadLaunchEnv(Env(m)).status().message()),
              HasSubstr("GTP_STORE_FD=-2 is not a file descriptor"));
  m["GTP_STORE_FD"] = "5";
  m["RANK"] = "1";
  m["LOCAL_RANK"] = "1";
  EXPECT_THAT(std::string(ReadLaunchEnv(Env(m)).status().message()),
              HasSubstr("GTP_STORE_FD is set for RANK=1; only rank 0 serves"));
}

TEST(LaunchEnv, FirstSlurmHost) {
  EXPECT_EQ(FirstSlurmHost("node1"), "node1");
  EXPECT_EQ(FirstSlurmHost("node1,node2"), "node1");
  EXPECT_EQ(FirstSlurmHost("node[07-09]"), "node07");
  EXPECT_EQ(FirstSlurmHost("a[3,5-6]"), "a3");
}

}  // namespace
}  // namespace gtp::comm
