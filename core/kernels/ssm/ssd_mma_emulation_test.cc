// The warp-level chunked SSD scan (ssd_mma.cu, ssd_mma_backward.cu;
// SsdCudaKernel::kChunkedMma) run on the CPU by the warp emulator
// (core/kernels/cuda/testing/warp_emulator.h): the kernels' own source, every lane a thread,
// mma.sync by the PTX fragment layouts. It checks the indexing, the masks,
// the tiles' orientations, the head sums and the scalar gradients against
// an independent reference (the recurrence and its adjoint, in double) on
// any machine; ssm_gpu_test runs the same kernels on a GPU.
// The emulator before the kernel source:
// clang-format off
#define GTP_CUDA_HOST_EMULATION
#include "core/kernels/cuda/testing/warp_emulator.h"
#include "core/kernels/ssm/ssd_mma.cu"
#include "core/kernels/ssm/ssd_mma_backward.cu"
// clang-format on
// (their launchers now run the grids on the host, synchronously)

#include <cmath>
#include <cstdint>
#include <tuple>
#include <vector>

#include "core/kernels/cuda/testing/emulation_checks.h"
#include "core/kernels/ssm/testing/ssd_emulation.h"
#include "gtest/gtest.h"

namespace gtp::kernels::ssm {
namespace {

alignas(16) double smem[200 * 1024 / 8];  // the blocks' dynamic shared memory

struct Case {
  int64_t B, T, H, P, G, N;
  int offset = 0;  // x, dy, B, C start this many floats into their buffers (a view's start)
  int64_t chunk = 128;  // the caller's chunk: 64-step chunks at width 32 where ≥ 64, else 32
};

class SsdMmaEmulationTest : public ::testing::TestWithParam<std::tuple<Case, bool>> {};

// kChunkedMma's split bf16 products keep about 2⁻¹⁶ of each product
// (ssm_gpu_test kMmaFwdL2); the outputs sum up to a few hundred products of
// O(1) terms, whose errors mostly cancel: 2e-4 of the largest |value| (the GPU
// test's per-element bound, kScanTol) leaves an order of magnitude. The
// emulator's mma sums in f32 in k order, as the tensor cores do up to
// their rounding.
constexpr double kTol = 2e-4;
// dA sums B·T·P·N terms that can cancel to far below their size, so its
// bound is of Σ|term| (ssd_reference.h dA_terms), not of the largest |dA|: a
// term goes through up to two split products (≤ 2⁻¹⁶ relative each), so its
// error is ≤ 2·2⁻¹⁶ ≈ 3.1e-5 of |term| (measured ≤ 6.4e-6 of Σ|term|,
// 2026-12-05; with 32-step chunks at width 32, dA[0] = −2.34 of Σ|term| =
// 94.6 was 6.0e-4 off, 2.6e-4 of |dA|).
constexpr double kDaTol = 3.1e-5;
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
  const reference::SsdProblem p = reference::MakeSsdProblem({c.B, c.T, c.H, c.P, c.G, c.N});
  auto at = [&](const std::vector<float>& v) {  // v's values `offset` floats into a new buffer
    std::vector<float> buf(c.offset, NAN);
    buf.insert(buf.end(), v.begin(), v.end());
    return buf;
  };
  const std::vector<float> xo = at(p.x), dyo = at(p.dy), Bo = at(p.Bm), Co = at(p.Cm);
  const float *px = xo.data() + c.offset, *pdy = dyo.data() + c.offset, *pB = Bo.data() + c.offset,
              *pC = Co.data() + c.offset;
  const auto out = reference::RunSsdInEverySchedule(p, [&](const auto& p, auto& o) {
    std::vector<float> scratch(
        cuda::SsdMmaScratchFloats(c.B, c.T, c.H, c.P, c.G, c.N, c.chunk, true) + 1, NAN);
    cuda::SsdMmaForward(px, p.dt.data(), p.A.data(), pB, pC, p.D.data(), o.y.data(), scratch.data(),
                        c.B, c.T, c.H, c.P, c.G, c.N, c.chunk, split, nullptr);
    cuda::SsdMmaBackward(pdy, px, p.dt.data(), p.A.data(), pB, pC, p.D.data(), o.dx.data(),
                         o.ddt.data(), o.dA.data(), o.dB.data(), o.dC.data(), o.dD.data(),
                         scratch.data(), c.B, c.T, c.H, c.P, c.G, c.N, c.chunk, split, nullptr);
  });
  const double tol = split ? kTol : kBf16Tol, da_tol = split ? kDaTol : kBf16Tol;
  EXPECT_TRUE(reference::SsdNear(out, p.ref, tol, /*skip=*/{5}));
  for (int64_t h = 0; h < c.H; ++h) {  // dA: against the size of its terms
    ASSERT_TRUE(std::isfinite(out[5][h])) << "dA[" << h << "]";
    EXPECT_NEAR(out[5][h], p.ref.dA[h], da_tol * std::fmax(p.ref.dA_terms[h], 1.0))
        << "dA[" << h << "]";
  }
}

// Widths 16, 32, 64 (16 and 64: 32-step chunks; 32: 64-step chunks, and
// 32-step ones where chunk < 64); 4, 2 and 1 heads a block; the head sums in the block (H/hb =
// G) and through partials (H/hb > G); T not a multiple of the chunk, one
// step, one chunk exactly, odd P and N.
INSTANTIATE_TEST_SUITE_P(
    Shapes, SsdMmaEmulationTest,
    ::testing::Combine(
        ::testing::Values(Case{1, 70, 4, 16, 1, 16},     // 4 heads a block, the group's sum in it
                          Case{2, 37, 4, 8, 2, 16},      // 2 heads a block, G = 2
                          Case{1, 50, 6, 5, 1, 7},       // 2 heads a block, 3 partials a group
                          Case{2, 130, 8, 16, 1, 16},    // 4 heads a block, 2 partials; 3 chunks
                          Case{1, 64, 2, 16, 2, 16},     // G = H: a head a block; T = one chunk
                          Case{2, 1, 4, 16, 1, 16},      // T = 1
                          Case{1, 40, 2, 32, 1, 20},     // width 32
                          Case{1, 45, 2, 64, 1, 33},     // width 64: 32-step chunks, 2 of them
                          Case{1, 40, 4, 64, 1, 64},     // width 64, 4 heads a group: 2 a block fit
                          Case{1, 70, 4, 16, 1, 16, 1},  // inputs 4 bytes past 16-byte alignment
                          Case{1, 70, 4, 16, 1, 16, 0, 32},   // width 16, 32-step chunks: 3
                          Case{2, 130, 8, 16, 1, 16, 0, 32},  // the same with 2 partials a group
                          Case{1, 64, 2, 16, 2, 16, 0, 32},   // G = H, T two chunks exactly
                          Case{1, 40, 2, 32, 1, 20, 0, 32},   // width 32, 32-step chunks
                          Case{1, 130, 2, 32, 1, 20}),  // width 32, 64-step chunks: 3
        ::testing::Bool()));  // split products (kChunkedMma), or bf16 (kChunkedMmaBf16)

}  // namespace
}  // namespace gtp::kernels::ssm
