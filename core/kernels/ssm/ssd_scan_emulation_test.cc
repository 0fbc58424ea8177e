// The SSD scan's recurrence kernels (ssd_scan.cu: SsdCudaKernel::kRecurrence,
// the default forward, and the backward where P·N > 256) run on the CPU by
// the warp emulator (core/kernels/cuda/testing/warp_emulator.h; the tile
// length chosen by its occupancy model) against the recurrence and its
// adjoint in double, in three orders of each block's threads (bit-identical
// outputs: no race between barriers). ssm_gpu_test runs the same kernels on
// a GPU.
#define GTP_CUDA_HOST_EMULATION
#include "core/kernels/cuda/testing/warp_emulator.h"
#include "core/kernels/ssm/ssd_scan.cu"
// (its launchers now run the grids on the host, synchronously)

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/kernels/ssm/testing/ssd_reference.h"
#include "gtest/gtest.h"

namespace gtp::kernels::ssm {
namespace {

alignas(128) double smem[228 * 1024 / 8];  // the blocks' dynamic shared memory

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

// The recurrence in f32 over T ≤ 40 steps of O(1) terms, its state reduced
// over up to N lanes a step: the f32 rounding of a few hundred terms, well
// within 2e-4 of the largest value (ssm_gpu_test's kScanTol for the same
// kernels); a wrong index, lane or checkpoint is O(1).
constexpr double kTol = 2e-4;

class SsdScanEmulationTest : public ::testing::TestWithParam<Case> {};

TEST_P(SsdScanEmulationTest, MatchesTheRecurrenceInEverySchedule) {
  const Case c = GetParam();
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
    gtp::emu::SetSchedule(schedules[run], 9);
    Vec y(nx, NAN), dx(nx, NAN), ddt(nt, NAN), dB(nb, NAN), dC(nb, NAN), dA(c.H, 0.5f),
        dD(c.H, -0.25f);  // dA, dD accumulate onto these
    Vec scratch(cuda::SsdScanBackwardScratchFloats(c.B, c.T, c.H, c.P, c.G, c.N, c.chunk) + 1, NAN);
    cuda::SsdScanForward(x.data(), dt.data(), A.data(), Bm.data(), Cm.data(), D.data(), y.data(),
                         c.B, c.T, c.H, c.P, c.G, c.N, nullptr);
    cuda::SsdScanBackward(dy.data(), x.data(), dt.data(), A.data(), Bm.data(), Cm.data(), D.data(),
                          dx.data(), ddt.data(), dA.data(), dB.data(), dC.data(), dD.data(),
                          scratch.data(), c.B, c.T, c.H, c.P, c.G, c.N, c.chunk, nullptr);
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
