// CPU tests of the GEMM epilogues (GemmDesc::epilogue, core/kernels/kernels.h)
// against the double reference: GELU with the pre-activation saved
// (kGeluAux), the GELU backward with the bias gradient (kDGeluBGrad) and the
// bias gradient of the weight-gradient GEMM (kBGrad); f32 and bf16 operands
// and outputs, every transpose, odd shapes, padded leading dimensions. Plus:
// f32 results bit-identical to the unfused kernels, bf16 outputs rounded once
// from them, the bias gradient summed before rounding, an MLP backward
// against finite differences, and the invalid descriptors abort.
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/kernels/cpu.h"
#include "core/kernels/testing/harness.h"
#include "core/kernels/testing/reference.h"
#include "gtest/gtest.h"

namespace gtp::kernels::testing {
namespace {

struct Dims {
  int64_t m, n, k;
};

// Odd and degenerate shapes; 257 crosses OpenBLAS' blocking boundaries.
const Dims kShapes[] = {{1, 1, 1},   {3, 5, 7},    {257, 3, 33}, {2, 257, 1},
                        {17, 24, 9}, {64, 48, 32}, {33, 8, 257}};

struct Types {
  DType ab, c;
  double tol;  // of C and aux against the reference
};
const Types kTypes[] = {{DType::kF32, DType::kF32, 2e-5},
                        {DType::kBF16, DType::kF32, 2e-5},
                        {DType::kBF16, DType::kBF16, 1e-2},
                        {DType::kF32, DType::kBF16, 1e-2}};

// Bias gradients are f32 sums of f32 values (before any rounding of C).
constexpr double kBiasGradTol = 1e-4;

std::string Describe(const GemmDesc& d) {
  return absl::StrCat("m=", d.m, " n=", d.n, " k=", d.k, " ta=", d.trans_a, " tb=", d.trans_b,
                      " ab=", DTypeName(d.ab_type), " c=", DTypeName(d.c_type),
                      " epilogue=", GemmEpilogueName(d.epilogue), " alpha=", d.alpha,
                      " beta=", d.beta, " bias=", d.bias != nullptr, " ld_aux=", d.ld_aux);
}

int64_t RowsA(const GemmDesc& d) { return d.trans_a ? d.k : d.m; }
int64_t ColsA(const GemmDesc& d) { return d.trans_a ? d.m : d.k; }
int64_t RowsB(const GemmDesc& d) { return d.trans_b ? d.n : d.k; }
int64_t ColsB(const GemmDesc& d) { return d.trans_b ? d.k : d.n; }
int64_t LdA(const GemmDesc& d) { return d.lda ? d.lda : ColsA(d); }
int64_t LdB(const GemmDesc& d) { return d.ldb ? d.ldb : ColsB(d); }
int64_t LdC(const GemmDesc& d) { return d.ldc ? d.ldc : d.n; }
int64_t LdAux(const GemmDesc& d) { return d.ld_aux ? d.ld_aux : d.n; }

// f32 values held as `t` bytes, and back.
std::vector<uint8_t> Store(const std::vector<float>& v, DType t) {
  std::vector<uint8_t> out(v.size() * SizeOf(t));
  if (t == DType::kF32) {
    std::memcpy(out.data(), v.data(), out.size());
  } else {
    const std::vector<bf16> b = ToBF16(v);
    std::memcpy(out.data(), b.data(), out.size());
  }
  return out;
}
std::vector<float> Load(const std::vector<uint8_t>& bytes, DType t) {
  std::vector<float> out(bytes.size() / SizeOf(t));
  if (t == DType::kF32) {
    std::memcpy(out.data(), bytes.data(), bytes.size());
  } else {
    for (size_t i = 0; i < out.size(); ++i) {
      uint16_t bits;
      std::memcpy(&bits, bytes.data() + 2 * i, 2);
      out[i] = BF16BitsToF32(bits);
    }
  }
  return out;
}
// Values exactly representable in t, so the reference sees what the kernel sees.
std::vector<float> Exact(std::vector<float> v, DType t) {
  return t == DType::kBF16 ? RoundToBF16(v) : v;
}

// The logical [rows, cols] part of a matrix with leading dimension ld, packed.
template <typename T>
std::vector<T> Logical(const std::vector<T>& v, int64_t rows, int64_t cols, int64_t ld) {
  std::vector<T> out(rows * cols);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) out[r * cols + c] = v[r * ld + c];
  }
  return out;
}

// A [rows, ld] matrix of random values; padding columns NaN (must not be read).
std::vector<float> Operand(Rng& rng, int64_t rows, int64_t cols, int64_t ld, DType t) {
  std::vector<float> v = Exact(rng.Uniform(rows * ld), t);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = cols; c < ld; ++c) v[r * ld + c] = NAN;
  }
  return v;
}

// P = alpha·op(A)·op(B) in double, packed [m, n].
std::vector<double> RefProduct(const GemmDesc& d, const std::vector<float>& A,
                               const std::vector<float>& B) {
  std::vector<double> p(d.m * d.n, 0.0);
  RefGemm(d.trans_a, d.trans_b, d.m, d.n, d.k, d.alpha, ToDouble(A), LdA(d), ToDouble(B), LdB(d),
          0.0, &p, 0);
  return p;
}

// Σ over rows of x[rows, cols].
std::vector<double> ColumnSums(const std::vector<double>& x, int64_t rows, int64_t cols) {
  std::vector<double> s(cols, 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) s[c] += x[r * cols + c];
  }
  return s;
}

GemmDesc Desc(const Dims& s, int t, const Types& ty, GemmEpilogue epilogue) {
  GemmDesc d;
  d.trans_a = t & 1;
  d.trans_b = t & 2;
  d.m = s.m, d.n = s.n, d.k = s.k;
  d.ab_type = ty.ab;
  d.c_type = ty.c;
  d.epilogue = epilogue;
  return d;
}

// Runs kGeluAux (bias and aux as given) and checks C, aux and both paddings.
void CheckGeluAux(GemmDesc d, Rng& rng, bool with_bias, bool with_aux, double tol) {
  const std::vector<float> A = Operand(rng, RowsA(d), ColsA(d), LdA(d), d.ab_type);
  const std::vector<float> B = Operand(rng, RowsB(d), ColsB(d), LdB(d), d.ab_type);
  const std::vector<float> bias = Exact(rng.Uniform(d.n), d.c_type);
  std::vector<uint8_t> bias_s = Store(bias, d.c_type);
  if (with_bias) d.bias = bias_s.data();
  // Logical part of C and aux NaN (written, never read), padding 7.
  std::vector<float> c0(d.m * LdC(d), 7.0f), aux0(d.m * LdAux(d), 7.0f);
  for (int64_t i = 0; i < d.m; ++i) {
    for (int64_t j = 0; j < d.n; ++j) c0[i * LdC(d) + j] = aux0[i * LdAux(d) + j] = NAN;
  }
  std::vector<uint8_t> C = Store(c0, d.c_type), aux = Store(aux0, d.c_type);
  if (with_aux) d.aux = aux.data();
  SCOPED_TRACE(Describe(d) + absl::StrCat(" with_aux=", with_aux));
  cpu::Gemm(d, Store(A, d.ab_type).data(), Store(B, d.ab_type).data(), C.data());

  std::vector<double> pre = RefProduct(d, A, B);
  if (with_bias) {
    for (int64_t i = 0; i < d.m; ++i) {
      for (int64_t j = 0; j < d.n; ++j) pre[i * d.n + j] += bias[j];
    }
  }
  const std::vector<float> c = Load(C, d.c_type), a = Load(aux, d.c_type);
  EXPECT_TRUE(RelClose(Logical(c, d.m, d.n, LdC(d)), RefGelu(pre), tol));
  if (with_aux) {
    EXPECT_TRUE(RelClose(Logical(a, d.m, d.n, LdAux(d)), pre, tol));
  }
  for (int64_t i = 0; i < d.m; ++i) {
    for (int64_t j = d.n; j < LdC(d); ++j) ASSERT_EQ(c[i * LdC(d) + j], 7.0f) << "C padding";
    for (int64_t j = d.n; j < LdAux(d); ++j) ASSERT_EQ(a[i * LdAux(d) + j], 7.0f) << "aux padding";
    if (!with_aux) {
      for (int64_t j = 0; j < d.n; ++j) ASSERT_TRUE(std::isnan(a[i * LdAux(d) + j])) << "aux";
    }
  }
}

TEST(GemmEpilogue, GeluAuxMatchesReference) {
  Rng rng(1);
  for (const Types& ty : kTypes) {
    for (size_t si = 0; si < std::size(kShapes); ++si) {
      for (int t = 0; t < 4; ++t) {
        for (int bias = 0; bias < 2; ++bias) {
          GemmDesc d = Desc(kShapes[si], t, ty, GemmEpilogue::kGeluAux);
          d.alpha = t == 3 ? 0.5f : 1.0f;
          d.ld_aux = si % 2 ? d.n + 3 : 0;  // padded and packed pre-activations
          CheckGeluAux(d, rng, bias, /*with_aux=*/true, ty.tol);
        }
      }
    }
  }
}

TEST(GemmEpilogue, GeluWithoutAuxWritesOnlyC) {
  Rng rng(2);
  for (const Types& ty : kTypes) {
    GemmDesc d = Desc({17, 24, 9}, 2, ty, GemmEpilogue::kGeluAux);
    CheckGeluAux(d, rng, /*with_bias=*/true, /*with_aux=*/false, ty.tol);
  }
}

TEST(GemmEpilogue, GeluAuxHonoursLeadingDimensions) {
  Rng rng(3);
  for (const Types& ty : kTypes) {
    for (int t = 0; t < 4; ++t) {
      GemmDesc d = Desc({33, 17, 65}, t, ty, GemmEpilogue::kGeluAux);
      d.lda = ColsA(d) + 3;
      d.ldb = ColsB(d) + 1;
      d.ldc = d.n + 2;
      d.ld_aux = d.n + 7;
      CheckGeluAux(d, rng, /*with_bias=*/true, /*with_aux=*/true, ty.tol);
    }
  }
}

// f32: the epilogue is the unfused Gemm (+ bias) then GeluForward, bit for
// bit; bf16 outputs are exactly those values rounded once.
TEST(GemmEpilogue, GeluAuxIsTheUnfusedGemmAndGelu) {
  Rng rng(4);
  for (DType ab : {DType::kF32, DType::kBF16}) {
    for (int t = 0; t < 4; ++t) {
      GemmDesc d = Desc({65, 40, 33}, t, {ab, DType::kF32, 0}, GemmEpilogue::kNone);
      SCOPED_TRACE(Describe(d));
      const std::vector<uint8_t> A = Store(Exact(rng.Uniform(RowsA(d) * ColsA(d)), ab), ab);
      const std::vector<uint8_t> B = Store(Exact(rng.Uniform(RowsB(d) * ColsB(d)), ab), ab);
      const std::vector<float> bias = RoundToBF16(rng.Uniform(d.n));
      const std::vector<bf16> bias_b = ToBF16(bias);
      std::vector<float> pre(d.m * d.n), y(d.m * d.n);
      d.bias = bias.data();
      cpu::Gemm(d, A.data(), B.data(), pre.data());
      cpu::GeluForward(pre.data(), y.data(), d.m * d.n);

      d.epilogue = GemmEpilogue::kGeluAux;
      std::vector<float> y_f = NaNs(d.m * d.n), pre_f = NaNs(d.m * d.n);
      d.aux = pre_f.data();
      cpu::Gemm(d, A.data(), B.data(), y_f.data());
      EXPECT_EQ(0, std::memcmp(y_f.data(), y.data(), y.size() * sizeof(float)));
      EXPECT_EQ(0, std::memcmp(pre_f.data(), pre.data(), pre.size() * sizeof(float)));

      d.c_type = DType::kBF16;
      d.bias = bias_b.data();
      std::vector<bf16> y_b = ToBF16(NaNs(d.m * d.n)), pre_b = y_b;
      d.aux = pre_b.data();
      cpu::Gemm(d, A.data(), B.data(), y_b.data());
      for (size_t i = 0; i < y.size(); ++i) {
        ASSERT_EQ(y_b[i].bits, F32ToBF16Bits(y[i])) << "y element " << i;
        ASSERT_EQ(pre_b[i].bits, F32ToBF16Bits(pre[i])) << "pre element " << i;
      }
    }
  }
}

// Runs kDGeluBGrad and checks C (= dx) and bias_grad against the reference.
void CheckDGelu(GemmDesc d, Rng& rng, bool with_bias_grad, double tol) {
  const std::vector<float> A = Operand(rng, RowsA(d), ColsA(d), LdA(d), d.ab_type);
  const std::vector<float> B = Operand(rng, RowsB(d), ColsB(d), LdB(d), d.ab_type);
  // Pre-activations over GELU's curved range, NaN in the padding (not read).
  std::vector<float> pre = Operand(rng, d.m, d.n, LdAux(d), DType::kF32);
  for (float& v : pre) v *= 3.0f;
  pre = Exact(pre, d.c_type);
  std::vector<uint8_t> aux = Store(pre, d.c_type);
  d.aux = aux.data();
  std::vector<float> c0(d.m * LdC(d), 7.0f);
  for (int64_t i = 0; i < d.m; ++i) {
    for (int64_t j = 0; j < d.n; ++j) c0[i * LdC(d) + j] = NAN;
  }
  std::vector<uint8_t> C = Store(c0, d.c_type);
  std::vector<float> bias_grad = NaNs(d.n);
  if (with_bias_grad) d.bias_grad = bias_grad.data();
  SCOPED_TRACE(Describe(d) + absl::StrCat(" with_bias_grad=", with_bias_grad));
  cpu::Gemm(d, Store(A, d.ab_type).data(), Store(B, d.ab_type).data(), C.data());

  const std::vector<double> dx =
      RefGeluBackward(RefProduct(d, A, B), ToDouble(Logical(pre, d.m, d.n, LdAux(d))));
  const std::vector<float> c = Load(C, d.c_type);
  EXPECT_TRUE(RelClose(Logical(c, d.m, d.n, LdC(d)), dx, tol));
  for (int64_t i = 0; i < d.m; ++i) {
    for (int64_t j = d.n; j < LdC(d); ++j) ASSERT_EQ(c[i * LdC(d) + j], 7.0f) << "C padding";
  }
  if (with_bias_grad) {
    EXPECT_TRUE(RelClose(bias_grad, ColumnSums(dx, d.m, d.n), kBiasGradTol));
  } else {
    for (float v : bias_grad) ASSERT_TRUE(std::isnan(v)) << "bias_grad written without a pointer";
  }
}

TEST(GemmEpilogue, DGeluBGradMatchesReference) {
  Rng rng(5);
  for (const Types& ty : kTypes) {
    for (size_t si = 0; si < std::size(kShapes); ++si) {
      for (int t = 0; t < 4; ++t) {
        GemmDesc d = Desc(kShapes[si], t, ty, GemmEpilogue::kDGeluBGrad);
        d.ld_aux = si % 2 ? d.n + 5 : 0;
        CheckDGelu(d, rng, /*with_bias_grad=*/true, ty.tol);
      }
    }
  }
}

TEST(GemmEpilogue, DGeluWithoutBiasGradWritesOnlyC) {
  Rng rng(6);
  for (const Types& ty : kTypes) {
    CheckDGelu(Desc({17, 24, 9}, 0, ty, GemmEpilogue::kDGeluBGrad), rng, false, ty.tol);
  }
}

TEST(GemmEpilogue, DGeluBGradHonoursLeadingDimensions) {
  Rng rng(7);
  for (const Types& ty : kTypes) {
    for (int t = 0; t < 4; ++t) {
      GemmDesc d = Desc({33, 17, 65}, t, ty, GemmEpilogue::kDGeluBGrad);
      d.lda = ColsA(d) + 1;
      d.ldb = ColsB(d) + 4;
      d.ldc = d.n + 3;
      d.ld_aux = d.n + 8;
      CheckDGelu(d, rng, /*with_bias_grad=*/true, ty.tol);
    }
  }
}

// f32: the unfused Gemm then GeluBackward, and bias_grad the f32 column sums
// in row order, bit for bit. bf16 C: dx rounded once from those values and
// bias_grad identical, i.e. summed before the rounding.
TEST(GemmEpilogue, DGeluBGradIsTheUnfusedGemmAndGeluBackward) {
  Rng rng(8);
  for (DType ab : {DType::kF32, DType::kBF16}) {
    GemmDesc d = Desc({129, 40, 33}, 0, {ab, DType::kF32, 0}, GemmEpilogue::kNone);
    SCOPED_TRACE(Describe(d));
    const std::vector<uint8_t> A = Store(Exact(rng.Uniform(RowsA(d) * ColsA(d)), ab), ab);
    const std::vector<uint8_t> B = Store(Exact(rng.Uniform(RowsB(d) * ColsB(d)), ab), ab);
    std::vector<float> pre = RoundToBF16(rng.Uniform(d.m * d.n, -3.0f, 3.0f));
    std::vector<float> g(d.m * d.n), dx(d.m * d.n), db(d.n, 0.0f);
    cpu::Gemm(d, A.data(), B.data(), g.data());
    cpu::GeluBackward(g.data(), pre.data(), dx.data(), d.m * d.n);
    for (int64_t i = 0; i < d.m; ++i) {
      for (int64_t j = 0; j < d.n; ++j) db[j] += dx[i * d.n + j];
    }

    d.epilogue = GemmEpilogue::kDGeluBGrad;
    d.aux = pre.data();
    std::vector<float> dx_f = NaNs(d.m * d.n), db_f = NaNs(d.n);
    d.bias_grad = db_f.data();
    cpu::Gemm(d, A.data(), B.data(), dx_f.data());
    EXPECT_EQ(0, std::memcmp(dx_f.data(), dx.data(), dx.size() * sizeof(float)));
    EXPECT_EQ(0, std::memcmp(db_f.data(), db.data(), db.size() * sizeof(float)));

    d.c_type = DType::kBF16;
    std::vector<bf16> pre_b = ToBF16(pre), dx_b = ToBF16(NaNs(d.m * d.n));
    std::vector<float> db_b = NaNs(d.n);
    d.aux = pre_b.data();
    d.bias_grad = db_b.data();
    cpu::Gemm(d, A.data(), B.data(), dx_b.data());
    for (size_t i = 0; i < dx.size(); ++i) {
      ASSERT_EQ(dx_b[i].bits, F32ToBF16Bits(dx[i])) << "dx element " << i;
    }
    EXPECT_EQ(0, std::memcmp(db_b.data(), db.data(), db.size() * sizeof(float)));
  }
}

// Runs kBGrad and checks C and bias_grad[m] = Σ_l op(A)[i, l].
void CheckBGrad(GemmDesc d, Rng& rng, double tol) {
  const std::vector<float> A = Operand(rng, RowsA(d), ColsA(d), LdA(d), d.ab_type);
  const std::vector<float> B = Operand(rng, RowsB(d), ColsB(d), LdB(d), d.ab_type);
  std::vector<float> c0 = Exact(rng.Uniform(d.m * LdC(d)), d.c_type);
  for (int64_t i = 0; i < d.m; ++i) {
    for (int64_t j = 0; j < LdC(d); ++j) {
      if (j >= d.n) {
        c0[i * LdC(d) + j] = 7.0f;
      } else if (d.beta == 0.0f) {
        c0[i * LdC(d) + j] = NAN;
      }
    }
  }
  std::vector<uint8_t> C = Store(c0, d.c_type);
  std::vector<float> bias_grad = NaNs(d.m);
  d.bias_grad = bias_grad.data();
  SCOPED_TRACE(Describe(d));
  cpu::Gemm(d, Store(A, d.ab_type).data(), Store(B, d.ab_type).data(), C.data());

  std::vector<double> ref = ToDouble(c0);
  RefGemm(d.trans_a, d.trans_b, d.m, d.n, d.k, 1.0, ToDouble(A), LdA(d), ToDouble(B), LdB(d),
          d.beta, &ref, LdC(d));
  EXPECT_TRUE(RelClose(Load(C, d.c_type), ref, tol));  // padding included: left as it was
  std::vector<double> db(d.m, 0.0);
  for (int64_t i = 0; i < d.m; ++i) {
    for (int64_t l = 0; l < d.k; ++l) db[i] += d.trans_a ? A[l * LdA(d) + i] : A[i * LdA(d) + l];
  }
  EXPECT_TRUE(RelClose(bias_grad, db, kBiasGradTol));
}

TEST(GemmEpilogue, BGradMatchesReference) {
  Rng rng(9);
  for (const Types& ty : kTypes) {
    for (const Dims& s : kShapes) {
      for (int t = 0; t < 4; ++t) {
        for (float beta : {0.0f, 0.5f}) {
          GemmDesc d = Desc(s, t, ty, GemmEpilogue::kBGrad);
          d.beta = beta;
          CheckBGrad(d, rng, ty.tol);
        }
      }
    }
  }
}

TEST(GemmEpilogue, BGradHonoursLeadingDimensions) {
  Rng rng(10);
  for (const Types& ty : kTypes) {
    for (int t = 0; t < 4; ++t) {
      GemmDesc d = Desc({33, 17, 65}, t, ty, GemmEpilogue::kBGrad);
      d.lda = ColsA(d) + 3;
      d.ldb = ColsB(d) + 2;
      d.ldc = d.n + 1;
      d.beta = 1.0f;
      CheckBGrad(d, rng, ty.tol);
    }
  }
}

// The MLP h = x·W1ᵀ + b1, a = gelu(h), y = a·W2ᵀ built from the epilogues,
// its backward against finite differences of the double reference on
// L = Σ w·y: dh = (dy·W2) ∘ gelu'(h) with db1 (kDGeluBGrad), dW1 = dhᵀ·x with
// db1 again (kBGrad: the two bias-gradient routes agree), dx = dh·W1.
TEST(GemmEpilogue, MlpBackwardMatchesFiniteDifferences) {
  Rng rng(11);
  const int64_t N = 7, C = 5, H = 9, O = 3;
  const std::vector<float> x = rng.Uniform(N * C), W1 = rng.Uniform(H * C), b1 = rng.Uniform(H),
                           W2 = rng.Uniform(O * H), dy = rng.Uniform(N * O);
  auto forward = [&](const std::vector<double>& xd, const std::vector<double>& W1d,
                     const std::vector<double>& b1d) {
    std::vector<double> h(N * H, 0.0), y(N * O, 0.0);
    RefGemm(false, true, N, H, C, 1.0, xd, 0, W1d, 0, 0.0, &h, 0);
    for (int64_t i = 0; i < N; ++i) {
      for (int64_t j = 0; j < H; ++j) h[i * H + j] += b1d[j];
    }
    RefGemm(false, true, N, O, H, 1.0, RefGelu(h), 0, ToDouble(W2), 0, 0.0, &y, 0);
    return y;
  };
  const std::vector<double> w = ToDouble(dy);
  const std::vector<double> fd_x = FiniteDifferenceGradient(
      [&](const std::vector<double>& v) { return forward(v, ToDouble(W1), ToDouble(b1)); },
      ToDouble(x), w);
  const std::vector<double> fd_W1 = FiniteDifferenceGradient(
      [&](const std::vector<double>& v) { return forward(ToDouble(x), v, ToDouble(b1)); },
      ToDouble(W1), w);
  const std::vector<double> fd_b1 = FiniteDifferenceGradient(
      [&](const std::vector<double>& v) { return forward(ToDouble(x), ToDouble(W1), v); },
      ToDouble(b1), w);

  // Forward: h saved by the fc1 epilogue.
  std::vector<float> a = NaNs(N * H), h = NaNs(N * H);
  GemmDesc fc1;
  fc1.trans_b = true;
  fc1.m = N, fc1.n = H, fc1.k = C;
  fc1.bias = b1.data();
  fc1.epilogue = GemmEpilogue::kGeluAux;
  fc1.aux = h.data();
  cpu::Gemm(fc1, x.data(), W1.data(), a.data());
  // Backward.
  std::vector<float> dh = NaNs(N * H), db1 = NaNs(H), db1_w = NaNs(H), dW1 = NaNs(H * C),
                     dx = NaNs(N * C);
  GemmDesc dgrad2;
  dgrad2.m = N, dgrad2.n = H, dgrad2.k = O;
  dgrad2.epilogue = GemmEpilogue::kDGeluBGrad;
  dgrad2.aux = h.data();
  dgrad2.bias_grad = db1.data();
  cpu::Gemm(dgrad2, dy.data(), W2.data(), dh.data());
  GemmDesc wgrad1;
  wgrad1.trans_a = true;
  wgrad1.m = H, wgrad1.n = C, wgrad1.k = N;
  wgrad1.epilogue = GemmEpilogue::kBGrad;
  wgrad1.bias_grad = db1_w.data();
  cpu::Gemm(wgrad1, dh.data(), x.data(), dW1.data());
  GemmDesc dgrad1;
  dgrad1.m = N, dgrad1.n = C, dgrad1.k = H;
  cpu::Gemm(dgrad1, dh.data(), W1.data(), dx.data());

  EXPECT_TRUE(RelClose(dx, fd_x, 1e-5));
  EXPECT_TRUE(RelClose(dW1, fd_W1, 1e-5));
  EXPECT_TRUE(RelClose(db1, fd_b1, 1e-5));
  EXPECT_TRUE(RelClose(db1_w, fd_b1, 1e-5));
}

TEST(GemmEpilogueDeathTest, InvalidDescriptorsAbortNamingTheEpilogue) {
  std::vector<float> A(64, 1.0f), B(64, 1.0f), C(64), aux(64), bg(8);
  GemmDesc d;
  d.m = d.n = d.k = 4;
  d.epilogue = GemmEpilogue::kGeluAux;
  d.beta = 1.0f;
  EXPECT_DEATH(cpu::Gemm(d, A.data(), B.data(), C.data()), "gelu_aux.*beta == 0");
  d = GemmDesc{};
  d.m = d.n = d.k = 4;
  d.epilogue = GemmEpilogue::kDGeluBGrad;
  EXPECT_DEATH(cpu::Gemm(d, A.data(), B.data(), C.data()), "dgelu_bgrad.*pre-activation in aux");
  d.aux = aux.data();
  d.ld_aux = 3;
  EXPECT_DEATH(cpu::Gemm(d, A.data(), B.data(), C.data()), "dgelu_bgrad.*ld_aux=3 < n=4");
  d = GemmDesc{};
  d.m = d.n = d.k = 4;
  d.epilogue = GemmEpilogue::kBGrad;
  EXPECT_DEATH(cpu::Gemm(d, A.data(), B.data(), C.data()), "bgrad.*bias_grad \\[m\\]");
  d.bias_grad = bg.data();
  d.alpha = 2.0f;
  EXPECT_DEATH(cpu::Gemm(d, A.data(), B.data(), C.data()), "bgrad.*alpha == 1");
  d = GemmDesc{};
  d.m = d.n = d.k = 4;
  d.aux = aux.data();
  EXPECT_DEATH(cpu::Gemm(d, A.data(), B.data(), C.data()), "epilogue is none");
}

}  // namespace
}  // namespace gtp::kernels::testing
