// The warp-level chunked SSD scan (ssd_mma.cu, ssd_mma_backward.cu;
// SsdCudaKernel::kChunkedMma) run on the CPU by the warp emulator
// (core/kernels/cuda/testing/warp_emulator.h): the kernels' own source, every lane a thread,
// mma.sync by the PTX fragment layouts. It checks the indexing, the masks,
// the tiles' orientations, the head sums and the scalar gradients against
// an independent reference (the recurrence and its adjoint, in double) on
// any machine; ssm_gpu_test runs the same kernels on a GPU.
#define GTP_CUDA_HOST_EMULATION
#include "core/kernels/cuda/testing/warp_emulator.h"
#include "core/kernels/ssm/ssd_mma.cu"
#include "core/kernels/ssm/ssd_mma_backward.cu"
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

alignas(16) double smem[200 * 1024 / 8];  // the blocks' dynamic shared memory

using Vec = std::vector<float>;
using DVec = std::vector<double>;

struct Case {
  int64_t B, T, H, P, G, N;
  int offset = 0;  // x, dy, B, C start this many floats into their buffers (a view's start)
};

Vec Random(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  Vec v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// Every element within tol·max(max|want|, 1) of want, and finite. The
// inputs are O(1), so 1 is the scale of the terms an output sums: an output
// whose reference is exactly 0 (dA at T = 1, where S_{−1} = 0) is the f32
// cancellation of such terms.
void ExpectClose(const Vec& got, const DVec& want, double tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double m = 1.0;
  for (double w : want) m = std::fmax(m, std::fabs(w));

  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_TRUE(std::isfinite(got[i])) << what << "[" << i << "]";
    ASSERT_NEAR(got[i], want[i], tol * m) << what << "[" << i << "] of " << got.size();
  }
}

class SsdMmaEmulationTest : public ::testing::TestWithParam<std::tuple<Case, bool>> {};

// kChunkedMma's split bf16 products keep about 2⁻¹⁶ of each product
// (ssm_gpu_test kMmaFwdL2); the outputs sum up to a few hundred products of
// O(1) terms, whose errors mostly cancel: 2e-4 of the largest |value| (the GPU
// test's per-element bound, kScanTol) leaves an order of magnitude. The
// emulator's mma sums in f32 in k order, as the tensor cores do up to
// their rounding.
constexpr double kTol = 2e-4;
// kChunkedMmaBf16 rounds each operand to bf16 (2⁻⁹ relative): a product of
// two rounded operands is within 2·2⁻⁹ ≈ 3.9e-3 of the exact one, and y, dx,
// dB, dC, ddt go through two products in a row (the masked C·Bᵀ or X·dYᵀ
// rounded again as the next product's operand): ≤ ~4·2⁻⁹ ≈ 7.8e-3 a term,
// which random signs average down (measured ≤ 5.5e-3 of the largest value,
// 2026-12-05). 2e-2 bounds the worst term with room. dA sums B·T such terms
// that largely cancel, so its bound is 2e-2 of Σ|term| (measured 8.5e-2 of
// max(|dA|, 1), ≤ 5.5e-3 of Σ|term|).
constexpr double kBf16Tol = 2e-2;

TEST_P(SsdMmaEmulationTest, MatchesTheRecurrenceInEverySchedule) {
  const Case c = std::get<0>(GetParam());
  const bool split = std::get<1>(GetParam());
  gtp::emu::SetShared(smem, sizeof(smem));
  const int64_t nx = c.B * c.T * c.H * c.P, nt = c.B * c.T * c.H, nb = c.B * c.T * c.G * c.N;
  Vec x = Random(nx, 1), Bm = Random(nb, 2), Cm = Random(nb, 3), D = Random(c.H, 4),
      dy = Random(nx, 5), dt = Random(nt, 6, 0.2f), A = Random(c.H, 7, 0.5f);
  for (float& v : dt) v = 0.05f + std::fabs(v);
  for (float& v : A) v = -std::exp(v);
  const reference::SsdReference ref =
      reference::RunSsdReference({c.B, c.T, c.H, c.P, c.G, c.N}, x, dt, A, Bm, Cm, D, dy);
  auto at = [&](const Vec& v) {  // v's values `offset` floats into a new buffer
    Vec buf(c.offset, NAN);
    buf.insert(buf.end(), v.begin(), v.end());
    return buf;
  };
  const Vec xo = at(x), dyo = at(dy), Bo = at(Bm), Co = at(Cm);
  const float *px = xo.data() + c.offset, *pdy = dyo.data() + c.offset, *pB = Bo.data() + c.offset,
              *pC = Co.data() + c.offset;
  // Three runs, each in another order of the block's threads between
  // barriers (the emulator's schedules): outputs equal bit for bit, so no
  // thread reads shared memory another writes without a barrier between.
  const gtp::emu::Schedule schedules[3] = {
      gtp::emu::Schedule::kInOrder, gtp::emu::Schedule::kReverse, gtp::emu::Schedule::kShuffled};
  Vec out[3][7];
  for (int run = 0; run < 3; ++run) {
    gtp::emu::SetSchedule(schedules[run], 11);
    Vec y(nx, NAN), dx(nx, NAN), ddt(nt, NAN), dB(nb, NAN), dC(nb, NAN), dA(c.H, 0.5f),
        dD(c.H, -0.25f);  // dA, dD accumulate onto these
    Vec scratch(cuda::SsdMmaScratchFloats(c.B, c.T, c.H, c.P, c.G, c.N, true) + 1, NAN);
    cuda::SsdMmaForward(px, dt.data(), A.data(), pB, pC, D.data(), y.data(), scratch.data(), c.B,
                        c.T, c.H, c.P, c.G, c.N, split, nullptr);
    cuda::SsdMmaBackward(pdy, px, dt.data(), A.data(), pB, pC, D.data(), dx.data(), ddt.data(),
                         dA.data(), dB.data(), dC.data(), dD.data(), scratch.data(), c.B, c.T, c.H,
                         c.P, c.G, c.N, split, nullptr);
    for (float& v : dA) v -= 0.5f;
    for (float& v : dD) v += 0.25f;
    out[run][0] = y;
    out[run][1] = dx;
    out[run][2] = ddt;
    out[run][3] = dB;
    out[run][4] = dC;
    out[run][5] = dA;
    out[run][6] = dD;
  }
  const char* names[7] = {"y", "dx", "ddt", "dB", "dC", "dA", "dD"};
  const DVec* want[7] = {&ref.y, &ref.dx, &ref.ddt, &ref.dB, &ref.dC, &ref.dA, &ref.dD};
  for (int k = 0; k < 7; ++k) {
    if (!split && k == 5) {  // dA at bf16: against the size of its terms
      for (int64_t h = 0; h < c.H; ++h) {
        ASSERT_TRUE(std::isfinite(out[0][5][h])) << "dA[" << h << "]";
        EXPECT_NEAR(out[0][5][h], ref.dA[h], kBf16Tol * std::fmax(ref.dA_terms[h], 1.0))
            << "dA[" << h << "]";
      }
    } else {
      ExpectClose(out[0][k], *want[k], split ? kTol : kBf16Tol, names[k]);
    }
    for (int run = 1; run < 3; ++run) {
      EXPECT_EQ(0,
                std::memcmp(out[0][k].data(), out[run][k].data(), out[0][k].size() * sizeof(float)))
          << names[k] << " differs between schedules 0 and " << run;
    }
  }
}

// Widths 16, 32, 64 (64: 32-step chunks); 4, 2 and 1 heads a block; the
// head sums in the block (H/hb = G) and through partials (H/hb > G); T not a
// multiple of the chunk, one step, one chunk exactly, odd P and N.
INSTANTIATE_TEST_SUITE_P(
    Shapes, SsdMmaEmulationTest,
    ::testing::Combine(
        ::testing::Values(Case{1, 70, 4, 16, 1, 16},   // 4 heads a block, the group's sum in it
                          Case{2, 37, 4, 8, 2, 16},    // 2 heads a block, G = 2
                          Case{1, 50, 6, 5, 1, 7},     // 2 heads a block, 3 partials a group
                          Case{2, 130, 8, 16, 1, 16},  // 4 heads a block, 2 partials; 3 chunks
                          Case{1, 64, 2, 16, 2, 16},   // G = H: a head a block; T = one chunk
                          Case{2, 1, 4, 16, 1, 16},    // T = 1
                          Case{1, 40, 2, 32, 1, 20},   // width 32
                          Case{1, 45, 2, 64, 1, 33},   // width 64: 32-step chunks, 2 of them
                          Case{1, 40, 4, 64, 1, 64},   // width 64, 4 heads a group: 2 a block fit
                          Case{1, 70, 4, 16, 1, 16, 1}),  // inputs 4 bytes past 16-byte alignment
        ::testing::Bool()));  // split products (kChunkedMma), or bf16 (kChunkedMmaBf16)

}  // namespace
}  // namespace gtp::kernels::ssm
