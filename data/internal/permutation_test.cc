#include "data/internal/permutation.h"

#include <vector>

#include "gtest/gtest.h"

namespace gtp::data_internal {
namespace {

TEST(RandomPermutation, IsABijectionForManySizes) {
  for (uint64_t n : {1, 2, 3, 4, 5, 7, 8, 15, 16, 17, 100, 255, 256, 1000, 4097}) {
    RandomPermutation p(n, /*key=*/n * 7919 + 1);
    std::vector<int> seen(n, 0);
    for (uint64_t i = 0; i < n; ++i) {
      uint64_t j = p(i);
      ASSERT_LT(j, n);
      ++seen[j];
    }
    for (uint64_t j = 0; j < n; ++j) ASSERT_EQ(seen[j], 1) << "n=" << n << " j=" << j;
  }
}

TEST(RandomPermutation, KeyChangesTheOrderAndShuffles) {
  const uint64_t n = 1000;
  RandomPermutation a(n, 1), b(n, 2), a2(n, 1);
  int same_ab = 0, fixed = 0;
  for (uint64_t i = 0; i < n; ++i) {
    EXPECT_EQ(a(i), a2(i));
    same_ab += a(i) == b(i);
    fixed += a(i) == i;
  }
  EXPECT_LT(same_ab, 20);
  EXPECT_LT(fixed, 20);
}

}  // namespace
}  // namespace gtp::data_internal
