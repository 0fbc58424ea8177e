#include "mimo/grids.h"

#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "parallel/testing/fake_communicator.h"

namespace gtp::mimo {
namespace {

using parallel::HyperCommGrid;
using parallel::ParallelConfig;

// Grids of plain DP on the given ranges, as seen from world rank 0.
struct Grids {
  parallel::testing::FakeCommunicator world;
  std::vector<std::unique_ptr<HyperCommGrid>> grids;

  Grids(int world_size, const std::vector<std::pair<int, int>>& ranges) : world(0, world_size) {
    const char* names[] = {"vision", "language", "audio"};
    for (size_t i = 0; i < ranges.size(); ++i) {
      auto g = HyperCommGrid::Create(names[i], ParallelConfig{}, ranges[i].first, ranges[i].second,
                                     world);
      EXPECT_TRUE(g.ok()) << g.status();
      grids.push_back(std::make_unique<HyperCommGrid>(*std::move(g)));
    }
  }
  std::vector<const HyperCommGrid*> ptrs() const {
    std::vector<const HyperCommGrid*> p;
    for (const auto& g : grids) p.push_back(g.get());
    return p;
  }
};

void ExpectInvalid(const absl::Status& s, const std::string& needle) {
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find(needle), absl::string_view::npos) << s;
}

TEST(ValidateModuleGrids, DisjointCoveringIsOk) {
  Grids g(8, {{4, 4}, {0, 4}});
  EXPECT_TRUE(ValidateModuleGrids(g.ptrs(), 8).ok());
  EXPECT_FALSE(IsColocated(g.ptrs()));
  Grids three(8, {{0, 2}, {2, 4}, {6, 2}});
  EXPECT_TRUE(ValidateModuleGrids(three.ptrs(), 8).ok());
  Grids one(4, {{0, 4}});
  EXPECT_TRUE(ValidateModuleGrids(one.ptrs(), 4).ok());
}

TEST(ValidateModuleGrids, ColocatedIsOk) {
  Grids g(4, {{0, 4}, {0, 4}});
  EXPECT_TRUE(ValidateModuleGrids(g.ptrs(), 4).ok());
  EXPECT_TRUE(IsColocated(g.ptrs()));
}

TEST(ValidateModuleGrids, OverlapIsNamed) {
  Grids g(8, {{0, 4}, {2, 6}});
  ExpectInvalid(ValidateModuleGrids(g.ptrs(), 8),
                "grids vision [0, 4) and language [2, 8) overlap on ranks 2..3");
  // Identical pair plus a third grid: not "all identical".
  Grids mixed(8, {{0, 4}, {0, 4}, {4, 4}});
  ExpectInvalid(ValidateModuleGrids(mixed.ptrs(), 8),
                "grids vision [0, 4) and language [0, 4) overlap on ranks 0..3");
}

TEST(ValidateModuleGrids, GapIsNamed) {
  Grids tail(8, {{0, 4}, {4, 2}});
  ExpectInvalid(ValidateModuleGrids(tail.ptrs(), 8), "ranks 6..7 belong to no module grid");
  Grids middle(8, {{0, 3}, {4, 4}});
  ExpectInvalid(ValidateModuleGrids(middle.ptrs(), 8), "rank 3 belongs to no module grid");
  Grids colocated(8, {{0, 4}, {0, 4}});
  ExpectInvalid(ValidateModuleGrids(colocated.ptrs(), 8), "ranks 4..7 belong to no module grid");
}

TEST(ValidateModuleGrids, BadArguments) {
  ExpectInvalid(ValidateModuleGrids({}, 4), "no module grids");
  ExpectInvalid(ValidateModuleGrids({nullptr}, 4), "module grid 0 is null");
  Grids g(8, {{0, 8}});
  ExpectInvalid(ValidateModuleGrids(g.ptrs(), 4), "extends past the world of 4 ranks");
}

}  // namespace
}  // namespace gtp::mimo
