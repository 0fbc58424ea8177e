#include "core/timeline.h"

#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

#include "gtest/gtest.h"

namespace gtp {
namespace {

TEST(Timeline, HostSpansNestAndMeasureTime) {
  Timeline t(/*cuda=*/false);
  t.Begin("step", nullptr);
  t.Begin("forward", nullptr);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  t.End(nullptr);
  {
    Timeline::Scope s(&t, "allreduce", nullptr, "comm");
  }
  t.End(nullptr);
  ASSERT_TRUE(t.Collect().ok());
  ASSERT_EQ(t.spans().size(), 3u);
  const auto& step = t.spans()[0];
  const auto& fwd = t.spans()[1];
  EXPECT_EQ(step.name, "step");
  EXPECT_EQ(fwd.depth, 1);
  EXPECT_EQ(t.spans()[2].depth, 0);  // depth counts per track
  EXPECT_GE(fwd.end_us - fwd.begin_us, 19000.0);
  EXPECT_LE(step.begin_us, fwd.begin_us);
  EXPECT_GE(step.end_us, fwd.end_us);
}

TEST(Timeline, WindowsFollowEachOtherAndJsonIsWritten) {
  Timeline t(false);
  t.Begin("a", nullptr);
  t.End(nullptr);
  ASSERT_TRUE(t.Collect().ok());
  t.Begin("b", nullptr);
  t.End(nullptr);
  ASSERT_TRUE(t.Collect().ok());
  ASSERT_EQ(t.spans().size(), 2u);
  EXPECT_GE(t.spans()[1].begin_us, t.spans()[0].end_us);
  const std::string path = ::testing::TempDir() + "/trace.json";
  ASSERT_TRUE(t.WriteChromeTrace(path).ok());
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string json = ss.str();
  EXPECT_NE(json.find("\"traceEvents\""), std::string::npos);
  EXPECT_NE(json.find("\"name\": \"b\", \"ph\": \"X\""), std::string::npos);
  EXPECT_NE(json.find("thread_name"), std::string::npos);
}

TEST(Timeline, CollectWithOpenSpanIsAnError) {
  Timeline t(false);
  t.Begin("open", nullptr);
  EXPECT_FALSE(t.Collect().ok());
}

}  // namespace
}  // namespace gtp
