// ParseSavedProgress: a checkpoint's progress entries are numbers or a
// DataLoss naming the file and the field (std::stoull used to throw: UCX
// ranks aborted, threads said "exception: stoull" and nothing else).
#include "recipes/trainer/checkpointing.h"

#include <map>
#include <string>
#include <tuple>

#include "gtest/gtest.h"

namespace gtp::recipes {
namespace {

TEST(SavedProgress, NumbersOrANamedDataLoss) {
  std::map<std::string, std::string> extra = {
      {"consumed_samples", "4096"}, {"optimizer_step", "256"}, {"optimizer_skipped", "3"}};
  auto p = ParseSavedProgress(extra, "run/checkpoints/iter_0000256");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->consumed_samples, 4096u);
  EXPECT_EQ(p->optimizer_step, 256);
  EXPECT_EQ(p->optimizer_skipped, 3);
  for (const auto& [key, value, words] :
       {std::tuple<std::string, std::string, std::string>{"consumed_samples", "abc",
                                                          "consumed_samples is 'abc'"},
        {"optimizer_step", "-1", "optimizer_step is '-1'"},
        {"optimizer_skipped", "3x", "optimizer_skipped is '3x'"},
        {"consumed_samples", "99999999999999999999999", "not a whole number"}}) {
    auto bad = extra;
    bad[key] = value;
    auto r = ParseSavedProgress(bad, "run/checkpoints/iter_0000256");
    ASSERT_FALSE(r.ok()) << key << "=" << value;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
    const std::string m(r.status().message());
    EXPECT_NE(m.find("run/checkpoints/iter_0000256/metadata.pb"), std::string::npos) << m;
    EXPECT_NE(m.find(words), std::string::npos) << m;
  }
  auto missing = extra;
  missing.erase("optimizer_step");
  auto r = ParseSavedProgress(missing, "d");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(std::string(r.status().message()).find("d/metadata.pb has no optimizer_step"),
            std::string::npos)
      << r.status();
}

}  // namespace
}  // namespace gtp::recipes
