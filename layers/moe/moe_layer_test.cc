// The MoE layer against an independent double-precision reference (its own
// forward; gradients by central finite differences of Σ dy·y + z-loss with
// the routing held fixed), on one rank and on EP / EGTP / TP / SP / GTP
// layouts of 4 threads, where outputs, input gradients, expert weight
// gradients (averaged over the expert data-parallel group, as the expert
// grad buffer does) and the gate gradient must match the reference's mean
// over the data lanes — with the all-to-all and the all-gather dispatcher
// alike. Capacity-dropped runs (no dropless reference) compare the all-gather
// dispatcher and padding to capacity with the unpadded all-to-all run. Also
// the combine op against a direct loop.
#include "layers/moe/moe_layer.h"

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "comm/local/local_communicator.h"
#include "core/kernels/testing/harness.h"
#include "core/philox.h"
#include "gtest/gtest.h"
#include "layers/moe/combine.h"
#include "parallel/parallel_config.h"
#include "parallel/process_groups.h"

namespace gtp::layers::moe {
namespace {

using Mat = std::vector<double>;

constexpr uint64_t kSeed = 5;
constexpr float kStd = 0.4f, kOutStd = 0.3f;

struct Dims {
  int E = 4, k = 2;
  int64_t C = 8, H = 12, B = 2, T = 4;
  bool swiglu = false;
  float z = 0.01f;
  int64_t N() const { return B * T; }
  int64_t H1() const { return swiglu ? 2 * H : H; }
};

Mat Global(const std::string& name, int64_t n, float std) {
  Mat w(n);
  for (int64_t i = 0; i < n; ++i) w[i] = std * PhiloxNormal(KeyFromName(name, kSeed), i);
  return w;
}
Mat LaneData(const char* what, int lane, int64_t n) {
  Mat m(n);
  for (int64_t i = 0; i < n; ++i) m[i] = PhiloxNormal(MixKey(KeyFromName(what), lane), i);
  return m;
}

struct Weights {
  Mat gate, w1, w2;
};
Weights InitialWeights(const Dims& d) {
  return {Global("m.router.weight", d.E * d.C, kStd),
          Global("m.experts.fc1.weight", d.E * d.H1() * d.C, kStd),
          Global("m.experts.fc2.weight", d.E * d.C * d.H, kOutStd)};
}

double Gelu(double u) {
  return 0.5 * u * (1 + std::tanh(std::sqrt(2 / M_PI) * (u + 0.044715 * u * u * u)));
}

// Reference forward of one lane: y [N, C]; sel fixes the routing (computed
// on the first call when empty). Returns Σ dy·y + z-loss.
double Reference(const Dims& d, const Weights& w, const Mat& x, const Mat& dy,
                 std::vector<int32_t>* sel, Mat* y_out) {
  const int64_t N = d.N(), C = d.C, H = d.H, H1 = d.H1();
  Mat y(N * C, 0.0);
  double J = 0;
  std::vector<float> lf(N * d.E);
  Mat l(N * d.E, 0.0);
  for (int64_t t = 0; t < N; ++t)
    for (int e = 0; e < d.E; ++e) {
      for (int64_t c = 0; c < C; ++c) l[t * d.E + e] += w.gate[e * C + c] * x[t * C + c];
      lf[t * d.E + e] = static_cast<float>(l[t * d.E + e]);
    }
  if (sel->empty()) {
    RouterConfig rc;
    rc.num_experts = d.E;
    rc.top_k = d.k;
    *sel = Route(rc, lf.data(), N, nullptr).selected;
  }
  for (int64_t t = 0; t < N; ++t) {
    double m = l[t * d.E];
    for (int e = 1; e < d.E; ++e) m = std::max(m, l[t * d.E + e]);
    double Z = 0;
    for (int e = 0; e < d.E; ++e) Z += std::exp(l[t * d.E + e] - m);
    const double lse = m + std::log(Z);
    J += d.z * lse * lse / N;
    for (int j = 0; j < d.k; ++j) {
      const int e = (*sel)[t * d.k + j];
      const double wt = std::exp(l[t * d.E + e] - m) / Z;
      Mat pre(H1, 0.0), act(H);
      for (int64_t h = 0; h < H1; ++h)
        for (int64_t c = 0; c < C; ++c) pre[h] += w.w1[(e * H1 + h) * C + c] * x[t * C + c];
      for (int64_t h = 0; h < H; ++h) {
        act[h] = d.swiglu ? pre[h] / (1 + std::exp(-pre[h])) * pre[H + h] : Gelu(pre[h]);
      }
      for (int64_t c = 0; c < C; ++c) {
        double o = 0;
        for (int64_t h = 0; h < H; ++h) o += w.w2[(e * C + c) * H + h] * act[h];
        y[t * C + c] += wt * o;
      }
    }
  }
  for (int64_t i = 0; i < N * C; ++i) J += dy[i] * y[i];
  if (y_out) *y_out = y;
  return J;
}

// Central differences of Reference w.r.t. every element of *v.
Mat FiniteDiff(const std::function<double()>& J, Mat* v) {
  Mat g(v->size());
  const double h = 1e-5;
  for (size_t i = 0; i < v->size(); ++i) {
    const double keep = (*v)[i];
    (*v)[i] = keep + h;
    const double a = J();
    (*v)[i] = keep - h;
    const double b = J();
    (*v)[i] = keep;
    g[i] = (a - b) / (2 * h);
  }
  return g;
}

struct LaneRef {
  Mat x, dy, y, dx;
  Weights dw;
};
LaneRef ReferenceLane(const Dims& d, int lane) {
  LaneRef r;
  r.x = LaneData("x", lane, d.N() * d.C);
  r.dy = LaneData("dy", lane, d.N() * d.C);
  Weights w = InitialWeights(d);
  std::vector<int32_t> sel;
  Reference(d, w, r.x, r.dy, &sel, &r.y);
  auto J = [&] { return Reference(d, w, r.x, r.dy, &sel, nullptr); };
  r.dx = FiniteDiff(J, &r.x);
  r.dw.gate = FiniteDiff(J, &w.gate);
  r.dw.w1 = FiniteDiff(J, &w.w1);
  r.dw.w2 = FiniteDiff(J, &w.w2);
  return r;
}

Tensor Rows(HeapAllocator& a, const Mat& m, int64_t row0, int64_t rows, int64_t C) {
  Tensor t = Tensor::Empty({rows, C}, DType::kF32, a);
  for (int64_t i = 0; i < rows * C; ++i) t.data<float>()[i] = static_cast<float>(m[row0 * C + i]);
  return t;
}

// Max |a − b| / max(1, max |b|) over a [rows, C] tensor vs rows of b.
double Err(const Tensor& a, const Mat& b, int64_t row0) {
  double e = 0, s = 1;
  for (int64_t i = 0; i < a.numel(); ++i) {
    e = std::max(e, std::abs(a.data<float>()[i] - b[row0 * a.dim(1) + i]));
    s = std::max(s, std::abs(b[row0 * a.dim(1) + i]));
  }
  return e / s;
}

// Error of a stacked expert param's (reduced) main grad vs the global ref.
double ParamErr(const ShardedParam& p, const Tensor& g, const Mat& ref) {
  double e = 0, s = 1e-3;
  const auto& L = p.global_layout();
  for (int64_t r = 0; r < p.shard_rows(); ++r) {
    const int64_t local = p.shard_row_begin() + r;
    if (local >= p.rows()) break;
    const int64_t R = L.row_map(local);
    for (int64_t c = 0; c < p.cols(); ++c) {
      const double want = ref[R * L.global_cols + L.col_offset + c];
      e = std::max(e, std::abs(g.data<float>()[r * p.cols() + c] - want));
      s = std::max(s, std::abs(want));
    }
  }
  return e / s;
}

MoeConfig Config(const Dims& d, Dispatcher disp = Dispatcher::kAllToAll) {
  MoeConfig mc;
  mc.dispatcher = disp;
  mc.router.num_experts = d.E;
  mc.router.top_k = d.k;
  mc.router.z_loss_coeff = d.z;
  mc.ffn_hidden = d.H;
  return mc;
}
MoeShape Shape_(const Dims& d, bool sp) {
  MoeShape s;
  s.C = d.C;
  s.H = d.H;
  s.B = d.B;
  s.T = d.T;
  s.swiglu = d.swiglu;
  s.sequence_parallel = sp;
  s.init_std = kStd;
  s.out_std = kOutStd;
  s.seed = kSeed;
  return s;
}

struct Layout {
  const char* name;
  int world, tp, tp_shards, ep, expert_shards;
  bool sp;
  int etp = 1;
};

const char* DispatcherName(Dispatcher disp) {
  return disp == Dispatcher::kAllGather ? "all-gather" : "all-to-all";
}

void RunLayout(const Dims& d, const Layout& layout, const std::vector<LaneRef>& refs,
               Dispatcher disp = Dispatcher::kAllToAll) {
  HeapAllocator host;
  const std::string name = std::string(layout.name) + " " + DispatcherName(disp);
  Layout k = layout;
  k.name = name.c_str();
  absl::Status st = comm::RunRanks(k.world, [&](comm::Communicator& world) {
    parallel::ParallelConfig pc;
    pc.tp = k.tp;
    pc.tp_num_weight_shards = k.tp_shards;
    pc.sequence_parallel = k.sp;
    pc.ep = k.ep;
    pc.etp = k.etp;
    pc.expert_tp_num_weight_shards = k.expert_shards;
    parallel::ModelFacts facts;
    facts.num_experts = d.E;
    auto pgs = parallel::ProcessGroupCollection::Build(pc, world, facts);
    ASSERT_TRUE(pgs.ok()) << pgs.status();
    const int lane = (*pgs->Get("data"))->rank(), t = (*pgs->Get("tp"))->rank();
    const int lanes = (*pgs->Get("data"))->size();
    ASSERT_EQ(static_cast<size_t>(lanes), refs.size());
    GtpChain chain(kernels::Exec::Cpu(host), GtpOptions{});
    auto layer = MoeLayer::Create("m", Config(d, disp), Shape_(d, k.sp), *pgs, &chain);
    ASSERT_TRUE(layer.ok()) << layer.status();
    const bool sp = k.sp && k.tp > 1;
    const int64_t rows = sp ? d.N() / k.tp : d.N(), row0 = sp ? t * rows : 0;
    const LaneRef& ref = refs[lane];
    auto y = (*layer)->Forward(Rows(host, ref.x, row0, rows, d.C));
    ASSERT_TRUE(y.ok()) << y.status();
    EXPECT_LT(Err(*y, ref.y, row0), 1e-5) << k.name << " y";
    auto dx = (*layer)->Backward(Rows(host, ref.dy, row0, rows, d.C));
    ASSERT_TRUE(dx.ok()) << dx.status();
    ASSERT_TRUE(chain.FinishBackward().ok());
    EXPECT_LT(Err(*dx, ref.dx, row0), 2e-5) << k.name << " dx";
    // Expected weight grads: the mean over lanes of the lanes' gradients.
    Weights mean{Mat(refs[0].dw.gate.size(), 0.0), Mat(refs[0].dw.w1.size(), 0.0),
                 Mat(refs[0].dw.w2.size(), 0.0)};
    for (const LaneRef& r : refs) {
      for (size_t i = 0; i < mean.gate.size(); ++i) mean.gate[i] += r.dw.gate[i] / lanes;
      for (size_t i = 0; i < mean.w1.size(); ++i) mean.w1[i] += r.dw.w1[i] / lanes;
      for (size_t i = 0; i < mean.w2.size(); ++i) mean.w2[i] += r.dw.w2[i] / lanes;
    }
    comm::Communicator* edp = *pgs->Get("edp");
    for (ShardedParam* p : {&(*layer)->fc1(), &(*layer)->fc2()}) {
      const Tensor& g = p->main_grad();
      ASSERT_TRUE(comm::Run(edp->AllReduce(g.raw_data(), g.raw_data(), g.numel(), DType::kF32,
                                           comm::ReduceOp::kMean))
                      .ok());
      EXPECT_LT(ParamErr(*p, g, p == &(*layer)->fc1() ? mean.w1 : mean.w2), 2e-5)
          << k.name << " " << p->name();
    }
    const Tensor& gg = (*layer)->router().gate()->grad;
    if (k.tp > 1) {
      ASSERT_TRUE(AllReduceSum(**pgs->Get("tp"), gg).ok());
    }
    comm::Communicator* data = *pgs->Get("data");
    ASSERT_TRUE(comm::Run(data->AllReduce(gg.raw_data(), gg.raw_data(), gg.numel(), DType::kF32,
                                          comm::ReduceOp::kMean))
                    .ok());
    EXPECT_LT(Err(gg, mean.gate, 0), 2e-5) << k.name << " gate";
  });
  ASSERT_TRUE(st.ok()) << st;
}

constexpr Dispatcher kDispatchers[] = {Dispatcher::kAllToAll, Dispatcher::kAllGather};

TEST(MoeLayer, OneRankMatchesTheReference) {
  for (bool swiglu : {false, true}) {
    Dims d;
    d.swiglu = swiglu;
    const std::vector<LaneRef> one = {ReferenceLane(d, 0)};
    for (Dispatcher disp : kDispatchers) {
      RunLayout(d, {swiglu ? "1 rank swiglu" : "1 rank gelu", 1, 1, 1, 1, 1, false}, one, disp);
    }
  }
}

// Both dispatchers on every layout, against the same reference.
TEST(MoeLayer, ExpertAndDenseLayoutsMatchTheReference) {
  Dims d;
  std::vector<LaneRef> four, two;
  for (int g = 0; g < 4; ++g) four.push_back(ReferenceLane(d, g));
  for (int g = 0; g < 2; ++g) two.push_back(ReferenceLane(d, g));
  for (Dispatcher disp : kDispatchers) {
    // name, world, tp, tp·gtp, ep, egtp (etp = 1)
    RunLayout(d, {"DP4 | EP2·EDP2", 4, 1, 1, 2, 1, false}, four, disp);
    RunLayout(d, {"DP4 | EP4", 4, 1, 1, 4, 1, false}, four, disp);
    RunLayout(d, {"DP4 | EP2·EGTP2", 4, 1, 1, 2, 2, false}, four, disp);
    RunLayout(d, {"GTP2·DP2 | EP2·EGTP2", 4, 1, 2, 2, 2, false}, four, disp);
    RunLayout(d, {"TP2·DP2 | EP2·EDP2", 4, 2, 2, 2, 1, false}, two, disp);
    RunLayout(d, {"TP2·DP2 SP | EP4", 4, 2, 2, 4, 1, true}, two, disp);
    // Expert tensor parallelism: name, world, tp, tp·gtp, ep, etp·egtp, sp, etp.
    RunLayout(d, {"DP4 | ETP2·EP2", 4, 1, 1, 2, 2, false, 2}, four, disp);
    RunLayout(d, {"TP2·DP2 SP | ETP2·EP2", 4, 2, 2, 2, 2, true, 2}, two, disp);
    RunLayout(d, {"DP4 | ETP2·EDP2", 4, 1, 1, 1, 2, false, 2}, four, disp);
    RunLayout(d, {"DP4 | ETP4", 4, 1, 1, 1, 4, false, 4}, four, disp);
  }
}

TEST(MoeLayer, ExpertTensorParallelSwiGlu) {
  Dims d;
  d.swiglu = true;
  std::vector<LaneRef> four;
  for (int g = 0; g < 4; ++g) four.push_back(ReferenceLane(d, g));
  for (Dispatcher disp : kDispatchers) {
    RunLayout(d, {"DP4 | ETP2·EP2 swiglu", 4, 1, 1, 2, 2, false, 2}, four, disp);
    RunLayout(d, {"DP4 | ETP2·EGTP2 swiglu", 4, 1, 1, 1, 4, false, 2}, four, disp);
  }
}

// One rank's results of a forward and backward (capacity runs, compared
// between configs rather than against the dropless reference).
struct RankRun {
  std::vector<float> y, dx, fc1, fc2, gate;
  std::vector<int64_t> expert_rows;
  int64_t capacity = 0, dropped = 0;
};

std::vector<float> Values(const Tensor& t) {
  return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
}

std::vector<RankRun> RunConfig(const Dims& d, const Layout& k, const MoeConfig& mc) {
  HeapAllocator host;
  std::vector<RankRun> out(k.world);
  absl::Status st = comm::RunRanks(k.world, [&](comm::Communicator& world) {
    parallel::ParallelConfig pc;
    pc.tp = k.tp;
    pc.tp_num_weight_shards = k.tp_shards;
    pc.sequence_parallel = k.sp;
    pc.ep = k.ep;
    pc.etp = k.etp;
    pc.expert_tp_num_weight_shards = k.expert_shards;
    parallel::ModelFacts facts;
    facts.num_experts = d.E;
    auto pgs = parallel::ProcessGroupCollection::Build(pc, world, facts);
    ASSERT_TRUE(pgs.ok()) << pgs.status();
    const int lane = (*pgs->Get("data"))->rank(), t = (*pgs->Get("tp"))->rank();
    GtpChain chain(kernels::Exec::Cpu(host), GtpOptions{});
    auto layer = MoeLayer::Create("m", mc, Shape_(d, k.sp), *pgs, &chain);
    ASSERT_TRUE(layer.ok()) << layer.status();
    const bool sp = k.sp && k.tp > 1;
    const int64_t rows = sp ? d.N() / k.tp : d.N(), row0 = sp ? t * rows : 0;
    auto y = (*layer)->Forward(Rows(host, LaneData("x", lane, d.N() * d.C), row0, rows, d.C));
    ASSERT_TRUE(y.ok()) << y.status();
    auto dx = (*layer)->Backward(Rows(host, LaneData("dy", lane, d.N() * d.C), row0, rows, d.C));
    ASSERT_TRUE(dx.ok()) << dx.status();
    ASSERT_TRUE(chain.FinishBackward().ok());
    RankRun& r = out[world.rank()];
    r.y = Values(*y);
    r.dx = Values(*dx);
    r.fc1 = Values((*layer)->fc1().main_grad());
    r.fc2 = Values((*layer)->fc2().main_grad());
    r.gate = Values((*layer)->router().gate()->grad);
    r.expert_rows = (*layer)->expert_rows();
    r.capacity = (*layer)->router().capacity();
    r.dropped = (*layer)->router().TakeStats().dropped;
  });
  EXPECT_TRUE(st.ok()) << st;
  return out;
}

// Max |a − b| / max(1, max |b|).
double VecErr(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return 1e30;
  double e = 0, s = 1;
  for (size_t i = 0; i < a.size(); ++i) {
    e = std::max(e, std::abs(static_cast<double>(a[i]) - b[i]));
    s = std::max(s, std::abs(static_cast<double>(b[i])));
  }
  return e / s;
}

void ExpectSameRun(const std::vector<RankRun>& got, const std::vector<RankRun>& want,
                   const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t r = 0; r < got.size(); ++r) {
    EXPECT_LT(VecErr(got[r].y, want[r].y), 1e-6) << what << " rank " << r << " y";
    EXPECT_LT(VecErr(got[r].dx, want[r].dx), 1e-6) << what << " rank " << r << " dx";
    EXPECT_LT(VecErr(got[r].fc1, want[r].fc1), 1e-6) << what << " rank " << r << " fc1 grad";
    EXPECT_LT(VecErr(got[r].fc2, want[r].fc2), 1e-6) << what << " rank " << r << " fc2 grad";
    EXPECT_LT(VecErr(got[r].gate, want[r].gate), 1e-6) << what << " rank " << r << " gate grad";
    EXPECT_EQ(got[r].dropped, want[r].dropped) << what << " rank " << r << " dropped";
  }
}

// Capacity-dropped runs: padding to capacity and the all-gather dispatcher
// give the unpadded all-to-all run's outputs and gradients; padded experts
// run on exactly ETP·EP·capacity rows each.
TEST(MoeLayer, PaddingToCapacityMatchesTheUnpaddedRun) {
  const Layout layouts[] = {
      {"1 rank", 1, 1, 1, 1, 1, false},
      {"DP4 | EP2·EDP2", 4, 1, 1, 2, 1, false},
      {"DP4 | EP4", 4, 1, 1, 4, 1, false},
      {"GTP2·DP2 | EP2·EGTP2", 4, 1, 2, 2, 2, false},
      {"TP2·DP2 | EP2·EDP2", 4, 2, 2, 2, 1, false},
      {"TP2·DP2 SP | EP4", 4, 2, 2, 4, 1, true},
      {"DP4 | ETP2·EP2", 4, 1, 1, 2, 2, false, 2},
      {"DP4 | ETP4", 4, 1, 1, 1, 4, false, 4},
  };
  for (bool swiglu : {false, true}) {
    Dims d;
    d.swiglu = swiglu;
    for (const Layout& k : layouts) {
      MoeConfig base = Config(d);
      base.router.capacity_factor = 0.5f;
      const std::vector<RankRun> want = RunConfig(d, k, base);
      int64_t dropped = 0;
      for (const RankRun& r : want) dropped += r.dropped;
      EXPECT_GT(dropped, 0) << k.name << ": the capacity should drop tokens";
      for (Dispatcher disp : kDispatchers) {
        for (bool pad : {false, true}) {
          if (disp == Dispatcher::kAllToAll && !pad) continue;
          MoeConfig mc = base;
          mc.dispatcher = disp;
          mc.router.pad_to_capacity = pad;
          const std::string what = std::string(k.name) + (swiglu ? " swiglu " : " gelu ") +
                                   DispatcherName(disp) + (pad ? " padded" : "");
          const std::vector<RankRun> got = RunConfig(d, k, mc);
          ExpectSameRun(got, want, what);
          if (!pad) continue;
          const int64_t group = static_cast<int64_t>(k.ep) * k.etp;
          for (const RankRun& r : got) {
            ASSERT_GT(r.capacity, 0) << what;
            for (int64_t rows : r.expert_rows) EXPECT_EQ(rows, group * r.capacity) << what;
          }
        }
      }
    }
  }
  MoeConfig bad = Config(Dims());
  bad.router.pad_to_capacity = true;
  EXPECT_EQ(bad.router.Validate().code(), absl::StatusCode::kInvalidArgument);
}

TEST(MoeCombine, MatchesADirectLoop) {
  HeapAllocator a;
  kernels::Exec e = kernels::Exec::Cpu(a);
  const int64_t n = 5, M = 7, C = 6;
  const int k = 2;
  const std::vector<int32_t> pos = {0, 3, 6, -1, 1, 2, -1, -1, 4, 5};
  Tensor ye = Tensor::Empty({M, C}, DType::kF32, a), dy = Tensor::Empty({n, C}, DType::kF32, a);
  Tensor p = Tensor::Empty({n * k}, DType::kI32, a), w = Tensor::Empty({n * k}, DType::kF32, a);
  for (int64_t i = 0; i < M * C; ++i) ye.data<float>()[i] = PhiloxNormal(1, i);
  for (int64_t i = 0; i < n * C; ++i) dy.data<float>()[i] = PhiloxNormal(2, i);
  for (int64_t i = 0; i < n * k; ++i) {
    p.data<int32_t>()[i] = pos[i];
    w.data<float>()[i] = 0.5f + 0.1f * i;
  }
  Tensor y = Tensor::Empty({n, C}, DType::kF32, a), dye = Tensor::Empty({M, C}, DType::kF32, a);
  Tensor dw = Tensor::Empty({n * k}, DType::kF32, a);
  CombineForward(e, ye, p, w, y);
  CombineBackward(e, dy, ye, p, w, dye, dw);
  std::vector<double> ref_dye(M * C, 0.0);
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t c = 0; c < C; ++c) {
      double s = 0;
      for (int j = 0; j < k; ++j)
        if (pos[t * k + j] >= 0) s += (0.5 + 0.1 * (t * k + j)) * ye.data<float>()[pos[t * k + j] * C + c];
      EXPECT_NEAR(y.data<float>()[t * C + c], s, 1e-5);
    }
    for (int j = 0; j < k; ++j) {
      const int32_t q = pos[t * k + j];
      double s = 0;
      for (int64_t c = 0; c < C; ++c) {
        if (q >= 0) {
          s += ye.data<float>()[q * C + c] * dy.data<float>()[t * C + c];
          ref_dye[q * C + c] = w.data<float>()[t * k + j] * dy.data<float>()[t * C + c];
        }
      }
      EXPECT_NEAR(dw.data<float>()[t * k + j], s, 1e-5);
    }
  }
  for (int64_t i = 0; i < M * C; ++i) EXPECT_NEAR(dye.data<float>()[i], ref_dye[i], 1e-6);
}

}  // namespace
}  // namespace gtp::layers::moe
