// Tests of a linear layer's three FP8 GEMMs (linear.h) on the CPU, f32 and
// bf16 inputs and outputs: Fp8Linear y = x·Wᵀ, Fp8LinearBackwardData
// dx = dy·W, Fp8LinearBackwardWeight dW = dyᵀ·x. Each is a block-scaled GEMM
// y [M, N'] = a [M, K]·b [N', K]ᵀ whose operands the function quantises
// itself; this test quantises them again, independently, with
// block_testing.h's double reference quantiser in the layout linear.h claims:
//
//   forward  a = x  [N, in]   1×128 along in    b = W  [out, in]  128×128
//   dgrad    a = dy [N, out]  1×128 along out   b = Wᵀ [in, out]  W's 128×128 tiles
//   wgrad    a = dyᵀ [out, N] 1×128 along N     b = xᵀ [in, N]    1×128 along N
//
// 1. Layout. Every output is within block_gemm_test.cc's rounding bound of
//    the double product of those dequantised operands (exact values
//    e4m3⁻¹(code)·scale):
//        |y − y_deq| ≤ γ_K·S,  S = Σ_k |a_deq,k·b_deq,k|,
//        γ_K = GemmRoundingGamma(K) ≈ (min(K, 128) + ceil(K/128) + 2)·2⁻²⁴
//    (exact code products summed in f32 per K block, block_testing.h), and
//    for a bf16 output one more rounding to nearest, ≤ 2⁻⁸·|y_f32| ≤
//    2⁻⁸·(|y_deq| + γ_K·S). That is ~1e-5 of S (f32 out), while the inputs
//    (BlockyMatrix) give every 128×128 tile and every row's 128 block its own
//    power of two, so an operand quantised in any other blocking rounds its
//    elements differently, by e4m3's few per cent — thousands of times the
//    bound. The negative controls show it: each function checked against a
//    reference with one operand in a wrong layout (x tiled, W in rows, W
//    untransposed, Wᵀ requantised, dyᵀ or xᵀ blocked along the wrong axis)
//    puts most outputs outside the bound.
//
// 2. Quantisation error against the double product of the unquantised
//    inputs (as the function saw them: bf16 inputs are rounded first):
//    relative Frobenius error in [1 %, 6 %]. Within each block the data are
//    Gaussian; RNE to e4m3's 3 mantissa bits leaves an RMS relative error of
//    about 2.5 % per element, √2 times that in a product of two, and a GEMM
//    of independent errors keeps that ratio (~3.5 %). Below 1 % the
//    operands were not quantised to e4m3 (or not at all); above 6 % the
//    rounding is coarser than e4m3's (wrong scales, a narrower format).
//
// 3. beta = 1 adds exactly. block_gemm.cc's CPU loop computes the f32 sum
//    acc the same way for any beta and then writes, for an f32 y,
//    `beta == 0 ? acc : acc + beta * y`: so beta 0 writes y0 = acc, and with
//    beta 1 (beta·y = y exactly) it writes fl(acc + P) = fl(y0 + P) for a y
//    holding P — one f32 addition, checked bit for bit. For a bf16 y it
//    writes RNE_bf16(fl(acc + P_bf16)): the f32 y0 of the same inputs plus
//    the bf16 P widened, rounded once to bf16. (An order that folded P into
//    acc before the last K block, or read P as bf16 for an f32 y, differs
//    in the last bits of many outputs.)
//
// Also: the property linear_gpu_test.cc's sampled CPU reference rests on.
//
// 4. Shapes that do not form the GEMM, or tensors that are not f32/bf16
//    matrices, abort naming every tensor.
//
// Every comparison is of the form ASSERT_TRUE(err <= bound) or counts
// !(err <= bound) as outside, so NaN never passes; outputs are poisoned
// with NaN before a beta 0 call, so an element not written fails.
#include "core/kernels/fp8/linear.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/dtype.h"
#include "core/kernels/fp8/block_quant.h"
#include "core/kernels/fp8/block_testing.h"
#include "core/kernels/ops.h"
#include "core/kernels/testing/harness.h"
#include "core/tensor.h"
#include "gtest/gtest.h"

namespace gtp::kernels::fp8 {
namespace {

using testing::BlockyMatrix;
using testing::Floats;
using testing::GemmRoundingGamma;
using testing::MakeMatrix;
using testing::RelFrobenius;
using testing::RefDequantize;
using testing::RefQuantize;
using testing::RefQuantized;
using testing::RefRoundTrip;
using testing::Transpose;

constexpr Fp8Layout kRow = Fp8Layout::kRow1x128, kTile = Fp8Layout::kTile128x128;

// The three functions share one signature: (e, first input, second input, output, beta).
using LinearFn = void (*)(const Exec&, const Tensor&, const Tensor&, const Tensor&, float);

// A layer: N tokens, in → out.
struct Dims {
  int64_t N, in, out;
};

// Its tensors: x [N, in], w [out, in], dy [N, out] in dtype t, and their
// values as the functions see them (bf16-rounded for bf16).
struct Layer {
  Dims d;
  DType t;
  Tensor tx, tw, tdy;
  std::vector<float> x, w, dy;
};

Layer MakeLayer(Allocator& alloc, Dims d, DType t, uint64_t seed) {
  Layer l{d, t};
  l.tx = MakeMatrix(BlockyMatrix(d.N, d.in, seed), d.N, d.in, alloc, t);
  l.tw = MakeMatrix(BlockyMatrix(d.out, d.in, seed + 1), d.out, d.in, alloc, t);
  l.tdy = MakeMatrix(BlockyMatrix(d.N, d.out, seed + 2), d.N, d.out, alloc, t);
  l.x = Floats(l.tx);
  l.w = Floats(l.tw);
  l.dy = Floats(l.tdy);
  return l;
}


std::vector<double> ToDouble(const std::vector<float>& v) { return {v.begin(), v.end()}; }


// One function's GEMM y [M, N] = a [M, K]·b [N, K]ᵀ: the function, its two
// inputs, and its operands dequantised in linear.h's layouts and unquantised.
struct Problem {
  const char* name;
  LinearFn fn;
  const Tensor* first;
  const Tensor* second;
  int64_t M, N, K;
  std::vector<double> a_deq, b_deq, a_exact, b_exact;
};

enum class Op { kForward, kBackwardData, kBackwardWeight };

Problem MakeProblem(Op op, const Layer& l) {
  const Dims d = l.d;
  switch (op) {
    case Op::kForward:
      return {"forward y = x·Wᵀ",
              Fp8Linear,
              &l.tx,
              &l.tw,
              d.N,
              d.out,
              d.in,
              RefRoundTrip(l.x, d.N, d.in, kRow),
              RefRoundTrip(l.w, d.out, d.in, kTile),
              ToDouble(l.x),
              ToDouble(l.w)};
    case Op::kBackwardData:
      return {"dgrad dx = dy·W",
              Fp8LinearBackwardData,
              &l.tdy,
              &l.tw,
              d.N,
              d.in,
              d.out,
              RefRoundTrip(l.dy, d.N, d.out, kRow),
              Transpose(RefRoundTrip(l.w, d.out, d.in, kTile), d.out, d.in),
              ToDouble(l.dy),
              ToDouble(Transpose(l.w, d.out, d.in))};
    case Op::kBackwardWeight:
      return {"wgrad dW = dyᵀ·x",
              Fp8LinearBackwardWeight,
              &l.tdy,
              &l.tx,
              d.out,
              d.in,
              d.N,
              RefRoundTrip(Transpose(l.dy, d.N, d.out), d.out, d.N, kRow),
              RefRoundTrip(Transpose(l.x, d.N, d.in), d.in, d.N, kRow),
              ToDouble(Transpose(l.dy, d.N, d.out)),
              ToDouble(Transpose(l.x, d.N, d.in))};
  }
  return {};
}

constexpr Op kOps[] = {Op::kForward, Op::kBackwardData, Op::kBackwardWeight};

// The double product a·bᵀ and S = Σ_k |a_k·b_k| of every output.
struct Product {
  int64_t K = 0;
  std::vector<double> y, S;
};

Product Multiply(const std::vector<double>& a, const std::vector<double>& b, int64_t M, int64_t N,
                 int64_t K) {
  Product p{K, std::vector<double>(static_cast<size_t>(M * N)),
            std::vector<double>(static_cast<size_t>(M * N))};
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t n = 0; n < N; ++n) {
      double y = 0, S = 0;
      for (int64_t k = 0; k < K; ++k) {
        const double v = a[m * K + k] * b[n * K + k];
        y += v;
        S += std::fabs(v);
      }
      p.y[m * N + n] = y;
      p.S[m * N + n] = S;
    }
  }
  return p;
}

// Outputs against the rounding bound of part 1 of the header.
struct Measured {
  int64_t outside = 0;  // outputs not within the bound (NaN included)
  double worst = 0;     // max |y − y_deq| / bound over the others
  std::string first;    // the first output outside, for a failure message
};

Measured MeasureRounding(const std::vector<float>& y, const Product& deq, int64_t N, DType y_type) {
  const double gamma = GemmRoundingGamma(deq.K);
  const double u_out = y_type == DType::kBF16 ? 0x1p-8 : 0.0;
  Measured m;
  for (size_t i = 0; i < y.size(); ++i) {
    const double bound = gamma * deq.S[i] + u_out * (std::fabs(deq.y[i]) + gamma * deq.S[i]);
    const double err = std::fabs(static_cast<double>(y[i]) - deq.y[i]);
    if (err <= bound) {
      if (bound > 0) m.worst = std::max(m.worst, err / bound);
      continue;
    }
    if (m.outside++ == 0) {
      std::ostringstream s;
      s << "y[" << i / N << "][" << i % N << "] = " << y[i] << ", dequantised product " << deq.y[i]
        << ": |Δ| " << err << " > bound " << bound;
      m.first = s.str();
    }
  }
  return m;
}

// An output [M, N] of dtype t with every element NaN.
Tensor Poisoned(Allocator& alloc, int64_t M, int64_t N, DType t) {
  return MakeMatrix(kernels::testing::NaNs(static_cast<size_t>(M * N)), M, N, alloc, t);
}

class Fp8LinearTest : public ::testing::Test {
 protected:
  HeapAllocator host_;
  Exec e_ = Exec::Cpu(host_);
};

// Parts 1 and 2: every function, both input and output dtypes, an odd shape
// and a multiple-of-128 one.
TEST_F(Fp8LinearTest, EachFunctionQuantisesItsOperandsInTheClaimedLayouts) {
  for (const Dims d : {Dims{200, 300, 150}, Dims{256, 384, 256}}) {
    for (const DType in_type : {DType::kF32, DType::kBF16}) {
      const Layer l = MakeLayer(host_, d, in_type, 10);
      for (const Op op : kOps) {
        const Problem p = MakeProblem(op, l);
        const Product deq = Multiply(p.a_deq, p.b_deq, p.M, p.N, p.K);
        const Product exact = Multiply(p.a_exact, p.b_exact, p.M, p.N, p.K);
        for (const DType out_type : {DType::kF32, DType::kBF16}) {
          SCOPED_TRACE(::testing::Message()
                       << p.name << ", N=" << d.N << " in=" << d.in << " out=" << d.out
                       << ", inputs " << DTypeName(in_type) << ", output " << DTypeName(out_type));
          const Tensor y = Poisoned(host_, p.M, p.N, out_type);
          p.fn(e_, *p.first, *p.second, y, 0.0f);
          const std::vector<float> yv = Floats(y);
          const Measured m = MeasureRounding(yv, deq, p.N, out_type);
          ASSERT_EQ(m.outside, 0) << m.outside << " of " << yv.size()
                                  << " outputs outside the rounding bound; first: " << m.first;
          ASSERT_TRUE(m.worst <= 1.0);
          const double frob = RelFrobenius(yv, exact.y);
          ASSERT_TRUE(frob >= 0.01 && frob <= 0.06) << "relative Frobenius error " << frob;
          std::printf(
              "%-18s N=%-3lld in=%-3lld out=%-3lld in %-4s out %-4s: worst |Δ|/rounding bound "
              "%.3f, rel. Frobenius error vs unquantised %.4f\n",
              p.name, static_cast<long long>(d.N), static_cast<long long>(d.in),
              static_cast<long long>(d.out), DTypeName(in_type), DTypeName(out_type), m.worst,
              frob);
        }
      }
    }
  }
}

// Part 1's negative controls: the same outputs against references with one
// operand in a layout the function does not use.
TEST_F(Fp8LinearTest, NegativeControlAReferenceInAnotherLayoutBreaksTheBound) {
  const Dims d{200, 300, 150};
  const Layer l = MakeLayer(host_, d, DType::kF32, 20);
  // A square layer, so that W itself (not Wᵀ) is a valid dgrad operand.
  const Dims sq{200, 256, 256};
  const Layer ls = MakeLayer(host_, sq, DType::kF32, 30);
  struct Control {
    const char* what;
    Problem p;  // the function and its inputs, with a wrong operand swapped in
  };
  std::vector<Control> controls;
  auto add = [&](const char* what, Op op, const Layer& layer, bool wrong_a,
                 std::vector<double> wrong) {
    Problem p = MakeProblem(op, layer);
    (wrong_a ? p.a_deq : p.b_deq) = std::move(wrong);
    controls.push_back({what, std::move(p)});
  };
  add("forward, x in 128×128 tiles", Op::kForward, l, true, RefRoundTrip(l.x, d.N, d.in, kTile));
  add("forward, W in 1×128 rows", Op::kForward, l, false, RefRoundTrip(l.w, d.out, d.in, kRow));
  add("dgrad, W untransposed (dy·Wᵀ)", Op::kBackwardData, ls, false,
      RefRoundTrip(ls.w, sq.out, sq.in, kTile));
  add("dgrad, Wᵀ requantised 1×128 along out", Op::kBackwardData, l, false,
      RefRoundTrip(Transpose(l.w, d.out, d.in), d.in, d.out, kRow));
  add("wgrad, dyᵀ blocked along out (dy's forward layout)", Op::kBackwardWeight, l, true,
      Transpose(RefRoundTrip(l.dy, d.N, d.out, kRow), d.N, d.out));
  add("wgrad, xᵀ blocked along in (x's forward layout)", Op::kBackwardWeight, l, false,
      Transpose(RefRoundTrip(l.x, d.N, d.in, kRow), d.N, d.in));
  for (const Control& c : controls) {
    SCOPED_TRACE(c.what);
    const Problem& p = c.p;
    const Tensor y = Poisoned(host_, p.M, p.N, DType::kF32);
    p.fn(e_, *p.first, *p.second, y, 0.0f);
    const std::vector<float> yv = Floats(y);
    for (const float v : yv) ASSERT_TRUE(std::isfinite(v));
    const Measured m =
        MeasureRounding(yv, Multiply(p.a_deq, p.b_deq, p.M, p.N, p.K), p.N, DType::kF32);
    std::printf("negative control %-50s %6lld of %6lld outputs outside the bound\n", c.what,
                static_cast<long long>(m.outside), static_cast<long long>(yv.size()));
    EXPECT_GT(m.outside, static_cast<int64_t>(yv.size()) / 2);
  }
}

uint32_t Bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof(b));
  return b;
}

// Part 3: y = (x·Wᵀ, dy·W or dyᵀ·x) + 1·P is the beta 0 result plus P in
// one f32 addition (bf16 y: that sum of the widened bf16 P, rounded once).
TEST_F(Fp8LinearTest, BetaOneAddsTheProductToYInOneRounding) {
  const Dims d{200, 300, 150};
  for (const DType in_type : {DType::kF32, DType::kBF16}) {
    const Layer l = MakeLayer(host_, d, in_type, 40);
    for (const Op op : kOps) {
      const Problem p = MakeProblem(op, l);
      SCOPED_TRACE(::testing::Message() << p.name << ", inputs " << DTypeName(in_type));
      const size_t n = static_cast<size_t>(p.M * p.N);
      const Tensor y0 = Poisoned(host_, p.M, p.N, DType::kF32);
      p.fn(e_, *p.first, *p.second, y0, 0.0f);
      const std::vector<float> y0v = Floats(y0);
      // P of the outputs' own magnitude, so that y0 + P rounds.
      std::vector<float> P = kernels::testing::Rng(50).Uniform(n, -2.0f, 2.0f);
      for (size_t i = 0; i < n; ++i) P[i] *= y0v[i];

      const Tensor y = MakeMatrix(P, p.M, p.N, host_);
      p.fn(e_, *p.first, *p.second, y, 1.0f);
      const std::vector<float> yv = Floats(y);
      int64_t rounded = 0;  // outputs where y0 + P is not exact in f32
      for (size_t i = 0; i < n; ++i) {
        const float want = y0v[i] + P[i];
        ASSERT_EQ(Bits(yv[i]), Bits(want))
            << "y[" << i / p.N << "][" << i % p.N << "] = " << yv[i] << ", y0 + P = " << y0v[i]
            << " + " << P[i] << " = " << want;
        rounded += static_cast<double>(want) != static_cast<double>(y0v[i]) + P[i];
      }
      EXPECT_GT(rounded, static_cast<int64_t>(n) / 4);  // the check sees the rounding

      const Tensor yb = MakeMatrix(P, p.M, p.N, host_, DType::kBF16);
      const std::vector<float> Pb = Floats(yb);
      p.fn(e_, *p.first, *p.second, yb, 1.0f);
      const bf16* h = static_cast<const bf16*>(yb.raw_data());
      for (size_t i = 0; i < n; ++i)
        ASSERT_EQ(h[i].bits, F32ToBF16Bits(y0v[i] + Pb[i]))
            << "bf16 y[" << i / p.N << "][" << i % p.N << "]: y0 " << y0v[i] << " + P " << Pb[i];
    }
  }
}

// What linear_gpu_test.cc's sampled CPU reference relies on: a row of y or
// dx depends only on its row of x or dy, and a row o of dW only on column o
// of dy, so the function on those rows (columns) alone gives the same bits.
TEST_F(Fp8LinearTest, ARowOfTheOutputIsTheFunctionOnItsRowOrColumnAlone) {
  const Dims d{200, 300, 150};
  const Layer l = MakeLayer(host_, d, DType::kBF16, 60);
  const int64_t rows[] = {0, 61, 127, 128, 199}, cols[] = {0, 61, 127, 128, 149};
  auto full = [&](LinearFn fn, const Tensor& a, const Tensor& b, int64_t M, int64_t N) {
    const Tensor y = Poisoned(host_, M, N, DType::kF32);
    fn(e_, a, b, y, 0.0f);
    return Floats(y);
  };
  const std::vector<float> y = full(Fp8Linear, l.tx, l.tw, d.N, d.out);
  const std::vector<float> dx = full(Fp8LinearBackwardData, l.tdy, l.tw, d.N, d.in);
  const std::vector<float> dw = full(Fp8LinearBackwardWeight, l.tdy, l.tx, d.out, d.in);
  for (const int64_t r : rows) {
    const Tensor x_r = MakeMatrix({l.x.begin() + r * d.in, l.x.begin() + (r + 1) * d.in}, 1, d.in,
                                  host_, DType::kBF16);
    const Tensor dy_r = MakeMatrix({l.dy.begin() + r * d.out, l.dy.begin() + (r + 1) * d.out}, 1,
                                   d.out, host_, DType::kBF16);
    const std::vector<float> y_r = full(Fp8Linear, x_r, l.tw, 1, d.out);
    const std::vector<float> dx_r = full(Fp8LinearBackwardData, dy_r, l.tw, 1, d.in);
    for (int64_t n = 0; n < d.out; ++n) ASSERT_EQ(Bits(y_r[n]), Bits(y[r * d.out + n])) << r;
    for (int64_t n = 0; n < d.in; ++n) ASSERT_EQ(Bits(dx_r[n]), Bits(dx[r * d.in + n])) << r;
  }
  for (const int64_t c : cols) {
    std::vector<float> dy_c(static_cast<size_t>(d.N));
    for (int64_t n = 0; n < d.N; ++n) dy_c[n] = l.dy[n * d.out + c];
    const Tensor dy_ct = MakeMatrix(dy_c, d.N, 1, host_, DType::kBF16);
    const std::vector<float> dw_c = full(Fp8LinearBackwardWeight, dy_ct, l.tx, 1, d.in);
    for (int64_t n = 0; n < d.in; ++n) ASSERT_EQ(Bits(dw_c[n]), Bits(dw[c * d.in + n])) << c;
  }
}

// Part 4.
// The shared-input and kept-weight forms (what q/k/v and a layer's forward →
// backward use) give the very bits of the plain functions: the quantisation
// is deterministic, so doing it once and reusing it changes nothing. Three
// linears read one x (as q, k, v do), each GEMM against the plain call.
TEST_F(Fp8LinearTest, SharedInputAndKeptWeightGiveThePlainFunctionsBits) {
  const Dims d{208, 304, 144};
  const Layer l = MakeLayer(host_, d, DType::kBF16, 40);
  auto same_bits = [](const Tensor& a, const Tensor& b) { return testing::Bytes(a) == testing::Bytes(b); };
  Fp8SharedInput shared(e_);
  for (uint64_t k = 0; k < 3; ++k) {
    SCOPED_TRACE(::testing::Message() << "linear " << k);
    const Tensor w = MakeMatrix(BlockyMatrix(d.out, d.in, 50 + k), d.out, d.in, host_, DType::kBF16);
    const Fp8Matrix wq = QuantizeWeight(e_, w);
    Tensor y0 = e_.Empty({d.N, d.out}, DType::kBF16), y1 = e_.Empty({d.N, d.out}, DType::kBF16);
    Fp8Linear(e_, l.tx, w, y0);
    Fp8Linear(e_, shared.Rows(l.tx), wq, y1);
    EXPECT_TRUE(same_bits(y0, y1)) << "forward";
    Tensor y2 = e_.Empty({d.N, d.out}, DType::kBF16);
    Fp8Linear(e_, shared.Rows(l.tx), QuantizeWeightPair(e_, w).w, y2);
    EXPECT_TRUE(same_bits(y0, y2)) << "forward, W from QuantizeWeightPair";
    // dy's codes made once for both backward GEMMs (Both), as a layer's
    // backward does.
    Fp8SharedInput dyq(e_);
    dyq.Both(l.tdy);
    Tensor dx0 = e_.Empty({d.N, d.in}), dx1 = e_.Empty({d.N, d.in}), dx2 = e_.Empty({d.N, d.in});
    Fp8LinearBackwardData(e_, l.tdy, w, dx0);
    Fp8LinearBackwardData(e_, l.tdy, TransposeWeight(e_, wq), dx1);
    Fp8LinearBackwardData(e_, dyq.Rows(l.tdy), QuantizeWeightPair(e_, w).wt, dx2);
    EXPECT_TRUE(same_bits(dx0, dx1)) << "dgrad";
    EXPECT_TRUE(same_bits(dx0, dx2)) << "dgrad from dy's shared codes and QuantizeWeightPair's Wᵀ";
    Tensor dw0 = e_.Empty({d.out, d.in}), dw1 = e_.Empty({d.out, d.in}),
           dw2 = e_.Empty({d.out, d.in});
    Fp8LinearBackwardWeight(e_, l.tdy, l.tx, dw0);
    Fp8LinearBackwardWeight(e_, l.tdy, shared.Transposed(l.tx), dw1);
    Fp8LinearBackwardWeight(e_, dyq.Transposed(l.tdy), shared.Transposed(l.tx), dw2);
    EXPECT_TRUE(same_bits(dw0, dw1)) << "wgrad";
    EXPECT_TRUE(same_bits(dw0, dw2)) << "wgrad from dy's shared codes";
    // Not vacuous: another weight gives other bits.
    if (k > 0) {
      Tensor other = e_.Empty({d.N, d.out}, DType::kBF16);
      Fp8Linear(e_, l.tx, MakeMatrix(BlockyMatrix(d.out, d.in, 49 + k), d.out, d.in, host_,
                                     DType::kBF16), other);
      EXPECT_FALSE(same_bits(y0, other));
    }
  }
}

// A shared input bound to one tensor refuses another (even one with the same
// values: it cannot know they are), and the quantised forms refuse codes in
// the wrong layout.
TEST(Fp8LinearDeathTest, SharedInputRefusesAnotherTensorAndWrongLayouts) {
  HeapAllocator host;
  const Exec cpu = Exec::Cpu(host);
  const std::vector<float> v = BlockyMatrix(16, 32, 1);
  const Tensor x = MakeMatrix(v, 16, 32, host), copy = MakeMatrix(v, 16, 32, host);
  EXPECT_DEATH(
      {
        Fp8SharedInput shared(cpu);
        shared.Rows(x);
        shared.Transposed(copy);
      },
      "fp8::Fp8SharedInput: bound to f32\\[16, 32\\] cpu, asked for another tensor");
  const Tensor w = MakeMatrix(BlockyMatrix(48, 32, 2), 48, 32, host);
  Fp8SharedInput shared(cpu);
  const Fp8Matrix wq = QuantizeWeight(cpu, w);
  EXPECT_DEATH(Fp8Linear(cpu, wq, wq, cpu.Empty({48, 48})),
               "fp8::Fp8Linear: xq must be row1x128 codes, got tile128x128");
  EXPECT_DEATH(Fp8Linear(cpu, shared.Rows(x), shared.Rows(x), cpu.Empty({16, 16})),
               "fp8::Fp8Linear: wq must be tile128x128 codes, got row1x128");
  EXPECT_DEATH(Fp8LinearBackwardWeight(cpu, cpu.Empty({16, 48}), wq, cpu.Empty({48, 48})),
               "fp8::Fp8LinearBackwardWeight: xtq must be row1x128 codes, got tile128x128");
  // Column sums come from the first quantisation's read: not after Rows.
  EXPECT_DEATH(
      {
        Fp8SharedInput dyq(cpu);
        dyq.Rows(x);
        dyq.Both(x, cpu.Zeros({32}));
      },
      "fp8::Fp8SharedInput::Both: column sums of f32\\[16, 32\\] cpu asked after it was quantised");
}

TEST(Fp8LinearDeathTest, ShapesThatDoNotFormTheGemmAbortNamingEveryTensor) {
  HeapAllocator host;
  const Exec cpu = Exec::Cpu(host);
  auto m = [&](int64_t r, int64_t c, DType t = DType::kF32) { return cpu.Empty({r, c}, t); };
  // Forward: in differs; y transposed.
  EXPECT_DEATH(Fp8Linear(cpu, m(4, 130), m(3, 129), m(4, 3)),
               "fp8::Fp8Linear: x f32\\[4, 130\\] cpu, w f32\\[3, 129\\] cpu, y f32\\[4, 3\\] cpu "
               "do not form y = x");
  EXPECT_DEATH(Fp8Linear(cpu, m(4, 130), m(3, 130), m(3, 4)),
               "x f32\\[4, 130\\] cpu, w f32\\[3, 130\\] cpu, y f32\\[3, 4\\] cpu do not form");
  // Dgrad: out differs; dx [N, out] instead of [N, in].
  EXPECT_DEATH(Fp8LinearBackwardData(cpu, m(4, 3), m(5, 130), m(4, 130)),
               "fp8::Fp8LinearBackwardData: dy f32\\[4, 3\\] cpu, w f32\\[5, 130\\] cpu, dx "
               "f32\\[4, 130\\] cpu do not form dx = dy");
  EXPECT_DEATH(Fp8LinearBackwardData(cpu, m(4, 3), m(3, 130), m(4, 3)),
               "dy f32\\[4, 3\\] cpu, w f32\\[3, 130\\] cpu, dx f32\\[4, 3\\] cpu do not form");
  // Wgrad: N differs; dw [in, out] instead of [out, in].
  EXPECT_DEATH(Fp8LinearBackwardWeight(cpu, m(4, 3), m(5, 130), m(3, 130)),
               "fp8::Fp8LinearBackwardWeight: dy f32\\[4, 3\\] cpu, x f32\\[5, 130\\] cpu, dw "
               "f32\\[3, 130\\] cpu do not form dw = dy");
  EXPECT_DEATH(Fp8LinearBackwardWeight(cpu, m(4, 3), m(4, 130), m(130, 3)),
               "dy f32\\[4, 3\\] cpu, x f32\\[4, 130\\] cpu, dw f32\\[130, 3\\] cpu do not form");
  // Not f32/bf16 matrices.
  EXPECT_DEATH(Fp8Linear(cpu, m(4, 130, DType::kF16), m(3, 130), m(4, 3)),
               "fp8::Fp8Linear: x must be an f32 or bf16 matrix, got f16\\[4, 130\\] cpu");
  EXPECT_DEATH(Fp8LinearBackwardWeight(cpu, m(4, 3), m(4, 130), cpu.Empty({390})),
               "fp8::Fp8LinearBackwardWeight: dw must be an f32 or bf16 matrix, got f32\\[390\\]");
  // A tensor on another device than the Exec.
  const Exec cuda{Device::Cuda(0), &host};
  EXPECT_DEATH(Fp8Linear(cuda, m(4, 130), m(3, 130), m(4, 3)),
               "fp8::Fp8Linear: x is on cpu, exec on cuda:0");
}

}  // namespace
}  // namespace gtp::kernels::fp8
