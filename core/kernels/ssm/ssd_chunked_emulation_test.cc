// The chunked SSD scan's CUDA kernels (ssd_chunked.cu, ssd_chunked_backward.cu:
// SsdCudaKernel::kChunked, the default backward at P·N ≤ 256, and
// kChunkedHeads) run on the CPU by the warp emulator
// (core/kernels/cuda/testing/warp_emulator.h; wmma's tf32 products by their
// definition) against the recurrence and its adjoint in double, in three
// orders of each block's threads (bit-identical outputs: no race between
// barriers). ssm_gpu_test runs the same kernels on a GPU.
#define GTP_CUDA_HOST_EMULATION
#include "core/kernels/cuda/testing/warp_emulator.h"
#include "core/kernels/ssm/ssd_chunked.cu"
#include "core/kernels/ssm/ssd_chunked_backward.cu"
// (their launchers now run the grids on the host, synchronously)

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "core/kernels/ssm/testing/ssd_reference.h"
#include "gtest/gtest.h"

namespace gtp::kernels::ssm {
namespace {

alignas(128) double smem[200 * 1024 / 8];  // the blocks' dynamic shared memory

using Vec = std::vector<float>;
using DVec = std::vector<double>;

struct Case {
  int64_t B, T, H, P, G, N, chunk;
};

Vec Random(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  Vec v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// Every element within tol·max(max|want|, 1) of want, and finite.
void ExpectClose(const Vec& got, const DVec& want, double tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double m = 1.0;
  for (double w : want) m = std::fmax(m, std::fabs(w));
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_TRUE(std::isfinite(got[i])) << what << "[" << i << "]";
    ASSERT_NEAR(got[i], want[i], tol * m) << what << "[" << i << "] of " << got.size();
  }
}

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
  const int64_t nx = c.B * c.T * c.H * c.P, nt = c.B * c.T * c.H, nb = c.B * c.T * c.G * c.N;
  Vec x = Random(nx, 1), Bm = Random(nb, 2), Cm = Random(nb, 3), D = Random(c.H, 4),
      dy = Random(nx, 5), dt = Random(nt, 6, 0.2f), A = Random(c.H, 7, 0.5f);
  for (float& v : dt) v = 0.05f + std::fabs(v);
  for (float& v : A) v = -std::exp(v);
  const reference::SsdReference ref =
      reference::RunSsdReference({c.B, c.T, c.H, c.P, c.G, c.N}, x, dt, A, Bm, Cm, D, dy);
  const gtp::emu::Schedule schedules[3] = {
      gtp::emu::Schedule::kInOrder, gtp::emu::Schedule::kReverse, gtp::emu::Schedule::kShuffled};
  Vec out[3][7];
  for (int run = 0; run < 3; ++run) {
    gtp::emu::SetSchedule(schedules[run], 3);
    Vec y(nx, NAN), dx(nx, NAN), ddt(nt, NAN), dB(nb, NAN), dC(nb, NAN), dA(c.H, 0.5f),
        dD(c.H, -0.25f);  // dA, dD accumulate onto these
    Vec fwd(cuda::SsdChunkedScratchFloats(c.B, c.T, c.H, c.P, c.G, c.N, c.chunk, false, blocks) + 1,
            NAN),
        bwd(cuda::SsdChunkedScratchFloats(c.B, c.T, c.H, c.P, c.G, c.N, c.chunk, true, blocks) + 1,
            NAN);
    cuda::SsdChunkedForward(x.data(), dt.data(), A.data(), Bm.data(), Cm.data(), D.data(), y.data(),
                            fwd.data(), c.B, c.T, c.H, c.P, c.G, c.N, c.chunk, nullptr, blocks);
    cuda::SsdChunkedBackward(dy.data(), x.data(), dt.data(), A.data(), Bm.data(), Cm.data(),
                             D.data(), dx.data(), ddt.data(), dA.data(), dB.data(), dC.data(),
                             dD.data(), bwd.data(), c.B, c.T, c.H, c.P, c.G, c.N, c.chunk, nullptr,
                             blocks);
    for (float& v : dA) v -= 0.5f;
    for (float& v : dD) v += 0.25f;
    Vec* o = out[run];
    o[0] = y, o[1] = dx, o[2] = ddt, o[3] = dB, o[4] = dC, o[5] = dA, o[6] = dD;
  }
  const char* names[7] = {"y", "dx", "ddt", "dB", "dC", "dA", "dD"};
  const DVec* want[7] = {&ref.y, &ref.dx, &ref.ddt, &ref.dB, &ref.dC, &ref.dA, &ref.dD};
  for (int k = 0; k < 7; ++k) {
    ExpectClose(out[0][k], *want[k], kTol, names[k]);
    for (int run = 1; run < 3; ++run) {
      EXPECT_EQ(0,
                std::memcmp(out[0][k].data(), out[run][k].data(), out[0][k].size() * sizeof(float)))
          << names[k] << " differs between schedules 0 and " << run;
    }
  }
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
