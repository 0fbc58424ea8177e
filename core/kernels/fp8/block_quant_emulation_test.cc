// The FP8 block quantisers' CUDA kernels (block_quant.cu, fused_quant.cu:
// 1×128 rows, 128×128 tiles, the transposed and fused forms, dequantisation)
// run on the CPU by the warp emulator
// (core/kernels/cuda/testing/warp_emulator.h), in three orders of each
// block's threads, against the reference quantiser written from the design
// note (block_reference.h: amax and scales in double, e4m3 by nearest value),
// codes and scales bit for bit. block_quant_gpu_test runs the same kernels on
// a GPU against the CPU quantisers.
// The emulator before the kernel source:
// clang-format off
#define GTP_CUDA_HOST_EMULATION
#include "core/kernels/cuda/testing/warp_emulator.h"
#include "core/kernels/fp8/block_quant.cu"
#include "core/kernels/fp8/fused_quant.cu"
// clang-format on
// (their launchers now run the grids on the host, synchronously)

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "core/kernels/cuda/testing/emulation_checks.h"
#include "core/kernels/fp8/block_reference.h"
#include "core/kernels/fp8/e4m3_reference.h"
#include "gtest/gtest.h"

namespace gtp::kernels::fp8 {
namespace {

alignas(16) double smem[8 * 1024];  // the blocks' dynamic shared memory

using FVec = std::vector<float>;
using Codes = std::vector<uint8_t>;

// A matrix whose 1×128 blocks span magnitudes from 2⁻³⁰ to 2³⁰ (so scales
// clamp, codes saturate at ±448 and subnormal codes occur), one all-zero
// block, and with `nonfinite` a NaN and an inf in two blocks.
FVec TestMatrix(int64_t R, int64_t C, bool nonfinite) {
  FVec x = gtp::emu::RandomNormal(R * C, static_cast<uint32_t>(R * 7919 + C));
  for (int64_t r = 0; r < R; ++r) {
    for (int64_t c = 0; c < C; ++c) {
      x[r * C + c] = std::ldexp(x[r * C + c], static_cast<int>((r * 7 + c / 128 * 13) % 61) - 30);
    }
  }
  if (R * C > 300) {
    for (int64_t c = 128; c < std::min<int64_t>(C, 256); ++c) x[c] = 0.0f;  // row 0, block 1
  }
  // Row 2 and column 5 at 2⁻⁹⁵ of the rest: block scales below
  // kFp8FastDivMinScale (2⁻⁶⁰), which the kernels encode by division (their
  // other path), beside blocks and a neighbouring column that take the
  // reciprocal's.
  for (int64_t c = 0; R > 2 && c < C; ++c) x[2 * C + c] = std::ldexp(x[2 * C + c], -95);
  for (int64_t r = 0; C > 5 && r < R; ++r) x[r * C + 5] = std::ldexp(x[r * C + 5], -95);
  if (nonfinite && R * C > 2) {
    x[R * C / 2] = std::numeric_limits<float>::quiet_NaN();
    x[R * C - 1] = std::numeric_limits<float>::infinity();
  }
  return x;
}

template <class V>
V Transposed(const V& x, int64_t R, int64_t C) {  // [R, C] → [C, R]
  V t(x.size());
  for (int64_t r = 0; r < R; ++r) {
    for (int64_t c = 0; c < C; ++c) t[c * R + r] = x[r * C + c];
  }
  return t;
}

FVec AsFloats(const Codes& q) { return FVec(q.begin(), q.end()); }

// Each 128-row block's column sums [nbr, C] in the order block_quant.h
// fixes for QuantizeRowsAndTransposed (block_quant.cc's AddColumnSumsCpu,
// before the blocks are added): lane l adds rows l, l + 32, l + 64, l + 96
// left to right (+0 past R), then a butterfly over the 32 lanes (xor 16,
// 8, 4, 2, 1).
FVec ColumnPartials(const FVec& x, int64_t R, int64_t C) {
  const int64_t nbr = (R + 127) / 128;
  FVec out(nbr * C);
  for (int64_t bi = 0; bi < nbr; ++bi) {
    for (int64_t c = 0; c < C; ++c) {
      float p[32];
      for (int64_t l = 0; l < 32; ++l) {
        float v[4];
        for (int64_t k = 0; k < 4; ++k) {
          const int64_t r = bi * 128 + l + 32 * k;
          v[k] = r < R ? x[r * C + c] : 0.0f;
        }
        p[l] = ((v[0] + v[1]) + v[2]) + v[3];
      }
      for (int64_t o = 16; o > 0; o >>= 1) {
        float next[32];
        for (int64_t l = 0; l < 32; ++l) next[l] = p[l] + p[l ^ o];
        std::copy(next, next + 32, p);
      }
      out[bi * C + c] = p[0];
    }
  }
  return out;
}

struct Case {
  int64_t R, C;
};

class BlockQuantEmulationTest : public ::testing::TestWithParam<Case> {};

template <class T>
void RunCase(const Case& c, bool nonfinite) {
  gtp::emu::SetShared(smem, sizeof(smem));
  const int64_t R = c.R, C = c.C, n = R * C;
  const std::vector<T> x = gtp::emu::Converted<T>(TestMatrix(R, C, nonfinite));
  const FVec xv = gtp::emu::Widened(x);
  const reference::RefBlocks rows = reference::RefQuantizeBlocks(xv, R, C, 1);
  const reference::RefBlocks tiles = reference::RefQuantizeBlocks(xv, R, C, 128);
  const reference::RefBlocks cols = reference::RefQuantizeBlocks(Transposed(xv, R, C), C, R, 1);
  const int64_t cb = (C + 127) / 128, rb = (R + 127) / 128;
  const auto out = gtp::emu::InEverySchedule([&] {
    std::vector<FVec> o;
    Codes q(n, 0xaa), qt(n, 0xaa);
    FVec s(R * cb, NAN), st(C * rb, NAN), ts(rb * cb, NAN), tst(cb * rb, NAN);
    cuda::QuantizeRow1x128(x.data(), R, C, q.data(), s.data(), nullptr, nullptr);
    o.push_back(AsFloats(q));
    o.push_back(s);
    cuda::QuantizeTile128x128(x.data(), R, C, q.data(), ts.data(), nullptr, nullptr);
    o.push_back(AsFloats(q));
    o.push_back(ts);
    cuda::QuantizeRowsTransposed(x.data(), R, C, qt.data(), st.data(), nullptr, nullptr);
    o.push_back(AsFloats(qt));
    o.push_back(st);
    Codes q2(n, 0x55), qt2(n, 0x55);
    FVec s2(R * cb, NAN), st2(C * rb, NAN);
    cuda::QuantizeRowsAndTransposed(x.data(), R, C, q2.data(), s2.data(), nullptr, qt2.data(),
                                    st2.data(), nullptr, nullptr, nullptr);
    o.push_back(AsFloats(q2));
    o.push_back(s2);
    o.push_back(AsFloats(qt2));
    o.push_back(st2);
    // Again with the column sums (a bias gradient's partials): the same
    // codes, and the sums in their fixed order.
    FVec partial(rb * C, NAN);
    cuda::QuantizeRowsAndTransposed(x.data(), R, C, q2.data(), s2.data(), nullptr, qt2.data(),
                                    st2.data(), nullptr, partial.data(), nullptr);
    o.push_back(AsFloats(qt2));
    o.push_back(partial);
    Codes q3(n, 0x55), qt3(n, 0x55);
    FVec ts3(rb * cb, NAN);
    cuda::QuantizeTileAndTranspose(x.data(), R, C, q3.data(), ts3.data(), nullptr, qt3.data(),
                                   tst.data(), nullptr, nullptr);
    o.push_back(AsFloats(q3));
    o.push_back(ts3);
    o.push_back(AsFloats(qt3));
    o.push_back(tst);
    return o;
  });
  const FVec tile_scales_t = Transposed(tiles.scales, rb, cb);
  const std::string tag =
      std::string(std::is_same_v<T, float> ? "f32" : "bf16") + (nonfinite ? ", NaN/inf" : "");
  EXPECT_TRUE(gtp::emu::SameBits(out[0], AsFloats(rows.q), "1x128 codes, " + tag));
  EXPECT_TRUE(gtp::emu::SameBits(out[1], rows.scales, "1x128 scales, " + tag));
  EXPECT_TRUE(gtp::emu::SameBits(out[2], AsFloats(tiles.q), "128x128 codes, " + tag));
  EXPECT_TRUE(gtp::emu::SameBits(out[3], tiles.scales, "128x128 scales, " + tag));
  EXPECT_TRUE(gtp::emu::SameBits(out[4], AsFloats(cols.q), "transposed codes, " + tag));
  EXPECT_TRUE(gtp::emu::SameBits(out[5], cols.scales, "transposed scales, " + tag));
  EXPECT_TRUE(gtp::emu::SameBits(out[6], AsFloats(rows.q), "fused 1x128 codes, " + tag));
  EXPECT_TRUE(gtp::emu::SameBits(out[7], rows.scales, "fused 1x128 scales, " + tag));
  EXPECT_TRUE(gtp::emu::SameBits(out[8], AsFloats(cols.q), "fused transposed codes, " + tag));
  EXPECT_TRUE(gtp::emu::SameBits(out[9], cols.scales, "fused transposed scales, " + tag));
  EXPECT_TRUE(gtp::emu::SameBits(out[10], AsFloats(cols.q), "fused codes with sums, " + tag));
  if (!nonfinite) {  // (with a NaN and an inf the sums are NaN: nothing to compare)
    EXPECT_TRUE(gtp::emu::SameBits(out[11], ColumnPartials(xv, R, C), "fused column sums, " + tag));
  }
  EXPECT_TRUE(gtp::emu::SameBits(out[12], AsFloats(tiles.q), "tile+transpose codes, " + tag));
  EXPECT_TRUE(gtp::emu::SameBits(out[13], tiles.scales, "tile+transpose scales, " + tag));
  EXPECT_TRUE(gtp::emu::SameBits(out[14], AsFloats(Transposed(tiles.q, R, C)),
                                 "tile+transpose qt, " + tag));
  EXPECT_TRUE(gtp::emu::SameBits(out[15], tile_scales_t, "tile+transpose scales_t, " + tag));
}

TEST_P(BlockQuantEmulationTest, QuantisersMatchTheReference) {
  for (bool nonfinite : {false, true}) {
    RunCase<float>(GetParam(), nonfinite);
    RunCase<bf16>(GetParam(), nonfinite);
  }
}

// The fused quantiser with GELU applied as it reads (an MLP's proj input)
// or GELU's derivative (fc's output gradient): the codes, scales and column
// sums of a = bf16(GELU(x)) or bf16(GeluGrad(dy, pre)) — cuda/gelu.cuh's
// functions, which the GELU kernels apply, here on the host — by the
// reference quantiser, bit for bit; and no launch (false) where C % 8 != 0.
TEST_P(BlockQuantEmulationTest, GeluInputsMatchTheReferenceOfTheActivation) {
  namespace ci = ::gtp::kernels::cuda::internal;
  gtp::emu::SetShared(smem, sizeof(smem));
  const int64_t R = GetParam().R, C = GetParam().C, n = R * C;
  const int64_t cb = (C + 127) / 128, rb = (R + 127) / 128;
  const std::vector<bf16> x = gtp::emu::Converted<bf16>(TestMatrix(R, C, false));
  FVec pre_f = gtp::emu::RandomNormal(n, static_cast<uint32_t>(R * 31 + C));
  for (float& v : pre_f) v *= 3.0f;  // GELU's curved part and both tails
  const std::vector<bf16> pre = gtp::emu::Converted<bf16>(pre_f);
  for (const bool grad : {false, true}) {
    const std::string tag = grad ? "GeluGrad" : "Gelu";
    FVec a(n);
    for (int64_t i = 0; i < n; ++i) {
      const float xi = ToF32(x[i]);
      a[i] = ToF32(ToBF16(grad ? ci::GeluGradFor<bf16>(xi, ToF32(pre[i])) : ci::GeluFor<bf16>(xi)));
    }
    const auto out = gtp::emu::InEverySchedule([&] {
      Codes q(n, 0x55), qt(n, 0x55);
      FVec s(R * cb, NAN), st(C * rb, NAN), partial(rb * C, NAN);
      const bool ran = grad ? cuda::QuantizeGeluGradRowsAndTransposed(
                                  x.data(), pre.data(), R, C, q.data(), s.data(), nullptr,
                                  qt.data(), st.data(), nullptr, partial.data(), nullptr)
                            : cuda::QuantizeGeluRowsAndTransposed(
                                  x.data(), R, C, q.data(), s.data(), nullptr, qt.data(), st.data(),
                                  nullptr, partial.data(), nullptr);
      return std::vector<FVec>{FVec{ran ? 1.0f : 0.0f}, AsFloats(q), s, AsFloats(qt), st, partial};
    });
    if (C % 8 != 0) {
      EXPECT_EQ(out[0][0], 0.0f) << tag << ": launched for C = " << C;
      continue;
    }
    ASSERT_EQ(out[0][0], 1.0f) << tag << ": not launched for C = " << C;
    const reference::RefBlocks rows = reference::RefQuantizeBlocks(a, R, C, 1);
    const reference::RefBlocks cols = reference::RefQuantizeBlocks(Transposed(a, R, C), C, R, 1);
    EXPECT_TRUE(gtp::emu::SameBits(out[1], AsFloats(rows.q), tag + " 1x128 codes"));
    EXPECT_TRUE(gtp::emu::SameBits(out[2], rows.scales, tag + " 1x128 scales"));
    EXPECT_TRUE(gtp::emu::SameBits(out[3], AsFloats(cols.q), tag + " transposed codes"));
    EXPECT_TRUE(gtp::emu::SameBits(out[4], cols.scales, tag + " transposed scales"));
    EXPECT_TRUE(gtp::emu::SameBits(out[5], ColumnPartials(a, R, C), tag + " column sums"));
  }
}

// y = e4m3⁻¹(q)·scale, exact in double, rounded once to f32 (and from the
// f32 product to bf16, nearest even), for both scale layouts.
TEST_P(BlockQuantEmulationTest, DequantisationMatchesTheReference) {
  gtp::emu::SetShared(smem, sizeof(smem));
  const int64_t R = GetParam().R, C = GetParam().C, cb = (C + 127) / 128;
  const FVec xv = TestMatrix(R, C, false);
  for (const bool tiles : {false, true}) {
    const reference::RefBlocks ref = reference::RefQuantizeBlocks(xv, R, C, tiles ? 128 : 1);
    FVec want(R * C), want_b(R * C);
    for (int64_t r = 0; r < R; ++r) {
      for (int64_t c = 0; c < C; ++c) {
        const float s = ref.scales[(tiles ? r / 128 : r) * cb + c / 128];
        const float v = static_cast<float>(reference::E4M3Decode(ref.q[r * C + c]) * s);
        want[r * C + c] = v;
        want_b[r * C + c] = ToF32(ToBF16(v));
      }
    }
    const auto out = gtp::emu::InEverySchedule([&] {
      FVec y(R * C, NAN);
      std::vector<bf16> yb(R * C, ToBF16(NAN));
      cuda::DequantizeBlocks(ref.q.data(), ref.scales.data(), tiles, R, C, y.data(), nullptr);
      cuda::DequantizeBlocks(ref.q.data(), ref.scales.data(), tiles, R, C, yb.data(), nullptr);
      return std::vector<FVec>{y, gtp::emu::Widened(yb)};
    });
    EXPECT_TRUE(gtp::emu::SameBits(out[0], want, tiles ? "tiles, f32" : "rows, f32"));
    EXPECT_TRUE(gtp::emu::SameBits(out[1], want_b, tiles ? "tiles, bf16" : "rows, bf16"));
  }
}

// One element, a partial block, a column, a row, exact tiles, tiles with
// partial edges on both sides, and bf16 fast paths (C a multiple of 8) with
// a partial last row of tiles and a partial column block.
INSTANTIATE_TEST_SUITE_P(Shapes, BlockQuantEmulationTest,
                         ::testing::Values(Case{1, 1}, Case{3, 5}, Case{1, 300}, Case{300, 1},
                                           Case{128, 128}, Case{129, 257}, Case{200, 256},
                                           Case{256, 136}));

}  // namespace
}  // namespace gtp::kernels::fp8
