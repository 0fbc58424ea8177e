// Tests of the dtype dispatch of core/kernels/ops.h on the CPU: bf16 tensors
// reach the bf16 kernels and f32 tensors the f32 ones (bit for bit the direct
// kernel calls), and unsupported dtype combinations abort naming the op and
// the dtypes. The kernels themselves are tested in cpu/*_test.cc.
#include "core/kernels/ops.h"

#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/allocator.h"
#include "core/kernels/cpu.h"
#include "core/kernels/testing/harness.h"
#include "core/kernels/testing/reference.h"
#include "core/tensor.h"
#include "gtest/gtest.h"

namespace gtp::kernels {
namespace {

using testing::NaNs;
using testing::Rng;
using testing::SameBytes;
using testing::ToBF16;

template <typename T>
Tensor Wrap(std::vector<T>& v, const Shape& s) {
  return Tensor::Wrap(v.data(), s, DTypeOf<T>::value, Device::Cpu());
}

constexpr int64_t N = 5, C = 24, V = 40;
constexpr float kEps = 1e-5f;

class OpsBf16 : public ::testing::Test {
 protected:
  std::vector<bf16> Bf16(size_t n) { return ToBF16(rng_.Normal(n)); }
  std::vector<bf16> Poison(size_t n) { return ToBF16(NaNs(n)); }

  HeapAllocator host_;
  Exec e_ = Exec::Cpu(host_);
  Rng rng_{7};
};

TEST_F(OpsBf16, NormsDispatchToTheBf16Kernels) {
  std::vector<bf16> x = Bf16(N * C), w = Bf16(C), b = Bf16(C), dy = Bf16(N * C);
  std::vector<bf16> y = Poison(N * C), y_ref = y, dx = Poison(N * C), dx_ref = dx;
  std::vector<float> mean = NaNs(N), rstd = NaNs(N), mean_ref = mean, rstd_ref = rstd;
  std::vector<float> dw(C, 1.0f), db(C, 2.0f), dw_ref = dw, db_ref = db;
  ops::LayerNormForward(e_, Wrap(x, {N, C}), Wrap(w, {C}), Wrap(b, {C}), Wrap(y, {N, C}),
                        Wrap(mean, {N}), Wrap(rstd, {N}), kEps);
  cpu::LayerNormForward(x.data(), w.data(), b.data(), y_ref.data(), mean_ref.data(),
                        rstd_ref.data(), N, C, kEps);
  EXPECT_TRUE(SameBytes(y, y_ref) && SameBytes(mean, mean_ref) && SameBytes(rstd, rstd_ref));
  ops::LayerNormBackward(e_, Wrap(dy, {N, C}), Wrap(x, {N, C}), Wrap(w, {C}), Wrap(mean, {N}),
                         Wrap(rstd, {N}), Wrap(dx, {N, C}), Wrap(dw, {C}), Wrap(db, {C}));
  cpu::LayerNormBackward(dy.data(), x.data(), w.data(), mean.data(), rstd.data(), dx_ref.data(),
                         dw_ref.data(), db_ref.data(), N, C);
  EXPECT_TRUE(SameBytes(dx, dx_ref) && SameBytes(dw, dw_ref) && SameBytes(db, db_ref));

  ops::RMSNormForward(e_, Wrap(x, {N, C}), Wrap(w, {C}), Wrap(y, {N, C}), Wrap(rstd, {N}), kEps);
  cpu::RMSNormForward(x.data(), w.data(), y_ref.data(), rstd_ref.data(), N, C, kEps);
  EXPECT_TRUE(SameBytes(y, y_ref) && SameBytes(rstd, rstd_ref));
  ops::RMSNormBackward(e_, Wrap(dy, {N, C}), Wrap(x, {N, C}), Wrap(w, {C}), Wrap(rstd, {N}),
                       Wrap(dx, {N, C}), Wrap(dw, {C}));
  cpu::RMSNormBackward(dy.data(), x.data(), w.data(), rstd.data(), dx_ref.data(), dw_ref.data(), N,
                       C);
  EXPECT_TRUE(SameBytes(dx, dx_ref) && SameBytes(dw, dw_ref));
}

TEST_F(OpsBf16, ActivationsAndRopeDispatchToTheBf16Kernels) {
  std::vector<bf16> x = Bf16(N * C), dy = Bf16(N * C), y = Poison(N * C), y_ref = y,
                    dx = Poison(N * C), dx_ref = dx;
  ops::GeluForward(e_, Wrap(x, {N, C}), Wrap(y, {N, C}));
  cpu::GeluForward(x.data(), y_ref.data(), N * C);
  EXPECT_TRUE(SameBytes(y, y_ref));
  ops::GeluBackward(e_, Wrap(dy, {N, C}), Wrap(x, {N, C}), Wrap(dx, {N, C}));
  cpu::GeluBackward(dy.data(), x.data(), dx_ref.data(), N * C);
  EXPECT_TRUE(SameBytes(dx, dx_ref));

  std::vector<bf16> h = Poison(N * C / 2), h_ref = h, dh = Bf16(N * C / 2);
  ops::SwiGluForward(e_, Wrap(x, {N, C}), Wrap(h, {N, C / 2}));
  cpu::SwiGluForward(x.data(), h_ref.data(), N, C / 2);
  EXPECT_TRUE(SameBytes(h, h_ref));
  ops::SwiGluBackward(e_, Wrap(dh, {N, C / 2}), Wrap(x, {N, C}), Wrap(dx, {N, C}));
  cpu::SwiGluBackward(dh.data(), x.data(), dx_ref.data(), N, C / 2);
  EXPECT_TRUE(SameBytes(dx, dx_ref));

  // [B=1, T=N, NH=2, HS=C/2], in place.
  std::vector<bf16> r = x, r_ref = x;
  ops::RopeForward(e_, Wrap(r, {1, N, 2, C / 2}), Wrap(r, {1, N, 2, C / 2}), 10000.0f);
  cpu::RopeForward(r_ref.data(), r_ref.data(), 1, N, 2, C / 2, 10000.0f);
  EXPECT_TRUE(SameBytes(r, r_ref));
  ops::RopeBackward(e_, Wrap(r, {1, N, 2, C / 2}), Wrap(r, {1, N, 2, C / 2}), 10000.0f);
  cpu::RopeBackward(r_ref.data(), r_ref.data(), 1, N, 2, C / 2, 10000.0f);
  EXPECT_TRUE(SameBytes(r, r_ref));
}

TEST_F(OpsBf16, EmbeddingElementwiseAndCrossEntropyDispatchToTheBf16Kernels) {
  std::vector<int32_t> idx = rng_.Ints(N, 0, V - 1), targets = idx;
  targets[1] = -1;
  std::vector<bf16> table = Bf16(V * C), out = Poison(N * C), out_ref = out, dout = Bf16(N * C);
  std::vector<float> dtable(V * C, 0.5f), dtable_ref = dtable;
  ops::EmbeddingForward(e_, Wrap(idx, {N}), Wrap(table, {V, C}), Wrap(out, {N, C}), 0);
  cpu::EmbeddingForward(idx.data(), table.data(), out_ref.data(), N, V, C, 0);
  EXPECT_TRUE(SameBytes(out, out_ref));
  ops::EmbeddingBackward(e_, Wrap(idx, {N}), Wrap(dout, {N, C}), Wrap(dtable, {V, C}), 0);
  cpu::EmbeddingBackward(idx.data(), dout.data(), dtable_ref.data(), N, V, C, 0);
  EXPECT_TRUE(SameBytes(dtable, dtable_ref));

  std::vector<bf16> y = Bf16(N * C), y_ref = y;
  ops::Axpby(e_, 0.5f, Wrap(out, {N, C}), -1.5f, Wrap(y, {N, C}));
  cpu::Axpby(0.5f, out.data(), -1.5f, y_ref.data(), N * C);
  EXPECT_TRUE(SameBytes(y, y_ref));
  double ss_ref = 0;
  cpu::SumSquares(y.data(), N * C, &ss_ref);
  EXPECT_EQ(ops::SumSquares(e_, Wrap(y, {N, C})), ss_ref);
  ops::Fill(e_, Wrap(y, {N, C}), 0.1f);
  for (bf16 v : y) ASSERT_EQ(v.bits, gtp::ToBF16(0.1f).bits);

  std::vector<bf16> logits = Bf16(N * V), dl = Poison(N * V), dl_ref = dl;
  std::vector<float> row_max = NaNs(N), target_logit = NaNs(N), sumexp = NaNs(N),
                     dloss = rng_.Normal(N);
  std::vector<float> row_max_ref = row_max, target_logit_ref = target_logit, sumexp_ref = sumexp;
  ops::CrossEntropyStats(e_, Wrap(logits, {N, V}), Wrap(targets, {N}), Wrap(row_max, {N}),
                         Wrap(target_logit, {N}), 0);
  cpu::CrossEntropyStats(logits.data(), targets.data(), row_max_ref.data(), target_logit_ref.data(),
                         N, V, 0);
  EXPECT_TRUE(SameBytes(row_max, row_max_ref) && SameBytes(target_logit, target_logit_ref));
  ops::CrossEntropySumExp(e_, Wrap(logits, {N, V}), Wrap(row_max, {N}), Wrap(sumexp, {N}));
  cpu::CrossEntropySumExp(logits.data(), row_max.data(), sumexp_ref.data(), N, V);
  EXPECT_TRUE(SameBytes(sumexp, sumexp_ref));
  ops::CrossEntropyBackward(e_, Wrap(logits, {N, V}), Wrap(row_max, {N}), Wrap(sumexp, {N}),
                            Wrap(targets, {N}), Wrap(dloss, {N}), Wrap(dl, {N, V}), 0);
  cpu::CrossEntropyBackward(logits.data(), row_max.data(), sumexp.data(), targets.data(),
                            dloss.data(), dl_ref.data(), N, V, 0);
  EXPECT_TRUE(SameBytes(dl, dl_ref));
}

// The f32 path is unchanged: same bits as the f32 kernel.
// The fused loss + gradient (on the CPU: the stages, in place) against the
// double references, f32 and bf16, over padded rows with ignored targets;
// CountValid counts the targets ≥ 0.
TEST_F(OpsBf16, CrossEntropyFusedMatchesTheReference) {
  constexpr int64_t kV = 37, kLd = 40, kN = 6;
  std::vector<float> lg = rng_.Normal(kN * kLd, 0.0f, 3.0f), dloss = rng_.Uniform(kN, 0.5f, 2.0f);
  for (int64_t i = 0; i < kN * kLd; ++i) lg[i] = i % kLd < kV ? lg[i] : 1e4f;
  std::vector<int32_t> tg = {3, -1, 0, 36, 17, -1};
  std::vector<float> count = NaNs(1);
  ops::CountValid(e_, Wrap(tg, {kN}), Wrap(count, {1}));
  EXPECT_EQ(count[0], 4.0f);
  for (bool bf : {false, true}) {
    SCOPED_TRACE(bf ? "bf16" : "f32");
    std::vector<bf16> lg16 = ToBF16(lg);
    std::vector<double> dense(kN * kV);
    for (int64_t n = 0; n < kN; ++n)
      for (int64_t v = 0; v < kV; ++v)
        dense[n * kV + v] = bf ? ToF32(lg16[n * kLd + v]) : lg[n * kLd + v];
    const std::vector<double> ref_loss = testing::RefCrossEntropy(dense, tg, kN, kV);
    const std::vector<double> ref_dl = testing::RefCrossEntropyBackward(
        dense, tg, std::vector<double>(dloss.begin(), dloss.end()), kN, kV);
    std::vector<float> lg32 = lg, loss = NaNs(kN);
    Tensor logits = bf ? Wrap(lg16, {kN, kLd}) : Wrap(lg32, {kN, kLd});
    ops::CrossEntropyFused(e_, logits, Wrap(tg, {kN}), Wrap(dloss, {kN}), Wrap(loss, {kN}), kV);
    const double tol = bf ? 1e-2 : 1e-5;
    for (int64_t n = 0; n < kN; ++n) {
      EXPECT_NEAR(loss[n], ref_loss[n], 1e-5 * (1 + std::abs(ref_loss[n]))) << n;
      for (int64_t v = 0; v < kLd; ++v) {
        const float got = bf ? ToF32(lg16[n * kLd + v]) : lg32[n * kLd + v];
        const double want = v < kV ? ref_dl[n * kV + v] : 0.0;
        ASSERT_NEAR(got, want, tol * (std::abs(want) + 1e-3)) << n << "," << v;
      }
    }
  }
}

// fp8 blockwise quantisation through ops: the kernels' bytes, f32 and bf16.
TEST_F(OpsBf16, Fp8BlockwiseDispatchesToTheKernels) {
  constexpr int64_t kN = 70, kBlocks = (kN + kFp8BlockSize - 1) / kFp8BlockSize;
  std::vector<float> x = rng_.Normal(kN, 0.0f, 3.0f);
  std::vector<bf16> xb = ToBF16(x);
  for (bool bf : {false, true}) {
    SCOPED_TRACE(bf ? "bf16" : "f32");
    const void* xp = bf ? static_cast<const void*>(xb.data()) : x.data();
    const DType xt = bf ? DType::kBF16 : DType::kF32;
    std::vector<uint8_t> q(kN), q_ref(kN), s(kBlocks, 0xa5), s_ref(kBlocks);
    Tensor xt_tensor = bf ? Wrap(xb, {kN}) : Wrap(x, {kN});
    ops::QuantizeFp8Blockwise(e_, xt_tensor, Wrap(q, {kN}), Wrap(s, {kBlocks}));
    cpu::QuantizeFp8Blockwise(xp, xt, q_ref.data(), s_ref.data(), kN, DType::kF8E4M3);
    EXPECT_TRUE(SameBytes(q, q_ref) && SameBytes(s, s_ref));
    std::vector<float> y = NaNs(kN), y_ref(kN);
    ops::DequantizeFp8Blockwise(e_, Wrap(q, {kN}), Wrap(s, {kBlocks}), Wrap(y, {kN}));
    cpu::DequantizeFp8Blockwise(q.data(), s.data(), y_ref.data(), DType::kF32, kN, DType::kF8E4M3);
    EXPECT_TRUE(SameBytes(y, y_ref));
    for (int64_t i = 0; i < kN; ++i) EXPECT_NEAR(y[i], x[i], 0.07 * std::abs(x[i]) + 1e-3) << i;
    // Each scale byte e is the smallest power of two 2^(e − 127) bringing
    // the block's amax to at most 448 (e4m3's max).
    for (int64_t b = 0; b < kBlocks; ++b) {
      double amax = 0;
      for (int64_t i = b * kFp8BlockSize; i < std::min(kN, (b + 1) * kFp8BlockSize); ++i) {
        amax = std::max(amax, std::fabs(static_cast<double>(bf ? ToF32(xb[i]) : x[i])));
      }
      const double s_b = std::ldexp(1.0, s[b] - 127);
      EXPECT_LE(amax / s_b, 448.0) << b;
      EXPECT_GT(2 * amax / s_b, 448.0) << b;
    }
  }
}

// Cast: f32 → bf16 is the kernel's rounding, bf16 → f32 exact, same dtype a copy.
TEST_F(OpsBf16, CastDispatchesToTheCastKernels) {
  std::vector<float> x = rng_.Normal(N * C), back = NaNs(N * C), same = NaNs(N * C);
  std::vector<bf16> y = Poison(N * C), y_ref(N * C);
  ops::Cast(e_, Wrap(x, {N, C}), Wrap(y, {N * C}));
  cpu::CastF32ToBF16(x.data(), y_ref.data(), N * C);
  EXPECT_TRUE(SameBytes(y, y_ref));
  ops::Cast(e_, Wrap(y, {N * C}), Wrap(back, {N, C}));
  for (int64_t i = 0; i < N * C; ++i) ASSERT_EQ(back[i], ToF32(y[i])) << i;
  ops::Cast(e_, Wrap(x, {N, C}), Wrap(same, {N, C}));
  EXPECT_TRUE(SameBytes(same, x));
}

// CastMany: each pair as Cast converts it, or copied; a column block of a
// matrix read or written row by row (the rest of that matrix untouched).
TEST_F(OpsBf16, CastManyConvertsEachPairAsCast) {
  std::vector<float> x = rng_.Normal(N * C), back = NaNs(C), block = NaNs(N * 2);
  std::vector<bf16> y = Poison(N * C), y_ref(N * C), b = Poison(C), wide = Poison(N * C);
  cpu::CastF32ToBF16(x.data(), y_ref.data(), N * C);
  cpu::CastF32ToBF16(x.data(), b.data(), C);
  std::vector<bf16> y2(y_ref.begin(), y_ref.begin() + N * 2);
  const Tensor xm = Wrap(x, {N, C}), wm = Wrap(wide, {N, C});
  ops::CastMany(
      e_, {xm, Wrap(b, {C}), xm.Strided({N, 2}, {C, 1}, 1), Wrap(y2, {N * 2})},
      {Wrap(y, {N * C}), Wrap(back, {C}), Wrap(block, {N, 2}), wm.Strided({N, 2}, {C, 1}, C - 2)});
  EXPECT_TRUE(SameBytes(y, y_ref));
  for (int64_t i = 0; i < C; ++i) ASSERT_EQ(back[i], ToF32(y_ref[i])) << i;
  for (int64_t r = 0; r < N; ++r) {
    for (int64_t c = 0; c < 2; ++c) {
      ASSERT_EQ(block[r * 2 + c], x[r * C + 1 + c]) << r << "," << c;  // copied
      // y2's rows of 2 placed in wide's last two columns, the rest poison.
      ASSERT_EQ(wide[r * C + C - 2 + c].bits, y2[r * 2 + c].bits) << r << "," << c;
    }
    for (int64_t c = 0; c < C - 2; ++c) ASSERT_TRUE(std::isnan(ToF32(wide[r * C + c]))) << r;
  }
  ops::CastMany(e_, {}, {});  // nothing to do
}

TEST_F(OpsBf16, F32StillDispatchesToTheF32Kernels) {
  std::vector<float> x = rng_.Normal(N * C), y = NaNs(N * C), y_ref = y;
  ops::GeluForward(e_, Wrap(x, {N, C}), Wrap(y, {N, C}));
  cpu::GeluForward(x.data(), y_ref.data(), N * C);
  EXPECT_TRUE(SameBytes(y, y_ref));
}

// The MLP epilogue ops are their GemmDescs (cpu/gemm_epilogue_test.cc tests
// the math), in f32 and in bf16 with f32 bias gradients.
float Widen(float v) { return v; }
float Widen(bf16 v) { return BF16BitsToF32(v.bits); }

template <typename T>
void CheckMlpEpilogueOps(const Exec& e, Rng& rng) {
  constexpr int64_t H = 16;  // x[N, C] → pre/y[N, H]
  auto values = [&](size_t n) {
    if constexpr (std::is_same_v<T, bf16>) {
      return ToBF16(rng.Normal(n));
    } else {
      return rng.Normal(n);
    }
  };
  std::vector<T> x = values(N * C), w = values(H * C), b = values(H), dy = values(N * H);
  std::vector<T> y = values(N * H), pre = values(N * H), y_ref = y, pre_ref = pre;
  ops::LinearGelu(e, Wrap(x, {N, C}), Wrap(w, {H, C}), Wrap(b, {H}), Wrap(y, {N, H}),
                  Wrap(pre, {N, H}));
  GemmDesc d;
  d.trans_b = true;
  d.m = N, d.n = H, d.k = C;
  d.ab_type = d.c_type = DTypeOf<T>::value;
  d.bias = b.data();
  d.epilogue = GemmEpilogue::kGeluAux;
  d.aux = pre_ref.data();
  cpu::Gemm(d, x.data(), w.data(), y_ref.data());
  EXPECT_TRUE(SameBytes(y, y_ref) && SameBytes(pre, pre_ref));

  std::vector<T> dx = values(N * C), dx_ref = dx, pre_in = values(N * C);
  std::vector<float> dbias = NaNs(C), dbias_ref = dbias;
  ops::LinearBackwardDataDGelu(e, Wrap(dy, {N, H}), Wrap(w, {H, C}), Wrap(pre_in, {N, C}),
                               Wrap(dx, {N, C}), Wrap(dbias, {C}));
  d = GemmDesc{};
  d.m = N, d.n = C, d.k = H;
  d.ab_type = d.c_type = DTypeOf<T>::value;
  d.epilogue = GemmEpilogue::kDGeluBGrad;
  d.aux = pre_in.data();
  d.bias_grad = dbias_ref.data();
  cpu::Gemm(d, dy.data(), w.data(), dx_ref.data());
  EXPECT_TRUE(SameBytes(dx, dx_ref) && SameBytes(dbias, dbias_ref));

  std::vector<float> dw = rng.Normal(H * C), dw_ref = dw, db = NaNs(H), db_ref = db;
  ops::LinearBackwardWeightBGrad(e, Wrap(dy, {N, H}), Wrap(x, {N, C}), Wrap(dw, {H, C}), 1.0f,
                                 Wrap(db, {H}));
  d = GemmDesc{};
  d.trans_a = true;
  d.m = H, d.n = C, d.k = N, d.beta = 1.0f;
  d.ab_type = DTypeOf<T>::value;
  d.epilogue = GemmEpilogue::kBGrad;
  d.bias_grad = db_ref.data();
  cpu::Gemm(d, dy.data(), x.data(), dw_ref.data());
  EXPECT_TRUE(SameBytes(dw, dw_ref) && SameBytes(db, db_ref));
  for (int64_t o = 0; o < H; ++o) {  // db = Σ_N dy, exactly in this small f32 case
    float sum = 0.0f;
    for (int64_t r = 0; r < N; ++r) sum += Widen(dy[r * H + o]);
    EXPECT_EQ(db[o], sum) << "db[" << o << "]";
  }
}

TEST_F(OpsBf16, MlpEpilogueOpsAreTheirGemmDescs) {
  CheckMlpEpilogueOps<float>(e_, rng_);
  CheckMlpEpilogueOps<bf16>(e_, rng_);
}

using OpsBf16DeathTest = OpsBf16;

TEST_F(OpsBf16DeathTest, MlpEpilogueOpsCheckShapesAndDTypes) {
  constexpr int64_t H = 16;
  std::vector<float> x = rng_.Normal(N * C), w = rng_.Normal(H * C), y = NaNs(N * H),
                     pre = NaNs(N * H), db = NaNs(H), dw = NaNs(H * C);
  std::vector<bf16> pre_b = Poison(N * H), db_b = Poison(H);
  EXPECT_DEATH(ops::LinearGelu(e_, Wrap(x, {N, C}), Wrap(w, {H, C}), Tensor(), Wrap(y, {N, H}),
                               Wrap(pre_b, {N, H})),
               "LinearGelu: .* must share a dtype each");
  EXPECT_DEATH(ops::LinearGelu(e_, Wrap(x, {N, C}), Wrap(w, {H, C}), Tensor(), Wrap(y, {N, H}),
                               Wrap(pre, {N - 1, H})),
               "LinearGelu: x .* pre");
  EXPECT_DEATH(ops::LinearBackwardDataDGelu(e_, Wrap(y, {N, H}), Wrap(w, {H, C}),
                                            Wrap(x, {N, C}), Wrap(x, {N, C}), Wrap(db, {H})),
               "LinearBackwardDataDGelu: dbias .* must be f32 \\[24\\]");
  EXPECT_DEATH(ops::LinearBackwardWeightBGrad(e_, Wrap(y, {N, H}), Wrap(x, {N, C}),
                                              Wrap(dw, {H, C}), 0.0f, Wrap(db_b, {H})),
               "LinearBackwardWeightBGrad: db .* must be f32 \\[16\\]");
}

TEST_F(OpsBf16DeathTest, UnsupportedDTypesAbortNamingTheOpAndDTypes) {
  std::vector<bf16> xb = Bf16(N * C), wb = Bf16(C), yb = Poison(N * C);
  std::vector<float> xf = rng_.Normal(N * C), wf = rng_.Normal(C), stats(N);
  std::vector<f16> xh(N * C);
  EXPECT_DEATH(ops::LayerNormForward(e_, Wrap(xb, {N, C}), Wrap(wf, {C}), Tensor(),
                                     Wrap(yb, {N, C}), Wrap(stats, {N}), Wrap(stats, {N}), kEps),
               "LayerNormForward: unsupported dtypes x=bf16 w=f32 b=none y=bf16 mean=f32 rstd=f32");
  EXPECT_DEATH(ops::GeluForward(e_, Wrap(xf, {N, C}), Wrap(yb, {N, C})),
               "GeluForward: unsupported dtypes x=f32 y=bf16");
  EXPECT_DEATH(ops::GeluForward(e_, Wrap(xh, {N, C}), Wrap(xh, {N, C})),
               "GeluForward: unsupported dtypes x=f16 y=f16");
  std::vector<bf16> stats_b(N);
  std::vector<int32_t> t(N, 0);
  EXPECT_DEATH(ops::CrossEntropyStats(e_, Wrap(xb, {N, C}), Wrap(t, {N}), Wrap(stats_b, {N}),
                                      Wrap(stats, {N}), 0),
               "CrossEntropyStats: unsupported dtypes logits=bf16 row_max=bf16 target_logit=f32");
  EXPECT_DEATH(ops::RMSNormBackward(e_, Wrap(xb, {N, C}), Wrap(xb, {N, C}), Wrap(wb, {C}),
                                    Wrap(stats, {N}), Wrap(yb, {N, C}), Wrap(wb, {C})),
               "RMSNormBackward: unsupported dtypes .* dw=bf16");
}

// ---- Grouped linear ops (mixture of experts) --------------------------------------
// G = 4 experts over M = 13 rows, expert 1 with none; stacked w[G·EN, EK].
// References are double loops over each expert's rows.
constexpr int64_t kEN = 6, kEK = 7;
const std::vector<int64_t> kOff = {0, 5, 5, 12, 13};

template <typename T>
std::vector<double> Doubles(const std::vector<T>& v) {
  std::vector<double> out;
  for (const T& x : v) out.push_back(Widen(x));
  return out;
}
template <typename T>
std::vector<T> Values(std::vector<float> v) {
  if constexpr (std::is_same_v<T, bf16>) {
    return ToBF16(v);
  } else {
    return v;
  }
}
// The expert owning row r.
int64_t ExpertOf(int64_t r) {
  int64_t g = 0;
  while (kOff[g + 1] <= r) ++g;
  return g;
}

template <typename T, typename TY>
void CheckGroupedLinearOps(const Exec& e, Rng& rng) {
  SCOPED_TRACE(absl::StrCat("ab=", DTypeName(DTypeOf<T>::value), " y=",
                            DTypeName(DTypeOf<TY>::value)));
  const int64_t G = static_cast<int64_t>(kOff.size()) - 1, M = kOff.back();
  const double tol = std::is_same_v<TY, bf16> ? 1e-2 : 1e-5;
  std::vector<T> x = Values<T>(rng.Normal(M * kEK)), w = Values<T>(rng.Normal(G * kEN * kEK)),
                 dy = Values<T>(rng.Normal(M * kEN));
  const std::vector<double> xd = Doubles(x), wd = Doubles(w), dyd = Doubles(dy);

  // y[r, n] = Σ_k x[r, k]·w[g·N + n, k].
  std::vector<TY> y = Values<TY>(NaNs(M * kEN));
  ops::GroupedLinear(e, Wrap(x, {M, kEK}), Wrap(w, {G * kEN, kEK}), kOff, Wrap(y, {M, kEN}));
  std::vector<double> y_ref(M * kEN, 0.0);
  for (int64_t r = 0; r < M; ++r) {
    for (int64_t n = 0; n < kEN; ++n) {
      for (int64_t k = 0; k < kEK; ++k) {
        y_ref[r * kEN + n] += xd[r * kEK + k] * wd[(ExpertOf(r) * kEN + n) * kEK + k];
      }
    }
  }
  const std::vector<double> yd = Doubles(y);
  EXPECT_TRUE(testing::RelClose(std::vector<float>(yd.begin(), yd.end()), y_ref, tol));

  // dx[r, k] = Σ_n dy[r, n]·w[g·N + n, k].
  std::vector<TY> dx = Values<TY>(NaNs(M * kEK));
  ops::GroupedLinearBackwardData(e, Wrap(dy, {M, kEN}), Wrap(w, {G * kEN, kEK}), kOff,
                                 Wrap(dx, {M, kEK}));
  std::vector<double> dx_ref(M * kEK, 0.0);
  for (int64_t r = 0; r < M; ++r) {
    for (int64_t k = 0; k < kEK; ++k) {
      for (int64_t n = 0; n < kEN; ++n) {
        dx_ref[r * kEK + k] += dyd[r * kEN + n] * wd[(ExpertOf(r) * kEN + n) * kEK + k];
      }
    }
  }
  const std::vector<double> dxd = Doubles(dx);
  EXPECT_TRUE(testing::RelClose(std::vector<float>(dxd.begin(), dxd.end()), dx_ref, tol));

  // dw[g·N + n, k] = alpha·Σ_{r of g} dy[r, n]·x[r, k] + beta·dw (expert 1: beta·dw).
  for (float beta : {0.0f, 1.0f}) {
    const float alpha = 0.5f;
    std::vector<float> dw0 = beta == 0.0f ? NaNs(G * kEN * kEK) : rng.Normal(G * kEN * kEK);
    std::vector<float> dw = dw0;
    ops::GroupedLinearBackwardWeight(e, Wrap(dy, {M, kEN}), Wrap(x, {M, kEK}), kOff, alpha, beta,
                                     Wrap(dw, {G * kEN, kEK}));
    std::vector<double> dw_ref(G * kEN * kEK, 0.0);
    for (int64_t r = 0; r < M; ++r) {
      for (int64_t n = 0; n < kEN; ++n) {
        for (int64_t k = 0; k < kEK; ++k) {
          dw_ref[(ExpertOf(r) * kEN + n) * kEK + k] += alpha * dyd[r * kEN + n] * xd[r * kEK + k];
        }
      }
    }
    if (beta != 0.0f) {
      for (size_t i = 0; i < dw_ref.size(); ++i) dw_ref[i] += beta * dw0[i];
    }
    EXPECT_TRUE(testing::RelClose(dw, dw_ref, 1e-5)) << "beta=" << beta;
  }
}

TEST_F(OpsBf16, GroupedLinearOpsMatchTheReference) {
  CheckGroupedLinearOps<float, float>(e_, rng_);
  CheckGroupedLinearOps<bf16, float>(e_, rng_);
  CheckGroupedLinearOps<bf16, bf16>(e_, rng_);
}

TEST_F(OpsBf16, GroupedGemmRunsEachGroup) {
  // Two groups of different sizes through ops::GroupedGemm, against ops::Gemm.
  std::vector<float> a0 = rng_.Normal(3 * 4), b0 = rng_.Normal(5 * 4), a1 = rng_.Normal(2 * 6),
                     b1 = rng_.Normal(1 * 6);
  std::vector<float> c0 = NaNs(3 * 5), c1 = NaNs(2 * 1), c0_ref = c0, c1_ref = c1;
  GemmDesc d;
  d.trans_b = true;
  d.alpha = 2.0f;
  ops::GroupedGemm(e_, d, {GemmGroup{3, 5, 4, a0.data(), b0.data(), c0.data()},
                           GemmGroup{2, 1, 6, a1.data(), b1.data(), c1.data()}});
  GemmDesc one = d;
  one.m = 3, one.n = 5, one.k = 4;
  cpu::Gemm(one, a0.data(), b0.data(), c0_ref.data());
  one.m = 2, one.n = 1, one.k = 6;
  cpu::Gemm(one, a1.data(), b1.data(), c1_ref.data());
  EXPECT_TRUE(SameBytes(c0, c0_ref) && SameBytes(c1, c1_ref));
}

TEST_F(OpsBf16DeathTest, GroupedLinearOpsCheckShapesAndOffsets) {
  const int64_t G = 4, M = 13;
  std::vector<float> x = rng_.Normal(M * kEK), w = rng_.Normal(G * kEN * kEK),
                     y = NaNs(M * kEN), dw = NaNs(G * kEN * kEK);
  std::vector<bf16> dw_b = Poison(G * kEN * kEK);
  EXPECT_DEATH(ops::GroupedLinear(e_, Wrap(x, {M, kEK}), Wrap(w, {G * kEN, kEK}), {0, 5, 12},
                                  Wrap(y, {M, kEN})),
               "GroupedLinear: off must run from 0 to the 13 rows");
  EXPECT_DEATH(ops::GroupedLinear(e_, Wrap(x, {M, kEK}), Wrap(w, {G * kEN, kEK}),
                                  {0, 6, 5, 12, 13}, Wrap(y, {M, kEN})),
               "GroupedLinear: off must be nondecreasing");
  EXPECT_DEATH(ops::GroupedLinear(e_, Wrap(x, {M, kEK}), Wrap(w, {G * kEN, kEK}), {0, 13},
                                  Wrap(y, {M, kEN})),
               "GroupedLinear: want x \\[M, K\\], w \\[1·N, K\\]");
  EXPECT_DEATH(ops::GroupedLinearBackwardData(e_, Wrap(y, {M, kEN}), Wrap(w, {G * kEN, kEK}),
                                              kOff, Wrap(x, {M - 1, kEK})),
               "GroupedLinearBackwardData: want dy");
  EXPECT_DEATH(ops::GroupedLinearBackwardWeight(e_, Wrap(y, {M, kEN}), Wrap(x, {M, kEK}), kOff,
                                                1.0f, 0.0f, Wrap(dw_b, {G * kEN, kEK})),
               "GroupedLinearBackwardWeight: dw must be f32");
  EXPECT_DEATH(ops::GroupedLinearBackwardWeight(e_, Wrap(y, {M, kEN}), Wrap(x, {M, kEK}), kOff,
                                                1.0f, 0.0f, Wrap(dw, {G * kEN - 1, kEK})),
               "GroupedLinearBackwardWeight: want dy");
}

}  // namespace
}  // namespace gtp::kernels
