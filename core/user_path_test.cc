#include "core/user_path.h"

#include <cstdlib>

#include "gtest/gtest.h"

namespace gtp {
namespace {

TEST(UserPath, RelativeToWhereBazelRunWasCalled) {
  unsetenv("BUILD_WORKING_DIRECTORY");
  EXPECT_EQ(UserPath("runs/a"), "runs/a");  // not under bazel run
  setenv("BUILD_WORKING_DIRECTORY", "/home/me/work", 1);
  EXPECT_EQ(UserPath("runs/a"), "/home/me/work/runs/a");
  EXPECT_EQ(UserPath("./x.pbtxt"), "/home/me/work/./x.pbtxt");
  EXPECT_EQ(UserPath("/abs/path"), "/abs/path");
  EXPECT_EQ(UserPath(""), "");
  setenv("BUILD_WORKING_DIRECTORY", "/", 1);
  EXPECT_EQ(UserPath("a"), "/a");
  unsetenv("BUILD_WORKING_DIRECTORY");
}

}  // namespace
}  // namespace gtp
