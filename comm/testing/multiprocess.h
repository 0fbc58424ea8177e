// comm/testing/multiprocess.h — helpers for tests whose ranks are processes.
//
// Pattern: a cc_test with //tools/gtprun in `data` and its own main():
//   int main(int argc, char** argv) {
//     if (gtp::comm::testing::IsRankProcess()) return RunRank(argc, argv);
//     ::testing::InitGoogleTest(&argc, argv);
//     return RUN_ALL_TESTS();
//   }
// and TESTs that call RunCommand({GtprunPath(), "--nproc", "3", "--",
// SelfPath(), "scenario"}) and check the exit code and the "[rank k] " lines.
// All functions block; RunCommand is thread-safe.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"

namespace gtp::comm::testing {

// True when the launcher set RANK (this process is one rank of a job).
bool IsRankProcess();
// This executable (/proc/self/exe).
std::string SelfPath();
// The gtprun binary: $GTPRUN, else from the test's runfiles, else beside
// this binary (a bundle for the GPU machine).
std::string GtprunPath();

struct CommandResult {
  int exit_code = -1;        // 128 + signal when killed by one
  std::string output;        // stdout and stderr, interleaved
  absl::Duration elapsed;
};

// Runs argv with the current environment plus `env` (overriding), without
// RANK/WORLD_SIZE/LOCAL_RANK/MASTER_ADDR/MASTER_PORT unless given in `env`.
// Kills the process group after `limit`.
CommandResult RunCommand(const std::vector<std::string>& argv,
                         const std::vector<std::pair<std::string, std::string>>& env = {},
                         absl::Duration limit = absl::Seconds(120));

}  // namespace gtp::comm::testing
