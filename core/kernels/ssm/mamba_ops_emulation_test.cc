// The Mamba mixer's small CUDA kernels (mamba_conv.cu: causal conv1d;
// mamba_ops.cu: gated RMSNorm, the dt softplus and A = −exp(A_log); their
// column sums) run on the CPU by the warp emulator (core/kernels/cuda/testing/warp_emulator.h),
// against the ops' definitions in double (mamba_ops.h), in three orders of
// each block's threads (bit-identical outputs: no race between barriers).
// ssm_gpu_test runs the same kernels on a GPU against the CPU ops.
// The emulator before the kernel source:
// clang-format off
#define GTP_CUDA_HOST_EMULATION
#include "core/kernels/cuda/testing/warp_emulator.h"
#include "core/kernels/ssm/mamba_conv.cu"
#include "core/kernels/ssm/mamba_ops.cu"
// clang-format on
// (its launchers now run the grids on the host, synchronously)

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "core/kernels/cuda/testing/emulation_checks.h"
#include "gtest/gtest.h"

namespace gtp::kernels::ssm {
namespace {

alignas(16) double smem[1024];  // the blocks' dynamic shared memory (these kernels take none)

using Vec = std::vector<float>;
using DVec = std::vector<double>;

// The kernels sum up to a few thousand O(1) f32 terms (a norm's group, a
// column sum over the rows): an error of a few hundred ulps of the largest
// value at worst, so 1e-4 of it bounds them, and a wrong index or mask is O(1).
constexpr double kTol = 1e-4;

using ::gtp::emu::InEverySchedule;

Vec Random(size_t n, uint32_t seed, float scale = 1.0f) {
  return ::gtp::emu::RandomNormal(n, seed, scale);
}

double Sig(double v) { return 1.0 / (1.0 + std::exp(-v)); }
double SiluD(double v) { return v * Sig(v); }
double SiluGradD(double v) { return Sig(v) * (1.0 + v * (1.0 - Sig(v))); }

// ---------------------------------------------------------------- conv1d

struct ConvCase {
  int64_t B, T, Ch, K;
  bool silu;
};

class ConvEmulationTest : public ::testing::TestWithParam<ConvCase> {};

// pre[b, t, c] = bias[c] + Σ_k w[c, k]·x[b, t − (K−1) + k, c] (x = 0 before
// the sequence), y = silu(pre) or pre; the backward by the chain rule.
TEST_P(ConvEmulationTest, MatchesTheDefinition) {
  const ConvCase c = GetParam();
  gtp::emu::SetShared(smem, sizeof(smem));
  const int64_t n = c.B * c.T * c.Ch;
  const Vec x = Random(n, 1), w = Random(c.Ch * c.K, 2, 0.5f), bias = Random(c.Ch, 3),
            dy = Random(n, 4), dw0 = Random(c.Ch * c.K, 5), db0 = Random(c.Ch, 6);
  DVec pre(n), y(n), dx(n, 0.0), dw(dw0.begin(), dw0.end()), db(db0.begin(), db0.end());
  auto at = [&](int64_t b, int64_t t, int64_t ch) { return (b * c.T + t) * c.Ch + ch; };
  for (int64_t b = 0; b < c.B; ++b) {
    for (int64_t t = 0; t < c.T; ++t) {
      for (int64_t ch = 0; ch < c.Ch; ++ch) {
        double acc = bias[ch];
        for (int64_t k = 0; k < c.K; ++k) {
          const int64_t s = t - (c.K - 1) + k;
          if (s >= 0) acc += double{w[ch * c.K + k]} * x[at(b, s, ch)];
        }
        pre[at(b, t, ch)] = acc;
        y[at(b, t, ch)] = c.silu ? SiluD(acc) : acc;
      }
    }
  }
  for (int64_t b = 0; b < c.B; ++b) {
    for (int64_t t = 0; t < c.T; ++t) {
      for (int64_t ch = 0; ch < c.Ch; ++ch) {
        const int64_t i = at(b, t, ch);
        const double g = dy[i] * (c.silu ? SiluGradD(pre[i]) : 1.0);
        db[ch] += g;
        for (int64_t k = 0; k < c.K; ++k) {
          const int64_t s = t - (c.K - 1) + k;
          if (s < 0) continue;
          dw[ch * c.K + k] += g * x[at(b, s, ch)];
          dx[at(b, s, ch)] += g * w[ch * c.K + k];
        }
      }
    }
  }
  const std::vector<Vec> out = InEverySchedule([&] {
    Vec yo(n, NAN), dxo(n, NAN), dwo = dw0, dbo = db0;
    Vec scratch(cuda::CausalConv1dBackwardScratchFloats(c.B, c.T, c.Ch, c.K), NAN);
    cuda::CausalConv1dForward(x.data(), w.data(), bias.data(), yo.data(), c.B, c.T, c.Ch, c.K,
                              c.silu, nullptr);
    cuda::CausalConv1dBackward(dy.data(), x.data(), w.data(), bias.data(), c.silu, dxo.data(),
                               dwo.data(), dbo.data(), scratch.data(), c.B, c.T, c.Ch, c.K,
                               nullptr);
    // dx in bf16 (in_proj_x's gradient input): as a cast of dxo.
    std::vector<bf16> dxb(n, ToBF16(NAN));
    Vec dw2 = dw0, db2 = db0, dxbf;
    cuda::CausalConv1dBackward(dy.data(), x.data(), w.data(), bias.data(), c.silu, dxb.data(),
                               dw2.data(), db2.data(), scratch.data(), c.B, c.T, c.Ch, c.K,
                               nullptr);
    for (const bf16& v : dxb) dxbf.push_back(ToF32(v));
    return std::vector<Vec>{yo, dxo, dwo, dbo, dxbf};
  });
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(ToBF16(out[1][i]).bits, ToBF16(out[4][i]).bits) << "bf16 dx[" << i << "]";
  }
  EXPECT_TRUE(gtp::emu::Near(out[0], y, kTol, "y"));
  EXPECT_TRUE(gtp::emu::Near(out[1], dx, kTol, "dx"));
  EXPECT_TRUE(gtp::emu::Near(out[2], dw, kTol, "dw"));
  EXPECT_TRUE(gtp::emu::Near(out[3], db, kTol, "dbias"));
}

// The run kernels (K ≤ 4, T not a multiple of the 8-step run; the
// backward's slabs of 8 runs at these narrow widths, one across two
// sequences), the backward's
// stream kernel (Ch a multiple of 64: 32-step segments, the last one short,
// 8 a slab, a slab across sequences, several channel blocks; T shorter than
// a segment and than K) and the per-output kernels (K = 5), with and without
// the SiLU.
INSTANTIATE_TEST_SUITE_P(Shapes, ConvEmulationTest,
                         ::testing::Values(ConvCase{2, 37, 40, 4, true},
                                           ConvCase{1, 20, 33, 3, false},
                                           ConvCase{3, 5, 8, 1, true}, ConvCase{2, 19, 12, 5, true},
                                           ConvCase{1, 70, 64, 2, true},   // stream: 3 segments
                                           ConvCase{3, 50, 36, 4, true},   // 21 runs: 3 slabs
                                           ConvCase{5, 30, 20, 3, false},  // 20 runs: 3 slabs
                                           ConvCase{5, 37, 128, 4, true},  // stream: 10 segments
                                           ConvCase{2, 64, 64, 3, false},  // stream: whole segments
                                           ConvCase{3, 3, 64, 4, true},    // stream: T < K
                                           ConvCase{2, 33, 64, 1, true},   // stream: K = 1
                                           // stream: interior segments (unchecked steps)
                                           ConvCase{3, 100, 64, 4, true},
                                           ConvCase{2, 96, 64, 2, false},
                                           ConvCase{2, 70, 64, 1, true}));

// The stream kernel (aligned operands) and the run kernel (the same values
// one float off alignment) form each pre, g and dx by the same expression:
// dx bit for bit, f32 and bf16. Their dw and dbias sums differ in order only.
TEST(ConvEmulation, StreamAndRunKernelsGiveTheSameDx) {
  gtp::emu::SetShared(smem, sizeof(smem));
  // Segments at the sequence's start and end (checked steps) and between
  // them (unchecked).
  const int64_t B = 3, T = 109, Ch = 128, K = 4, n = B * T * Ch;
  const Vec x = Random(n, 11), w = Random(Ch * K, 12, 0.5f), bias = Random(Ch, 13),
            dy = Random(n, 14);
  // Each operand at offset 0 (aligned: the stream kernel) and 1 (the run kernel).
  struct Run {
    Vec dx, dw, db;
    std::vector<uint16_t> dxb;
  };
  auto run = [&](int64_t off) {
    Vec xo(n + off), dyo(n + off), dxo(n + off, NAN);
    std::copy(x.begin(), x.end(), xo.begin() + off);
    std::copy(dy.begin(), dy.end(), dyo.begin() + off);
    std::vector<bf16> dxb(n + off, ToBF16(NAN));
    EXPECT_EQ(cuda::ConvStreams(B, T, Ch, K, dyo.data() + off, xo.data() + off, dxo.data() + off,
                                sizeof(float)),
              off == 0);
    Run r{Vec(), Vec(Ch * K, 0.0f), Vec(Ch, 0.0f), {}};
    Vec scratch(cuda::CausalConv1dBackwardScratchFloats(B, T, Ch, K), NAN);
    cuda::CausalConv1dBackward(dyo.data() + off, xo.data() + off, w.data(), bias.data(), true,
                               dxo.data() + off, r.dw.data(), r.db.data(), scratch.data(), B, T, Ch,
                               K, nullptr);
    Vec dw2(Ch * K, 0.0f), db2(Ch, 0.0f);
    cuda::CausalConv1dBackward(dyo.data() + off, xo.data() + off, w.data(), bias.data(), true,
                               dxb.data() + off, dw2.data(), db2.data(), scratch.data(), B, T, Ch,
                               K, nullptr);
    r.dx.assign(dxo.begin() + off, dxo.end());
    for (int64_t i = 0; i < n; ++i) r.dxb.push_back(dxb[off + i].bits);
    return r;
  };
  const Run stream = run(0), runs = run(1);
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_FALSE(std::isnan(stream.dx[i])) << "dx[" << i << "]";
    uint32_t a, b;
    std::memcpy(&a, &stream.dx[i], 4);
    std::memcpy(&b, &runs.dx[i], 4);
    ASSERT_EQ(a, b) << "dx[" << i << "]";
    ASSERT_EQ(stream.dxb[i], runs.dxb[i]) << "bf16 dx[" << i << "]";
  }
  const DVec dw(runs.dw.begin(), runs.dw.end()), db(runs.db.begin(), runs.db.end());
  EXPECT_TRUE(gtp::emu::Near(stream.dw, dw, kTol, "dw"));
  EXPECT_TRUE(gtp::emu::Near(stream.db, db, kTol, "dbias"));
}

// The stream kernel's slabs are its grid's y (≤ 65535): many short
// sequences within the 32-bit index limit take the run kernel instead.
TEST(ConvEmulation, ManyShortSequencesTakeTheRunKernel) {
  alignas(16) static float p[4];
  ASSERT_TRUE(cuda::ConvRuns(600000, 1, 64, 4));
  EXPECT_GT(cuda::ConvStreamSlabs(600000, 1), 65535);
  EXPECT_FALSE(cuda::ConvStreams(600000, 1, 64, 4, p, p, p, sizeof(float)));
  EXPECT_TRUE(cuda::ConvStreams(8, 1024, 64, 4, p, p, p, sizeof(float)));
}

// No channels: the scratch size is 0 and the backward writes nothing (the
// narrow-width slab rule divides by the channel blocks; Ch = 0 must not).
TEST(ConvEmulation, NoChannelsIsNothingToDo) {
  EXPECT_EQ(cuda::CausalConv1dBackwardScratchFloats(2, 8, 0, 4), 0);
  float sentinel = 7.0f;
  cuda::CausalConv1dBackward(&sentinel, &sentinel, &sentinel, &sentinel, true, &sentinel, &sentinel,
                             &sentinel, &sentinel, 2, 8, 0, 4, nullptr);
  EXPECT_EQ(sentinel, 7.0f);
}

// ---------------------------------------------------------------- gated RMSNorm

struct NormCase {
  int64_t N, Ch, group;
};

class GatedRmsNormEmulationTest : public ::testing::TestWithParam<NormCase> {};

// g = x·silu(z); per (row, group) r = 1/√(mean(g²) + eps); y = g·r·w; the
// backward by the chain rule (dw summed over rows).
TEST_P(GatedRmsNormEmulationTest, MatchesTheDefinition) {
  const NormCase c = GetParam();
  gtp::emu::SetShared(smem, sizeof(smem));
  const int64_t n = c.N * c.Ch, gs = c.Ch / c.group;
  const float eps = 1e-5f;
  const Vec x = Random(n, 11), z = Random(n, 12), w = Random(c.Ch, 13, 0.5f), dy = Random(n, 14),
            dw0 = Random(c.Ch, 15);
  DVec y(n), rstd(c.N * gs), dx(n), dz(n), dw(dw0.begin(), dw0.end());
  for (int64_t r = 0; r < c.N; ++r) {
    for (int64_t gi = 0; gi < gs; ++gi) {
      const int64_t base = r * c.Ch + gi * c.group;
      double ss = 0.0, dot = 0.0;
      for (int64_t j = 0; j < c.group; ++j) {
        const double g = x[base + j] * SiluD(z[base + j]);
        ss += g * g;
        dot += double{w[gi * c.group + j]} * dy[base + j] * g;
      }
      const double rs = 1.0 / std::sqrt(ss / c.group + eps), m = dot / c.group;
      rstd[r * gs + gi] = rs;
      for (int64_t j = 0; j < c.group; ++j) {
        const int64_t i = base + j, col = gi * c.group + j;
        const double si = SiluD(z[i]), g = x[i] * si;
        y[i] = g * rs * w[col];
        const double dg = rs * w[col] * dy[i] - g * rs * rs * rs * m;
        dx[i] = dg * si;
        dz[i] = dg * x[i] * SiluGradD(z[i]);
        dw[col] += dy[i] * g * rs;
      }
    }
  }
  const std::vector<Vec> out = InEverySchedule([&] {
    Vec yo(n, NAN), ro(c.N * gs, NAN), dxo(n, NAN), dzo(n, NAN), dwo = dw0;
    Vec scratch(cuda::GatedRmsNormBackwardScratchFloats(c.N, c.Ch), NAN);
    cuda::GatedRmsNormForward(x.data(), z.data(), w.data(), yo.data(), ro.data(), c.N, c.Ch,
                              c.group, eps, nullptr);
    cuda::GatedRmsNormBackward(dy.data(), x.data(), z.data(), w.data(), ro.data(), dxo.data(),
                               dzo.data(), dwo.data(), scratch.data(), c.N, c.Ch, c.group, nullptr);
    // y in bf16 (the out-projection's input in bf16 training): as a cast of yo.
    std::vector<bf16> yb(n, ToBF16(NAN));
    Vec rb(c.N * gs, NAN), ybf;
    cuda::GatedRmsNormForward(x.data(), z.data(), w.data(), yb.data(), rb.data(), c.N, c.Ch,
                              c.group, eps, nullptr);
    for (const bf16& v : yb) ybf.push_back(ToF32(v));
    // dz in bf16 (in_proj_z's gradient input): as a cast of dzo.
    std::vector<bf16> dzb(n, ToBF16(NAN));
    Vec dx2(n, NAN), dw2 = dw0, dzbf;
    cuda::GatedRmsNormBackward(dy.data(), x.data(), z.data(), w.data(), ro.data(), dx2.data(),
                               dzb.data(), dw2.data(), scratch.data(), c.N, c.Ch, c.group, nullptr);
    for (const bf16& v : dzb) dzbf.push_back(ToF32(v));
    // dy in bf16 (out_proj's input gradient in bf16 training, read as it
    // comes): the bits of the f32 path given dy's f32 cast.
    std::vector<bf16> dyb;
    Vec dyr;
    for (const float v : dy) dyb.push_back(ToBF16(v)), dyr.push_back(ToF32(dyb.back()));
    Vec dx3(n, NAN), dz3(n, NAN), dw3 = dw0, dx4(n, NAN), dz4(n, NAN), dw4 = dw0;
    cuda::GatedRmsNormBackward(dyr.data(), x.data(), z.data(), w.data(), ro.data(), dx3.data(),
                               dz3.data(), dw3.data(), scratch.data(), c.N, c.Ch, c.group, nullptr);
    cuda::GatedRmsNormBackward(dyb.data(), x.data(), z.data(), w.data(), ro.data(), dx4.data(),
                               dz4.data(), dw4.data(), scratch.data(), c.N, c.Ch, c.group, nullptr);
    return std::vector<Vec>{yo, ro, dxo, dzo, dwo, ybf, dzbf, dx2, dx3, dz3, dw3, dx4, dz4, dw4};
  });
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(ToBF16(out[0][i]).bits, ToBF16(out[5][i]).bits) << "bf16 y[" << i << "]";
    ASSERT_EQ(ToBF16(out[3][i]).bits, ToBF16(out[6][i]).bits) << "bf16 dz[" << i << "]";
    ASSERT_EQ(out[2][i], out[7][i]) << "dx[" << i << "] with a bf16 dz";
    ASSERT_EQ(out[8][i], out[11][i]) << "dx[" << i << "] from a bf16 dy";
    ASSERT_EQ(out[9][i], out[12][i]) << "dz[" << i << "] from a bf16 dy";
    ASSERT_FALSE(std::isnan(out[11][i])) << "dx[" << i << "] from a bf16 dy";
  }
  for (int64_t col = 0; col < c.Ch; ++col) {
    ASSERT_EQ(out[10][col], out[13][col]) << "dw[" << col << "] from a bf16 dy";
  }
  EXPECT_TRUE(gtp::emu::Near(out[0], y, kTol, "y"));
  EXPECT_TRUE(gtp::emu::Near(out[1], rstd, kTol, "rstd"));
  EXPECT_TRUE(gtp::emu::Near(out[2], dx, kTol, "dx"));
  EXPECT_TRUE(gtp::emu::Near(out[3], dz, kTol, "dz"));
  EXPECT_TRUE(gtp::emu::Near(out[4], dw, kTol, "dw"));
}

// The warp-per-item kernels (group < 256), the block-per-item ones (256 ≤
// group ≤ 2048: the hybrid's 1536, one not a multiple of 256), several
// groups a row, and the row backward's dw over several slabs of 4 rows (the
// last one short).
INSTANTIATE_TEST_SUITE_P(Shapes, GatedRmsNormEmulationTest,
                         ::testing::Values(NormCase{7, 96, 32}, NormCase{5, 96, 96},
                                           NormCase{3, 12, 4}, NormCase{4, 1536, 1536},
                                           NormCase{3, 600, 300}, NormCase{2, 510, 255},
                                           NormCase{2, 4096, 2048}, NormCase{13, 512, 256},
                                           NormCase{9, 1536, 1536}));

// The forward over many rows takes slabs of rows with the next row's loads
// ahead (NormForwardSlabs); its rows must be the block-per-row kernel's bits
// (the same rows through launches below the slab threshold), its bf16 y the
// f32 y's cast, and both the definition's within kTol. 4099 rows: slabs of 5, the last
// one of 4; two groups a row.
TEST(GatedRmsNormEmulation, SlabForwardGivesTheRowKernelsBits) {
  gtp::emu::SetShared(smem, sizeof(smem));
  const int64_t N = 4099, Ch = 512, group = 256, gs = Ch / group, n = N * Ch, half = 2048;
  ASSERT_TRUE(cuda::NormForwardSlabs(N));
  ASSERT_FALSE(cuda::NormForwardSlabs(N - half));
  ASSERT_FALSE(cuda::NormForwardSlabs(half));
  const float eps = 1e-5f;
  const Vec x = Random(n, 21), z = Random(n, 22), w = Random(Ch, 23, 0.5f);
  Vec ys(n, NAN), rs(N * gs, NAN), yr(n, NAN), rr(N * gs, NAN);
  std::vector<bf16> bs(n, ToBF16(NAN));
  cuda::GatedRmsNormForward(x.data(), z.data(), w.data(), ys.data(), rs.data(), N, Ch, group, eps,
                            nullptr);
  cuda::GatedRmsNormForward(x.data(), z.data(), w.data(), bs.data(), rs.data(), N, Ch, group, eps,
                            nullptr);
  for (const int64_t r0 : {int64_t{0}, half}) {  // the row kernel, in two launches
    const int64_t rows = r0 == 0 ? half : N - half;
    cuda::GatedRmsNormForward(x.data() + r0 * Ch, z.data() + r0 * Ch, w.data(), yr.data() + r0 * Ch,
                              rr.data() + r0 * gs, rows, Ch, group, eps, nullptr);
  }
  auto bits = [](float v) {
    uint32_t b;
    std::memcpy(&b, &v, 4);
    return b;
  };
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_FALSE(std::isnan(ys[i])) << "y[" << i << "]";
    ASSERT_EQ(bits(ys[i]), bits(yr[i])) << "y[" << i << "]";
    ASSERT_EQ(bs[i].bits, ToBF16(ys[i]).bits) << "bf16 y[" << i << "]";  // a cast's bits
  }
  for (int64_t i = 0; i < N * gs; ++i) ASSERT_EQ(bits(rs[i]), bits(rr[i])) << "rstd[" << i << "]";
  DVec y(n), rstd(N * gs);
  for (int64_t r = 0; r < N; ++r) {
    for (int64_t gi = 0; gi < gs; ++gi) {
      const int64_t base = r * Ch + gi * group;
      double ss = 0.0;
      for (int64_t j = 0; j < group; ++j) {
        const double g = x[base + j] * SiluD(z[base + j]);
        ss += g * g;
      }
      rstd[r * gs + gi] = 1.0 / std::sqrt(ss / group + eps);
      for (int64_t j = 0; j < group; ++j) {
        y[base + j] = x[base + j] * SiluD(z[base + j]) * rstd[r * gs + gi] * w[gi * group + j];
      }
    }
  }
  EXPECT_TRUE(gtp::emu::Near(ys, y, kTol, "y"));
  EXPECT_TRUE(gtp::emu::Near(rs, rstd, kTol, "rstd"));
}

// ---------------------------------------------------------------- dt, A

TEST(MambaScalarsEmulationTest, SoftplusAndNegExpMatchTheDefinitions) {
  gtp::emu::SetShared(smem, sizeof(smem));
  const int64_t N = 300, H = 6;
  const Vec raw = Random(N * H, 21, 2.0f), bias = Random(H, 22), ddt = Random(N * H, 23),
            db0 = Random(H, 24), a_log = Random(H, 25), da = Random(H, 26), g0 = Random(H, 27);
  DVec dt(N * H), draw(N * H), db(db0.begin(), db0.end()), a(H), g(g0.begin(), g0.end());
  for (int64_t i = 0; i < N * H; ++i) {
    const double v = double{raw[i]} + bias[i % H];
    dt[i] = std::log1p(std::exp(v));
    draw[i] = ddt[i] * Sig(v);
    db[i % H] += draw[i];
  }
  for (int64_t h = 0; h < H; ++h) {
    a[h] = -std::exp(double{a_log[h]});
    g[h] += da[h] * a[h];
  }
  const std::vector<Vec> out = InEverySchedule([&] {
    Vec dto(N * H, NAN), drawo(N * H, NAN), dbo = db0, ao(H, NAN), go = g0;
    Vec scratch(cuda::SoftplusBiasBackwardScratchFloats(N, H), NAN);
    cuda::SoftplusBiasForward(raw.data(), bias.data(), dto.data(), N, H, nullptr);
    cuda::SoftplusBiasBackward(ddt.data(), raw.data(), bias.data(), drawo.data(), dbo.data(),
                               scratch.data(), N, H, nullptr);
    cuda::NegExpForward(a_log.data(), ao.data(), H, nullptr);
    cuda::NegExpBackwardAccumulate(da.data(), ao.data(), go.data(), H, nullptr);
    return std::vector<Vec>{dto, drawo, dbo, ao, go};
  });
  EXPECT_TRUE(gtp::emu::Near(out[0], dt, kTol, "dt"));
  EXPECT_TRUE(gtp::emu::Near(out[1], draw, kTol, "draw"));
  EXPECT_TRUE(gtp::emu::Near(out[2], db, kTol, "dbias"));
  EXPECT_TRUE(gtp::emu::Near(out[3], a, kTol, "a"));
  EXPECT_TRUE(gtp::emu::Near(out[4], g, kTol, "a_log grad"));
}

}  // namespace
}  // namespace gtp::kernels::ssm
