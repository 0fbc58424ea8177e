// Tests of the reference block-scaled GEMM (block_gemm.h), y = a·bᵀ, in two
// ways, each with a bound derived below and asserted per element (`!(≤)`
// form, so NaN never passes):
//
// 1. Against the double-precision GEMM of the dequantised operands (the
//    exact values e4m3⁻¹(code)·scale), i.e. the GEMM's own f32 rounding.
//    With u = 2⁻²⁴, L = min(K, 128) terms per K block and nb K blocks: each
//    code product is exact in f32; a block's partial sum of L products has
//    error ≤ γ_{L−1}·Σ|p| (recursive summation, γ_n = nu/(1 − nu)); scaling
//    it by fl(sa·sb) adds 2 roundings; adding the nb scaled partials adds
//    γ_{nb−1}. To first order, with S = Σ_k |da_k·db_k| (dequantised values):
//        |y − y_ref| ≤ (L + nb + 2)·u·S      (+ K·2⁻⁵² S for the double reference)
//    so for K = 300 about 1.3e-5·S: a scale applied to the wrong block (the
//    test matrices give every block its own power of two in 2^±26) is off by
//    orders of magnitude, which NegativeControlAWrongScaleBreaksTheBound shows.
//
// 2. Against the double GEMM of the unquantised operands: the quantisation
//    error. With |da − a| ≤ ea = ρ|a| + τa (block_scale.h: ρ = 2⁻⁴ + 2⁻²⁰,
//    τ = 2⁻¹⁰·scale of the element's block),
//        da·db − a·b = a(db − b) + b(da − a) + (da − a)(db − b), so
//        |y − y_exact| ≤ Σ_k (|a_k|·eb_k + |b_k|·ea_k + ea_k·eb_k) + bound 1.
//    For normal-range elements that is ≈ (2ρ + ρ²)·Σ|a||b|: 2⁻⁴ per operand
//    element at worst, as e4m3's 3 mantissa bits give. The worst case is
//    reached within 15 % (WorstCaseComesWithin15PercentOfTheBound), so the
//    bound is not slack that would hide a coarser rounding.
#include "core/kernels/fp8/block_gemm.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/kernels/fp8/block_quant.h"
#include "core/kernels/fp8/block_testing.h"
#include "core/kernels/fp8/lt_scale_layout.h"
#include "core/tensor.h"
#include "gtest/gtest.h"

namespace gtp::kernels::fp8 {
namespace {

using testing::BlockyMatrix;
using testing::Bytes;
using testing::Floats;
using testing::GemmRoundingGamma;
using testing::MakeMatrix;
using testing::RefDequantize;
using testing::ScaleOf;
using testing::Transpose;

constexpr double kRho = kE4M3RelativeError;
constexpr double kTau = kE4M3SubnormalError;

// A GEMM operand [rows, K]: its quantised form, the unquantised values, the
// exact dequantised values and a bound on |dequantised − unquantised| per element.
struct Operand {
  Fp8Matrix m;
  int64_t rows = 0, K = 0;
  std::vector<double> exact, deq, err;
};

std::vector<double> ToDouble(const std::vector<float>& v) { return {v.begin(), v.end()}; }

void FillDeqAndErr(Operand* o, const std::vector<float>& x) {
  o->rows = o->m.q.dim(0);
  o->K = o->m.q.dim(1);
  const std::vector<float> s = Floats(o->m.scales);
  o->exact = ToDouble(x);
  o->deq = RefDequantize(Bytes(o->m.q), s, o->rows, o->K, o->m.layout);
  o->err.resize(x.size());
  for (int64_t r = 0; r < o->rows; ++r)
    for (int64_t k = 0; k < o->K; ++k)
      o->err[r * o->K + k] = kRho * std::fabs(x[r * o->K + k]) + kTau * ScaleOf(s, r, k, o->K, o->m.layout);
}

// x [R, K] quantised in layout l.
Operand Quantized(const Exec& e, const std::vector<float>& x, int64_t R, int64_t K, Fp8Layout l) {
  Operand o;
  o.m = {e.Empty({R, K}, DType::kF8E4M3), e.Empty(Fp8ScaleShape(R, K, l)), l};
  QuantizeBlocks(e, MakeMatrix(x, R, K, *e.alloc), l, o.m.q, o.m.scales);
  FillDeqAndErr(&o, x);
  return o;
}

// Wᵀ [C, R] from W [R, C] quantised 128×128 (TransposeTiles: no requantisation).
Operand TransposedTiles(const Exec& e, const std::vector<float>& w, int64_t R, int64_t C) {
  const Operand wq = Quantized(e, w, R, C, Fp8Layout::kTile128x128);
  Operand o;
  o.m = {e.Empty({C, R}, DType::kF8E4M3), e.Empty(Fp8ScaleShape(C, R, Fp8Layout::kTile128x128)),
         Fp8Layout::kTile128x128};
  TransposeTiles(e, wq.m.q, wq.m.scales, o.m.q, o.m.scales);
  FillDeqAndErr(&o, Transpose(w, R, C));
  return o;
}

// xᵀ [C, R] quantised 1×128 along R, from x [R, C] (QuantizeRowsTransposed).
Operand RowsTransposed(const Exec& e, const std::vector<float>& x, int64_t R, int64_t C) {
  Operand o;
  o.m = {e.Empty({C, R}, DType::kU8), e.Empty(Fp8ScaleShape(C, R, Fp8Layout::kRow1x128)),
         Fp8Layout::kRow1x128};
  QuantizeRowsTransposed(e, MakeMatrix(x, R, C, *e.alloc), o.m.q, o.m.scales);
  FillDeqAndErr(&o, Transpose(x, R, C));
  return o;
}

// The same from x's forward codes (RequantizeRowsTransposed): two roundings,
// |d₂ − x| ≤ (2ρ + ρ²)|x| + (1 + ρ)τ₁ + τ₂ (block_quant_test.cc derives it).
Operand Requantized(const Exec& e, const std::vector<float>& x, int64_t R, int64_t C) {
  const Operand fwd = Quantized(e, x, R, C, Fp8Layout::kRow1x128);
  Operand o;
  o.m = {e.Empty({C, R}, DType::kF8E4M3), e.Empty(Fp8ScaleShape(C, R, Fp8Layout::kRow1x128)),
         Fp8Layout::kRow1x128};
  RequantizeRowsTransposed(e, fwd.m.q, fwd.m.scales, o.m.q, o.m.scales);
  FillDeqAndErr(&o, Transpose(x, R, C));
  const std::vector<float> s1 = Floats(fwd.m.scales), s2 = Floats(o.m.scales);
  for (int64_t c = 0; c < C; ++c)
    for (int64_t r = 0; r < R; ++r)
      o.err[c * R + r] = (2 * kRho + kRho * kRho) * std::fabs(x[r * C + c]) +
                         (1 + kRho) * kTau * ScaleOf(s1, r, c, C, Fp8Layout::kRow1x128) +
                         kTau * ScaleOf(s2, c, r, R, Fp8Layout::kRow1x128);
  return o;
}

struct Result {
  double worst_rounding = 0;      // max |y − y_deq| / bound 1
  double worst_quantisation = 0;  // max |y − y_exact| / bound 2
  double rel_frobenius = 0;       // ‖y − y_exact‖ / ‖y_exact‖
  int64_t violations = 0;         // elements outside bound 1 (for the negative control)
};

// Runs BlockScaledGemm(a, b) and checks both bounds of the header comment.
Result RunAndCheck(const Exec& e, const Operand& a, const Operand& b, bool expect_within = true) {
  EXPECT_EQ(a.K, b.K);
  const int64_t M = a.rows, N = b.rows, K = a.K;
  Tensor y = MakeMatrix(kernels::testing::NaNs(static_cast<size_t>(M * N)), M, N, *e.alloc);
  BlockScaledGemm(e, a.m, b.m, y);
  const std::vector<float> yv = Floats(y);
  const double gamma = GemmRoundingGamma(K);
  Result res;
  double num = 0, den = 0;
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t n = 0; n < N; ++n) {
      double y_deq = 0, y_exact = 0, S = 0, q_bound = 0;
      for (int64_t k = 0; k < K; ++k) {
        const int64_t i = m * K + k, j = n * K + k;
        y_deq += a.deq[i] * b.deq[j];
        y_exact += a.exact[i] * b.exact[j];
        S += std::fabs(a.deq[i] * b.deq[j]);
        q_bound += std::fabs(a.exact[i]) * b.err[j] + std::fabs(b.exact[j]) * a.err[i] + a.err[i] * b.err[j];
      }
      const double got = yv[m * N + n], r_bound = gamma * S;
      const double r_err = std::fabs(got - y_deq), q_err = std::fabs(got - y_exact);
      if (!(r_err <= r_bound)) {
        ++res.violations;
        if (expect_within) {
          ADD_FAILURE() << "y[" << m << "," << n << "] = " << got << ", dequantised reference "
                        << y_deq << ": |Δ| " << r_err << " > " << r_bound;
          return res;
        }
        continue;
      }
      if (expect_within && !(q_err <= q_bound + r_bound)) {
        ADD_FAILURE() << "y[" << m << "," << n << "] = " << got << ", unquantised " << y_exact
                      << ": |Δ| " << q_err << " > " << q_bound + r_bound;
        return res;
      }
      if (r_bound > 0) res.worst_rounding = std::max(res.worst_rounding, r_err / r_bound);
      if (q_bound > 0) res.worst_quantisation = std::max(res.worst_quantisation, q_err / (q_bound + r_bound));
      num += (got - y_exact) * (got - y_exact);
      den += y_exact * y_exact;
    }
  }
  res.rel_frobenius = den > 0 ? std::sqrt(num / den) : 0;
  return res;
}

class BlockGemm : public ::testing::Test {
 protected:
  HeapAllocator host_;
  Exec e_ = Exec::Cpu(host_);
};

// The wgmma kernel's self-check is for a CUDA Exec; on the CPU it refuses,
// naming what it needs (block_gemm_gpu_test runs it on the GPU).
TEST_F(BlockGemm, TheWgmmaSelfCheckRefusesACpuExec) {
  const absl::Status s = CheckWgmmaGemm(e_);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(s.message()).find("needs a CUDA Exec"), std::string::npos) << s;
}

// Shapes around the block size, each pair of layouts.
TEST_F(BlockGemm, WithinBothBoundsForEveryLayoutPairAndShape) {
  struct Shape3 { int64_t M, N, K; };
  for (const Shape3 s : {Shape3{1, 1, 1}, Shape3{3, 5, 127}, Shape3{37, 150, 300}, Shape3{130, 64, 512}}) {
    for (const Fp8Layout la : {Fp8Layout::kRow1x128, Fp8Layout::kTile128x128}) {
      for (const Fp8Layout lb : {Fp8Layout::kRow1x128, Fp8Layout::kTile128x128}) {
        SCOPED_TRACE(::testing::Message() << s.M << "x" << s.N << "x" << s.K << " a "
                                          << Fp8LayoutName(la) << " b " << Fp8LayoutName(lb));
        const Operand a = Quantized(e_, BlockyMatrix(s.M, s.K, 1), s.M, s.K, la);
        const Operand b = Quantized(e_, BlockyMatrix(s.N, s.K, 2), s.N, s.K, lb);
        const Result r = RunAndCheck(e_, a, b);
        EXPECT_LE(r.worst_rounding, 1.0);
        EXPECT_LE(r.worst_quantisation, 1.0);
      }
    }
  }
}

// A linear layer's three GEMMs in the layouts the backward needs, N tokens,
// in → out: y = x·Wᵀ (x 1×128 along in, W 128×128); dx = dy·W (dy 1×128
// along out, Wᵀ by TransposeTiles); dW = dyᵀ·x (both 1×128 along N, from
// the high-precision tensors or, for x, requantised from its forward codes).
TEST_F(BlockGemm, ALinearLayersForwardAndBackwardLayouts) {
  const int64_t N = 200, in = 300, out = 150;
  const std::vector<float> x = BlockyMatrix(N, in, 3), w = BlockyMatrix(out, in, 4),
                           dy = BlockyMatrix(N, out, 5);
  struct Case {
    const char* name;
    Operand a, b;
  };
  const Case cases[] = {
      {"forward y = x·Wᵀ", Quantized(e_, x, N, in, Fp8Layout::kRow1x128),
       Quantized(e_, w, out, in, Fp8Layout::kTile128x128)},
      {"dgrad dx = dy·W", Quantized(e_, dy, N, out, Fp8Layout::kRow1x128),
       TransposedTiles(e_, w, out, in)},
      {"wgrad dW = dyᵀ·x", RowsTransposed(e_, dy, N, out), RowsTransposed(e_, x, N, in)},
      {"wgrad, x requantised", RowsTransposed(e_, dy, N, out), Requantized(e_, x, N, in)},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const Result r = RunAndCheck(e_, c.a, c.b);
    EXPECT_LE(r.worst_quantisation, 1.0);
    // Typical (not worst-case) error for Gaussian blocks: RNE to 3 mantissa
    // bits leaves an RMS relative error of about 2.5 % per element, √2 times
    // that in a product; a GEMM with independent errors keeps that ratio.
    // Outside [1 %, 6 %] the quantisation is not e4m3's (e.g. none at all, or
    // a coarser format).
    EXPECT_GT(r.rel_frobenius, 0.01);
    EXPECT_LT(r.rel_frobenius, 0.06);
    std::printf("%-22s rel. Frobenius error %.4f, worst |Δ|/bound: rounding %.3f, quantisation %.3f\n",
                c.name, r.rel_frobenius, r.worst_rounding, r.worst_quantisation);
  }
}

// Every element of a and b loses nearly the most e4m3 allows, all in the
// same direction: 1.0625 − 2⁻²⁰ in a block scaled by 2⁻⁸ (amax 448·2⁻⁸ =
// 1.75 at the start of each 128 block) is 271.99… before rounding, 256
// after: −5.9 % per element, −11.4 % per product; bound 2 allows ≈ 12.9 %.
TEST_F(BlockGemm, WorstCaseComesWithin15PercentOfTheBound) {
  const int64_t M = 4, N = 3, K = 256;
  const float v = 1.0625f - 0x1p-20f;
  std::vector<float> a(M * K, v), b(N * K, v);
  for (int64_t k = 0; k < K; k += kFp8Block) {
    for (int64_t m = 0; m < M; ++m) a[m * K + k] = 1.75f;
    for (int64_t n = 0; n < N; ++n) b[n * K + k] = 1.75f;
  }
  const Operand qa = Quantized(e_, a, M, K, Fp8Layout::kRow1x128);
  const Operand qb = Quantized(e_, b, N, K, Fp8Layout::kTile128x128);
  EXPECT_EQ(Floats(qa.m.scales)[0], 0x1p-8f);
  EXPECT_EQ(qa.deq[1], 1.0);  // v rounded down to 256·2⁻⁸
  const Result r = RunAndCheck(e_, qa, qb);
  EXPECT_LE(r.worst_quantisation, 1.0);
  EXPECT_GT(r.worst_quantisation, 0.85);
}

// NaN or inf in an operand: its block's scale is NaN, so every output that
// block feeds is NaN and every other output is unaffected.
TEST_F(BlockGemm, NonFiniteInputsPoisonExactlyTheOutputsTheyFeed) {
  const int64_t M = 40, N = 150, K = 300;
  std::vector<float> x = BlockyMatrix(M, K, 6), w = BlockyMatrix(N, K, 7);
  x[5 * K + 200] = std::numeric_limits<float>::quiet_NaN();  // row 5 of a
  w[70 * K + 10] = std::numeric_limits<float>::infinity();   // tile (0, 0) of b: n < 128
  const Operand a = Quantized(e_, x, M, K, Fp8Layout::kRow1x128);
  const Operand b = Quantized(e_, w, N, K, Fp8Layout::kTile128x128);
  Tensor y = e_.Empty({M, N});
  BlockScaledGemm(e_, a.m, b.m, y);
  const std::vector<float> yv = Floats(y);
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t n = 0; n < N; ++n) {
      const bool poisoned = m == 5 || n < 128;
      ASSERT_EQ(std::isnan(yv[m * N + n]), poisoned) << m << "," << n;
      if (poisoned) continue;
      double ref = 0, S = 0;
      for (int64_t k = 0; k < K; ++k) {
        ref += a.deq[m * K + k] * b.deq[n * K + k];
        S += std::fabs(a.deq[m * K + k] * b.deq[n * K + k]);
      }
      ASSERT_TRUE(std::fabs(yv[m * N + n] - ref) <= GemmRoundingGamma(K) * S) << m << "," << n;
    }
  }
}

// The rounding bound sees a scale applied to the wrong block: swapping two
// of b's tile scales puts most outputs of the affected rows far outside it.
TEST_F(BlockGemm, NegativeControlAWrongScaleBreaksTheBound) {
  const int64_t M = 20, N = 150, K = 300;
  const Operand a = Quantized(e_, BlockyMatrix(M, K, 8), M, K, Fp8Layout::kRow1x128);
  Operand b = Quantized(e_, BlockyMatrix(N, K, 9), N, K, Fp8Layout::kTile128x128);
  EXPECT_EQ(RunAndCheck(e_, a, b).violations, 0);
  float* s = b.m.scales.data<float>();  // [2, 3]; b.deq keeps the right values
  std::swap(s[0], s[1]);
  const Result wrong = RunAndCheck(e_, a, b, /*expect_within=*/false);
  EXPECT_GT(wrong.violations, M * 128 / 2);
}

// A bf16 y is the f32 result rounded once to nearest even.
TEST_F(BlockGemm, Bf16OutputIsTheF32ResultRounded) {
  const int64_t M = 20, N = 40, K = 300;
  const Operand a = Quantized(e_, BlockyMatrix(M, K, 10), M, K, Fp8Layout::kRow1x128);
  const Operand b = Quantized(e_, BlockyMatrix(N, K, 11), N, K, Fp8Layout::kTile128x128);
  Tensor y32 = e_.Empty({M, N}), y16 = e_.Empty({M, N}, DType::kBF16);
  BlockScaledGemm(e_, a.m, b.m, y32);
  BlockScaledGemm(e_, a.m, b.m, y16);
  const std::vector<float> f = Floats(y32);
  const bf16* h = static_cast<const bf16*>(y16.raw_data());
  for (int64_t i = 0; i < M * N; ++i) ASSERT_EQ(h[i].bits, F32ToBF16Bits(f[i])) << i;
}

// cuBLASLt's scale layout (lt_scale_layout.h): every entry of our table has
// its own offset inside the buffer, and the only offsets left over are
// BLK128x128's padding (K blocks beyond K, up to a multiple of 4). This
// checks the function is a consistent layout, not that it is cuBLASLt's
// (block_gemm_gpu_test.cc's probe does that on a GPU).
TEST(LtScaleLayout, EveryEntryHasItsOwnOffsetAndOnlyTilePaddingIsLeft) {
  for (const bool tiles : {false, true}) {
    for (const int64_t rows : {16, 128, 208, 304}) {
      for (const int64_t K : {16, 128, 384, 512, 1008}) {
        SCOPED_TRACE(::testing::Message() << (tiles ? "tiles " : "rows ") << rows << " x " << K);
        const int64_t L = Fp8NumBlocks(K), table_rows = tiles ? Fp8NumBlocks(rows) : rows;
        const int64_t count = LtScaleCount(tiles, rows, K);
        std::vector<int> hits(static_cast<size_t>(count), 0);
        for (int64_t i = 0; i < table_rows; ++i) {
          for (int64_t j = 0; j < L; ++j) {
            const int64_t o = LtScaleOffset(tiles, rows, K, i, j);
            ASSERT_TRUE(o >= 0 && o < count) << i << "," << j << " -> " << o;
            ++hits[static_cast<size_t>(o)];
          }
        }
        int64_t unused = 0;
        for (const int h : hits) {
          ASSERT_LE(h, 1);
          unused += h == 0;
        }
        EXPECT_EQ(unused, tiles ? table_rows * ((L + 3) / 4 * 4 - L) : 0);
      }
    }
  }
  // The documented examples: 1×128 is [L, rows] (outer-dim-major), 128×128
  // [ceil(rows/128), L rounded up to 4].
  EXPECT_EQ(LtScaleOffset(false, 208, 384, 5, 2), 2 * 208 + 5);
  EXPECT_EQ(LtScaleOffset(true, 304, 384, 2, 1), 2 * 4 + 1);
  EXPECT_EQ(LtScaleCount(true, 304, 1008), 3 * 8);
}

// A bias is added to each output's f32 sum before its one rounding: for an
// f32 y exactly fl(y₀ + bias[n]) with y₀ the bias-free result, for a bf16 y
// that sum rounded once to bf16 (not the bf16 y₀ plus the bias).
TEST_F(BlockGemm, ABiasIsAddedPerColumnBeforeTheRounding) {
  const int64_t M = 20, N = 40, K = 300;
  const Operand a = Quantized(e_, BlockyMatrix(M, K, 12), M, K, Fp8Layout::kRow1x128);
  const Operand b = Quantized(e_, BlockyMatrix(N, K, 13), N, K, Fp8Layout::kTile128x128);
  std::vector<float> bias = BlockyMatrix(1, N, 14);
  for (float& v : bias) v = BF16BitsToF32(F32ToBF16Bits(v));  // bf16 values
  Tensor y0 = e_.Empty({M, N}), y32 = e_.Empty({M, N}), y16 = e_.Empty({M, N}, DType::kBF16);
  BlockScaledGemm(e_, a.m, b.m, y0);
  BlockScaledGemm(e_, a.m, b.m, y32, 0.0f, MakeMatrix(bias, 1, N, host_).View({N}));
  BlockScaledGemm(e_, a.m, b.m, y16, 0.0f, MakeMatrix(bias, 1, N, host_, DType::kBF16).View({N}));
  const std::vector<float> f0 = Floats(y0), f32 = Floats(y32);
  const bf16* h = static_cast<const bf16*>(y16.raw_data());
  int64_t changed = 0;
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t n = 0; n < N; ++n) {
      const int64_t i = m * N + n;
      const float want = f0[i] + bias[n];
      ASSERT_EQ(FloatBits(f32[i]), FloatBits(want)) << m << "," << n;
      ASSERT_EQ(h[i].bits, F32ToBF16Bits(want)) << m << "," << n;
      changed += f32[i] != f0[i];
    }
  }
  EXPECT_GT(changed, M * N / 2);  // the bias really moved the outputs
}

TEST(BlockGemmDeathTest, ABiasOfAnotherShapeTypeOrWithBetaAborts) {
  HeapAllocator host;
  const Exec cpu = Exec::Cpu(host);
  const Fp8Matrix a{cpu.Empty({2, 130}, DType::kF8E4M3), cpu.Empty({2, 2}), Fp8Layout::kRow1x128};
  const Fp8Matrix b{cpu.Empty({3, 130}, DType::kU8), cpu.Empty({1, 2}), Fp8Layout::kTile128x128};
  EXPECT_DEATH(BlockScaledGemm(cpu, a, b, cpu.Empty({2, 3}), 0.0f, cpu.Empty({2})),
               "bias must be f32\\[3\\] \\(y's dtype, one per column\\), got f32\\[2\\]");
  EXPECT_DEATH(BlockScaledGemm(cpu, a, b, cpu.Empty({2, 3}), 0.0f, cpu.Empty({3}, DType::kBF16)),
               "bias must be f32\\[3\\]");
  EXPECT_DEATH(BlockScaledGemm(cpu, a, b, cpu.Empty({2, 3}), 1.0f, cpu.Empty({3})),
               "a bias with beta 1 \\(only 0\\) is not supported");
}

TEST(BlockGemmDeathTest, MismatchedShapesAbortSayingWhy) {
  HeapAllocator host;
  const Exec cpu = Exec::Cpu(host);
  const Exec cuda{Device::Cuda(0), &host};
  const Fp8Matrix a{cpu.Empty({2, 130}, DType::kF8E4M3), cpu.Empty({2, 2}), Fp8Layout::kRow1x128};
  const Fp8Matrix b{cpu.Empty({3, 130}, DType::kU8), cpu.Empty({1, 2}), Fp8Layout::kTile128x128};
  const Fp8Matrix b_k{cpu.Empty({3, 129}, DType::kU8), cpu.Empty({1, 2}), Fp8Layout::kTile128x128};
  EXPECT_DEATH(BlockScaledGemm(cuda, a, b, cpu.Empty({2, 3})), "a is on cpu, exec on cuda:0");
  EXPECT_DEATH(BlockScaledGemm(cpu, a, b_k, cpu.Empty({2, 3})), "differ in K");
  EXPECT_DEATH(BlockScaledGemm(cpu, a, b, cpu.Empty({3, 2})), "y must be f32 or bf16 \\[2, 3\\]");
  EXPECT_DEATH(BlockScaledGemm(cpu, a, b, cpu.Empty({2, 3}, DType::kF16)), "y must be f32 or bf16");
  const Fp8Matrix b_rows{b.q, b.scales, Fp8Layout::kRow1x128};  // tile scales read as row scales
  EXPECT_DEATH(BlockScaledGemm(cpu, a, b_rows, cpu.Empty({2, 3})), "b must be f32\\[3, 2\\]");
}

// What the CUDA path adds to the checks, refused before any CUDA call (so
// this runs without a GPU: host memory labelled cuda:0, never touched).
class BlockGemmCudaRefusalDeathTest : public ::testing::Test {
 protected:
  // An operand [rows, K] in layout l, "on" cuda:0 (host memory).
  Fp8Matrix Operand(int64_t rows, int64_t K, Fp8Layout l) {
    return {Wrapped({rows, K}, DType::kF8E4M3), Wrapped(Fp8ScaleShape(rows, K, l), DType::kF32),
            l};
  }
  Tensor Wrapped(const Shape& s, DType t) {
    buffers_.emplace_back(static_cast<size_t>(s.numel()) * SizeOf(t) + 64);
    // 64-byte aligned start inside the buffer.
    const uintptr_t p = reinterpret_cast<uintptr_t>(buffers_.back().data());
    return Tensor::Wrap(reinterpret_cast<void*>((p + 63) / 64 * 64), s, t, Device::Cuda(0));
  }
  HeapAllocator host_;
  const Exec cuda_{Device::Cuda(0), &host_};
  std::vector<std::vector<uint8_t>> buffers_;
};

TEST_F(BlockGemmCudaRefusalDeathTest, ShapesCuBlasLtCannotTakeAbortNamingTheRequirement) {
  constexpr Fp8Layout kRow = Fp8Layout::kRow1x128, kTile = Fp8Layout::kTile128x128;
  const char* kNeed16 = "needs M, N and K to be multiples of 16";
  // M = 200, N = 300, K = 1000 one at a time (each a multiple of 8, not 16).
  EXPECT_DEATH(BlockScaledGemm(cuda_, Operand(200, 384, kRow), Operand(304, 384, kTile),
                               Wrapped({200, 304}, DType::kF32)),
               std::string(kNeed16) + ".*got M=200 N=304 K=384");
  EXPECT_DEATH(BlockScaledGemm(cuda_, Operand(208, 384, kRow), Operand(300, 384, kTile),
                               Wrapped({208, 300}, DType::kF32)),
               std::string(kNeed16) + ".*got M=208 N=300 K=384");
  EXPECT_DEATH(BlockScaledGemm(cuda_, Operand(208, 1000, kRow), Operand(304, 1000, kRow),
                               Wrapped({208, 304}, DType::kF32)),
               std::string(kNeed16) + ".*got M=208 N=304 K=1000");
  EXPECT_DEATH(BlockScaledGemm(cuda_, Operand(256, 256, kTile), Operand(256, 256, kTile),
                               Wrapped({256, 256}, DType::kF32)),
               "no 128x128 x 128x128 block scaling");
  // A y 8 bytes into an aligned buffer.
  const Tensor base = Wrapped({1, 128 * 16 * 4 + 8}, DType::kU8);
  const Tensor y_off = Tensor::Wrap(static_cast<uint8_t*>(base.raw_data()) + 8, {128, 16},
                                    DType::kF32, Device::Cuda(0));
  EXPECT_DEATH(BlockScaledGemm(cuda_, Operand(128, 128, kRow), Operand(16, 128, kTile), y_off),
               "needs 16-byte aligned matrices; the addresses modulo 16 are a.q 0, b.q 0, y 8");
  // A bias with an f32 y (cuBLASLt has no algorithm for it).
  EXPECT_DEATH(BlockScaledGemm(cuda_, Operand(128, 128, kRow), Operand(16, 128, kTile),
                               Wrapped({128, 16}, DType::kF32), 0.0f, Wrapped({16}, DType::kF32)),
               "no block-scaled FP8 GEMM with a BIAS epilogue for an f32 y.*pass a bf16 y");
  // The algorithm plan (benchmarks) on the CPU.
  HeapAllocator host;
  const Exec cpu = Exec::Cpu(host);
  const Fp8Matrix a{cpu.Empty({16, 128}, DType::kF8E4M3), cpu.Empty({16, 1}), kRow};
  EXPECT_DEATH(BlockScaledGemmPlan(cpu, a, a, cpu.Empty({16, 16}), 4),
               "fp8::BlockScaledGemmPlan: a CUDA Exec with a BlasContext only");
  // Everything else right, but no BlasContext.
  EXPECT_DEATH(BlockScaledGemm(cuda_, Operand(128, 128, kRow), Operand(16, 128, kTile),
                               Wrapped({128, 16}, DType::kBF16)),
               "needs a BlasContext");
}

}  // namespace
}  // namespace gtp::kernels::fp8
