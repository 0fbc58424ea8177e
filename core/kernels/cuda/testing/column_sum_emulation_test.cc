// The bias gradients' column sums (core/kernels/cuda/column_sum.cu, f32 and
// bf16) run on the CPU by the warp emulator
// (core/kernels/cuda/testing/warp_emulator.h), in three orders of each
// block's threads, against the CPU kernel (core/kernels/cpu.h) bit for bit:
// both backends add in kColumnSumSlabRows' documented order. The CPU kernel
// is itself checked against a double reference (core/kernels/cpu).
// column_sum_gpu_test runs the same kernels on a GPU.
// The emulator before the kernel source:
// clang-format off
#define GTP_CUDA_HOST_EMULATION
#include "core/kernels/cuda/testing/warp_emulator.h"
#include "core/kernels/cuda/column_sum.cu"
// clang-format on
// (its launchers now run the grids on the host, synchronously)

#include <cstdint>
#include <cstring>
#include <vector>

#include "core/kernels/cpu.h"
#include "core/kernels/cuda/testing/emulation_checks.h"
#include "gtest/gtest.h"

namespace gtp::kernels::cuda {
namespace {

alignas(16) double smem[1024];  // the blocks' dynamic shared memory (these kernels take none)

using FVec = std::vector<float>;

// R rows over several slabs of kColumnSumSlabRows, C not a multiple of the
// vector (the scalar path) and a multiple (the vector path), f32 and bf16;
// and more slabs than pass 2 stages at once (130 > kTotalStage: two rounds,
// the second partial).
TEST(ColumnSumEmulationTest, MatchesTheCpuBitForBit) {
  gtp::emu::SetShared(smem, sizeof(smem));
  struct Shape {
    int64_t R, C;
  };
  for (const Shape sh :
       {Shape{2 * kColumnSumSlabRows + 5, 37}, Shape{2 * kColumnSumSlabRows + 5, 64},
        Shape{(kTotalStage + 1) * kColumnSumSlabRows + 3, 5}}) {
    const int64_t R = sh.R, C = sh.C;
    const FVec x = gtp::emu::RandomNormal(R * C, 50), s0 = gtp::emu::RandomNormal(C, 51);
    std::vector<bf16> xb;
    for (float f : x) xb.push_back(ToBF16(f));
    FVec want = s0, want_b = s0;
    cpu::ColumnSumAccumulate(x.data(), R, C, want.data());
    cpu::ColumnSumAccumulate(xb.data(), R, C, want_b.data());
    const auto out = gtp::emu::InEverySchedule([&] {
      FVec sums = s0, sums_b = s0, partial(ColumnSumPartials(R, C), NAN);
      ColumnSumAccumulate(x.data(), R, C, sums.data(), partial.data(), nullptr);
      ColumnSumAccumulate(xb.data(), R, C, sums_b.data(), partial.data(), nullptr);
      return std::vector<FVec>{sums, sums_b};
    });
    EXPECT_TRUE(gtp::emu::SameBits(out[0], want, "f32 sums"));
    EXPECT_TRUE(gtp::emu::SameBits(out[1], want_b, "bf16 sums"));
  }
}

}  // namespace
}  // namespace gtp::kernels::cuda
