// Tests of the block quantisation (block_quant.h) against block_testing.h's
// quantiser, written from the design note in double with the independent
// e4m3 reference: codes and scales must be equal bit for bit (they are
// integers and one correctly rounded f32 division each, so any difference is
// a bug, not rounding noise). Dequantised values against the exact product
// e4m3⁻¹(code)·scale and against the input within the derived e4m3 bound
// (block_scale.h): |d − x| ≤ (2⁻⁴ + 2⁻²⁰)|x| + 2⁻¹⁰·scale.
#include "core/kernels/fp8/block_quant.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/allocator.h"
#include "core/kernels/fp8/block_testing.h"
#include "core/kernels/fp8/e4m3_reference.h"
#include "core/kernels/fp8/lt_scale_layout.h"
#include "core/tensor.h"
#include "gtest/gtest.h"

namespace gtp::kernels::fp8 {
namespace {

using testing::BlockyMatrix;
using testing::Bytes;
using testing::Floats;
using testing::MakeMatrix;
using testing::RefDequantize;
using testing::RefQuantize;
using testing::ScaleOf;
using testing::Transpose;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// Bitwise equality of f32 vectors (NaN equals NaN).
void ExpectSameBits(const std::vector<float>& a, const std::vector<float>& b, const char* what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i)
    ASSERT_EQ(FloatBits(a[i]), FloatBits(b[i])) << what << " [" << i << "]: " << a[i] << " vs " << b[i];
}

struct Quantized {
  Tensor q, scales;
};

Quantized Quantize(const Exec& e, const Tensor& x, Fp8Layout l) {
  Quantized out{e.Empty({x.dim(0), x.dim(1)}, DType::kF8E4M3),
                e.Empty(Fp8ScaleShape(x.dim(0), x.dim(1), l))};
  QuantizeBlocks(e, x, l, out.q, out.scales);
  return out;
}

class BlockQuant : public ::testing::TestWithParam<std::tuple<Fp8Layout, DType, int64_t, int64_t>> {
 protected:
  HeapAllocator host_;
  Exec e_ = Exec::Cpu(host_);
};

// Random blocky data plus the special blocks: an all-zero block with a −0,
// a block of f32 subnormals (scale clamped at FLT_MIN) and a block whose
// small elements land on e4m3 subnormal codes.
std::vector<float> TestData(int64_t R, int64_t C, DType t) {
  std::vector<float> x = BlockyMatrix(R, C, 17 + R * 1000 + C);
  if (R >= 3 && C >= 2) {
    for (int64_t c = 0; c < std::min<int64_t>(C, 128); ++c) x[c] = 0.0f;
    x[1] = -0.0f;
    if (t == DType::kF32)  // bf16 would round these to zero
      for (int64_t c = 0; c < std::min<int64_t>(C, 128); ++c) x[C + c] = 1e-40f * (c % 7 - 3);
    for (int64_t c = 0; c < std::min<int64_t>(C, 128); ++c) x[2 * C + c] = std::ldexp(1.0f, -(c % 16));
  }
  return kernels::testing::LoadAs(kernels::testing::StoreAs(x, t), t);  // the values x holds
}

TEST_P(BlockQuant, CodesAndScalesEqualTheReferenceBitForBit) {
  const auto [l, t, R, C] = GetParam();
  const std::vector<float> x = TestData(R, C, t);
  const Quantized got = Quantize(e_, MakeMatrix(x, R, C, host_, t), l);
  const testing::RefQuantized ref = RefQuantize(x, R, C, l);
  ExpectSameBits(Floats(got.scales), ref.scales, "scales");
  EXPECT_EQ(Bytes(got.q), ref.q);
  if (R >= 3 && C >= 2 && l == Fp8Layout::kRow1x128) {
    EXPECT_EQ(Floats(got.scales)[0], 1.0f);  // the zero block
    EXPECT_EQ(Bytes(got.q)[1], 0x80);        // −0 keeps its sign
    if (t == DType::kF32) {  // the block of f32 subnormals
      EXPECT_EQ(Floats(got.scales)[(C + 127) / 128], std::numeric_limits<float>::min());
    }
  }
}

TEST_P(BlockQuant, DequantisedValuesAreTheScaledCodesWithinTheE4M3Bound) {
  const auto [l, t, R, C] = GetParam();
  const std::vector<float> x = TestData(R, C, t);
  const Quantized got = Quantize(e_, MakeMatrix(x, R, C, host_, t), l);
  Tensor y = MakeMatrix(kernels::testing::NaNs(x.size()), R, C, host_, t);
  DequantizeBlocks(e_, got.q, got.scales, l, y);
  const std::vector<float> yv = Floats(y), scales = Floats(got.scales);
  const std::vector<double> exact = RefDequantize(Bytes(got.q), scales, R, C, l);
  double worst_rel = 0;
  for (int64_t r = 0; r < R; ++r) {
    for (int64_t c = 0; c < C; ++c) {
      const int64_t i = r * C + c;
      // y is the f32 (or bf16) rounding of the exact product.
      const float want = static_cast<float>(exact[i]);
      ASSERT_EQ(FloatBits(yv[i]), FloatBits(t == DType::kF32 ? want : BF16BitsToF32(F32ToBF16Bits(want))))
          << r << "," << c;
      // The e4m3 bound (block_scale.h), on the exact product; `!(≤)` fails on NaN.
      const double s = ScaleOf(scales, r, c, C, l), err = std::fabs(exact[i] - x[i]);
      ASSERT_TRUE(err <= kE4M3RelativeError * std::fabs(x[i]) + kE4M3SubnormalError * s)
          << "x " << x[i] << " dequantised " << exact[i] << " scale " << s;
      if (std::fabs(x[i]) >= 0x1p-6 * s) worst_rel = std::max(worst_rel, err / std::fabs(x[i]));
    }
  }
  // The bound is tight: some element in the normal range loses nearly 2⁻⁴/(1 + 2⁻⁴) ≈ 5.9 %
  // (so the values really went through 3 mantissa bits).
  if (R * C >= 4096) {
    EXPECT_GT(worst_rel, 0.055);
  }
}

std::string CaseName(const ::testing::TestParamInfo<BlockQuant::ParamType>& info) {
  const auto [l, t, R, C] = info.param;
  return absl::StrCat(Fp8LayoutName(l), "_", DTypeName(t), "_", R, "x", C);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, BlockQuant,
    ::testing::Combine(::testing::Values(Fp8Layout::kRow1x128, Fp8Layout::kTile128x128),
                       ::testing::Values(DType::kF32, DType::kBF16),
                       ::testing::Values(1, 3, 130, 256), ::testing::Values(1, 127, 300)),
    CaseName);

// A NaN or ±inf turns its whole block (and only it) into NaN scale + 0x7F codes.
TEST(BlockQuantSpecial, NonFiniteValuesPoisonTheirBlockOnly) {
  HeapAllocator host;
  const Exec e = Exec::Cpu(host);
  const int64_t R = 200, C = 300;
  for (const Fp8Layout l : {Fp8Layout::kRow1x128, Fp8Layout::kTile128x128}) {
    for (const float bad : {kNaN, kInf, -kInf}) {
      std::vector<float> x = BlockyMatrix(R, C, 5);
      x[150 * C + 140] = bad;  // row 150, column block 1, tile (1, 1)
      const Quantized got = Quantize(e, MakeMatrix(x, R, C, host), l);
      Tensor y = MakeMatrix(std::vector<float>(x.size()), R, C, host);
      DequantizeBlocks(e, got.q, got.scales, l, y);
      const std::vector<uint8_t> q = Bytes(got.q);
      const std::vector<float> yv = Floats(y);
      for (int64_t r = 0; r < R; ++r) {
        for (int64_t c = 0; c < C; ++c) {
          const bool in_block = c / 128 == 1 && (l == Fp8Layout::kRow1x128 ? r == 150 : r / 128 == 1);
          ASSERT_EQ(std::isnan(ScaleOf(Floats(got.scales), r, c, C, l)), in_block) << r << "," << c;
          ASSERT_EQ(q[r * C + c] == kE4M3NaNCode, in_block) << r << "," << c;
          ASSERT_EQ(std::isnan(yv[r * C + c]), in_block) << r << "," << c;
        }
      }
    }
  }
}

// A tile of Wᵀ holds exactly the elements of a tile of W: transposing the
// codes and the scale grid gives the quantisation of Wᵀ bit for bit, so one
// 128×128 quantisation serves the forward (W) and the dgrad GEMM (Wᵀ).
// 1×128 blocks do not have this property (checked at the end).
TEST(BlockQuantSpecial, TileTransposeIsTheQuantisationOfTheTranspose) {
  HeapAllocator host;
  const Exec e = Exec::Cpu(host);
  for (const auto& [R, C] : {std::pair<int64_t, int64_t>{200, 300}, {256, 128}, {1, 129}}) {
    const std::vector<float> w = BlockyMatrix(R, C, 9), wt = Transpose(w, R, C);
    const Quantized qw = Quantize(e, MakeMatrix(w, R, C, host), Fp8Layout::kTile128x128);
    Tensor qt = e.Empty({C, R}, DType::kF8E4M3), st = e.Empty(Fp8ScaleShape(C, R, Fp8Layout::kTile128x128));
    TransposeTiles(e, qw.q, qw.scales, qt, st);
    const Quantized direct = Quantize(e, MakeMatrix(wt, C, R, host), Fp8Layout::kTile128x128);
    EXPECT_EQ(Bytes(qt), Bytes(direct.q)) << R << "x" << C;
    ExpectSameBits(Floats(st), Floats(direct.scales), "scales of Wᵀ");
    const testing::RefQuantized ref = RefQuantize(wt, C, R, Fp8Layout::kTile128x128);
    EXPECT_EQ(Bytes(qt), ref.q);
    // Both in one call: the same bits.
    Tensor q2 = e.Empty({R, C}, DType::kF8E4M3), s2 = e.Empty(Fp8ScaleShape(R, C, Fp8Layout::kTile128x128));
    Tensor qt2 = e.Empty({C, R}, DType::kF8E4M3), st2 = e.Empty(Fp8ScaleShape(C, R, Fp8Layout::kTile128x128));
    QuantizeTilesAndTransposed(e, MakeMatrix(w, R, C, host), q2, s2, qt2, st2);
    EXPECT_EQ(Bytes(q2), Bytes(qw.q)) << R << "x" << C;
    ExpectSameBits(Floats(s2), Floats(qw.scales), "scales (both)");
    EXPECT_EQ(Bytes(qt2), ref.q) << R << "x" << C;
    ExpectSameBits(Floats(st2), ref.scales, "scales of Wᵀ (both)");
  }
  // 1×128: the row blocks of Wᵀ (columns of W) have other amaxes, so other codes.
  const int64_t R = 256, C = 256;
  const std::vector<float> w = BlockyMatrix(R, C, 9);
  const std::vector<uint8_t> rows = RefQuantize(w, R, C, Fp8Layout::kRow1x128).q;
  const std::vector<uint8_t> cols = RefQuantize(Transpose(w, R, C), C, R, Fp8Layout::kRow1x128).q;
  int64_t differ = 0;
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c) differ += rows[r * C + c] != cols[c * R + r];
  EXPECT_GT(differ, R * C / 2);
}

// The scales' second copy for cuBLASLt (lt_scales): the table written in
// the order lt_scale_layout.h describes, spelled out here as its own loops —
// 1×128: entry (r, j) at j·rows + r; 128×128: (i, j) at i·L4 + j with L4 =
// ceil(K/128) rounded up to 4 and the padding NaN bytes — for each quantiser
// that writes one. (The layout itself is cuBLASLt's: block_gemm_gpu_test's
// probe checks it on the GPU.)
TEST(BlockQuantSpecial, TheCuBlasLtCopyOfTheScalesIsTheTableInItsLayout) {
  HeapAllocator host;
  const Exec e = Exec::Cpu(host);
  const int64_t R = 300, C = 200;  // 3 and 2 K blocks: tile padding both ways
  const std::vector<float> x = BlockyMatrix(R, C, 21);
  const Tensor xm = MakeMatrix(x, R, C, host);
  // rows × K operand, its table [table_rows, L] and its copy.
  auto expect_copy = [](const Tensor& table, const Tensor& lt, bool tiles, int64_t rows,
                        int64_t K, const std::string& what) {
    const int64_t L = (K + 127) / 128, L4 = (L + 3) / 4 * 4;
    const std::vector<float> tv = Floats(table), lv = Floats(lt);
    ASSERT_EQ(lv.size(), static_cast<size_t>(tiles ? (rows + 127) / 128 * L4 : rows * L)) << what;
    const int64_t table_rows = tiles ? (rows + 127) / 128 : rows;
    for (int64_t i = 0; i < table_rows; ++i) {
      for (int64_t j = 0; j < (tiles ? L4 : L); ++j) {
        const float got = tiles ? lv[i * L4 + j] : lv[j * rows + i];
        if (j < L) {
          ASSERT_EQ(FloatBits(got), FloatBits(tv[i * L + j])) << what << " (" << i << ", " << j << ")";
        } else {
          ASSERT_EQ(FloatBits(got), 0xffffffffu) << what << " padding (" << i << ", " << j << ")";
        }
      }
    }
  };
  for (const Fp8Layout l : {Fp8Layout::kRow1x128, Fp8Layout::kTile128x128}) {
    const bool tiles = l == Fp8Layout::kTile128x128;
    Tensor q = e.Empty({R, C}, DType::kU8), s = e.Empty(Fp8ScaleShape(R, C, l));
    Tensor lt = e.Empty({LtScaleCount(tiles, R, C)});
    QuantizeBlocks(e, xm, l, q, s, lt);
    expect_copy(s, lt, tiles, R, C, std::string("QuantizeBlocks ") + Fp8LayoutName(l));
    if (tiles) {
      Tensor qt = e.Empty({C, R}, DType::kU8), st = e.Empty(Fp8ScaleShape(C, R, l));
      Tensor ltt = e.Empty({LtScaleCount(true, C, R)});
      TransposeTiles(e, q, s, qt, st, ltt);
      expect_copy(st, ltt, true, C, R, "TransposeTiles");
    }
  }
  Tensor qt = e.Empty({C, R}, DType::kU8), st = e.Empty(Fp8ScaleShape(C, R, Fp8Layout::kRow1x128));
  Tensor ltt = e.Empty({LtScaleCount(false, C, R)});
  QuantizeRowsTransposed(e, xm, qt, st, ltt);
  expect_copy(st, ltt, false, C, R, "QuantizeRowsTransposed");
}

// QuantizeRowsAndTransposed: both 1×128 quantisations, each against the
// reference quantiser (of x, and of xᵀ) bit for bit.
TEST(BlockQuantSpecial, RowsAndTransposedAreBothReferenceQuantisations) {
  HeapAllocator host;
  const Exec e = Exec::Cpu(host);
  for (const DType t : {DType::kF32, DType::kBF16}) {
    const int64_t R = 300, C = 200;
    const std::vector<float> x = TestData(R, C, t);
    Tensor q = e.Empty({R, C}, DType::kU8), s = e.Empty(Fp8ScaleShape(R, C, Fp8Layout::kRow1x128));
    Tensor qt = e.Empty({C, R}, DType::kU8), st = e.Empty(Fp8ScaleShape(C, R, Fp8Layout::kRow1x128));
    QuantizeRowsAndTransposed(e, MakeMatrix(x, R, C, host, t), q, s, qt, st);
    const testing::RefQuantized rows = RefQuantize(x, R, C, Fp8Layout::kRow1x128);
    const testing::RefQuantized cols = RefQuantize(Transpose(x, R, C), C, R, Fp8Layout::kRow1x128);
    EXPECT_EQ(Bytes(q), rows.q) << DTypeName(t);
    ExpectSameBits(Floats(s), rows.scales, "scales");
    EXPECT_EQ(Bytes(qt), cols.q) << DTypeName(t);
    ExpectSameBits(Floats(st), cols.scales, "scales_t");
  }
}

// The column sums QuantizeRowsAndTransposed adds from its read (a bias
// gradient) against the double sum: the fixed order is a tree of depth
// 3 (a lane's four rows) + 5 (the butterfly) per 128-row block, then
// ceil(R/128) blocks in sequence and the add into the sums, so each result
// is within γ·(Σ|x| + |s₀|) of the exact s₀ + Σx with γ = (9 + ceil(R/128))·2⁻²⁴
// (f32); a bf16 sum adds its own rounding (2⁻⁸ relative). The codes are
// those of the call without sums.
TEST(BlockQuantSpecial, ColumnSumsAreTheRowSumsWithinTheirOrdersBound) {
  HeapAllocator host;
  const Exec e = Exec::Cpu(host);
  for (const DType st : {DType::kF32, DType::kBF16}) {
    const int64_t R = 300, C = 40;  // 3 row blocks, the last one partial
    const std::vector<float> x = BlockyMatrix(R, C, 23);
    std::vector<float> s0(C);
    for (int64_t c = 0; c < C; ++c) s0[c] = 0.25f * static_cast<float>(c % 5) - 0.5f;
    const Tensor sums = MakeMatrix(s0, 1, C, host, st).View({C});
    const std::vector<float> start = Floats(sums);  // as the dtype holds them
    Tensor q = e.Empty({R, C}, DType::kU8), s = e.Empty(Fp8ScaleShape(R, C, Fp8Layout::kRow1x128));
    Tensor qt = e.Empty({C, R}, DType::kU8), sct = e.Empty(Fp8ScaleShape(C, R, Fp8Layout::kRow1x128));
    QuantizeRowsAndTransposed(e, MakeMatrix(x, R, C, host), q, s, qt, sct, Tensor(), Tensor(), sums);
    EXPECT_EQ(Bytes(q), RefQuantize(x, R, C, Fp8Layout::kRow1x128).q);
    const std::vector<float> got = Floats(sums);
    const double gamma = (9.0 + 3.0) * 0x1p-24;
    int moved = 0;
    for (int64_t c = 0; c < C; ++c) {
      double exact = start[c], mag = std::fabs(start[c]);
      for (int64_t r = 0; r < R; ++r) {
        exact += x[r * C + c];
        mag += std::fabs(x[r * C + c]);
      }
      // bf16 (8 significant bits) rounds the f32 result r once: ≤ 2⁻⁸·|r|.
      const double f32_err = gamma * mag;
      const double bound =
          f32_err + (st == DType::kBF16 ? 0x1p-8 * (std::fabs(exact) + f32_err) : 0.0);
      EXPECT_LE(std::fabs(got[c] - exact), bound) << DTypeName(st) << " column " << c;
      moved += std::fabs(got[c] - start[c]) > 10 * bound;
    }
    EXPECT_GT(moved, C / 2) << "the sums really moved";
  }
}

// The wgrad operand xᵀ (1×128 along the rows of x), straight from x.
TEST(BlockQuantSpecial, QuantizeRowsTransposedIsTheRowQuantisationOfTheTranspose) {
  HeapAllocator host;
  const Exec e = Exec::Cpu(host);
  for (const DType t : {DType::kF32, DType::kBF16}) {
    const int64_t R = 300, C = 200;
    const std::vector<float> x = TestData(R, C, t);
    Tensor qt = e.Empty({C, R}, DType::kU8), st = e.Empty(Fp8ScaleShape(C, R, Fp8Layout::kRow1x128));
    QuantizeRowsTransposed(e, MakeMatrix(x, R, C, host, t), qt, st);
    const testing::RefQuantized ref = RefQuantize(Transpose(x, R, C), C, R, Fp8Layout::kRow1x128);
    EXPECT_EQ(Bytes(qt), ref.q);
    ExpectSameBits(Floats(st), ref.scales, "scales_t");
  }
}

// From the forward's codes when x itself is gone: dequantise (f32), transpose,
// quantise again. Bit for bit the reference quantisation of the transposed
// f32 dequantised values; within one e4m3 bound of those values, and within
// two stacked bounds of x:
//   |d₂ − x| ≤ |d₂ − d₁| + |d₁ − x|
//            ≤ ρ|d₁| + τ₂ + ρ|x| + τ₁ ≤ (2ρ + ρ²)|x| + (1 + ρ)τ₁ + τ₂
// (ρ = kE4M3RelativeError, τ = 2⁻¹⁰·scale of the element's block in each
// quantisation; d₁ rounded to f32 adds 2⁻²⁴|d₁|, inside ρ's 2⁻²⁰ margin).
TEST(BlockQuantSpecial, RequantizeRowsTransposedStacksTwoRoundings) {
  HeapAllocator host;
  const Exec e = Exec::Cpu(host);
  const int64_t R = 300, C = 200;
  const std::vector<float> x = TestData(R, C, DType::kF32);
  const Quantized fwd = Quantize(e, MakeMatrix(x, R, C, host), Fp8Layout::kRow1x128);
  Tensor qt = e.Empty({C, R}, DType::kF8E4M3), st = e.Empty(Fp8ScaleShape(C, R, Fp8Layout::kRow1x128));
  RequantizeRowsTransposed(e, fwd.q, fwd.scales, qt, st);
  const std::vector<float> s1 = Floats(fwd.scales), s2 = Floats(st);
  const std::vector<double> d1 = RefDequantize(Bytes(fwd.q), s1, R, C, Fp8Layout::kRow1x128);
  std::vector<float> d1f(d1.begin(), d1.end());  // the f32 values DequantizeBlocks gives
  const testing::RefQuantized ref = RefQuantize(Transpose(d1f, R, C), C, R, Fp8Layout::kRow1x128);
  EXPECT_EQ(Bytes(qt), ref.q);
  ExpectSameBits(s2, ref.scales, "scales_t");
  const std::vector<double> d2 = RefDequantize(Bytes(qt), s2, C, R, Fp8Layout::kRow1x128);
  const double rho = kE4M3RelativeError;
  for (int64_t r = 0; r < R; ++r) {
    for (int64_t c = 0; c < C; ++c) {
      const double v2 = d2[c * R + r], tau1 = kE4M3SubnormalError * ScaleOf(s1, r, c, C, Fp8Layout::kRow1x128),
                   tau2 = kE4M3SubnormalError * ScaleOf(s2, c, r, R, Fp8Layout::kRow1x128);
      ASSERT_TRUE(std::fabs(v2 - d1[r * C + c]) <= rho * std::fabs(d1[r * C + c]) + tau2) << r << "," << c;
      ASSERT_TRUE(std::fabs(v2 - x[r * C + c]) <=
                  (2 * rho + rho * rho) * std::fabs(x[r * C + c]) + (1 + rho) * tau1 + tau2)
          << r << "," << c;
    }
  }
  // The second rounding is real: some codes differ from quantising x's transpose directly.
  const std::vector<uint8_t> direct = RefQuantize(Transpose(x, R, C), C, R, Fp8Layout::kRow1x128).q;
  int64_t differ = 0;
  for (size_t i = 0; i < direct.size(); ++i) differ += direct[i] != Bytes(qt)[i];
  EXPECT_GT(differ, 0);
  std::printf("requantised vs direct: %lld of %lld codes differ\n", static_cast<long long>(differ),
              static_cast<long long>(R * C));
}

TEST(BlockQuantDeathTest, WrongDeviceAndBadShapesAbortSayingWhy) {
  HeapAllocator host;
  const Exec cpu = Exec::Cpu(host);
  // Host tensors on a CUDA Exec: rejected before any kernel (no GPU needed).
  const Exec cuda{Device::Cuda(0), &host};
  const Tensor x = MakeMatrix(std::vector<float>(6, 1.0f), 2, 3, host);
  const Tensor q = cpu.Empty({2, 3}, DType::kF8E4M3), s = cpu.Empty({2, 1});
  EXPECT_DEATH(QuantizeBlocks(cuda, x, Fp8Layout::kRow1x128, q, s),
               "fp8::QuantizeBlocks: x is on cpu, exec on cuda:0");
  EXPECT_DEATH(TransposeTiles(cuda, q, cpu.Empty({1, 1}), cpu.Empty({3, 2}, DType::kU8),
                              cpu.Empty({1, 1})),
               "fp8::TransposeTiles: q is on cpu, exec on cuda:0");
  EXPECT_DEATH(QuantizeBlocks(cpu, x, Fp8Layout::kTile128x128, q, cpu.Empty({2, 1})),
               "scales must be f32\\[1, 1\\]");
  EXPECT_DEATH(QuantizeBlocks(cpu, x, Fp8Layout::kRow1x128, cpu.Empty({3, 2}, DType::kU8), s),
               "q must be fp8_e4m3 or u8 \\[2, 3\\]");
  // Column sums of another length or dtype.
  const Tensor qt = cpu.Empty({3, 2}, DType::kU8), st = cpu.Empty({3, 1});
  EXPECT_DEATH(QuantizeRowsAndTransposed(cpu, x, q, s, qt, st, Tensor(), Tensor(), cpu.Empty({2})),
               "fp8::QuantizeRowsAndTransposed: column_sums must be f32 or bf16 \\[3\\], got f32\\[2\\]");
  EXPECT_DEATH(QuantizeRowsAndTransposed(cpu, x, q, s, qt, st, Tensor(), Tensor(),
                                         cpu.Empty({3}, DType::kF16)),
               "column_sums must be f32 or bf16 \\[3\\], got f16\\[3\\]");
}

}  // namespace
}  // namespace gtp::kernels::fp8
