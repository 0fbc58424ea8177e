#include "tools/topology/topology.h"

#include <sstream>

#include "gtest/gtest.h"

namespace gtp::tools {
namespace {

bool Contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

TEST(PrintTopology, PrintsCoordinatesAndGroups) {
  parallel::ParallelConfig c;
  c.world_size = 24;
  c.tp = 2;
  c.tp_num_weight_shards = 8;
  c.ep = 4;
  c.etp = 1;
  c.expert_tp_num_weight_shards = 2;
  std::ostringstream out;
  ASSERT_TRUE(PrintTopology(c, {}, 0, out));
  const std::string s = out.str();
  EXPECT_TRUE(Contains(s, "world=24 tp=2 gtp=4 cp=1 dp=3 pp=1")) << s;
  EXPECT_TRUE(Contains(s, "    13 |    1    2    0    1    0 |    0    1    1    1    0\n")) << s;
  EXPECT_TRUE(Contains(s, "[0,2,4,6] [1,3,5,7] [8,10,12,14]")) << s;  // gtp
  EXPECT_TRUE(Contains(s, "[0,4] [1,5] [2,6] [3,7] [8,12]")) << s;    // egtp
  EXPECT_TRUE(Contains(s, "replicate = dp_cp")) << s;
}

TEST(PrintTopology, ListsEveryProblem) {
  parallel::ParallelConfig c;
  c.world_size = 10;
  c.tp = 4;
  c.tp_num_weight_shards = 6;
  c.order = "tp-tp";
  std::ostringstream out;
  EXPECT_FALSE(PrintTopology(c, {}, 0, out));
  const std::string s = out.str();
  EXPECT_TRUE(Contains(s, "PROBLEM: tp_num_weight_shards 6 is not a multiple of tp 4")) << s;
  EXPECT_TRUE(Contains(s, "PROBLEM: dense order 'tp-tp': axis 'tp' appears more than once")) << s;
}

TEST(PrintTopology, Offset) {
  parallel::ParallelConfig c;
  c.world_size = 4;
  c.tp = 2;
  std::ostringstream out;
  ASSERT_TRUE(PrintTopology(c, {}, 4, out));
  EXPECT_TRUE(Contains(out.str(), "grid on world ranks [4, 8)")) << out.str();
  EXPECT_TRUE(Contains(out.str(), "[4,5] [6,7]")) << out.str();
}

}  // namespace
}  // namespace gtp::tools
