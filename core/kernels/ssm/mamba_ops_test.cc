// The Mamba-2 small ops against double-precision references written here:
// forward values, and every gradient against central finite differences of
// the double reference's linear loss Σ y·R.
#include "core/kernels/ssm/mamba_ops.h"

#include <cmath>
#include <functional>
#include <vector>

#include "core/allocator.h"
#include "core/philox.h"
#include "gtest/gtest.h"

namespace gtp::kernels::ssm {
namespace {

using Vec = std::vector<double>;

Vec Random(size_t n, uint64_t key, double scale = 1.0) {
  Vec v(n);
  for (size_t i = 0; i < n; ++i) v[i] = scale * PhiloxNormal(key, i);
  return v;
}

Tensor T(HeapAllocator& a, const Vec& v, const Shape& s) {
  Tensor t = Tensor::Empty(s, DType::kF32, a);
  for (size_t i = 0; i < v.size(); ++i) t.data<float>()[i] = static_cast<float>(v[i]);
  return t;
}
Tensor Zeros(HeapAllocator& a, const Shape& s) {
  Tensor t = Tensor::Empty(s, DType::kF32, a);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = 0.0f;
  return t;
}
Tensor NaNs(HeapAllocator& a, const Shape& s) {
  Tensor t = Tensor::Empty(s, DType::kF32, a);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = std::nanf("");
  return t;
}

double Sig(double v) { return 1.0 / (1.0 + std::exp(-v)); }
double Silu(double v) { return v * Sig(v); }

// Every element of `got` (f32) against `want` (double), relative to max|want|.
void ExpectClose(const Tensor& got, const Vec& want, double tol, const char* what) {
  ASSERT_EQ(got.numel(), static_cast<int64_t>(want.size())) << what;
  double m = 1e-12;
  for (double v : want) m = std::max(m, std::fabs(v));
  for (size_t i = 0; i < want.size(); ++i) {
    const float g = got.data<float>()[i];
    ASSERT_TRUE(std::isfinite(g)) << what << "[" << i << "]";
    ASSERT_NEAR(g, want[i], tol * m) << what << "[" << i << "]";
  }
}

// Central differences of loss(v) at each element of v.
Vec FiniteDiff(Vec v, const std::function<double(const Vec&)>& loss) {
  Vec g(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    const double h = 1e-6 * std::max(1.0, std::fabs(v[i])), keep = v[i];
    v[i] = keep + h;
    const double up = loss(v);
    v[i] = keep - h;
    const double down = loss(v);
    v[i] = keep;
    g[i] = (up - down) / (2 * h);
  }
  return g;
}

double Dot(const Vec& a, const Vec& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// ---- conv1d ----------------------------------------------------------------------------
Vec ConvRef(const Vec& x, const Vec& w, const Vec& bias, int64_t B, int64_t Tn, int64_t Ch, int64_t K,
            bool silu) {
  Vec y(B * Tn * Ch);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < Tn; ++t)
      for (int64_t c = 0; c < Ch; ++c) {
        double acc = bias[c];
        for (int64_t k = 0; k < K; ++k) {
          const int64_t s = t - (K - 1) + k;
          if (s >= 0) acc += w[c * K + k] * x[(b * Tn + s) * Ch + c];
        }
        y[(b * Tn + t) * Ch + c] = silu ? Silu(acc) : acc;
      }
  return y;
}

TEST(CausalConv1d, ForwardAndBackwardMatchTheReference) {
  HeapAllocator a;
  const Exec e = Exec::Cpu(a);
  for (bool silu : {false, true}) {
    const int64_t B = 2, Tn = 7, Ch = 5, K = 4;
    const Vec x = Random(B * Tn * Ch, 1), w = Random(Ch * K, 2, 0.5), bias = Random(Ch, 3, 0.1),
              R = Random(B * Tn * Ch, 4);
    Tensor y = NaNs(a, {B, Tn, Ch});
    CausalConv1dForward(e, T(a, x, {B, Tn, Ch}), T(a, w, {Ch, K}), T(a, bias, {Ch}), y, silu);
    ExpectClose(y, ConvRef(x, w, bias, B, Tn, Ch, K, silu), 1e-6, "y");
    // Causal: y at t = 0 depends only on x at t = 0 (checked through dx below).
    Tensor dx = NaNs(a, {B, Tn, Ch}), dw = Zeros(a, {Ch, K}), db = Zeros(a, {Ch});
    CausalConv1dBackward(e, T(a, R, {B, Tn, Ch}), T(a, x, {B, Tn, Ch}), T(a, w, {Ch, K}),
                         T(a, bias, {Ch}), silu, dx, dw, db);
    auto L = [&](const Vec& xx, const Vec& ww, const Vec& bb) {
      return Dot(ConvRef(xx, ww, bb, B, Tn, Ch, K, silu), R);
    };
    ExpectClose(dx, FiniteDiff(x, [&](const Vec& v) { return L(v, w, bias); }), 1e-5, "dx");
    ExpectClose(dw, FiniteDiff(w, [&](const Vec& v) { return L(x, v, bias); }), 1e-5, "dw");
    ExpectClose(db, FiniteDiff(bias, [&](const Vec& v) { return L(x, w, v); }), 1e-5, "dbias");
    // A bf16 dx (in_proj_x's gradient input in bf16 training): the f32 dx
    // rounded to nearest even, bit for bit.
    Tensor dxb = e.Empty({B, Tn, Ch}, DType::kBF16), dw2 = Zeros(a, {Ch, K}), db2 = Zeros(a, {Ch});
    CausalConv1dBackward(e, T(a, R, {B, Tn, Ch}), T(a, x, {B, Tn, Ch}), T(a, w, {Ch, K}),
                         T(a, bias, {Ch}), silu, dxb, dw2, db2);
    for (int64_t i = 0; i < B * Tn * Ch; ++i) {
      ASSERT_EQ(dxb.data<bf16>()[i].bits, ToBF16(dx.data<float>()[i]).bits)
          << "bf16 dx[" << i << "]";
    }
    // Parameter gradients accumulate.
    CausalConv1dBackward(e, T(a, R, {B, Tn, Ch}), T(a, x, {B, Tn, Ch}), T(a, w, {Ch, K}),
                         T(a, bias, {Ch}), silu, dx, dw, db);
    Vec twice = FiniteDiff(bias, [&](const Vec& v) { return 2 * L(x, w, v); });
    ExpectClose(db, twice, 1e-5, "dbias accumulated");
  }
}

// ---- softplus + bias -------------------------------------------------------------------
TEST(SoftplusBias, ForwardAndBackwardMatchTheReference) {
  HeapAllocator a;
  const Exec e = Exec::Cpu(a);
  const int64_t N = 6, H = 3;
  Vec raw = Random(N * H, 5, 3.0), bias = Random(H, 6);
  raw[0] = 25.0;  // the pass-through branch
  const Vec R = Random(N * H, 7);
  auto ref = [&](const Vec& rr, const Vec& bb) {
    Vec dt(N * H);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t h = 0; h < H; ++h) {
        const double u = rr[n * H + h] + bb[h];
        dt[n * H + h] = u > 20 ? u : std::log1p(std::exp(u));
      }
    return dt;
  };
  Tensor dt = NaNs(a, {N, H});
  SoftplusBiasForward(e, T(a, raw, {N, H}), T(a, bias, {H}), dt);
  ExpectClose(dt, ref(raw, bias), 1e-6, "dt");
  Tensor draw = NaNs(a, {N, H}), db = Zeros(a, {H});
  SoftplusBiasBackward(e, T(a, R, {N, H}), T(a, raw, {N, H}), T(a, bias, {H}), draw, db);
  ExpectClose(draw, FiniteDiff(raw, [&](const Vec& v) { return Dot(ref(v, bias), R); }), 1e-5,
              "draw");
  ExpectClose(db, FiniteDiff(bias, [&](const Vec& v) { return Dot(ref(raw, v), R); }), 1e-5, "dbias");
}

// ---- gated RMSNorm ---------------------------------------------------------------------
TEST(GatedRmsNorm, ForwardAndBackwardMatchTheReference) {
  HeapAllocator a;
  const Exec e = Exec::Cpu(a);
  const int64_t N = 4, Ch = 12;
  const float eps = 1e-5f;
  for (int64_t group : {12L, 4L}) {
    const Vec x = Random(N * Ch, 8), z = Random(N * Ch, 9), w = Random(Ch, 10, 0.5), R = Random(N * Ch, 11);
    auto ref = [&](const Vec& xx, const Vec& zz, const Vec& ww) {
      Vec y(N * Ch);
      for (int64_t n = 0; n < N; ++n)
        for (int64_t g0 = 0; g0 < Ch; g0 += group) {
          double ss = 0;
          for (int64_t c = g0; c < g0 + group; ++c) {
            const double g = xx[n * Ch + c] * Silu(zz[n * Ch + c]);
            ss += g * g;
          }
          const double r = 1.0 / std::sqrt(ss / group + eps);
          for (int64_t c = g0; c < g0 + group; ++c) {
            y[n * Ch + c] = xx[n * Ch + c] * Silu(zz[n * Ch + c]) * r * ww[c];
          }
        }
      return y;
    };
    Tensor y = NaNs(a, {N, Ch}), rstd = NaNs(a, {N, Ch / group});
    GatedRmsNormForward(e, T(a, x, {N, Ch}), T(a, z, {N, Ch}), T(a, w, {Ch}), y, rstd, group, eps);
    ExpectClose(y, ref(x, z, w), 1e-5, "y");
    // A bf16 y (what out_proj reads in bf16 training) is the f32 y rounded to
    // nearest even, bit for bit: a cast's result without the cast.
    Tensor yb = e.Empty({N, Ch}, DType::kBF16), rb = NaNs(a, {N, Ch / group});
    GatedRmsNormForward(e, T(a, x, {N, Ch}), T(a, z, {N, Ch}), T(a, w, {Ch}), yb, rb, group, eps);
    for (int64_t i = 0; i < N * Ch; ++i) {
      ASSERT_EQ(yb.data<bf16>()[i].bits, ToBF16(y.data<float>()[i]).bits) << "bf16 y[" << i << "]";
    }
    Tensor dx = NaNs(a, {N, Ch}), dz = NaNs(a, {N, Ch}), dw = Zeros(a, {Ch});
    GatedRmsNormBackward(e, T(a, R, {N, Ch}), T(a, x, {N, Ch}), T(a, z, {N, Ch}), T(a, w, {Ch}), rstd,
                         group, dx, dz, dw);
    // A bf16 dz (in_proj_z's gradient input in bf16 training): the f32 dz
    // rounded to nearest even, bit for bit; dx and dw as before.
    Tensor dx2 = NaNs(a, {N, Ch}), dzb = e.Empty({N, Ch}, DType::kBF16), dw2 = Zeros(a, {Ch});
    GatedRmsNormBackward(e, T(a, R, {N, Ch}), T(a, x, {N, Ch}), T(a, z, {N, Ch}), T(a, w, {Ch}),
                         rstd, group, dx2, dzb, dw2);
    for (int64_t i = 0; i < N * Ch; ++i) {
      ASSERT_EQ(dzb.data<bf16>()[i].bits, ToBF16(dz.data<float>()[i]).bits)
          << "bf16 dz[" << i << "]";
      ASSERT_EQ(dx2.data<float>()[i], dx.data<float>()[i]) << "dx[" << i << "]";
    }
    // A bf16 dy (out_proj's input gradient in bf16 training, read as it
    // comes): the bits of the f32 path given dy's f32 cast.
    Vec Rr(R.size());
    Tensor Rb = e.Empty({N, Ch}, DType::kBF16);
    for (size_t i = 0; i < R.size(); ++i) {
      Rb.data<bf16>()[i] = ToBF16(R[i]);
      Rr[i] = ToF32(Rb.data<bf16>()[i]);
    }
    Tensor dx3 = NaNs(a, {N, Ch}), dz3 = NaNs(a, {N, Ch}), dw3 = Zeros(a, {Ch});
    Tensor dx4 = NaNs(a, {N, Ch}), dz4 = NaNs(a, {N, Ch}), dw4 = Zeros(a, {Ch});
    GatedRmsNormBackward(e, T(a, Rr, {N, Ch}), T(a, x, {N, Ch}), T(a, z, {N, Ch}), T(a, w, {Ch}),
                         rstd, group, dx3, dz3, dw3);
    GatedRmsNormBackward(e, Rb, T(a, x, {N, Ch}), T(a, z, {N, Ch}), T(a, w, {Ch}), rstd, group, dx4,
                         dz4, dw4);
    for (int64_t i = 0; i < N * Ch; ++i) {
      ASSERT_FALSE(std::isnan(dx4.data<float>()[i])) << "dx[" << i << "] from a bf16 dy";
      ASSERT_EQ(dx4.data<float>()[i], dx3.data<float>()[i]) << "dx[" << i << "] from a bf16 dy";
      ASSERT_EQ(dz4.data<float>()[i], dz3.data<float>()[i]) << "dz[" << i << "] from a bf16 dy";
    }
    for (int64_t c = 0; c < Ch; ++c) {
      ASSERT_EQ(dw4.data<float>()[c], dw3.data<float>()[c]) << "dw[" << c << "] from a bf16 dy";
    }
    ExpectClose(dx, FiniteDiff(x, [&](const Vec& v) { return Dot(ref(v, z, w), R); }), 1e-4, "dx");
    ExpectClose(dz, FiniteDiff(z, [&](const Vec& v) { return Dot(ref(x, v, w), R); }), 1e-4, "dz");
    ExpectClose(dw, FiniteDiff(w, [&](const Vec& v) { return Dot(ref(x, z, v), R); }), 1e-4, "dw");
  }
}

// ---- A = −exp(A_log) -------------------------------------------------------------------
TEST(NegExp, ForwardAndBackwardMatchTheClosedForm) {
  HeapAllocator a;
  const Exec e = Exec::Cpu(a);
  const int64_t H = 7;
  Vec a_log = Random(H, 12, 1.5);
  a_log[0] = 0.0;                  // A = −1 exactly
  a_log[1] = std::log(16.0);       // the top of Mamba-2's init range
  const Vec da = Random(H, 13), g0 = Random(H, 14);
  Tensor A = NaNs(a, {H});
  NegExpForward(e, T(a, a_log, {H}), A);
  Vec want(H);
  for (int64_t h = 0; h < H; ++h) want[h] = -std::exp(static_cast<double>(static_cast<float>(a_log[h])));
  ExpectClose(A, want, 1e-6, "A");
  for (int64_t h = 0; h < H; ++h) ASSERT_LT(A.data<float>()[h], 0.0f) << h;
  // dA_log = dA·(−e^{A_log}), added to what the gradient held.
  Tensor grad = T(a, g0, {H});
  NegExpBackwardAccumulate(e, T(a, da, {H}), A, grad);
  Vec wg(H);
  for (int64_t h = 0; h < H; ++h) {
    wg[h] = static_cast<float>(g0[h]) - static_cast<float>(da[h]) * std::exp(static_cast<float>(a_log[h]));
  }
  ExpectClose(grad, wg, 1e-6, "A_log grad");
  // And against finite differences of Σ A·dA.
  Tensor g = Zeros(a, {H});
  NegExpBackwardAccumulate(e, T(a, da, {H}), A, g);
  ExpectClose(g, FiniteDiff(a_log, [&](const Vec& v) {
                double s = 0;
                for (int64_t h = 0; h < H; ++h) s += -std::exp(v[h]) * da[h];
                return s;
              }),
              1e-5, "A_log grad (finite differences)");
}

TEST(MambaOpsDeathTest, BadShapesAreNamed) {
  HeapAllocator a;
  const Exec e = Exec::Cpu(a);
  EXPECT_DEATH(CausalConv1dForward(e, Zeros(a, {2, 3, 4}), Zeros(a, {5, 2}), Zeros(a, {4}),
                                   Zeros(a, {2, 3, 4}), true),
               "CausalConv1dForward");
  EXPECT_DEATH(GatedRmsNormForward(e, Zeros(a, {2, 6}), Zeros(a, {2, 6}), Zeros(a, {6}),
                                   Zeros(a, {2, 6}), Zeros(a, {2, 1}), 4, 1e-5f),
               "GatedRmsNormForward");
  EXPECT_DEATH(NegExpForward(e, Zeros(a, {4}), Zeros(a, {3})), "NegExpForward");
  // The outputs that take bf16 take f32 or bf16 only, and say so.
  EXPECT_DEATH(GatedRmsNormForward(e, Zeros(a, {2, 6}), Zeros(a, {2, 6}), Zeros(a, {6}),
                                   e.Empty({2, 6}, DType::kF16), Zeros(a, {2, 2}), 3, 1e-5f),
               "GatedRmsNormForward: y must be a contiguous f32 or bf16");
  EXPECT_DEATH(CausalConv1dBackward(e, Zeros(a, {2, 3, 4}), Zeros(a, {2, 3, 4}), Zeros(a, {4, 2}),
                                    Zeros(a, {4}), true, e.Empty({2, 3, 4}, DType::kF16),
                                    Zeros(a, {4, 2}), Zeros(a, {4})),
               "CausalConv1dBackward: dx must be a contiguous f32 or bf16");
}

}  // namespace
}  // namespace gtp::kernels::ssm
