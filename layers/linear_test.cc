// Layer parity matrix for the parallel linears: every (TP, GTP) in {1,2,4}²
// with TP·GTP ≤ 8, SP on/off, sizes that need GTP padding. The sharded
// Column→Row pair must reproduce an unsharded double-precision reference:
// outputs, input gradients, weight gradients (averaged over the GTP data
// lanes, as the GTP reduce-scatter means) and bias gradients.
#include "layers/linear.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "comm/local/local_communicator.h"
#include "core/kernels/testing/harness.h"
#include "core/philox.h"
#include "gtest/gtest.h"
#include "parallel/parallel_config.h"
#include "parallel/process_groups.h"

namespace gtp::layers {
namespace {

using kernels::testing::RelClose;
using Mat = std::vector<double>;  // row-major

constexpr uint64_t kSeed = 17;
constexpr float kStd = 0.5f;

Mat GlobalWeight(const std::string& name, int64_t rows, int64_t cols) {
  Mat w(rows * cols);
  for (int64_t i = 0; i < rows * cols; ++i) w[i] = kStd * PhiloxNormal(KeyFromName(name, kSeed), i);
  return w;
}
// Per-lane test inputs: x_g[N, in], dy_g[N, out].
Mat LaneData(const char* what, int lane, int64_t rows, int64_t cols) {
  Mat m(rows * cols);
  for (int64_t i = 0; i < rows * cols; ++i)
    m[i] = PhiloxNormal(MixKey(KeyFromName(what), lane), i);
  return m;
}
// c[m, n] = a[m, k] · b[n, k]ᵀ
Mat MatMulT(const Mat& a, const Mat& b, int64_t m, int64_t n, int64_t k) {
  Mat c(m * n, 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t p = 0; p < k; ++p) c[i * n + j] += a[i * k + p] * b[j * k + p];
  return c;
}
// c[m, n] = a[m, k] · b[k, n]
Mat MatMul(const Mat& a, const Mat& b, int64_t m, int64_t n, int64_t k) {
  Mat c(m * n, 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t p = 0; p < k; ++p)
      for (int64_t j = 0; j < n; ++j) c[i * n + j] += a[i * k + p] * b[p * n + j];
  return c;
}
// c[m, n] = a[k, m]ᵀ · b[k, n]
Mat TMatMul(const Mat& a, const Mat& b, int64_t m, int64_t n, int64_t k) {
  Mat c(m * n, 0.0);
  for (int64_t p = 0; p < k; ++p)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) c[i * n + j] += a[p * m + i] * b[p * n + j];
  return c;
}

Tensor HostTensor(HeapAllocator& a, const Mat& m, int64_t row0, int64_t rows, int64_t cols,
                  int64_t col0 = 0, int64_t ld = -1) {
  if (ld < 0) ld = cols;
  Tensor t = Tensor::Empty({rows, cols}, DType::kF32, a);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) t.data<float>()[r * cols + c] = m[(row0 + r) * ld + col0 + c];
  return t;
}
Mat Sub(const Mat& m, int64_t row0, int64_t rows, int64_t col0, int64_t cols, int64_t ld) {
  Mat s(rows * cols);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) s[r * cols + c] = m[(row0 + r) * ld + col0 + c];
  return s;
}
std::vector<float> Vec(const Tensor& t) {
  return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
}

struct Case {
  int tp, gtp;
  bool sp;
};
std::string Name(const ::testing::TestParamInfo<Case>& i) {
  return "tp" + std::to_string(i.param.tp) + "_gtp" + std::to_string(i.param.gtp) +
         (i.param.sp ? "_sp" : "");
}

class LinearParity : public ::testing::TestWithParam<Case> {};

TEST_P(LinearParity, ColumnThenRowMatchesUnshardedReference) {
  const Case k = GetParam();
  const int world = k.tp * k.gtp;
  // hidden = 250 needs GTP padding (250/TP rows per TP rank); TP 4 needs 252.
  const int64_t N = 8, in = 12, hidden = k.tp == 4 ? 252 : 250, out = 10;
  const Mat W1 = GlobalWeight("l1.weight", hidden, in), W2 = GlobalWeight("l2.weight", out, hidden);
  // Reference per lane (biases start at zero).
  std::vector<Mat> x(k.gtp), dy(k.gtp), h(k.gtp), y(k.gtp), dh(k.gtp), dx(k.gtp);
  Mat dW1(hidden * in, 0.0), dW2(out * hidden, 0.0);
  for (int g = 0; g < k.gtp; ++g) {
    x[g] = LaneData("x", g, N, in);
    dy[g] = LaneData("dy", g, N, out);
    h[g] = MatMulT(x[g], W1, N, hidden, in);
    y[g] = MatMulT(h[g], W2, N, out, hidden);
    dh[g] = MatMul(dy[g], W2, N, hidden, out);
    dx[g] = MatMul(dh[g], W1, N, in, hidden);
    Mat a = TMatMul(dh[g], x[g], hidden, in, N), b = TMatMul(dy[g], h[g], out, hidden, N);
    for (size_t i = 0; i < a.size(); ++i) dW1[i] += a[i] / k.gtp;
    for (size_t i = 0; i < b.size(); ++i) dW2[i] += b[i] / k.gtp;
  }
  HeapAllocator host;
  absl::Status st = comm::RunRanks(world, [&](comm::Communicator& world_comm) {
    parallel::ParallelConfig pc;
    pc.tp = k.tp;
    pc.tp_num_weight_shards = k.tp * k.gtp;
    pc.sequence_parallel = k.sp;
    auto pgs = parallel::ProcessGroupCollection::Build(pc, world_comm);
    ASSERT_TRUE(pgs.ok()) << pgs.status();
    const int t = (*pgs->Get("tp"))->rank(), g = (*pgs->Get("gtp"))->rank();
    GtpChain chain(kernels::Exec::Cpu(host), GtpOptions{});
    LinearConfig c1{"l1", in, hidden, true, k.sp, kStd, kSeed};
    LinearConfig c2{"l2", hidden, out, true, k.sp, kStd, kSeed};
    auto l1 = ColumnParallelLinear::Create(c1, *pgs, &chain);
    auto l2 = RowParallelLinear::Create(c2, *pgs, &chain);
    ASSERT_TRUE(l1.ok() && l2.ok());
    const int64_t rows = k.sp ? N / k.tp : N, row0 = k.sp ? t * rows : 0;
    // The second iteration also adds a residual to l2's output (Forward's
    // `residual`: after the TP reduction and the bias, left as it was).
    const Mat res = LaneData("residual", g, N, out);
    Mat y_res = y[g];
    for (size_t i = 0; i < y_res.size(); ++i) y_res[i] += res[i];
    for (int iter = 0; iter < 2; ++iter) {  // second iteration: prefetch chain + cache reuse
      auto hid = (*l1)->Forward(HostTensor(host, x[g], row0, rows, in));
      ASSERT_TRUE(hid.ok()) << hid.status();
      const Tensor residual = HostTensor(host, res, row0, rows, out);
      auto yt =
          iter == 0 ? (*l2)->Forward(*hid) : (*l2)->Forward(*hid, Direction::kForward, residual);
      ASSERT_TRUE(yt.ok()) << yt.status();
      EXPECT_TRUE(RelClose(Vec(*yt), Sub(iter == 0 ? y[g] : y_res, row0, rows, 0, out, out), 1e-5))
          << "y";
      EXPECT_EQ(Vec(residual), Vec(HostTensor(host, res, row0, rows, out))) << "residual written";
      auto dht = (*l2)->Backward(HostTensor(host, dy[g], row0, rows, out));
      ASSERT_TRUE(dht.ok()) << dht.status();
      const int64_t h_tp = hidden / k.tp;
      EXPECT_TRUE(RelClose(Vec(*dht), Sub(dh[g], 0, N, t * h_tp, h_tp, hidden), 1e-5)) << "dh";
      auto dxt = (*l1)->Backward(*dht);
      ASSERT_TRUE(dxt.ok()) << dxt.status();
      EXPECT_TRUE(RelClose(Vec(*dxt), Sub(dx[g], row0, rows, 0, in, in), 1e-5)) << "dx";
      ASSERT_TRUE(chain.FinishBackward().ok());
    }
    // Weight grads: two iterations accumulated → 2× the reference. Compare
    // this rank's shard rows (padding rows must stay zero).
    auto check_shard = [&](ShardedParam& p, const Mat& ref, int64_t ref_cols, int64_t row_off,
                           int64_t col_off) {
      std::vector<float> got = Vec(p.main_grad());
      Mat want(got.size(), 0.0);
      for (int64_t r = 0; r < p.shard_rows(); ++r) {
        const int64_t lr = p.shard_row_begin() + r;
        for (int64_t c = 0; c < p.cols(); ++c)
          want[r * p.cols() + c] = lr < p.rows() ? 2 * ref[(row_off + lr) * ref_cols + col_off + c] : 0;
      }
      EXPECT_TRUE(RelClose(got, want, 1e-5)) << p.name() << " t" << t << " g" << g;
    };
    check_shard((*l1)->weight(), dW1, in, t * (hidden / k.tp), 0);
    check_shard((*l2)->weight(), dW2, hidden, 0, t * (hidden / k.tp));
    // Bias grads (per lane, before finalisation): l1's covers all N rows of
    // its TP slice; l2's covers this rank's rows (SP) or all rows.
    Mat db1(hidden / k.tp, 0.0), db2(out, 0.0);
    for (int64_t r = 0; r < N; ++r)
      for (int64_t j = 0; j < hidden / k.tp; ++j) db1[j] += 2 * dh[g][r * hidden + t * (hidden / k.tp) + j];
    for (int64_t r = row0; r < row0 + rows; ++r)
      for (int64_t j = 0; j < out; ++j) db2[j] += 2 * dy[g][r * out + j];
    EXPECT_TRUE(RelClose(Vec((*l1)->bias()->grad), db1, 1e-5));
    EXPECT_TRUE(RelClose(Vec((*l2)->bias()->grad), db2, 1e-5));
    EXPECT_EQ((*l2)->bias()->grad_needs_tp_sum, k.sp && k.tp > 1);
  });
  ASSERT_TRUE(st.ok()) << st;
}

INSTANTIATE_TEST_SUITE_P(Matrix, LinearParity,
                         ::testing::Values(Case{1, 1, false}, Case{1, 2, false}, Case{1, 4, false},
                                           Case{2, 1, false}, Case{2, 2, false}, Case{2, 4, false},
                                           Case{4, 1, false}, Case{4, 2, false}, Case{2, 1, true},
                                           Case{2, 2, true}, Case{2, 4, true}, Case{4, 1, true},
                                           Case{4, 2, true}),
                         Name);

TEST(Linear, OutFeaturesNotDivisibleByTpIsAClearError) {
  HeapAllocator host;
  absl::Status st = comm::RunRanks(2, [&](comm::Communicator& w) {
    parallel::ParallelConfig pc;
    pc.tp = 2;
    auto pgs = parallel::ProcessGroupCollection::Build(pc, w);
    ASSERT_TRUE(pgs.ok());
    GtpChain chain(kernels::Exec::Cpu(host), GtpOptions{});
    auto l = ColumnParallelLinear::Create(LinearConfig{"fc", 4, 7}, *pgs, &chain);
    EXPECT_EQ(l.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(l.status().message().find("fc.out_features = 7"), std::string::npos) << l.status();
  });
  ASSERT_TRUE(st.ok()) << st;
}

// LinearConfig::f32_output / f32_input_grad (the Mamba mixer's): a bf16
// column linear writes its GEMM's f32 result unrounded — the bf16 output is
// that result rounded once, the control — and a bf16 row linear's dx
// likewise; each flag is refused on the other kind of linear, and f32_output
// with a bias.
TEST(Linear, F32OutputIsTheUnroundedResultAndMisplacedFlagsAreRefused) {
  HeapAllocator host;
  absl::Status st = comm::RunRanks(1, [&](comm::Communicator& w) {
    auto pgs = parallel::ProcessGroupCollection::Build(parallel::ParallelConfig{}, w);
    ASSERT_TRUE(pgs.ok());
    const kernels::Exec e = kernels::Exec::Cpu(host);
    GtpChain chain(e, GtpOptions{});
    LinearConfig c{"fc", 32, 48, /*bias=*/false};
    c.dtype = DType::kBF16;
    LinearConfig c32 = c;
    c32.name = "fc32";
    c32.f32_output = true;
    auto l = ColumnParallelLinear::Create(c, *pgs, &chain);
    auto l32 = ColumnParallelLinear::Create(c32, *pgs, &chain);
    ASSERT_TRUE(l.ok() && l32.ok());
    std::vector<float> xv(16 * 32);
    for (size_t i = 0; i < xv.size(); ++i) xv[i] = PhiloxNormal(7, i);
    Tensor x = e.Empty({16, 32}, DType::kBF16);
    kernels::ops::Cast(e, Tensor::Wrap(xv.data(), {16, 32}, DType::kF32, Device::Cpu()), x);
    auto y = (*l)->Forward(x);
    auto y32 = (*l32)->Forward(x);
    ASSERT_TRUE(y.ok() && y32.ok());
    ASSERT_EQ(y32->dtype(), DType::kF32);
    // fc and fc32 have different names, so different initial weights: give
    // fc32 fc's weight to compare the two outputs.
    kernels::ops::CopyInto(e, (*l)->weight().shard(), (*l32)->weight().shard());
    y32 = (*l32)->Forward(x);
    ASSERT_TRUE(y32.ok());
    Tensor rounded = e.Empty({16, 48}, DType::kBF16);
    kernels::ops::Cast(e, *y32, rounded);
    EXPECT_EQ(std::memcmp(rounded.raw_data(), y->raw_data(), rounded.nbytes()), 0)
        << "the bf16 output is the f32 output rounded once";
    size_t unrounded = 0;
    const float* f = y32->data<float>();
    for (int64_t i = 0; i < y32->numel(); ++i) {
      unrounded += (FloatBits(f[i]) & 0xffffu) != 0 ? 1 : 0;
    }
    EXPECT_GT(unrounded, static_cast<size_t>(y32->numel() / 2)) << "f32 results, not bf16 widened";
    // Misplaced flags.
    LinearConfig bad = c32;
    bad.bias = true;
    bad.name = "b1";
    EXPECT_NE(ColumnParallelLinear::Create(bad, *pgs, &chain).status().message().find(
                  "b1: an f32 output is for bias-free linears"),
              std::string::npos);
    bad = c;
    bad.name = "b2";
    bad.f32_input_grad = true;
    EXPECT_NE(ColumnParallelLinear::Create(bad, *pgs, &chain).status().message().find(
                  "b2: f32_input_grad is a row-parallel linear's setting"),
              std::string::npos);
    bad = c32;
    bad.name = "b3";
    EXPECT_NE(RowParallelLinear::Create(bad, *pgs, &chain).status().message().find(
                  "b3: f32_output is a column-parallel linear's setting"),
              std::string::npos);
    // A row linear's f32 input gradient, likewise the unrounded dgrad.
    LinearConfig r = c;
    r.name = "proj";
    LinearConfig r32 = r;
    r32.name = "proj32";
    r32.f32_input_grad = true;
    auto p = RowParallelLinear::Create(r, *pgs, &chain);
    auto p32 = RowParallelLinear::Create(r32, *pgs, &chain);
    ASSERT_TRUE(p.ok() && p32.ok());
    kernels::ops::CopyInto(e, (*p)->weight().shard(), (*p32)->weight().shard());
    ASSERT_TRUE((*p)->Forward(x).ok() && (*p32)->Forward(x).ok());
    Tensor dy = e.Empty({16, 48}, DType::kBF16);
    kernels::ops::Cast(e, *y32, dy);
    auto dx = (*p)->Backward(dy);
    auto dx32 = (*p32)->Backward(dy);
    ASSERT_TRUE(dx.ok() && dx32.ok());
    ASSERT_EQ(dx32->dtype(), DType::kF32);
    Tensor dxr = e.Empty({16, 32}, DType::kBF16);
    kernels::ops::Cast(e, *dx32, dxr);
    EXPECT_EQ(std::memcmp(dxr.raw_data(), dx->raw_data(), dxr.nbytes()), 0);
  });
  ASSERT_TRUE(st.ok()) << st;
}

}  // namespace
}  // namespace gtp::layers
