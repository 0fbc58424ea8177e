#include "recipes/trainer/run_lock.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
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

bool Exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}
void Touch(const std::string& path) { std::ofstream(path) << "x"; }

// A run that fails before it has results removes what its start-up wrote,
// but only from a directory that was its own when it took the lock.
TEST(RunDirLock, RemoveRunOutputsEmptiesOnlyAFreshDirectory) {
  const std::string dir = TmpDir("fresh");
  {
    auto lock = RunDirLock::Acquire(dir);
    ASSERT_TRUE(lock.ok()) << lock.status();
    EXPECT_TRUE(lock->fresh());
    Touch(dir + "/recipe.pbtxt");
    TmpDir("fresh/tensorboard");
    Touch(dir + "/tensorboard/events.out.tfevents.1");
    lock->RemoveRunOutputs();
    EXPECT_FALSE(Exists(dir + "/recipe.pbtxt"));
    EXPECT_FALSE(Exists(dir + "/tensorboard"));
    EXPECT_FALSE(Exists(dir + "/run.lock"));
  }
  EXPECT_TRUE(Exists(dir));  // the directory itself is the caller's to remove

  const std::string used = TmpDir("used");
  Touch(used + "/metrics.jsonl");  // an earlier run's
  auto lock = RunDirLock::Acquire(used);
  ASSERT_TRUE(lock.ok()) << lock.status();
  EXPECT_FALSE(lock->fresh());
  Touch(used + "/recipe.pbtxt");
  lock->RemoveRunOutputs();
  EXPECT_TRUE(Exists(used + "/metrics.jsonl"));
  EXPECT_TRUE(Exists(used + "/recipe.pbtxt"));
  EXPECT_TRUE(Exists(used + "/run.lock"));
}

}  // namespace
}  // namespace gtp::recipes
