// The SSD scan's recurrence kernels (ssd_scan.cu: SsdCudaKernel::kRecurrence,
// the default forward, and the backward where P·N > 256) run on the CPU by
// the warp emulator (core/kernels/cuda/testing/warp_emulator.h; the tile
// length chosen by its occupancy model) against the recurrence and its
// adjoint in double, in three orders of each block's threads (bit-identical
// outputs: no race between barriers). ssm_gpu_test runs the same kernels on
// a GPU.
// The emulator before the kernel source:
// clang-format off
#define GTP_CUDA_HOST_EMULATION
#include "core/kernels/cuda/testing/warp_emulator.h"
#include "core/kernels/ssm/ssd_scan.cu"
// clang-format on
// (its launchers now run the grids on the host, synchronously)

#include <cstdint>

#include "core/kernels/cuda/testing/emulation_checks.h"
#include "core/kernels/ssm/testing/ssd_emulation.h"
#include "gtest/gtest.h"

namespace gtp::kernels::ssm {
namespace {

alignas(128) double smem[228 * 1024 / 8];  // the blocks' dynamic shared memory

struct Case {
  int64_t B, T, H, P, G, N, chunk;
};

// The recurrence in f32 over T ≤ 40 steps of O(1) terms, its state reduced
// over up to N lanes a step: the f32 rounding of a few hundred terms, well
// within 2e-4 of the largest value (ssm_gpu_test's kScanTol for the same
// kernels); a wrong index, lane or checkpoint is O(1).
constexpr double kTol = 2e-4;

class SsdScanEmulationTest : public ::testing::TestWithParam<Case> {};

TEST_P(SsdScanEmulationTest, MatchesTheRecurrenceInEverySchedule) {
  const Case c = GetParam();
  gtp::emu::SetShared(smem, sizeof(smem));
  const reference::SsdProblem p = reference::MakeSsdProblem({c.B, c.T, c.H, c.P, c.G, c.N});
  const auto out = reference::RunSsdInEverySchedule(p, [&](const auto& p, auto& o) {
    std::vector<float> scratch(
        cuda::SsdScanBackwardScratchFloats(c.B, c.T, c.H, c.P, c.G, c.N, c.chunk) + 1, NAN);
    cuda::SsdScanForward(p.x.data(), p.dt.data(), p.A.data(), p.Bm.data(), p.Cm.data(), p.D.data(),
                         o.y.data(), c.B, c.T, c.H, c.P, c.G, c.N, nullptr);
    cuda::SsdScanBackward(p.dy.data(), p.x.data(), p.dt.data(), p.A.data(), p.Bm.data(),
                          p.Cm.data(), p.D.data(), o.dx.data(), o.ddt.data(), o.dA.data(),
                          o.dB.data(), o.dC.data(), o.dD.data(), scratch.data(), c.B, c.T, c.H, c.P,
                          c.G, c.N, c.chunk, nullptr);
  });
  EXPECT_TRUE(reference::SsdNear(out, p.ref, kTol));
}

// The plans' cuts (ssd_scan.cu MakeScanPlan: lanes a row and states a lane
// by N, rows a block, p-tiles): the hybrid's P = N = 16, N = 3, 32 and 100,
// P = 1 and 100, G < H and G = H; checkpoints every 16 steps of T = 37, one
// step, and a chunk past T.
INSTANTIATE_TEST_SUITE_P(
    Shapes, SsdScanEmulationTest,
    ::testing::Values(Case{1, 37, 2, 16, 1, 16, 16}, Case{2, 20, 4, 8, 2, 16, 128},
                      Case{1, 12, 2, 4, 1, 3, 4}, Case{1, 15, 2, 16, 2, 32, 16},
                      Case{1, 9, 1, 8, 1, 100, 16}, Case{1, 10, 3, 1, 3, 16, 16},
                      Case{1, 8, 1, 100, 1, 16, 4}, Case{2, 1, 2, 16, 1, 16, 16}));

}  // namespace
}  // namespace gtp::kernels::ssm
