// The chunked SSD scan's CUDA kernels (ssd_chunked.cu, ssd_chunked_backward.cu:
// SsdCudaKernel::kChunked, the default backward at P·N ≤ 256, and
// kChunkedHeads) run on the CPU by the warp emulator
// (core/kernels/cuda/testing/warp_emulator.h; wmma's tf32 products by their
// definition) against the recurrence and its adjoint in double, in three
// orders of each block's threads (bit-identical outputs: no race between
// barriers). ssm_gpu_test runs the same kernels on a GPU.
// The emulator before the kernel source:
// clang-format off
#define GTP_CUDA_HOST_EMULATION
#include "core/kernels/cuda/testing/warp_emulator.h"
#include "core/kernels/ssm/ssd_chunked.cu"
#include "core/kernels/ssm/ssd_chunked_backward.cu"
// clang-format on
// (their launchers now run the grids on the host, synchronously)

#include <cstdint>
#include <tuple>

#include "core/kernels/cuda/testing/emulation_checks.h"
#include "core/kernels/ssm/testing/ssd_emulation.h"
#include "gtest/gtest.h"

namespace gtp::kernels::ssm {
namespace {

alignas(128) double smem[200 * 1024 / 8];  // the blocks' dynamic shared memory

struct Case {
  int64_t B, T, H, P, G, N, chunk;
};

// 3×TF32 keeps about 21 bits of each product (ssd_chunked_common.cuh Mma3),
// ≈ 5e-7 relative, and the outputs sum up to a few hundred O(1) products
// over the chunk and the passes: 2e-4 of the largest value (ssm_gpu_test's
// kScanTol for these kernels) leaves a wide margin; a wrong index or mask is
// O(1).
constexpr double kTol = 2e-4;

class SsdChunkedEmulationTest
    : public ::testing::TestWithParam<std::tuple<Case, cuda::ChunkedBlocks>> {};

TEST_P(SsdChunkedEmulationTest, MatchesTheRecurrenceInEverySchedule) {
  const Case c = std::get<0>(GetParam());
  const cuda::ChunkedBlocks blocks = std::get<1>(GetParam());
  ASSERT_TRUE(cuda::SsdChunkedFits(c.P, c.N, c.chunk, blocks));
  gtp::emu::SetShared(smem, sizeof(smem));
  const reference::SsdProblem p = reference::MakeSsdProblem({c.B, c.T, c.H, c.P, c.G, c.N});
  const auto out = reference::RunSsdInEverySchedule(p, [&](const auto& p, auto& o) {
    std::vector<float> fwd(
        cuda::SsdChunkedScratchFloats(c.B, c.T, c.H, c.P, c.G, c.N, c.chunk, false, blocks) + 1,
        NAN);
    std::vector<float> bwd(
        cuda::SsdChunkedScratchFloats(c.B, c.T, c.H, c.P, c.G, c.N, c.chunk, true, blocks) + 1,
        NAN);
    cuda::SsdChunkedForward(p.x.data(), p.dt.data(), p.A.data(), p.Bm.data(), p.Cm.data(),
                            p.D.data(), o.y.data(), fwd.data(), c.B, c.T, c.H, c.P, c.G, c.N,
                            c.chunk, nullptr, blocks);
    cuda::SsdChunkedBackward(p.dy.data(), p.x.data(), p.dt.data(), p.A.data(), p.Bm.data(),
                             p.Cm.data(), p.D.data(), o.dx.data(), o.ddt.data(), o.dA.data(),
                             o.dB.data(), o.dC.data(), o.dD.data(), bwd.data(), c.B, c.T, c.H, c.P,
                             c.G, c.N, c.chunk, nullptr, blocks);
  });
  EXPECT_TRUE(reference::SsdNear(out, p.ref, kTol));
}

// Chunks of 64, 32 and 16 steps (the chunk argument caps the kernels'
// length), T not a multiple of the chunk, G < H and G = H, odd P and N;
// kHeadGroups with a head a block (its splits: the fewest with
// B·⌈T/L⌉·G·splits ≥ 128).
INSTANTIATE_TEST_SUITE_P(
    Shapes, SsdChunkedEmulationTest,
    ::testing::Combine(::testing::Values(Case{1, 70, 4, 16, 1, 16, 128},  // the hybrid's P, N
                                         Case{2, 37, 4, 8, 2, 16, 32},    // G = 2, 32-step chunks
                                         Case{1, 50, 2, 5, 1, 7, 16},     // odd P, N; 16-step
                                         Case{1, 40, 2, 16, 2, 16, 128},  // G = H
                                         Case{2, 1, 2, 16, 1, 16, 128}),  // T = 1
                       ::testing::Values(cuda::ChunkedBlocks::kPerHead,
                                         cuda::ChunkedBlocks::kHeadGroups)));

// kHeadGroups' backward with 2 heads a block (B·⌈T/L⌉·G = 64 blocks: two
// splits of the group's 4 heads; the chunk short) and with 4 (128 blocks:
// one split).
INSTANTIATE_TEST_SUITE_P(HeadGroups, SsdChunkedEmulationTest,
                         ::testing::Combine(::testing::Values(Case{64, 12, 4, 8, 1, 8, 16},
                                                              Case{128, 16, 4, 8, 1, 8, 16}),
                                            ::testing::Values(cuda::ChunkedBlocks::kHeadGroups)));

}  // namespace
}  // namespace gtp::kernels::ssm
