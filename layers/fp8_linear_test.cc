// The parallel linears with FP8 GEMMs (LinearConfig::fp8, train.precision=
// fp8) on the CPU reference path: a Column(GELU-fused)→Row pair in bf16
// parameters against an unsharded double-precision reference, on one rank
// and sharded (TP 2 × GTP 2 with SP; GTP 2), and that the backward gathers
// no weight (it reads the forward's Wᵀ codes), and that with an fp8 wgrad it
// reads no input either (the forward's xᵀ codes). Also what Create refuses.
//
// Tolerances. Each FP8 GEMM quantises both operands to e4m3 (3 mantissa
// bits): for Gaussian data a relative RMS error of about 2.5 % per element
// and about 3.5 % per GEMM output (block_gemm_test.cc). A quantity that
// passes through two quantised GEMMs (y: x→h→y; dx: dy→dh→dx) compounds two
// such errors, plus bf16 roundings (2⁻⁹ relative, negligible here), so we
// ask for a relative Frobenius error below 8 %; and above 1 % for every
// GEMM output, which bf16 GEMMs (~0.3 %) cannot reach: the FP8 path really
// ran. Bias gradients are column sums of the bf16 dy/dh, not FP8 GEMMs.
#include <cmath>
#include <vector>

#include "comm/local/local_communicator.h"
#include "core/kernels/ops.h"
#include "core/philox.h"
#include "gtest/gtest.h"
#include "layers/linear.h"
#include "parallel/parallel_config.h"
#include "parallel/process_groups.h"

namespace gtp::layers {
namespace {

namespace ops = kernels::ops;
using Mat = std::vector<double>;  // row-major

constexpr uint64_t kSeed = 23;
constexpr float kStd = 0.05f;

Mat Normal(uint64_t key, int64_t n, double scale) {
  Mat m(n);
  for (int64_t i = 0; i < n; ++i) m[i] = scale * PhiloxNormal(key, i);
  return m;
}
Mat GlobalWeight(const std::string& name, int64_t rows, int64_t cols) {
  Mat w(rows * cols);  // what InitShardFromGlobal builds (param_io.h)
  for (int64_t i = 0; i < rows * cols; ++i) w[i] = kStd * PhiloxNormal(KeyFromName(name, kSeed), i);
  return w;
}
// c[m, n] = Σ_k a[m·sa + k·ta] · b[n·sb + k·tb]: every product the test needs.
Mat Product(const Mat& a, int64_t sa, int64_t ta, const Mat& b, int64_t sb, int64_t tb, int64_t m,
            int64_t n, int64_t k) {
  Mat c(m * n, 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t p = 0; p < k; ++p) c[i * n + j] += a[i * sa + p * ta] * b[j * sb + p * tb];
  return c;
}
double Gelu(double x) {
  const double u = std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x);
  return 0.5 * x * (1.0 + std::tanh(u));
}
double GeluGrad(double x) {
  const double k = std::sqrt(2.0 / M_PI), u = k * (x + 0.044715 * x * x * x);
  const double t = std::tanh(u);
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * k * (1.0 + 3 * 0.044715 * x * x);
}

// A bf16 [rows, cols] tensor of m's block (rows from row0, cols from col0 of ld).
Tensor Bf16(HeapAllocator& a, const Mat& m, int64_t row0, int64_t rows, int64_t col0, int64_t cols,
            int64_t ld) {
  Tensor f = Tensor::Empty({rows, cols}, DType::kF32, a);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      f.data<float>()[r * cols + c] = m[(row0 + r) * ld + col0 + c];
  Tensor b = Tensor::Empty({rows, cols}, DType::kBF16, a);
  ops::Cast(kernels::Exec::Cpu(a), f, b);
  return b;
}
std::vector<double> Values(HeapAllocator& a, const Tensor& t) {
  Tensor f = t;
  if (t.dtype() != DType::kF32) {
    f = Tensor::Empty(t.shape(), DType::kF32, a);
    ops::Cast(kernels::Exec::Cpu(a), t, f);
  }
  return std::vector<double>(f.data<float>(), f.data<float>() + f.numel());
}
// ‖got − want‖ / ‖want‖ over want's block (row0, col0, ld), NaN when got is.
double RelError(const std::vector<double>& got, const Mat& want, int64_t row0, int64_t rows,
                int64_t col0, int64_t cols, int64_t ld) {
  double num = 0, den = 0;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const double w = want[(row0 + r) * ld + col0 + c], d = got[r * cols + c] - w;
      num += d * d;
      den += w * w;
    }
  }
  return std::sqrt(num / den);
}

struct Case {
  int tp, gtp;
  bool sp;
};
std::string Name(const ::testing::TestParamInfo<Case>& i) {
  return "tp" + std::to_string(i.param.tp) + "_gtp" + std::to_string(i.param.gtp) +
         (i.param.sp ? "_sp" : "");
}

class Fp8Linear : public ::testing::TestWithParam<Case> {};

TEST_P(Fp8Linear, GeluMlpMatchesTheDoubleReferenceWithinFp8Error) {
  const Case k = GetParam();
  // Multiples of 16 (cuBLASLt's rule, kept on the CPU too); hidden spans two
  // 128-tiles per TP rank at TP 2, and out one partial tile.
  const int64_t N = 64, in = 160, hidden = 512, out = 144;
  const Mat W1 = GlobalWeight("fc.weight", hidden, in),
            W2 = GlobalWeight("proj.weight", out, hidden);
  // The same x and dy on every GTP lane, so the GTP-averaged weight gradients
  // equal one lane's.
  const Mat x = Normal(KeyFromName("x"), N * in, 1.0), dy = Normal(KeyFromName("dy"), N * out, 1.0);
  const Mat pre = Product(x, in, 1, W1, in, 1, N, hidden, in);  // x·W1ᵀ
  Mat h(pre.size()), dh(pre.size());
  for (size_t i = 0; i < pre.size(); ++i) h[i] = Gelu(pre[i]);
  const Mat y = Product(h, hidden, 1, W2, hidden, 1, N, out, hidden);  // h·W2ᵀ
  const Mat dhg = Product(dy, out, 1, W2, 1, hidden, N, hidden, out);  // dy·W2
  for (size_t i = 0; i < pre.size(); ++i) dh[i] = dhg[i] * GeluGrad(pre[i]);
  const Mat dx = Product(dh, hidden, 1, W1, 1, in, N, in, hidden);    // dh·W1
  const Mat dW2 = Product(dy, 1, out, h, 1, hidden, out, hidden, N);  // dyᵀ·h
  const Mat dW1 = Product(dh, 1, hidden, x, 1, in, hidden, in, N);    // dhᵀ·x

  HeapAllocator host;
  absl::Status st = comm::RunRanks(k.tp * k.gtp, [&](comm::Communicator& world) {
    parallel::ParallelConfig pc;
    pc.tp = k.tp;
    pc.tp_num_weight_shards = k.tp * k.gtp;
    pc.sequence_parallel = k.sp;
    auto pgs = parallel::ProcessGroupCollection::Build(pc, world);
    ASSERT_TRUE(pgs.ok()) << pgs.status();
    const int t = (*pgs->Get("tp"))->rank();
    GtpOptions gtp_options;
    gtp_options.fp8_tile_gather = true;  // fc's shards are whole tiles under GTP; proj's are not
    GtpChain chain(kernels::Exec::Cpu(host), gtp_options);
    chain.set_tracing(true);
    LinearConfig c1{"fc", in, hidden, true, k.sp, kStd, kSeed};
    LinearConfig c2{"proj", hidden, out, true, k.sp, kStd, kSeed};
    for (LinearConfig* c : {&c1, &c2}) c->dtype = DType::kBF16, c->fp8 = true;
    auto l1 = ColumnParallelLinear::Create(c1, *pgs, &chain);
    auto l2 = RowParallelLinear::Create(c2, *pgs, &chain);
    ASSERT_TRUE(l1.ok()) << l1.status();
    ASSERT_TRUE(l2.ok()) << l2.status();
    const int64_t rows = k.sp ? N / k.tp : N, row0 = k.sp ? t * rows : 0, h_tp = hidden / k.tp;
    Tensor gelu_pre;
    auto ht =
        (*l1)->ForwardGelu(Bf16(host, x, row0, rows, 0, in, in), Direction::kForward, &gelu_pre);
    ASSERT_TRUE(ht.ok()) << ht.status();
    auto yt = (*l2)->Forward(*ht);
    ASSERT_TRUE(yt.ok()) << yt.status();
    auto dht = (*l2)->BackwardDGelu(Bf16(host, dy, row0, rows, 0, out, out), gelu_pre);
    ASSERT_TRUE(dht.ok()) << dht.status();
    auto dxt = (*l1)->Backward(*dht);
    ASSERT_TRUE(dxt.ok()) << dxt.status();
    ASSERT_TRUE(chain.FinishBackward().ok());
    // The backward reads Wᵀ's codes kept by the forward: no weight is
    // gathered for it (under GTP the forward's gathers are still there).
    int forward_gathers = 0, backward_gathers = 0;
    for (const GtpTraceEvent& ev : chain.trace()) {
      if (ev.kind != GtpTraceEvent::kGatherIssued) continue;
      (ev.dir == Direction::kForward ? forward_gathers : backward_gathers) += 1;
    }
    EXPECT_EQ(forward_gathers, k.gtp > 1 ? 2 : 0);
    EXPECT_EQ(backward_gathers, 0);
    // fc's shards are whole 128-row tiles under GTP (512 / TP / GTP rows):
    // gathered as FP8 tiles; proj's 144 rows are not.
    EXPECT_EQ((*l1)->weight().fp8_tiles(), k.gtp > 1);
    EXPECT_FALSE((*l2)->weight().fp8_tiles());

    auto expect_fp8_error = [&](const char* what, double err, double lo) {
      EXPECT_TRUE(err >= lo && err <= 0.08)
          << what << ": relative error " << err << " outside [" << lo << ", 0.08]";
      std::printf("tp%d gtp%d%s rank t%d %-4s rel. error %.4f\n", k.tp, k.gtp, k.sp ? " sp" : "", t,
                  what, err);
    };
    // One quantised GEMM stands behind pre and dh; two behind y and dx.
    expect_fp8_error("pre", RelError(Values(host, gelu_pre), pre, 0, N, t * h_tp, h_tp, hidden),
                     0.01);
    expect_fp8_error("y", RelError(Values(host, *yt), y, row0, rows, 0, out, out), 0.01);
    expect_fp8_error("dh", RelError(Values(host, *dht), dh, 0, N, t * h_tp, h_tp, hidden), 0.01);
    expect_fp8_error("dx", RelError(Values(host, *dxt), dx, row0, rows, 0, in, in), 0.01);
    // This rank's GTP shard of each weight gradient (padding rows excluded).
    auto shard_error = [&](ShardedParam& p, const Mat& ref, int64_t ref_cols, int64_t row_off,
                           int64_t col_off) {
      const std::vector<double> got = Values(host, p.main_grad());
      const int64_t n =
          std::max<int64_t>(0, std::min(p.shard_rows(), p.rows() - p.shard_row_begin()));
      return RelError(got, ref, row_off + p.shard_row_begin(), n, col_off, p.cols(), ref_cols);
    };
    expect_fp8_error("dW1", shard_error((*l1)->weight(), dW1, in, t * h_tp, 0), 0.01);
    expect_fp8_error("dW2", shard_error((*l2)->weight(), dW2, hidden, 0, t * h_tp), 0.01);
    // Bias gradients: sums of bf16 gradients, no FP8 GEMM of their own (dh's
    // own error carries into db1).
    Mat db1(hidden, 0.0), db2(out, 0.0);
    for (int64_t r = 0; r < N; ++r) {
      for (int64_t j = 0; j < hidden; ++j) db1[j] += dh[r * hidden + j];
    }
    for (int64_t r = row0; r < row0 + rows; ++r) {
      for (int64_t j = 0; j < out; ++j) db2[j] += dy[r * out + j];
    }
    const double e1 =
        RelError(Values(host, (*l1)->bias()->grad), db1, 0, 1, t * h_tp, h_tp, hidden);
    const double e2 = RelError(Values(host, (*l2)->bias()->grad), db2, 0, 1, 0, out, out);
    EXPECT_TRUE(e1 <= 0.08) << "db1 " << e1;
    EXPECT_TRUE(e2 <= 0.01) << "db2 " << e2;  // bf16 dy only
  });
  ASSERT_TRUE(st.ok()) << st;
}

INSTANTIATE_TEST_SUITE_P(Layouts, Fp8Linear,
                         ::testing::Values(Case{1, 1, false}, Case{1, 2, false}, Case{2, 2, true}),
                         Name);

// With an fp8 wgrad the backward reads the codes of xᵀ the forward made, not
// x: overwriting both linears' inputs with NaN between forward and backward
// changes no gradient bit. With a bf16 wgrad (fp8_wgrad false) the backward
// reads x itself, and the same overwrite makes the weight gradients NaN —
// the control that shows the overwrite reaches what a backward would read.
TEST(Fp8LinearInput, AnFp8WgradBackwardReadsTheForwardsCodesNotTheInput) {
  const int64_t N = 64, in = 160, hidden = 256, out = 144;
  const Mat x = Normal(KeyFromName("x"), N * in, 1.0), dy = Normal(KeyFromName("dy"), N * out, 1.0);
  HeapAllocator host;
  // The weight gradients of fc and proj after one forward and backward.
  auto run = [&](bool fp8_wgrad, bool poison) {
    std::vector<double> grads;
    absl::Status st = comm::RunRanks(1, [&](comm::Communicator& world) {
      auto pgs = parallel::ProcessGroupCollection::Build(parallel::ParallelConfig{}, world);
      ASSERT_TRUE(pgs.ok()) << pgs.status();
      const kernels::Exec e = kernels::Exec::Cpu(host);
      GtpChain chain(e, GtpOptions{});
      LinearConfig c1{"fc", in, hidden, true, false, kStd, kSeed};
      LinearConfig c2{"proj", hidden, out, true, false, kStd, kSeed};
      for (LinearConfig* c : {&c1, &c2}) {
        c->dtype = DType::kBF16, c->fp8 = true, c->fp8_wgrad = fp8_wgrad;
      }
      auto l1 = ColumnParallelLinear::Create(c1, *pgs, &chain);
      auto l2 = RowParallelLinear::Create(c2, *pgs, &chain);
      ASSERT_TRUE(l1.ok() && l2.ok());
      Tensor xt = Bf16(host, x, 0, N, 0, in, in), gelu_pre;
      auto ht = (*l1)->ForwardGelu(xt, Direction::kForward, &gelu_pre);
      ASSERT_TRUE(ht.ok()) << ht.status();
      auto yt = (*l2)->Forward(*ht);
      ASSERT_TRUE(yt.ok()) << yt.status();
      if (poison) {
        ops::Fill(e, xt, std::nanf(""));
        ops::Fill(e, *ht, std::nanf(""));
      }
      auto dht = (*l2)->BackwardDGelu(Bf16(host, dy, 0, N, 0, out, out), gelu_pre);
      ASSERT_TRUE(dht.ok()) << dht.status();
      ASSERT_TRUE((*l1)->Backward(*dht).ok());
      ASSERT_TRUE(chain.FinishBackward().ok());
      for (ShardedParam* p : {&(*l1)->weight(), &(*l2)->weight()}) {
        const std::vector<double> v = Values(host, p->main_grad());
        grads.insert(grads.end(), v.begin(), v.end());
      }
    });
    EXPECT_TRUE(st.ok()) << st;
    return grads;
  };
  const std::vector<double> clean = run(true, false), poisoned = run(true, true);
  ASSERT_FALSE(clean.empty());
  for (double g : clean) ASSERT_TRUE(std::isfinite(g));
  EXPECT_TRUE(clean == poisoned) << "an fp8 wgrad read the overwritten input";
  const std::vector<double> bf16_wgrad = run(false, true);
  size_t nan = 0;
  for (double g : bf16_wgrad) nan += std::isnan(g) ? 1 : 0;
  EXPECT_GT(nan, bf16_wgrad.size() / 2) << "the control: a bf16 wgrad reads x";
}

// What Create refuses, naming the layer and a way out.
TEST(Fp8LinearConfig, RefusesF32ParamsAndShardsNotInSixteens) {
  HeapAllocator host;
  absl::Status st = comm::RunRanks(2, [&](comm::Communicator& w) {
    parallel::ParallelConfig pc;
    pc.tp = 2;
    auto pgs = parallel::ProcessGroupCollection::Build(pc, w);
    ASSERT_TRUE(pgs.ok());
    GtpChain chain(kernels::Exec::Cpu(host), GtpOptions{});
    LinearConfig f32{"fc", 64, 64};
    f32.fp8 = true;
    auto a = ColumnParallelLinear::Create(f32, *pgs, &chain);
    EXPECT_NE(a.status().message().find("fc: FP8 GEMMs need bf16 parameters"), std::string::npos)
        << a.status();
    LinearConfig odd{"proj", 48, 64};  // in / TP = 24
    odd.fp8 = true;
    odd.dtype = DType::kBF16;
    auto b = RowParallelLinear::Create(odd, *pgs, &chain);
    EXPECT_NE(
        b.status().message().find("proj: FP8 GEMMs need this rank's weight [out, in] = [64, 24]"),
        std::string::npos)
        << b.status();
  });
  ASSERT_TRUE(st.ok()) << st;
}

}  // namespace
}  // namespace gtp::layers
