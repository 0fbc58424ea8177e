// The LayerNorm and RMSNorm CUDA kernels (core/kernels/cuda/norm.cu: the
// row kernels, the two-pass dw/db reduction, the fused bf16 backward of the
// GPU training path) run on the CPU by the warp emulator
// (core/kernels/cuda/testing/warp_emulator.h) against the norms' definitions
// in double, f32 and bf16, in three orders of each block's threads
// (bit-identical outputs: no race between barriers). norm_gpu_test runs the
// same kernels on a GPU.
// The emulator before the kernel source:
// clang-format off
#define GTP_CUDA_HOST_EMULATION
#include "core/kernels/cuda/testing/warp_emulator.h"
#include "core/kernels/cuda/norm.cu"
// clang-format on
// (norm.cu's launchers now run the grids on the host, synchronously)

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "core/kernels/cuda/testing/emulation_checks.h"
#include "gtest/gtest.h"

namespace gtp::kernels::cuda {
namespace {

alignas(16) double smem[64 * 1024];  // the blocks' dynamic shared memory

using DVec = std::vector<double>;

// Values of type T (float or bf16) from N(0, scale²), and the same as doubles.
template <class T>
struct Data {
  std::vector<T> v;
  DVec d;
};
template <class T>
Data<T> Random(size_t n, uint32_t seed, float scale = 1.0f, float shift = 0.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(shift, scale);
  Data<T> out;
  for (size_t i = 0; i < n; ++i) {
    const float f = dist(rng);
    if constexpr (std::is_same_v<T, float>) {
      out.v.push_back(f);
      out.d.push_back(f);
    } else {
      const bf16 b = ToBF16(f);
      out.v.push_back(b);
      out.d.push_back(ToF32(b));
    }
  }
  return out;
}
template <class T>
std::vector<float> AsFloat(const std::vector<T>& v) {
  std::vector<float> out;
  for (const T& x : v) {
    if constexpr (std::is_same_v<T, float>) {
      out.push_back(x);
    } else {
      out.push_back(ToF32(x));
    }
  }
  return out;
}
template <class T>
std::vector<T> Nans(size_t n) {
  if constexpr (std::is_same_v<T, float>) {
    return std::vector<T>(n, NAN);
  } else {
    return std::vector<T>(n, ToBF16(NAN));
  }
}

struct Case {
  int64_t N, C;
  bool rms;
};

// f32: sums over C ≤ 768 and N ≤ 600 rows of O(1) terms in f32: far within
// 1e-4 of the largest value. bf16: the outputs are rounded to bf16 (2⁻⁹
// relative) after f32 math on bf16 inputs: 1e-2. (f32 dw, db stay f32 sums.)
template <class T>
constexpr double Tol() {
  return std::is_same_v<T, float> ? 1e-4 : 1e-2;
}

template <class T>
void RunCase(const Case& c) {
  gtp::emu::SetShared(smem, sizeof(smem));
  const int64_t N = c.N, C = c.C, n = N * C;
  const float eps = 1e-5f;
  const Data<T> x = Random<T>(n, 1, 1.5f, 0.3f), w = Random<T>(C, 2, 0.5f, 1.0f),
                b = Random<T>(C, 3), dy = Random<T>(n, 4), dres = Random<T>(n, 5);
  const Data<float> dw0 = Random<float>(C, 6), db0 = Random<float>(C, 7);
  // The definition, in double.
  DVec y(n), mean(N), rstd(N), dx(n), dw(dw0.d), db(db0.d);
  for (int64_t r = 0; r < N; ++r) {
    const double* xr = &x.d[r * C];
    double mu = 0.0, ss = 0.0;
    if (!c.rms) {
      for (int64_t j = 0; j < C; ++j) mu += xr[j];
      mu /= C;
    }
    for (int64_t j = 0; j < C; ++j) ss += (xr[j] - mu) * (xr[j] - mu);
    const double rs = 1.0 / std::sqrt(ss / C + eps);
    mean[r] = mu;
    rstd[r] = rs;
    double m1 = 0.0, m2 = 0.0;  // mean(dx̂), mean(dx̂·x̂)
    for (int64_t j = 0; j < C; ++j) {
      const double xh = (xr[j] - mu) * rs, g = dy.d[r * C + j] * w.d[j];
      y[r * C + j] = xh * w.d[j] + (c.rms ? 0.0 : b.d[j]);
      m1 += g;
      m2 += g * xh;
      dw[j] += dy.d[r * C + j] * xh;
      db[j] += dy.d[r * C + j];
    }
    m1 /= C;
    m2 /= C;
    for (int64_t j = 0; j < C; ++j) {
      const double xh = (xr[j] - mu) * rs, g = dy.d[r * C + j] * w.d[j];
      dx[r * C + j] = rs * (g - (c.rms ? 0.0 : m1) - xh * m2) + dres.d[r * C + j];
    }
  }
  const auto out = gtp::emu::InEverySchedule([&] {
    std::vector<T> yo = Nans<T>(n), dxo = Nans<T>(n);
    std::vector<float> mo(N, NAN), ro(N, NAN), dwo = dw0.v, dbo = db0.v;
    std::vector<float> scratch(LayerNormBackwardScratchFloats(N, C), NAN);
    if (c.rms) {
      RMSNormForward(x.v.data(), w.v.data(), yo.data(), ro.data(), N, C, eps, nullptr);
      RMSNormBackward(dy.v.data(), x.v.data(), w.v.data(), ro.data(), dxo.data(), dwo.data(),
                      scratch.data(), N, C, nullptr, dres.v.data());
    } else {
      LayerNormForward(x.v.data(), w.v.data(), b.v.data(), yo.data(), mo.data(), ro.data(), N, C,
                       eps, nullptr);
      LayerNormBackward(dy.v.data(), x.v.data(), w.v.data(), mo.data(), ro.data(), dxo.data(),
                        dwo.data(), dbo.data(), scratch.data(), N, C, nullptr, dres.v.data());
    }
    return std::vector<std::vector<float>>{AsFloat(yo), ro, AsFloat(dxo), dwo, dbo, mo};
  });
  const double tol = Tol<T>();
  EXPECT_TRUE(gtp::emu::Near(out[0], y, tol, "y"));
  EXPECT_TRUE(gtp::emu::Near(out[1], rstd, 1e-4, "rstd"));
  EXPECT_TRUE(gtp::emu::Near(out[2], dx, tol, "dx"));
  EXPECT_TRUE(gtp::emu::Near(out[3], dw, 1e-4, "dw"));
  if (!c.rms) {
    EXPECT_TRUE(gtp::emu::Near(out[4], db, 1e-4, "db"));
    EXPECT_TRUE(gtp::emu::Near(out[5], mean, 1e-4, "mean"));
  }
}

class NormEmulationTest : public ::testing::TestWithParam<Case> {};

TEST_P(NormEmulationTest, F32MatchesTheDefinition) { RunCase<float>(GetParam()); }
TEST_P(NormEmulationTest, Bf16MatchesTheDefinition) { RunCase<bf16>(GetParam()); }

// C = 768 (GPT-2's width: bf16's fused backward, 3 passes of 256 columns),
// 256 (one pass), 200 (16-byte rows, not the fused backward), 30 (no
// 16-byte rows); N = 600 (38 chunks of the dw/db reduction) and odd N.
// 512 at N = 4: one chunk of 4 rows, so warps 4-7 of the fused backward's
// block take no row (their column sums stay 0). 1024 (350M), and 1792 and
// 2048 (1.3B: the forward's row in registers at its widest; the fused
// backward with its column sums in shared memory).
INSTANTIATE_TEST_SUITE_P(Shapes, NormEmulationTest,
                         ::testing::Values(Case{37, 768, false}, Case{37, 768, true},
                                           Case{600, 256, false}, Case{20, 200, false},
                                           Case{20, 200, true}, Case{9, 30, false},
                                           Case{9, 30, true}, Case{4, 512, false},
                                           Case{4, 512, true}, Case{40, 1024, false},
                                           Case{9, 2048, true}, Case{37, 2048, false},
                                           Case{21, 1792, false}));

// Two launches' outputs (at width C) bit for bit, and no NaN in the first:
// the failing element and both values otherwise.
::testing::AssertionResult SameBitsNoNaN(const std::vector<float>& a, const std::vector<float>& b,
                                         int64_t C) {
  if (a.size() != b.size()) {
    return ::testing::AssertionFailure() << "C " << C << ": sizes " << a.size() << ", " << b.size();
  }
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i])) return ::testing::AssertionFailure() << "C " << C << " element " << i << " is NaN";
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) {
      return ::testing::AssertionFailure()
             << "C " << C << " element " << i << ": " << a[i] << " vs " << b[i];
    }
  }
  return ::testing::AssertionSuccess();
}

// The forward kernels' row-in-registers form (kIters > 0, C = kIters·256)
// adds the same values in the same order as the loop form (kIters = 0, any
// C): the same bits, checked here launch against launch.
template <int kIters>
void ExpectRowFormsAgree(bool rms) {
  gtp::emu::SetShared(smem, sizeof(smem));
  constexpr int64_t C = int64_t{kIters} * kWarpSize * kBf16Vec;
  const int64_t N = 11;  // two blocks of 8 rows, the second partly empty
  const Data<bf16> x = Random<bf16>(N * C, 11, 1.5f, 0.3f), w = Random<bf16>(C, 12, 0.5f, 1.0f),
                   b = Random<bf16>(C, 13);
  auto run = [&](auto iters) {
    std::vector<bf16> y = Nans<bf16>(N * C);
    std::vector<float> mean(N, NAN), rstd(N, NAN);
    if (rms) {
      Launch(RMSNormForwardKernel<bf16, kBf16Vec, decltype(iters)::value>, RowBlocks(N),
             kRowThreads, 0, nullptr, x.v.data(), w.v.data(), y.data(), rstd.data(), N, C, 1e-5f);
    } else {
      Launch(LayerNormForwardKernel<bf16, kBf16Vec, decltype(iters)::value>, RowBlocks(N),
             kRowThreads, 0, nullptr, x.v.data(), w.v.data(), b.v.data(), y.data(), mean.data(),
             rstd.data(), N, C, 1e-5f);
    }
    std::vector<float> all = AsFloat(y);
    all.insert(all.end(), rstd.begin(), rstd.end());
    if (!rms) all.insert(all.end(), mean.begin(), mean.end());
    return all;
  };
  const std::vector<float> regs = run(std::integral_constant<int, kIters>{});
  const std::vector<float> loop = run(std::integral_constant<int, 0>{});
  ASSERT_TRUE(SameBitsNoNaN(regs, loop, C));
}

TEST(NormEmulationRowForms, LayerNormRowInRegistersGivesTheLoopsBits) {
  ExpectRowFormsAgree<1>(false);
  ExpectRowFormsAgree<3>(false);
  ExpectRowFormsAgree<4>(false);
  ExpectRowFormsAgree<kMaxRowIters>(false);
}

TEST(NormEmulationRowForms, RmsNormRowInRegistersGivesTheLoopsBits) {
  ExpectRowFormsAgree<1>(true);
  ExpectRowFormsAgree<3>(true);
  ExpectRowFormsAgree<4>(true);
  ExpectRowFormsAgree<kMaxRowIters>(true);
}

// The fused backward's two homes for the column sums (registers, shared
// memory: norm.cu's kSmemSums) add the same terms in the same order: the
// same bits for dx and every partial sum, LayerNorm (dw and db) and RMSNorm
// (dw only), checked launch against launch. N = 37 in chunks of 16 rows:
// the last block's warps 5–7 take no row.
template <int kIters>
void ExpectSumFormsAgree(bool rms) {
  gtp::emu::SetShared(smem, sizeof(smem));
  constexpr int64_t C = int64_t{kIters} * kWarpSize * kBf16Vec;
  const int64_t N = 37, rows_per_chunk = 16, chunks = CeilDiv(N, rows_per_chunk);
  const Data<bf16> x = Random<bf16>(N * C, 21, 1.5f, 0.3f), w = Random<bf16>(C, 22, 0.5f, 1.0f),
                   dy = Random<bf16>(N * C, 23), dres = Random<bf16>(N * C, 24);
  const Data<float> mean = Random<float>(N, 25, 0.1f), rstd = Random<float>(N, 26, 0.1f, 1.0f);
  auto run = [&](auto smem_sums) {
    constexpr bool kSmem = decltype(smem_sums)::value;
    std::vector<bf16> dx = Nans<bf16>(N * C);
    std::vector<float> pw(chunks * C, NAN), pb(chunks * C, NAN);
    const size_t rows = kSmem && !rms ? 2 * kRowsPerBlock : kRowsPerBlock;
    Launch(NormBackwardFusedKernel<kIters, kSmem>, static_cast<unsigned>(chunks), kRowThreads,
           sizeof(float) * rows * C, nullptr, dy.v.data(), x.v.data(), w.v.data(),
           rms ? nullptr : mean.v.data(), rstd.v.data(), dx.data(), dres.v.data(), pw.data(),
           rms ? nullptr : pb.data(), N, rows_per_chunk);
    std::vector<float> all = AsFloat(dx);
    all.insert(all.end(), pw.begin(), pw.end());
    if (!rms) all.insert(all.end(), pb.begin(), pb.end());
    return all;
  };
  const std::vector<float> regs = run(std::false_type{}), shared = run(std::true_type{});
  ASSERT_TRUE(SameBitsNoNaN(regs, shared, C));
}

TEST(NormEmulationSumForms, LayerNormSharedSumsGiveTheRegistersBits) {
  ExpectSumFormsAgree<1>(false);
  ExpectSumFormsAgree<3>(false);
  ExpectSumFormsAgree<kMaxFusedIters>(false);
}

TEST(NormEmulationSumForms, RmsNormSharedSumsGiveTheRegistersBits) {
  ExpectSumFormsAgree<1>(true);
  ExpectSumFormsAgree<3>(true);
  ExpectSumFormsAgree<kMaxFusedIters>(true);
}

}  // namespace
}  // namespace gtp::kernels::cuda
