// The grouped experts under FP8 (experts.h, ExpertsConfig::fp8) on the CPU.
//
// 1. Padding changes nothing: each expert's rows are padded to
//    kFp8RowAlign with zero rows inside the layer; its output, input
//    gradient and weight gradients are, bit for bit, those of linear.h's
//    FP8 functions called on that expert's own unpadded rows and weight
//    slices (then GELU or SwiGLU as ops run them). Expert row counts 5, 0,
//    37 (none a multiple of 16) and an expert with no rows. Weight
//    gradients with wgrad_scale 1 and ½ (×½ is exact). With fp8_wgrad off the
//    wgrad GEMMs run in bf16 over the padded rows: compared with the bf16
//    grouped GEMM on the unpadded rows within f32 summation error (the CPU
//    GEMM may block K = 37 and K = 128 differently).
// 2. Against an independent reference: the expert MLP and its gradients in
//    double from the unquantised bf16 inputs and weights. Each output has
//    gone through one (y: two) e4m3 GEMMs; per GEMM e4m3's rounding leaves
//    ~2.5 % RMS per element and ~3.5 % in a product of two (linear_test.cc
//    part 2), and two GEMMs in series about √2 times that: relative
//    Frobenius error in [1 %, 10 %]. Below 1 % nothing was quantised; a
//    structural error (wrong expert's weight or rows, a lost padding row)
//    is of the order of the outputs (the negative control: 100 %+).
// 3. MoeLayer::Create refuses FP8 experts whose widths are not multiples of
//    16, naming the settings.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "comm/local/local_communicator.h"
#include "core/kernels/fp8/linear.h"
#include "core/kernels/ops.h"
#include "core/kernels/testing/harness.h"
#include "core/philox.h"
#include "gtest/gtest.h"
#include "layers/moe/experts.h"
#include "layers/moe/moe_layer.h"
#include "parallel/parallel_config.h"
#include "parallel/process_groups.h"

namespace gtp::layers::moe {
namespace {

namespace ops = kernels::ops;
namespace fp8 = kernels::fp8;

constexpr int64_t kC = 32, kH = 48;
const std::vector<int64_t> kRows = {5, 0, 37};
constexpr int kE = 3;

// n bf16 normal values (seeded), as a [rows, cols] tensor.
Tensor Normal(HeapAllocator& a, int64_t rows, int64_t cols, uint64_t seed) {
  std::vector<float> v(rows * cols);
  for (size_t i = 0; i < v.size(); ++i) v[i] = PhiloxNormal(MixKey(KeyFromName("x"), seed), i);
  Tensor t = Tensor::Empty({rows, cols}, DType::kBF16, a);
  const std::vector<uint8_t> b = kernels::testing::StoreAs(v, DType::kBF16);
  std::memcpy(t.raw_data(), b.data(), b.size());
  return t;
}

std::vector<float> Floats(const Tensor& t) {
  std::vector<uint8_t> b(t.nbytes());
  std::memcpy(b.data(), t.raw_data(), b.size());
  return kernels::testing::LoadAs(b, t.dtype());
}

bool SameBits(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

ExpertsConfig Config(bool swiglu, bool fp8_wgrad, float wgrad_scale) {
  ExpertsConfig c;
  c.C = kC;
  c.H = kH;
  c.swiglu = swiglu;
  c.dtype = DType::kBF16;
  c.init_std = 0.3f;
  c.out_std = 0.2f;
  c.seed = 7;
  c.num_experts = kE;
  c.wgrad_scale = wgrad_scale;
  c.fp8 = true;
  c.fp8_wgrad = fp8_wgrad;
  return c;
}

// One forward and backward of the layer on one rank; its weights, output,
// input gradient and weight gradients.
struct LayerRun {
  Tensor w1, w2;  // bf16 [E·H1, C], [E·C, H]
  Tensor y, dx;   // bf16 [Σ rows, C]
  Tensor g1, g2;  // f32, like w1 and w2
};

LayerRun RunLayer(HeapAllocator& host, const ExpertsConfig& c, const Tensor& x, const Tensor& dy,
                  const std::vector<int64_t>& rows = kRows) {
  LayerRun out;
  absl::Status st = comm::RunRanks(1, [&](comm::Communicator& world) {
    GtpChain chain(kernels::Exec::Cpu(host), GtpOptions{});
    GroupedExperts ex("m.experts", c, &world, &chain);
    auto y = ex.Forward(x, rows, Direction::kForward);
    ASSERT_TRUE(y.ok()) << y.status();
    auto dx = ex.Backward(dy);
    ASSERT_TRUE(dx.ok()) << dx.status();
    ASSERT_TRUE(chain.FinishBackward().ok());
    out = {ex.fc1().shard(), ex.fc2().shard(), *y, *dx, ex.fc1().main_grad(),
           ex.fc2().main_grad()};
  });
  EXPECT_TRUE(st.ok()) << st;
  return out;
}

class Fp8ExpertsTest : public ::testing::TestWithParam<bool> {  // swiglu
 protected:
  HeapAllocator host_;
  kernels::Exec e_ = kernels::Exec::Cpu(host_);
  const int64_t M_ = 42;  // Σ kRows
  Tensor x_ = Normal(host_, M_, kC, 1), dy_ = Normal(host_, M_, kC, 2);
};

// No local expert got a row (a rank the router sent nothing to): the layer
// runs, with empty outputs and zero weight gradients, in every form.
TEST_P(Fp8ExpertsTest, NoRowsAtAll) {
  const std::vector<int64_t> none(kRows.size(), 0);
  const Tensor x = Normal(host_, 0, kC, 3), dy = Normal(host_, 0, kC, 4);
  for (bool fp8_wgrad : {true, false}) {
    SCOPED_TRACE(fp8_wgrad ? "fp8 wgrad" : "bf16 wgrad");
    const LayerRun r = RunLayer(host_, Config(GetParam(), fp8_wgrad, 1.0f), x, dy, none);
    EXPECT_EQ(r.y.dim(0), 0);
    EXPECT_EQ(r.dx.dim(0), 0);
    for (const Tensor* g : {&r.g1, &r.g2}) {
      for (float v : Floats(*g)) ASSERT_EQ(v, 0.0f);
    }
  }
}

TEST_P(Fp8ExpertsTest, PaddedExpertsAreTheFp8LinearsOnEachExpertsOwnRows) {
  const bool swiglu = GetParam();
  const int64_t H1 = swiglu ? 2 * kH : kH;
  for (const float scale : {1.0f, 0.5f}) {
    SCOPED_TRACE(::testing::Message() << "wgrad_scale " << scale);
    const LayerRun r = RunLayer(host_, Config(swiglu, true, scale), x_, dy_);
    int64_t row = 0;
    for (int g = 0; g < kE; ++g) {
      SCOPED_TRACE(::testing::Message() << "expert " << g);
      const int64_t n = kRows[g];
      const Tensor w1 = r.w1.Slice(g * H1, (g + 1) * H1), w2 = r.w2.Slice(g * kC, (g + 1) * kC);
      const Tensor g1 = r.g1.Slice(g * H1, (g + 1) * H1), g2 = r.g2.Slice(g * kC, (g + 1) * kC);
      if (n == 0) {
        for (float v : Floats(g1)) ASSERT_EQ(v, 0.0f) << "an expert without rows has no gradient";
        for (float v : Floats(g2)) ASSERT_EQ(v, 0.0f);
        continue;
      }
      const Tensor x = x_.Slice(row, row + n), dy = dy_.Slice(row, row + n);
      Tensor pre = e_.Empty({n, H1}, DType::kBF16), act = e_.Empty({n, kH}, DType::kBF16);
      Tensor y = e_.Empty({n, kC}, DType::kBF16);
      fp8::Fp8Linear(e_, x, w1, pre);
      if (swiglu) {
        ops::SwiGluForward(e_, pre, act);
      } else {
        ops::GeluForward(e_, pre, act);
      }
      fp8::Fp8Linear(e_, act, w2, y);
      Tensor dact = e_.Empty({n, kH}, DType::kBF16), dpre = e_.Empty({n, H1}, DType::kBF16);
      Tensor dx = e_.Empty({n, kC}, DType::kBF16);
      Tensor dw2 = e_.Zeros({kC, kH}), dw1 = e_.Zeros({H1, kC});
      fp8::Fp8LinearBackwardData(e_, dy, w2, dact);
      fp8::Fp8LinearBackwardWeight(e_, dy, act, dw2);
      if (swiglu) {
        ops::SwiGluBackward(e_, dact, pre, dpre);
      } else {
        ops::GeluBackward(e_, dact, pre, dpre);
      }
      fp8::Fp8LinearBackwardData(e_, dpre, w1, dx);
      fp8::Fp8LinearBackwardWeight(e_, dpre, x, dw1);
      if (scale != 1.0f) {
        ops::Axpby(e_, 0.0f, dw1, scale, dw1);  // ×½: exact
        ops::Axpby(e_, 0.0f, dw2, scale, dw2);
      }
      EXPECT_TRUE(SameBits(r.y.Slice(row, row + n), y)) << "y";
      EXPECT_TRUE(SameBits(r.dx.Slice(row, row + n), dx)) << "dx";
      EXPECT_TRUE(SameBits(g2, dw2)) << "fc2 weight gradient";
      EXPECT_TRUE(SameBits(g1, dw1)) << "fc1 weight gradient";
      row += n;
    }
  }
}

TEST_P(Fp8ExpertsTest, Bf16WgradOverThePaddedRowsIsTheUnpaddedGroupedGemm) {
  const bool swiglu = GetParam();
  const LayerRun fp8w = RunLayer(host_, Config(swiglu, true, 1.0f), x_, dy_);
  const LayerRun bf16w = RunLayer(host_, Config(swiglu, false, 1.0f), x_, dy_);
  // The forward and the dgrads do not depend on the wgrad's precision.
  EXPECT_TRUE(SameBits(fp8w.y, bf16w.y));
  EXPECT_TRUE(SameBits(fp8w.dx, bf16w.dx));
  // fc2's wgrad from the layer's own act: recompute it as the layer did and
  // run the bf16 grouped GEMM on the unpadded rows.
  const int64_t H1 = swiglu ? 2 * kH : kH;
  std::vector<int64_t> off = {0};
  for (int64_t n : kRows) off.push_back(off.back() + n);
  Tensor pre = e_.Empty({M_, H1}, DType::kBF16), act = e_.Empty({M_, kH}, DType::kBF16);
  for (int g = 0; g < kE; ++g) {
    if (kRows[g] == 0) continue;
    fp8::Fp8Linear(e_, x_.Slice(off[g], off[g + 1]), bf16w.w1.Slice(g * H1, (g + 1) * H1),
                   pre.Slice(off[g], off[g + 1]));
  }
  if (swiglu) {
    ops::SwiGluForward(e_, pre, act);
  } else {
    ops::GeluForward(e_, pre, act);
  }
  Tensor dw2 = e_.Zeros({kE * kC, kH});
  ops::GroupedLinearBackwardWeight(e_, dy_, act, off, 1.0f, 0.0f, dw2);
  // f32 sums of at most 37 products of bf16 values: |Δ| ≤ 37·2⁻²⁴·Σ|terms|
  // for any two orders; 1e-5 of the largest gradient covers it.
  const std::vector<float> got = Floats(bf16w.g2), want = Floats(dw2);
  double worst = 0, scale = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    worst = std::max(worst, std::abs(double(got[i]) - want[i]));
    scale = std::max(scale, std::abs(double(want[i])));
  }
  EXPECT_GT(scale, 0.0);
  EXPECT_TRUE(worst <= 1e-5 * scale) << "fc2 bf16 wgrad: worst " << worst << " of " << scale;
  // And it is not the fp8 wgrad (the setting took effect).
  EXPECT_FALSE(SameBits(fp8w.g2, bf16w.g2));
}

// ‖got − want‖ / ‖want‖ (NaN if got holds NaN).
double RelFrobenius(const std::vector<float>& got, const std::vector<double>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    num += (got[i] - want[i]) * (got[i] - want[i]);
    den += want[i] * want[i];
  }
  return std::sqrt(num / den);
}

double Gelu(double x) {
  const double k = std::sqrt(2.0 / M_PI);
  return 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x)));
}
double GeluGrad(double x) {
  const double k = std::sqrt(2.0 / M_PI), u = k * (x + 0.044715 * x * x * x);
  const double t = std::tanh(u);
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * k * (1.0 + 3 * 0.044715 * x * x);
}
double Silu(double x) { return x / (1.0 + std::exp(-x)); }
double SiluGrad(double x) {
  const double s = 1.0 / (1.0 + std::exp(-x));
  return s * (1.0 + x * (1.0 - s));
}

TEST_P(Fp8ExpertsTest, MatchesTheDoubleExpertMlpWithinE4m3sError) {
  const bool swiglu = GetParam();
  const int64_t H1 = swiglu ? 2 * kH : kH;
  const LayerRun r = RunLayer(host_, Config(swiglu, true, 1.0f), x_, dy_);
  const std::vector<float> x = Floats(x_), dy = Floats(dy_), w1 = Floats(r.w1), w2 = Floats(r.w2);
  // expert(m): the expert of row m; shift: pair row m's expert with another's weights.
  auto reference = [&](int shift, std::vector<double>* y, std::vector<double>* dx,
                       std::vector<double>* g1, std::vector<double>* g2) {
    y->assign(M_ * kC, 0.0);
    dx->assign(M_ * kC, 0.0);
    g1->assign(kE * H1 * kC, 0.0);
    g2->assign(kE * kC * kH, 0.0);
    int64_t m = 0;
    for (int e = 0; e < kE; ++e) {
      const int w = (e + shift) % kE;
      for (int64_t i = 0; i < kRows[e]; ++i, ++m) {
        std::vector<double> pre(H1, 0.0), act(kH), dact(kH, 0.0), dpre(H1);
        for (int64_t j = 0; j < H1; ++j)
          for (int64_t c = 0; c < kC; ++c) pre[j] += double(x[m * kC + c]) * w1[(w * H1 + j) * kC + c];
        for (int64_t j = 0; j < kH; ++j)
          act[j] = swiglu ? Silu(pre[j]) * pre[kH + j] : Gelu(pre[j]);
        for (int64_t c = 0; c < kC; ++c) {
          for (int64_t j = 0; j < kH; ++j) {
            (*y)[m * kC + c] += act[j] * w2[(w * kC + c) * kH + j];
            dact[j] += double(dy[m * kC + c]) * w2[(w * kC + c) * kH + j];
            (*g2)[(e * kC + c) * kH + j] += double(dy[m * kC + c]) * act[j];
          }
        }
        for (int64_t j = 0; j < kH; ++j) {
          if (swiglu) {
            dpre[j] = dact[j] * pre[kH + j] * SiluGrad(pre[j]);
            dpre[kH + j] = dact[j] * Silu(pre[j]);
          } else {
            dpre[j] = dact[j] * GeluGrad(pre[j]);
          }
        }
        for (int64_t j = 0; j < H1; ++j) {
          for (int64_t c = 0; c < kC; ++c) {
            (*dx)[m * kC + c] += dpre[j] * w1[(w * H1 + j) * kC + c];
            (*g1)[(e * H1 + j) * kC + c] += dpre[j] * x[m * kC + c];
          }
        }
      }
    }
  };
  std::vector<double> y, dx, g1, g2;
  reference(0, &y, &dx, &g1, &g2);
  const double errs[] = {RelFrobenius(Floats(r.y), y), RelFrobenius(Floats(r.dx), dx),
                         RelFrobenius(Floats(r.g1), g1), RelFrobenius(Floats(r.g2), g2)};
  const char* names[] = {"y", "dx", "fc1 grad", "fc2 grad"};
  for (int i = 0; i < 4; ++i) {
    EXPECT_TRUE(errs[i] >= 0.01 && errs[i] <= 0.10)
        << names[i] << ": relative Frobenius error " << errs[i];
  }
  // Negative control: each expert's rows through the next expert's weights.
  reference(1, &y, &dx, &g1, &g2);
  EXPECT_GT(RelFrobenius(Floats(r.y), y), 0.5);
  EXPECT_GT(RelFrobenius(Floats(r.dx), dx), 0.5);
}

INSTANTIATE_TEST_SUITE_P(Activations, Fp8ExpertsTest, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& i) {
                           return std::string(i.param ? "SwiGlu" : "Gelu");
                         });

TEST(Fp8Experts, CreateRefusesWidthsThatAreNotMultiplesOf16) {
  HeapAllocator host;
  absl::Status st = comm::RunRanks(1, [&](comm::Communicator& world) {
    parallel::ParallelConfig pc;
    parallel::ModelFacts facts;
    facts.num_experts = 4;
    auto pgs = parallel::ProcessGroupCollection::Build(pc, world, facts);
    ASSERT_TRUE(pgs.ok()) << pgs.status();
    GtpChain chain(kernels::Exec::Cpu(host), GtpOptions{});
    MoeConfig mc;
    mc.router.num_experts = 4;
    mc.router.top_k = 2;
    MoeShape s;
    s.C = 32;
    s.H = 40;
    s.B = 2;
    s.T = 8;
    s.dtype = DType::kBF16;
    s.fp8 = true;
    auto layer = MoeLayer::Create("m", mc, s, *pgs, &chain);
    ASSERT_FALSE(layer.ok());
    EXPECT_NE(std::string(layer.status().message())
                  .find("m: FP8 expert GEMMs need bf16 parameters and the width (32) and each "
                        "expert's hidden units per ETP rank (40 / ETP 1 = 40) to be multiples of 16"),
              std::string::npos)
        << layer.status();
    s.H = 48;
    s.dtype = DType::kF32;
    EXPECT_FALSE(MoeLayer::Create("m", mc, s, *pgs, &chain).ok()) << "f32 parameters";
    s.dtype = DType::kBF16;
    EXPECT_TRUE(MoeLayer::Create("m2", mc, s, *pgs, &chain).ok());
  });
  ASSERT_TRUE(st.ok()) << st;
}

}  // namespace
}  // namespace gtp::layers::moe
