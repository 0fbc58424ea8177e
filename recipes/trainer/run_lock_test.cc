#include "recipes/trainer/run_lock.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "gtest/gtest.h"

namespace gtp::recipes {
namespace {

std::string TmpDir(const std::string& name) {
  const std::string d = std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
  mkdir(d.c_str(), 0755);
  return d;
}

TEST(RunDirLock, ASecondRunOnTheDirectoryIsRefusedNamingTheHolder) {
  const std::string dir = TmpDir("held");
  auto first = RunDirLock::Acquire(dir);
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = RunDirLock::Acquire(dir);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  const std::string msg(second.status().message());
  EXPECT_NE(msg.find("is in use by another run (pid " + std::to_string(getpid()) + " on "),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("give this run its own --run_dir"), std::string::npos) << msg;
}

TEST(RunDirLock, TheLockGoesWithTheObject) {
  const std::string dir = TmpDir("released");
  {
    auto first = RunDirLock::Acquire(dir);
    ASSERT_TRUE(first.ok()) << first.status();
    RunDirLock moved = std::move(*first);  // still held after a move
    EXPECT_FALSE(RunDirLock::Acquire(dir).ok());
  }
  auto again = RunDirLock::Acquire(dir);
  EXPECT_TRUE(again.ok()) << again.status();
}

TEST(RunDirLock, ADirectoryThatCannotBeWrittenIsNamed) {
  // (A missing directory: root, which CI runs as, writes read-only ones.)
  const std::string dir = TmpDir("x") + "/missing";
  auto lock = RunDirLock::Acquire(dir);
  ASSERT_FALSE(lock.ok());
  EXPECT_EQ(lock.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(std::string(lock.status().message()).find(dir + "/run.lock"), std::string::npos)
      << lock.status();
}

}  // namespace
}  // namespace gtp::recipes
