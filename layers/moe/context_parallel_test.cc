// The router under context parallelism (layers/moe/router.h, "Context
// parallelism"): each CP rank routes its 2 of every sequence's 2·CP
// load-balanced chunks (and, with TP, its TP slice of those rows), sums the
// aux-loss counts over the lane's TP × CP ranks and scales its aux / z
// gradients by CP. Against one rank routing the whole lane, computed here:
// the same selections, aux and z values that sum to one rank's, input
// gradients CP times one rank's (the CP ranks' gradients are averaged by the
// gradient reduction) and gate gradients whose mean over CP (sum over TP) is
// one rank's — for the Switch (lane) and the per-sequence aux loss, softmax
// and sigmoid scoring. Also: the expert grid's EP groups span CP ranks, and
// capacity dropping under CP is refused, naming the setting and a value that
// works.
#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "comm/local/local_communicator.h"
#include "gtest/gtest.h"
#include "layers/moe/moe_layer.h"
#include "layers/moe/router.h"
#include "parallel/parallel_config.h"
#include "parallel/process_groups.h"

namespace gtp::layers::moe {
namespace {

constexpr int64_t kB = 2, kT = 8, kC = 12;
constexpr float kInitStd = 0.5f;
constexpr uint64_t kSeed = 3;

std::vector<float> Normal(int64_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(g);
  return v;
}

// Global position of local row i of CP rank r (2·cp chunks of T/(2·cp);
// rank r holds chunks r and 2·cp − 1 − r: layers/cp/ring_attention.h).
int64_t Position(int cp, int r, int64_t i) {
  const int64_t c = kT / (2 * cp);
  return i < c ? r * c + i : (2 * cp - 1 - r) * c + (i - c);
}

// What one router saw of a forward and backward.
struct Result {
  std::vector<int64_t> rows;  // lane row (b·T + t) of each local row
  std::vector<int32_t> selected;
  std::vector<float> dx, gate_grad;
  std::vector<double> counts;
  double aux = 0, z = 0;
};

// Forward and backward of router r on the lane rows `rows` of x, with the
// weights' gradient dw (scaled) and the aux / z gradients times loss_scale.
void RouteAndBack(Router& r, const std::vector<float>& x, const std::vector<float>& dw,
                  const std::vector<int64_t>& rows, float scale, float loss_scale, Result* out) {
  const int k = r.config().top_k;
  const int64_t n = static_cast<int64_t>(rows.size());
  std::vector<float> xl(n * kC), dwl(n * k);
  for (int64_t i = 0; i < n; ++i) {
    std::copy(x.begin() + rows[i] * kC, x.begin() + (rows[i] + 1) * kC, xl.begin() + i * kC);
    for (int j = 0; j < k; ++j) dwl[i * k + j] = scale * dw[rows[i] * k + j];
  }
  auto o = r.Forward(Tensor::Wrap(xl.data(), {n, kC}, DType::kF32, Device::Cpu()));
  ASSERT_TRUE(o.ok()) << o.status();
  const int32_t* sel = (*o)->selected.data<int32_t>();
  out->selected.assign(sel, sel + n * k);
  auto dx = r.Backward(Tensor::Wrap(dwl.data(), {n * k}, DType::kF32, Device::Cpu()), loss_scale);
  ASSERT_TRUE(dx.ok()) << dx.status();
  out->rows = rows;
  out->dx.assign(dx->data<float>(), dx->data<float>() + n * kC);
  const Tensor& g = r.gate()->grad;
  out->gate_grad.assign(g.data<float>(), g.data<float>() + g.numel());
  out->counts = r.TakeCounts();
  const Router::Stats st = r.TakeStats();
  out->aux = st.aux;
  out->z = st.z;
}

struct Case {
  std::string name;
  RouterConfig c;
};

std::vector<Case> Cases() {
  std::vector<Case> out;
  for (AuxLossType aux : {AuxLossType::kLane, AuxLossType::kSequence}) {
    for (int score = 0; score < 3; ++score) {
      RouterConfig c;
      c.num_experts = 6;
      c.top_k = 2;
      c.score = score == 2 ? ScoreFunction::kSigmoid : ScoreFunction::kSoftmax;
      c.pre_softmax = score != 1;
      c.aux_loss_coeff = 0.3f;  // large: the aux gradient is a visible part of dx
      c.aux_loss_type = aux;
      c.z_loss_coeff = 0.05f;
      const char* s = score == 0 ? "softmax" : score == 1 ? "post-softmax" : "sigmoid";
      out.push_back({std::string(aux == AuxLossType::kLane ? "lane" : "seq") + " aux, " + s, c});
    }
  }
  return out;
}

TEST(RouterUnderCp, MatchesOneRankRoutingTheWholeLane) {
  const std::vector<float> x = Normal(kB * kT * kC, 11);
  for (const Case& cs : Cases()) {
    const RouterConfig& c = cs.c;
    const int E = c.num_experts, k = c.top_k;
    const std::vector<float> dw = Normal(kB * kT * k, 12);
    // One rank: the whole lane of B sequences of T tokens.
    HeapAllocator host;
    const kernels::Exec e = kernels::Exec::Cpu(host);
    Result ref;
    {
      auto r = Router::Create("h.0.moe.router", c, kC, kB * kT, kT, 0, kB * kT, kInitStd, kSeed,
                              nullptr, e);
      ASSERT_TRUE(r.ok()) << r.status();
      std::vector<int64_t> all(kB * kT);
      for (int64_t i = 0; i < kB * kT; ++i) all[i] = i;
      RouteAndBack(**r, x, dw, all, 1.0f, 1.0f, &ref);
    }
    for (const int tp : {1, 2}) {
      const int cp = 2, world = tp * cp;
      const std::string what = cs.name + ", TP" + std::to_string(tp) + "·CP" + std::to_string(cp);
      std::vector<Result> got(world);
      absl::Status st = comm::RunRanks(world, [&](comm::Communicator& w) -> absl::Status {
        parallel::ParallelConfig pc;
        pc.tp = tp;
        pc.cp = cp;
        GTP_ASSIGN_OR_RETURN(auto pgs, parallel::ProcessGroupCollection::Build(pc, w));
        GTP_ASSIGN_OR_RETURN(comm::Communicator * tpg, pgs.Get("tp"));
        GTP_ASSIGN_OR_RETURN(comm::Communicator * cpg, pgs.Get("cp"));
        GTP_ASSIGN_OR_RETURN(comm::Communicator * tp_cp, pgs.Get("tp_cp"));
        const int t = tpg->rank(), r = cpg->rank();
        // The CP rank's rows [b][i] (T/CP per sequence); its TP slice of them.
        const int64_t Tl = kT / cp, n = kB * Tl / tp, row0 = t * n;
        std::vector<int64_t> rows(n);
        for (int64_t j = 0; j < n; ++j) {
          const int64_t l = row0 + j;
          rows[j] = (l / Tl) * kT + Position(cp, r, l % Tl);
        }
        HeapAllocator h;
        GTP_ASSIGN_OR_RETURN(
            auto router, Router::Create("h.0.moe.router", c, kC, n, Tl, row0, kB * Tl, kInitStd,
                                        kSeed, tpg, kernels::Exec::Cpu(h), RouterCp{cp, tp_cp}));
        // The LM loss of a CP rank is the mean over its own tokens: its
        // weights' gradient is CP times one rank's, as are the aux / z parts.
        RouteAndBack(*router, x, dw, rows, static_cast<float>(cp), static_cast<float>(cp),
                     &got[w.rank()]);
        return absl::OkStatus();
      });
      ASSERT_TRUE(st.ok()) << what << ": " << st;
      std::vector<double> counts(E, 0.0), gate(E * kC, 0.0);
      double aux = 0, z = 0;
      for (int w = 0; w < world; ++w) {
        const Result& g = got[w];
        // Routing is per token: the same experts as one rank's.
        for (size_t i = 0; i < g.rows.size(); ++i) {
          for (int j = 0; j < k; ++j) {
            ASSERT_EQ(g.selected[i * k + j], ref.selected[g.rows[i] * k + j])
                << what << ": rank " << w << " row " << g.rows[i];
          }
        }
        // dx = CP × one rank's rows: the same f32 dlogits doubled exactly
        // (CP = 2); the gate GEMM may sum its E = 6 terms in another order
        // for another row count: 1e-6 ≈ 6 roundings of 2⁻²⁴ relative to the
        // largest element.
        double err = 0, scale = 1e-3;
        for (size_t i = 0; i < g.rows.size(); ++i) {
          for (int64_t q = 0; q < kC; ++q) {
            const double want = cp * static_cast<double>(ref.dx[g.rows[i] * kC + q]);
            err = std::max(err, std::abs(g.dx[i * kC + q] - want));
            scale = std::max(scale, std::abs(want));
          }
        }
        EXPECT_LT(err / scale, 1e-6) << what << ": rank " << w << " dx";
        for (int i = 0; i < E; ++i) counts[i] += g.counts[i];
        // The gradient reduction: summed over TP, averaged over CP.
        for (int i = 0; i < E * kC; ++i) gate[i] += g.gate_grad[i] / cp;
        aux += g.aux;
        z += g.z;
      }
      EXPECT_EQ(counts, ref.counts) << what;
      // Gate gradient: sums over B·T = 16 rows in another grouping (ranks,
      // then the mean): ~16 roundings of 2⁻²⁴ ≈ 1e-6 of the largest term;
      // 1e-5 relative to the largest element leaves room for cancellation.
      double err = 0, scale = 1e-3;
      for (int i = 0; i < E * kC; ++i) {
        err = std::max(err, std::abs(gate[i] - ref.gate_grad[i]));
        scale = std::max(scale, static_cast<double>(std::abs(ref.gate_grad[i])));
      }
      EXPECT_LT(err / scale, 1e-5) << what << ": gate gradient";
      // aux / z: each token's f32 part as on one rank (the counts are exact
      // integers, N_g and N the same products), summed in double in another
      // order; 1e-6 also covers a last-bit difference of the logits' GEMM.
      EXPECT_GT(ref.aux, 0) << what;
      EXPECT_NEAR(aux, ref.aux, 1e-6 * ref.aux) << what << ": aux";
      EXPECT_NEAR(z, ref.z, 1e-6 * ref.z) << what << ": z";
    }
  }
}

TEST(RouterUnderCp, NeedsTheLaneGroup) {
  HeapAllocator host;
  RouterConfig c;
  c.num_experts = 4;
  auto r = Router::Create("h.0.moe.router", c, kC, 8, 4, 0, 8, kInitStd, kSeed, nullptr,
                          kernels::Exec::Cpu(host), RouterCp{2, nullptr});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("tp_cp"), std::string::npos) << r.status();
}

// What one MoE layer saw of a forward and backward: its rows' outputs and
// input gradients, and its gate and expert gradients.
struct LayerResult {
  std::vector<int64_t> rows;
  std::vector<float> y, dx, gate, fc1, fc2;
};

// The MoE layer (8 experts top-2, lane aux loss and z-loss, EP1: every rank
// holds every expert) under CP2 against one rank, with mean-normalised
// (loss_sum false) and summed losses: the layer picks the aux / z gradients'
// scale itself (CP, or the whole lane's tokens). Mean: a CP rank's output
// gradient is CP times one rank's (its LM loss is the mean over its own
// tokens) and the reductions average over the CP ranks (dp_cp, and EDP = the
// CP ranks for the experts); summed: the output gradients are one rank's and
// the reductions sum.
TEST(MoeLayerUnderCp, MatchesOneRankWithMeanAndSummedLosses) {
  constexpr int kCp = 2;
  const std::vector<float> x = Normal(kB * kT * kC, 21), dy = Normal(kB * kT * kC, 22);
  for (const bool loss_sum : {false, true}) {
    const std::string what = loss_sum ? "summed loss" : "mean loss";
    MoeConfig mc;
    mc.router.num_experts = 8;
    mc.router.top_k = 2;
    mc.router.aux_loss_coeff = 0.3f;
    mc.router.z_loss_coeff = 0.05f;
    // The layer on `cp` ranks (1: the whole lane); results by world rank.
    auto run = [&](int cp, std::vector<LayerResult>* out) {
      out->assign(cp, LayerResult());
      return comm::RunRanks(cp, [&](comm::Communicator& w) -> absl::Status {
        parallel::ParallelConfig pc;
        pc.cp = cp;
        parallel::ModelFacts facts;
        facts.num_experts = mc.router.num_experts;
        GTP_ASSIGN_OR_RETURN(auto pgs, parallel::ProcessGroupCollection::Build(pc, w, facts));
        const int r = (*pgs.Get("cp"))->rank();
        HeapAllocator host;
        GtpChain chain(kernels::Exec::Cpu(host), GtpOptions{});
        MoeShape s;
        s.C = kC;
        s.H = 8;
        s.B = kB;
        s.T = kT / cp;
        s.loss_sum = loss_sum;
        s.init_std = kInitStd;
        s.out_std = kInitStd;
        s.seed = kSeed;
        GTP_ASSIGN_OR_RETURN(auto layer, MoeLayer::Create("h.0.moe", mc, s, pgs, &chain));
        LayerResult& o = (*out)[w.rank()];
        const int64_t n = kB * s.T;
        const float scale = loss_sum ? 1.0f : static_cast<float>(cp);
        std::vector<float> xl(n * kC), dyl(n * kC);
        for (int64_t j = 0; j < n; ++j) {
          o.rows.push_back((j / s.T) * kT + Position(cp, r, j % s.T));
          for (int64_t q = 0; q < kC; ++q) {
            xl[j * kC + q] = x[o.rows[j] * kC + q];
            dyl[j * kC + q] = scale * dy[o.rows[j] * kC + q];
          }
        }
        GTP_ASSIGN_OR_RETURN(
            Tensor y, layer->Forward(Tensor::Wrap(xl.data(), {n, kC}, DType::kF32, Device::Cpu())));
        o.y.assign(y.data<float>(), y.data<float>() + n * kC);
        GTP_ASSIGN_OR_RETURN(Tensor dx, layer->Backward(Tensor::Wrap(dyl.data(), {n, kC},
                                                                     DType::kF32, Device::Cpu())));
        o.dx.assign(dx.data<float>(), dx.data<float>() + n * kC);
        GTP_RETURN_IF_ERROR(chain.FinishBackward());
        auto host_of = [](const Tensor& t) {
          return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
        };
        o.gate = host_of(layer->router().gate()->grad);
        o.fc1 = host_of(layer->fc1().main_grad());
        o.fc2 = host_of(layer->fc2().main_grad());
        return absl::OkStatus();
      });
    };
    std::vector<LayerResult> one, got;
    ASSERT_TRUE(run(1, &one).ok()) << what;
    ASSERT_TRUE(run(kCp, &got).ok()) << what;
    // Max |a − b| / max(1e-3, max |b|).
    auto rel = [](const std::vector<double>& a, const std::vector<float>& b) {
      double e = 0, s = 1e-3;
      for (size_t i = 0; i < b.size(); ++i) {
        e = std::max(e, std::abs(a[i] - b[i]));
        s = std::max(s, static_cast<double>(std::abs(b[i])));
      }
      return e / s;
    };
    // Rows: the same routing and experts per token; dx CP times one rank's
    // under the mean (the aux / z parts included, the layer's loss scale).
    // The expert GEMMs see other row groupings (f32 sums over C = 12 or
    // H = 8 in another blocking): 1e-5 of the largest element.
    const double dx_scale = loss_sum ? 1.0 : kCp;
    for (const LayerResult& g : got) {
      std::vector<double> y, dx;
      std::vector<float> want_y, want_dx;
      for (size_t j = 0; j < g.rows.size(); ++j) {
        for (int64_t q = 0; q < kC; ++q) {
          y.push_back(g.y[j * kC + q]);
          dx.push_back(g.dx[j * kC + q] / dx_scale);
          want_y.push_back(one[0].y[g.rows[j] * kC + q]);
          want_dx.push_back(one[0].dx[g.rows[j] * kC + q]);
        }
      }
      EXPECT_LT(rel(y, want_y), 1e-5) << what << ": y";
      EXPECT_LT(rel(dx, want_dx), 1e-5) << what << ": dx";
    }
    // Gradients reduced over the CP ranks: averaged (mean) or summed. Sums
    // over the lane's 16 tokens in another grouping: 1e-5 of the largest.
    auto reduced = [&](std::vector<float> LayerResult::*field) {
      std::vector<double> v((got[0].*field).size(), 0.0);
      for (const LayerResult& g : got)
        for (size_t i = 0; i < v.size(); ++i) v[i] += (g.*field)[i] / dx_scale;
      return v;
    };
    EXPECT_LT(rel(reduced(&LayerResult::gate), one[0].gate), 1e-5) << what << ": gate";
    EXPECT_LT(rel(reduced(&LayerResult::fc1), one[0].fc1), 1e-5) << what << ": fc1";
    EXPECT_LT(rel(reduced(&LayerResult::fc2), one[0].fc2), 1e-5) << what << ": fc2";
  }
}

// The expert grid is carved from every rank, the dense grid's CP ranks
// included (parallel/parallel_config.h: world = ETP·EP·EGTP·EDP·PP), so EP
// can span CP (and DP) ranks, as Megatron's expert data parallelism does.
TEST(ExpertGridUnderCp, EpSpansTheContextParallelRanks) {
  auto groups = [](int dp, int cp, int ep, int egtp) {
    parallel::ParallelConfig pc;
    pc.cp = cp;
    pc.ep = ep;
    pc.expert_tp_num_weight_shards = egtp;
    auto r = pc.Resolve(dp * cp);
    EXPECT_TRUE(r.ok()) << r.status();
    auto all = parallel::StandardGroupRanks(*r);
    EXPECT_TRUE(all.ok()) << all.status();
    std::map<std::string, std::vector<std::vector<int>>> g;
    for (auto& [name, ranks] : *all) g[name] = ranks;
    return g;
  };
  using G = std::vector<std::vector<int>>;
  // CP2·DP2 with EP2·EGTP2: the EP groups are the CP groups, EGTP the DP ones.
  auto a = groups(2, 2, 2, 2);
  EXPECT_EQ(a["cp"], (G{{0, 1}, {2, 3}}));
  EXPECT_EQ(a["ep"], a["cp"]);
  EXPECT_EQ(a["egtp"], a["dp"]);
  // CP2·DP2 with EP4: one EP group over every CP and DP rank.
  EXPECT_EQ(groups(2, 2, 4, 1)["ep"], (G{{0, 1, 2, 3}}));
  // CP2 with EP1: the experts are replicated over the CP ranks (EDP = CP).
  auto c = groups(1, 2, 1, 1);
  EXPECT_EQ(c["edp"], (G{{0, 1}}));
}

// Capacity dropping picks among a rank's own tokens, which under CP are 2 of
// each sequence's 2·CP chunks: refused, naming the setting and a value that
// works; dropless MoE under CP builds.
TEST(MoeLayerUnderCp, RefusesCapacityDroppingAndBuildsDropless) {
  absl::Status st = comm::RunRanks(2, [](comm::Communicator& w) -> absl::Status {
    parallel::ParallelConfig pc;
    pc.cp = 2;
    pc.ep = 2;
    parallel::ModelFacts facts;
    facts.num_experts = 4;
    GTP_ASSIGN_OR_RETURN(auto pgs, parallel::ProcessGroupCollection::Build(pc, w, facts));
    HeapAllocator host;
    GtpChain chain(kernels::Exec::Cpu(host), GtpOptions{});
    MoeConfig mc;
    mc.router.num_experts = 4;
    mc.router.top_k = 2;
    mc.router.capacity_factor = 1.25f;
    MoeShape s;
    s.C = kC;
    s.H = 8;
    s.B = kB;
    s.T = kT / 2;
    auto bad = MoeLayer::Create("h.0.moe", mc, s, pgs, &chain);
    EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument) << bad.status();
    const std::string msg(bad.status().message());
    EXPECT_NE(msg.find("moe.capacity_factor = 1.25"), std::string::npos) << msg;
    EXPECT_NE(msg.find("moe.capacity_factor=0"), std::string::npos) << msg;
    mc.router.capacity_factor = 0;
    auto ok = MoeLayer::Create("h.0.moe", mc, s, pgs, &chain);
    EXPECT_TRUE(ok.ok()) << ok.status();
    return absl::OkStatus();
  });
  ASSERT_TRUE(st.ok()) << st;
}

}  // namespace
}  // namespace gtp::layers::moe
