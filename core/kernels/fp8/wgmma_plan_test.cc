// ChooseWgmmaPlan (wgmma_plan.h) on the capacities of real GPUs, each
// expectation worked out by hand from the wave model: units of work over
// the clusters that fit, rounded up to whole waves; a 192-row wave counted
// as 1.35 of a 128-row one. The same choices on the device itself are
// block_gemm_gpu_test.cc's ThePlanTakes192RowTilesWhereTheirWavesCostLess.
#include "core/kernels/fp8/wgmma_plan.h"

#include <cstdint>
#include <string>

#include "gtest/gtest.h"

namespace gtp::kernels::fp8::cuda {
namespace {

// H100 SXM and H200: 132 multiprocessors, 66 pairs of 128-row CTAs either
// way (fp8_linear_benchmark's clusters counter, docs/PERFORMANCE.md).
constexpr WgmmaCapacity kH100{132, 66, 66};

struct Want {
  int64_t M, N, K;
  int tile_m, cluster_m, cluster_n, splits;
};

void ExpectPlan(const Want& w, const WgmmaCapacity& c = kH100) {
  const WgmmaPlan p = ChooseWgmmaPlan(w.M, w.N, w.K, c);
  const std::string shape =
      std::to_string(w.M) + " x " + std::to_string(w.N) + " x " + std::to_string(w.K);
  EXPECT_EQ(p.tile_m, w.tile_m) << shape;
  EXPECT_EQ(p.cluster_m, w.cluster_m) << shape;
  EXPECT_EQ(p.cluster_n, w.cluster_n) << shape;
  EXPECT_EQ(p.splits, w.splits) << shape;
  EXPECT_FALSE(p.ping_pong || p.bulk_store || p.overlap) << shape;
  EXPECT_TRUE(p.prefetch_y) << shape;  // a no-op where beta is 0
}

// The linears' GEMMs at N = 8192 tokens (fp8_linear_benchmark's shapes).
// 1.3B forward 8192 × 8192: 2048 pairs over 66 = 32 waves, against 2752
// tiles of 192 rows over 132 = 21 waves × 1.35 = 28.4: 192 rows (measured
// 0.290 ms against 0.329). 350M forward 8192 × 4096: 16 against 11 × 1.35
// = 14.9: 192 (0.088 against 0.097). 350M wgrad 4096 × 1024: 128 pairs, 2
// waves, against 176 tiles, 2 × 1.35 = 2.7: 128 rows (0.118 against 0.152).
// The 1.3B dgrad and wgrad, 8192 × 2048: 8 waves against 6 × 1.35 = 8.1,
// and the 350M dgrad, 8192 × 1024: 4 against 3 × 1.35 = 4.05: 128 rows,
// where 192 measured within 2 % (a near tie either way).
TEST(ChooseWgmmaPlan, TheTrainersShapesTakeTheWaveModelsChoice) {
  ExpectPlan({8192, 8192, 2048, 192, 1, 1, 1});  // 1.3B forward
  ExpectPlan({8192, 4096, 1024, 192, 1, 1, 1});  // 350M forward
  ExpectPlan({4096, 1024, 8192, 128, 2, 1, 1});  // 350M wgrad
  ExpectPlan({8192, 2048, 8192, 128, 2, 1, 1});  // 1.3B dgrad and wgrad
  ExpectPlan({8192, 1024, 4096, 128, 2, 1, 1});  // 350M dgrad
}

// Few units: split-K. 512 × 768: 12 pairs, one wave of a whole K; split in
// 2, 3, 4 ranges: 24, 36, 48 units, still one wave, of 1/2, 1/3, 1/4 of K
// — 4 (8 K blocks allow 4 ranges of 2). 1536 × 1536 × 512: 72 pairs, 2
// waves; 2 ranges (the most 4 K blocks allow): 144 units, 3 waves of half
// K = 1.5; 96 tiles of 192 rows, one wave × 1.35 = 1.35: 192 rows, unsplit.
TEST(ChooseWgmmaPlan, FewUnitsSplitKOrTake192RowTiles) {
  ExpectPlan({512, 768, 1024, 128, 2, 1, 4});
  ExpectPlan({512, 768, 512, 128, 2, 1, 2});  // 4 K blocks: at most 2 ranges
  ExpectPlan({512, 768, 256, 128, 2, 1, 1});  // 2 K blocks: no split
  ExpectPlan({1536, 1536, 512, 192, 1, 1, 1});
}

// The pair follows the shape: 2 × 1 where M is a multiple of 256, else
// 1 × 2 where N is, else none; and none where no pair fits the device.
// 384 × 512 × 2048: 3 × 2 pairs along N, 6 units, one wave; 2, 3, 4
// ranges of the 16 K blocks: 12, 18, 24 units, still one wave, of a half,
// a third, a quarter of K: 4.
TEST(ChooseWgmmaPlan, APairOnlyWhereTheShapeAndTheDeviceAllowIt) {
  ExpectPlan({384, 512, 2048, 128, 1, 2, 4});
  ExpectPlan({384, 384, 2048, 128, 1, 1, 4});
  ExpectPlan({512, 768, 1024, 128, 1, 1, 4}, WgmmaCapacity{132, 0, 0});
}

// Another device, the same model: 114 multiprocessors and 57 pairs (as an
// H100 PCIe would have). 1.3B forward: 2048 pairs over 57 = 36 waves,
// against 2752 tiles over 114 = 25 × 1.35 = 33.75: still 192 rows. 350M
// wgrad: 128 pairs over 57 = 3 waves; in 2 ranges 256 units, 5 waves of
// half K = 2.5 (a tenth better); against 176 tiles over 114 = 2 × 1.35 =
// 2.7: 128 rows, split in 2 — where the H100 takes them unsplit.
TEST(ChooseWgmmaPlan, TheChoiceFollowsTheDevicesCapacity) {
  const WgmmaCapacity pcie{114, 57, 57};
  ExpectPlan({8192, 8192, 2048, 192, 1, 1, 1}, pcie);
  ExpectPlan({4096, 1024, 8192, 128, 2, 1, 2}, pcie);
}

// What no device has, and an empty shape, are refused by name.
TEST(ChooseWgmmaPlanDeathTest, RefusesAnEmptyShapeOrNoMultiprocessors) {
  EXPECT_DEATH(ChooseWgmmaPlan(512, 768, 1024, WgmmaCapacity{0, 0, 0}), "0 multiprocessors");
  EXPECT_DEATH(ChooseWgmmaPlan(512, 768, 1024, WgmmaCapacity{132, -1, 66}), "-1 and 66 pairs");
  EXPECT_DEATH(ChooseWgmmaPlan(0, 768, 1024, kH100), "a 0 x 768 x 1024 GEMM");
}

}  // namespace
}  // namespace gtp::kernels::fp8::cuda
