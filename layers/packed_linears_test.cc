// PackedLinears against a double-precision reference, packed (one GEMM per
// pass) and as three linears (an attention's q, k, v), over TP and GTP layouts: q, k, v, the
// partial input gradient, the weight gradients (two iterations accumulated; averaged over the GTP
// data lanes as the reduce-scatter means) and the bias gradients. Packed, each of its memory cases:
// the weight read in place (GTP 1, shards in one buffer) or copied (padded shards, gathered GTP
// weights); the weight gradient written in place (main grads adjacent, the
// first write fresh or accumulating) or through scratch.
//
// Tolerance: f32 GEMMs with K ≤ 16 (forward, dgrad) or K = N·iterations (wgrad)
// terms of O(1) values: relative error ≲ K·2⁻²⁴ ≈ 1e-6; 1e-5 leaves room
// for the BLAS's summation order and no room for a wrong block or a missed
// bias.
#include "layers/packed_linears.h"

#include <cmath>
#include <string>
#include <vector>

#include "comm/local/local_communicator.h"
#include "core/kernels/testing/harness.h"
#include "core/philox.h"
#include "gtest/gtest.h"
#include "layers/param_io.h"
#include "parallel/parallel_config.h"
#include "parallel/process_groups.h"

namespace gtp::layers {
namespace {

using kernels::testing::RelClose;
using Mat = std::vector<double>;  // row-major

constexpr uint64_t kSeed = 23;
constexpr float kStd = 0.5f;
constexpr int64_t kN = 8, kC = 16, kQ = 16, kKv = 8;  // GQA-like: k, v narrower than q

Mat GlobalWeight(const std::string& name, int64_t rows, int64_t cols) {
  Mat w(rows * cols);
  for (int64_t i = 0; i < rows * cols; ++i) w[i] = kStd * PhiloxNormal(KeyFromName(name, kSeed), i);
  return w;
}
Mat LaneData(const std::string& what, int lane, int64_t n) {
  Mat m(n);
  for (int64_t i = 0; i < n; ++i) m[i] = PhiloxNormal(MixKey(KeyFromName(what), lane), i);
  return m;
}
Tensor HostTensor(HeapAllocator& a, const Mat& m, int64_t rows, int64_t cols, int64_t col0 = 0,
                  int64_t ld = -1) {
  if (ld < 0) ld = cols;
  Tensor t = Tensor::Empty({rows, cols}, DType::kF32, a);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) t.data<float>()[r * cols + c] = m[r * ld + col0 + c];
  return t;
}
// Any 2-D view (dense or row-pitched) as a vector, row-major.
std::vector<float> Vec2(const Tensor& t) {
  std::vector<float> v;
  const int64_t rows = t.dim(0), cols = t.numel() / rows, pitch = t.strides()[0];
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) v.push_back(t.data<float>()[r * pitch + c]);
  return v;
}
// Writes m (row-major, rows × cols) into a 2-D view of t.
void Fill2(const Tensor& t, const Mat& m) {
  const int64_t rows = t.dim(0), cols = t.numel() / rows, pitch = t.strides()[0];
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      t.data<float>()[r * pitch + c] = static_cast<float>(m[r * cols + c]);
}

struct Case {
  int tp, gtp;
  bool packed;
  int64_t alignment;    // GtpOptions::alignment (32 with these sizes pads the GTP-1 shards)
  bool adjacent_grads;  // GTP 1: main grads in one buffer (as GradBuffer lays a grad group)
};
std::string Name(const ::testing::TestParamInfo<Case>& i) {
  const Case& c = i.param;
  return "tp" + std::to_string(c.tp) + "_gtp" + std::to_string(c.gtp) +
         (c.packed ? "_packed" : "_three") + "_align" + std::to_string(c.alignment) +
         (c.adjacent_grads ? "_adjacent" : "");
}

class QkvParity : public ::testing::TestWithParam<Case> {};

TEST_P(QkvParity, MatchesDoubleReference) {
  const Case k = GetParam();
  const int world = k.tp * k.gtp;
  const int64_t out[3] = {kQ, kKv, kKv};
  const char* names[3] = {"a.q", "a.k", "a.v"};
  Mat W[3];
  for (int i = 0; i < 3; ++i) W[i] = GlobalWeight(std::string(names[i]) + ".weight", out[i], kC);
  HeapAllocator host;
  absl::Status st = comm::RunRanks(world, [&](comm::Communicator& world_comm) {
    parallel::ParallelConfig pc;
    pc.tp = k.tp;
    pc.tp_num_weight_shards = k.tp * k.gtp;
    auto pgs = parallel::ProcessGroupCollection::Build(pc, world_comm);
    ASSERT_TRUE(pgs.ok()) << pgs.status();
    const int t = (*pgs->Get("tp"))->rank(), g = (*pgs->Get("gtp"))->rank();
    GtpOptions opts;
    opts.alignment = k.alignment;
    GtpChain chain(kernels::Exec::Cpu(host), opts);
    LinearConfig lc[3];
    for (int i = 0; i < 3; ++i) {
      lc[i] = LinearConfig{names[i], kC, out[i], true, false, kStd, kSeed};
      lc[i].caller_reduces_input_grad = true;
    }
    auto p = PackedLinears::Create({lc[0], lc[1], lc[2]}, k.packed, *pgs, &chain);
    ASSERT_TRUE(p.ok()) << p.status();
    ColumnParallelLinear* part[3] = {&(*p)->part(0), &(*p)->part(1), &(*p)->part(2)};
    int64_t rows[3];
    for (int i = 0; i < 3; ++i) rows[i] = out[i] / k.tp;
    // Nonzero biases (TP slices of a global one), written into the params.
    Mat bias[3];
    for (int i = 0; i < 3; ++i) {
      bias[i] = LaneData(std::string(names[i]) + ".bias", 0, out[i]);
      Fill2(part[i]->bias()->value.View({1, rows[i]}),
            Mat(bias[i].begin() + t * rows[i], bias[i].begin() + (t + 1) * rows[i]));
    }
    // Where the packed weight is read in place, the shards are one buffer.
    if (k.packed && k.gtp == 1 && k.alignment == 1) {
      for (int i = 1; i < 3; ++i) {
        EXPECT_EQ(part[i]->weight().shard().storage(), part[0]->weight().shard().storage());
        EXPECT_EQ(part[i]->bias()->value.storage(), part[0]->bias()->value.storage());
      }
    }
    Tensor grads_buffer, bias_grads;
    if (k.adjacent_grads) {  // what GradBuffer does for a grad group, then its ZeroGrad
      int64_t total = 0;
      for (int i = 0; i < 3; ++i) total += part[i]->weight().main_grad().numel();
      grads_buffer = Tensor::Zeros({total}, DType::kF32, host);
      int64_t at = 0;
      for (int i = 0; i < 3; ++i) {
        ShardedParam& w = part[i]->weight();
        const int64_t n = w.main_grad().numel();
        w.set_main_grad_storage(grads_buffer.Slice(at, at + n).View({w.shard_rows(), w.cols()}));
        at += n;
      }
      // Poison the rows the GEMM writes: a deferred grad that the first write
      // accumulated into would show (pad rows are never written: they stay zero).
      for (int i = 0; i < 3; ++i) {
        const Tensor& m = part[i]->weight().main_grad();
        for (int64_t e = 0; e < part[i]->weight().rows() * kC; ++e) m.data<float>()[e] = NAN;
        part[i]->weight().DeferGradZero();
      }
      for (int i = 0; i < 3; ++i) EXPECT_TRUE(part[i]->weight().grad_zero_deferred());
      // The bias grads side by side too (GradBuffer keeps listed order).
      bias_grads = Tensor::Zeros({rows[0] + rows[1] + rows[2]}, DType::kF32, host);
      for (int i = 0, at = 0; i < 3; at += rows[i], ++i) {
        part[i]->bias()->grad = bias_grads.Slice(at, at + rows[i]);
      }
    }

    // Reference for this rank (TP slice t, data lane g); weight grads summed
    // over two iterations, averaged over the GTP lanes.
    Mat dW[3], db[3];
    for (int i = 0; i < 3; ++i) {
      dW[i].assign(rows[i] * kC, 0.0);
      db[i].assign(rows[i], 0.0);
    }
    for (int iter = 0; iter < 2; ++iter) {
      const std::string it = std::to_string(iter);
      const Mat x = LaneData("x" + it, g, kN * kC);
      auto y = (*p)->Forward(HostTensor(host, x, kN, kC), Direction::kForward);
      ASSERT_TRUE(y.ok()) << y.status();
      const Tensor got[3] = {y->part[0], y->part[1], y->part[2]};
      Mat dx(kN * kC, 0.0);
      PackedLinears::Parts d = (*p)->NewGrads();
      const Tensor dt[3] = {d.part[0], d.part[1], d.part[2]};
      EXPECT_EQ(d.all.defined(), k.packed);
      for (int i = 0; i < 3; ++i) {
        ASSERT_EQ(got[i].shape(), Shape({kN, rows[i]}));
        Mat want(kN * rows[i]);
        const Mat dy = LaneData(std::string("dy") + names[i] + it, g, kN * rows[i]);
        for (int64_t n = 0; n < kN; ++n) {
          for (int64_t r = 0; r < rows[i]; ++r) {
            double s = bias[i][t * rows[i] + r];
            for (int64_t c = 0; c < kC; ++c) s += x[n * kC + c] * W[i][(t * rows[i] + r) * kC + c];
            want[n * rows[i] + r] = s;
            const double dyv = dy[n * rows[i] + r];
            db[i][r] += dyv;
            for (int64_t c = 0; c < kC; ++c)
              dx[n * kC + c] += dyv * W[i][(t * rows[i] + r) * kC + c];
          }
        }
        for (int l = 0; l < k.gtp; ++l) {  // the weight grad: the mean over the GTP lanes
          const Mat xl = LaneData("x" + it, l, kN * kC);
          const Mat dyl = LaneData(std::string("dy") + names[i] + it, l, kN * rows[i]);
          for (int64_t n = 0; n < kN; ++n)
            for (int64_t r = 0; r < rows[i]; ++r)
              for (int64_t c = 0; c < kC; ++c)
                dW[i][r * kC + c] += dyl[n * rows[i] + r] * xl[n * kC + c] / k.gtp;
        }
        EXPECT_TRUE(RelClose(Vec2(got[i]), want, 1e-5)) << names[i] << " iter " << iter;
        Fill2(dt[i], dy);
      }
      auto dxt = (*p)->Backward(d);
      ASSERT_TRUE(dxt.ok()) << dxt.status();
      // In place exactly where the memory allows it: GTP 1 unpadded shards,
      // and main grads side by side.
      if (k.packed && k.gtp == 1 && k.alignment == 1) {
        EXPECT_EQ((*p)->copies(), k.adjacent_grads ? 0 : 2);
      } else if (k.packed) {
        EXPECT_GE((*p)->copies(), 3);  // the weight twice, its grad
      }
      EXPECT_TRUE(RelClose(Vec2(*dxt), dx, 1e-5)) << "dx iter " << iter;
      ASSERT_TRUE(chain.FinishBackward().ok());
    }
    for (int i = 0; i < 3; ++i) {
      ShardedParam& w = part[i]->weight();
      const std::vector<float> got = Vec2(w.main_grad());
      Mat want(got.size(), 0.0);  // this rank's shard rows; pad rows zero
      for (int64_t r = 0; r < w.shard_rows(); ++r) {
        const int64_t lr = w.shard_row_begin() + r;
        for (int64_t c = 0; c < kC; ++c) want[r * kC + c] = lr < w.rows() ? dW[i][lr * kC + c] : 0;
      }
      EXPECT_TRUE(RelClose(got, want, 1e-5)) << w.name() << " t" << t << " g" << g;
      EXPECT_TRUE(RelClose(Vec2(part[i]->bias()->grad.View({1, rows[i]})), db[i], 1e-5))
          << names[i] << ".bias";
    }
  });
  ASSERT_TRUE(st.ok()) << st;
}

INSTANTIATE_TEST_SUITE_P(Layouts, QkvParity,
                         ::testing::Values(Case{1, 1, false, 1, false}, Case{1, 1, true, 1, false},
                                           Case{1, 1, true, 1, true}, Case{1, 1, true, 32, false},
                                           Case{1, 1, true, 32, true}, Case{1, 2, false, 1, false},
                                           Case{1, 2, true, 1, false}, Case{2, 1, true, 1, true},
                                           Case{2, 2, true, 1, false}, Case{2, 2, false, 1, false}),
                         Name);

TEST(PackedLinears, PackedRefusesFp8) {
  HeapAllocator host;
  absl::Status st = comm::RunRanks(1, [&](comm::Communicator& w) {
    auto pgs = parallel::ProcessGroupCollection::Build(parallel::ParallelConfig{}, w);
    ASSERT_TRUE(pgs.ok());
    GtpChain chain(kernels::Exec::Cpu(host), GtpOptions{});
    LinearConfig c{"a.q", 128, 128, false, false, 0.02f, 1};
    c.caller_reduces_input_grad = true;
    c.dtype = DType::kBF16;
    c.fp8 = true;
    auto p = PackedLinears::Create({c, c, c}, /*packed=*/true, *pgs, &chain);
    EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument) << p.status();
    EXPECT_NE(p.status().message().find("FP8"), std::string::npos) << p.status();
  });
  ASSERT_TRUE(st.ok()) << st;
}

}  // namespace
}  // namespace gtp::layers
