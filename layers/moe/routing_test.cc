// The f32 routing ops on the CPU (layers/moe/routing.h) against the
// double-precision pure functions of layers/moe/router.h: identical
// selections, drops and dispatch order; weights, dlogits and the aux / z
// values within f32 rounding. Also our exp / log against the C library's.
#include "layers/moe/routing.h"

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "layers/moe/router.h"

namespace gtp::layers::moe {
namespace {

namespace ri = routing_internal;

std::vector<float> RandomLogits(int64_t n, int E, uint32_t seed, float quantum = 0) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, 1.5f);
  std::vector<float> l(n * E);
  for (float& v : l) v = quantum > 0 ? quantum * std::round(d(g) / quantum) : d(g);
  return l;
}

namespace ops = kernels::ops;

template <typename T>
std::vector<T> Head(const std::vector<T>& v, size_t n) {
  return std::vector<T>(v.begin(), v.begin() + n);
}

template <typename T>
Tensor Wrap(std::vector<T>& v) {
  return Tensor::Wrap(v.data(), {static_cast<int64_t>(v.size())}, DTypeOf<T>::value, Device::Cpu());
}

// The device params of c for n local tokens (one lane of n, or sequences of seq_len).
RouteParams Params(const RouterConfig& c, int64_t n, int64_t seq_len = 0) {
  RouteParams p;
  p.E = c.num_experts;
  p.k = c.top_k;
  p.sigmoid = c.score == ScoreFunction::kSigmoid;
  p.pre_softmax = c.pre_softmax;
  p.scaling = c.topk_scaling;
  p.num_groups = c.num_groups;
  p.group_topk = c.group_topk;
  p.capacity = c.capacity_factor > 0
                   ? static_cast<int64_t>(std::ceil(static_cast<double>(c.capacity_factor) * n *
                                                    c.top_k / c.num_experts))
                   : 0;
  p.by_position = c.drop_policy == DropPolicy::kPosition;
  p.aux_coeff = c.aux_loss_coeff;
  p.z_coeff = c.z_loss_coeff;
  p.lane_rows = n;
  if (seq_len > 0) {
    p.seq_len = seq_len;
    p.G = static_cast<int>(n / seq_len);
  }
  return p;
}

struct Case {
  std::string name;
  RouterConfig c;
};

std::vector<Case> Cases() {
  std::vector<Case> out;
  auto add = [&](const std::string& name, int E, int k, ScoreFunction s, bool pre) {
    RouterConfig c;
    c.num_experts = E;
    c.top_k = k;
    c.score = s;
    c.pre_softmax = pre;
    c.topk_scaling = 1.5f;
    out.push_back({name, c});
    return &out.back().c;
  };
  add("softmax pre E8 k2", 8, 2, ScoreFunction::kSoftmax, true);
  add("softmax post E6 k3", 6, 3, ScoreFunction::kSoftmax, false);
  add("sigmoid E8 k2", 8, 2, ScoreFunction::kSigmoid, true);
  add("sigmoid E5 k1", 5, 1, ScoreFunction::kSigmoid, true);
  add("softmax pre E1 k1", 1, 1, ScoreFunction::kSoftmax, true);
  RouterConfig* g = add("groups E16 k4 G4/2 sigmoid", 16, 4, ScoreFunction::kSigmoid, true);
  g->num_groups = 4;
  g->group_topk = 2;
  g = add("groups E64 k8 G8/4 softmax pre", 64, 8, ScoreFunction::kSoftmax, true);
  g->num_groups = 8;
  g->group_topk = 4;
  return out;
}

void ExpectClose(const std::vector<float>& got, const std::vector<float>& want, double rel,
                 const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double scale = 1e-30;
  for (float v : want) scale = std::max(scale, std::abs(static_cast<double>(v)));
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], rel * scale) << what << " element " << i;
  }
}

TEST(RoutingOps, RouteTokensMatchesRoute) {
  HeapAllocator a;
  const kernels::Exec e = kernels::Exec::Cpu(a);
  const int64_t n = 257;
  for (const Case& cs : Cases()) {
    for (bool with_bias : {false, true}) {
      const RouterConfig& c = cs.c;
      const int E = c.num_experts, k = c.top_k;
      std::vector<float> l = RandomLogits(n, E, 3 + E), bias(E);
      for (int i = 0; i < E; ++i) bias[i] = 0.05f * ((i * 7) % 5) - 0.1f;
      Routing ref = Route(c, l.data(), n, with_bias ? bias.data() : nullptr);
      std::vector<int32_t> sel(n * k);
      std::vector<float> w(n * k);
      RouteTokens(e, Params(c, n), Tensor::Wrap(l.data(), {n, E}, DType::kF32, Device::Cpu()),
                  with_bias ? Wrap(bias) : Tensor(), Wrap(sel), Wrap(w));
      EXPECT_EQ(sel, ref.selected) << cs.name << " bias " << with_bias;
      ExpectClose(w, ref.weight, 1e-6, cs.name);
    }
  }
}

TEST(RoutingOps, TiesGoToTheLowerExpert) {
  HeapAllocator a;
  const kernels::Exec e = kernels::Exec::Cpu(a);
  RouterConfig c;
  c.num_experts = 4;
  c.top_k = 2;
  std::vector<float> l = {1, 3, 3, 2, 0, 0, 0, 0};
  std::vector<int32_t> sel(4);
  std::vector<float> w(4);
  RouteTokens(e, Params(c, 2), Tensor::Wrap(l.data(), {2, 4}, DType::kF32, Device::Cpu()), Tensor(),
              Wrap(sel), Wrap(w));
  EXPECT_EQ(sel, (std::vector<int32_t>{1, 2, 0, 1}));
  EXPECT_EQ(w[0], w[1]);
  EXPECT_EQ(w[2], 0.25f);
}

// The order MoeLayer dispatches in: by expert, then slot.
void ReferenceDispatch(const std::vector<int32_t>& expert, int E, int k,
                       std::vector<int32_t>* counts, std::vector<int32_t>* pos,
                       std::vector<int32_t>* row_tok) {
  counts->assign(E, 0);
  pos->assign(expert.size(), -1);
  row_tok->clear();
  for (int e = 0; e < E; ++e) {
    for (size_t s = 0; s < expert.size(); ++s) {
      if (expert[s] != e) continue;
      (*pos)[s] = static_cast<int32_t>(row_tok->size());
      row_tok->push_back(static_cast<int32_t>(s / k));
      ++(*counts)[e];
    }
  }
}

TEST(RoutingOps, CapacityAndDispatchMatchApplyCapacity) {
  HeapAllocator a;
  const kernels::Exec e = kernels::Exec::Cpu(a);
  const int64_t n = 301;
  for (const Case& cs : Cases()) {
    for (DropPolicy policy : {DropPolicy::kProbability, DropPolicy::kPosition}) {
      for (float cf : {0.0f, 0.5f, 1.0f, 1.25f}) {
        RouterConfig c = cs.c;
        c.capacity_factor = cf;
        c.drop_policy = policy;
        const int E = c.num_experts, k = c.top_k;
        const int64_t S = n * k;
        // Coarse logits: many equal weights, so the tie rule matters.
        std::vector<float> l = RandomLogits(n, E, 11 + E, 0.5f);
        Routing ref = Route(c, l.data(), n, nullptr);
        const int64_t cap = ApplyCapacity(c, &ref);
        const RouteParams p = Params(c, n);
        ASSERT_EQ(p.capacity, cap);
        // The reference's own selections and weights in: the drop rule alone is tested.
        std::vector<int32_t> sel = ref.selected, counts(E), pos(S, 7), row_slot(S, 7),
                             row_tok(S, 7);
        std::vector<float> w = ref.weight;
        Dispatch(e, E, k, Wrap(sel), Wrap(counts), Wrap(pos), Wrap(row_slot), Wrap(row_tok));
        std::vector<int32_t> expert(S);
        if (cap > 0) {
          DropOverCapacity(e, p, Wrap(sel), Wrap(w), Wrap(counts), Wrap(pos), Wrap(row_slot),
                           Wrap(expert));
          Dispatch(e, E, k, Wrap(expert), Wrap(counts), Wrap(pos), Wrap(row_slot), Wrap(row_tok));
        } else {
          expert = sel;
        }
        const std::string what = cs.name + " cf " + std::to_string(cf) + " policy " +
                                 std::to_string(static_cast<int>(policy));
        EXPECT_EQ(expert, ref.expert) << what;
        std::vector<int32_t> want_counts, want_pos, want_tok;
        ReferenceDispatch(ref.expert, E, k, &want_counts, &want_pos, &want_tok);
        EXPECT_EQ(counts, want_counts) << what;
        EXPECT_EQ(pos, want_pos) << what;
        const int64_t M = static_cast<int64_t>(want_tok.size());
        EXPECT_EQ(std::vector<int32_t>(row_tok.begin(), row_tok.begin() + M), want_tok) << what;
        for (int64_t r = 0; r < M; ++r) ASSERT_EQ(pos[row_slot[r]], r) << what;
        int64_t kept = 0;
        for (int i = 0; i < E; ++i) {
          EXPECT_EQ(counts[i], ref.counts[i]) << what;
          kept += counts[i];
        }
        EXPECT_EQ(S - kept, ref.dropped) << what;
      }
    }
  }
}

TEST(RoutingOps, PadToCapacityAndLocalExperts) {
  HeapAllocator a;
  const kernels::Exec cpu = kernels::Exec::Cpu(a);
  // 4 tokens, k = 2, E = 3 (−1: dropped); capacity 3.
  std::vector<int32_t> expert = {0, 2, 1, 0, -1, 2, 0, 1};
  std::vector<int32_t> counts(3), pos(8), slot(8), tok(8), ppos(8), ptok(9), local(8);
  Dispatch(cpu, 3, 2, Wrap(expert), Wrap(counts), Wrap(pos), Wrap(slot), Wrap(tok));
  EXPECT_EQ(counts, (std::vector<int32_t>{3, 2, 2}));
  PadToCapacity(cpu, 3, 3, Wrap(expert), Wrap(counts), Wrap(pos), Wrap(tok), Wrap(ppos),
                Wrap(ptok));
  EXPECT_EQ(ppos, (std::vector<int32_t>{0, 6, 3, 1, -1, 7, 2, 4}));
  EXPECT_EQ(ptok, (std::vector<int32_t>{0, 1, 3, 1, 3, -1, 0, 2, -1}));
  SelectLocalExperts(cpu, 1, 2, Wrap(expert), Wrap(local));
  EXPECT_EQ(local, (std::vector<int32_t>{-1, 1, 0, -1, -1, 1, -1, 0}));
}

TEST(RoutingOps, AuxCountsValueAndBackwardMatchTheReference) {
  HeapAllocator a;
  const kernels::Exec e = kernels::Exec::Cpu(a);
  const int64_t n = 96, seq = 32;
  std::mt19937 g(5);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (const Case& cs : Cases()) {
    for (AuxLossType type : {AuxLossType::kLane, AuxLossType::kSequence}) {
      for (float cf : {0.0f, 0.75f}) {
        RouterConfig c = cs.c;
        c.aux_loss_coeff = 0.1f;
        c.aux_loss_type = type;
        c.z_loss_coeff = 0.01f;
        c.capacity_factor = cf;
        const int E = c.num_experts, k = c.top_k;
        const int G = type == AuxLossType::kLane ? 1 : static_cast<int>(n / seq);
        const std::string what =
            cs.name + (G > 1 ? " per sequence" : " per lane") + (cf > 0 ? " dropping" : "");
        std::vector<float> l = RandomLogits(n, E, 21 + E);
        Routing r = Route(c, l.data(), n, nullptr);
        ApplyCapacity(c, &r);
        std::vector<int32_t> group_of(n);
        for (int64_t t = 0; t < n; ++t) group_of[t] = G == 1 ? 0 : static_cast<int32_t>(t / seq);
        std::vector<float> ref_counts = SelectionCounts(r, group_of, G);
        const std::vector<int64_t> group_tokens(G, n / G);
        std::vector<float> q = AuxProbabilities(c, l.data(), n);
        double ref_aux = 0;
        std::vector<float> daux =
            AuxGradient(c, q, n, group_of, ref_counts, group_tokens, &ref_aux);
        RouteParams p = Params(c, n, G > 1 ? seq : 0);
        Tensor logits = Tensor::Wrap(l.data(), {n, E}, DType::kF32, Device::Cpu());
        std::vector<int32_t> sel = r.selected, expert = r.expert;
        std::vector<float> counts(G * E, -1.0f);
        CountSelections(e, p, Wrap(sel), Wrap(counts));
        EXPECT_EQ(counts, ref_counts) << what;
        std::vector<double> acc(2, 0.0);
        Tensor acc_t = Tensor::Wrap(acc.data(), {2}, DType::kI64, Device::Cpu());
        AuxLoss(e, p, logits, Wrap(counts), acc_t.Slice(0, 1));
        EXPECT_NEAR(acc[0], ref_aux, 1e-6 * ref_aux) << what;
        std::vector<float> dw(n * k);
        for (float& v : dw) v = nd(g);
        for (float loss_scale : {1.0f, 2.0f}) {
          std::vector<float> ref_dl(n * E), dl(n * E);
          double ref_z = 0;
          RouteBackward(c, r, l.data(), dw.data(), daux, n, loss_scale, ref_dl.data(), &ref_z);
          p.loss_scale = loss_scale;
          acc[1] = 0;
          RouteBackward(e, p, logits, Wrap(sel), Wrap(expert), Wrap(dw), Wrap(counts), Wrap(dl),
                        acc_t.Slice(1, 2));
          ExpectClose(dl, ref_dl, 4e-6, what + " dlogits");
          EXPECT_NEAR(acc[1], ref_z, 1e-6 * ref_z) << what;
          // Without aux.
          RouteBackward(c, r, l.data(), dw.data(), {}, n, loss_scale, ref_dl.data(), nullptr);
          RouteBackward(e, p, logits, Wrap(sel), Wrap(expert), Wrap(dw), Tensor(), Wrap(dl));
          ExpectClose(dl, ref_dl, 4e-6, what + " dlogits without aux");
        }
      }
    }
  }
}

TEST(RoutingOps, AccumulateCountsAddsSelectionsAndDrops) {
  HeapAllocator a;
  const kernels::Exec e = kernels::Exec::Cpu(a);
  std::vector<int32_t> sel = {3, 0, 5}, kept = {2, 0, 4};
  std::vector<double> acc = {1, 1, 1, 1, 9};
  AccumulateCounts(e, 8, Wrap(sel), Wrap(kept),
                   Tensor::Wrap(acc.data(), {5}, DType::kI64, Device::Cpu()));
  EXPECT_EQ(acc, (std::vector<double>{4, 1, 6, 3, 9}));
}

// The Router on a CPU exec, end to end: its device routing, dx, gate gradient
// and stats against the pure functions on the same logits.
TEST(Router, ForwardBackwardAndStatsMatchThePureFunctions) {
  HeapAllocator a;
  const kernels::Exec e = kernels::Exec::Cpu(a);
  const int64_t rows = 40, C = 12, T = 10;
  for (ScoreFunction score : {ScoreFunction::kSoftmax, ScoreFunction::kSigmoid}) {
    RouterConfig c;
    c.num_experts = 6;
    c.top_k = 2;
    c.score = score;
    c.aux_loss_coeff = 0.05f;
    c.aux_loss_type = AuxLossType::kSequence;
    c.z_loss_coeff = 0.01f;
    c.capacity_factor = 0.8f;
    c.expert_bias = true;
    const int E = c.num_experts, k = c.top_k;
    auto router =
        Router::Create("h.0.moe.router", c, C, rows, T, /*first_row=*/0, rows, 0.5f, 3, nullptr, e);
    ASSERT_TRUE(router.ok()) << router.status();
    Router& r = **router;
    for (int i = 0; i < E; ++i) r.expert_bias()[i] = 0.02f * i;
    std::vector<float> x = RandomLogits(rows, static_cast<int>(C), 9);
    Tensor xt = Tensor::Wrap(x.data(), {rows, C}, DType::kF32, Device::Cpu());
    auto out = r.Forward(xt);
    ASSERT_TRUE(out.ok()) << out.status();
    // The reference on the router's own logits.
    std::vector<float> l(rows * E);
    ops::Linear(e, xt, r.gate()->value,
                Tensor::Wrap(l.data(), {rows, E}, DType::kF32, Device::Cpu()));
    Routing ref = Route(c, l.data(), rows, r.expert_bias().data());
    ApplyCapacity(c, &ref);
    auto host = [](const Tensor& t) {
      return std::vector<int32_t>(t.data<int32_t>(), t.data<int32_t>() + t.numel());
    };
    EXPECT_EQ(host((*out)->selected), ref.selected);
    EXPECT_EQ(host((*out)->expert), ref.expert);
    std::vector<int32_t> want_counts, want_pos, want_tok;
    ReferenceDispatch(ref.expert, E, k, &want_counts, &want_pos, &want_tok);
    EXPECT_EQ(host((*out)->counts), want_counts);
    EXPECT_EQ(host((*out)->pos), want_pos);
    EXPECT_EQ(Head(host((*out)->row_tok), want_tok.size()), want_tok);
    const float* w = (*out)->weight.data<float>();
    ExpectClose(std::vector<float>(w, w + rows * k), ref.weight, 1e-6, "weight");
    // A recompute forward counts nothing.
    ASSERT_TRUE(r.Forward(xt, /*record=*/false).ok());
    // Backward: dx = dlogits·W, gate grad += dlogitsᵀ·x.
    std::vector<float> dw = RandomLogits(rows, k, 4);
    std::vector<int32_t> group_of(rows);
    for (int64_t t = 0; t < rows; ++t) group_of[t] = static_cast<int32_t>(t / T);
    const int G = static_cast<int>(rows / T);
    std::vector<float> counts = SelectionCounts(ref, group_of, G);
    double ref_aux = 0, ref_z = 0;
    std::vector<float> daux = AuxGradient(c, AuxProbabilities(c, l.data(), rows), rows, group_of,
                                          counts, std::vector<int64_t>(G, T), &ref_aux);
    std::vector<float> dl(rows * E);
    RouteBackward(c, ref, l.data(), dw.data(), daux, rows, 1.0f, dl.data(), &ref_z);
    auto dx = r.Backward(Wrap(dw), 1.0f);
    ASSERT_TRUE(dx.ok()) << dx.status();
    const float* W = r.gate()->value.data<float>();
    const float* gg = r.gate()->grad.data<float>();
    double err = 0, scale = 1e-3;
    for (int64_t t = 0; t < rows; ++t) {
      for (int64_t j = 0; j < C; ++j) {
        double want = 0;
        for (int i = 0; i < E; ++i) want += static_cast<double>(dl[t * E + i]) * W[i * C + j];
        err = std::max(err, std::abs(dx->data<float>()[t * C + j] - want));
        scale = std::max(scale, std::abs(want));
      }
    }
    EXPECT_LT(err / scale, 1e-5) << "dx";
    err = 0, scale = 1e-3;
    for (int i = 0; i < E; ++i) {
      for (int64_t j = 0; j < C; ++j) {
        double want = 0;
        for (int64_t t = 0; t < rows; ++t)
          want += static_cast<double>(dl[t * E + i]) * x[t * C + j];
        err = std::max(err, std::abs(gg[i * C + j] - want));
        scale = std::max(scale, std::abs(want));
      }
    }
    EXPECT_LT(err / scale, 1e-5) << "gate grad";
    // Stats: the one recorded forward's selections and drops; aux and z.
    std::vector<double> want_sel(E, 0.0);
    for (int32_t s : ref.selected) want_sel[s] += 1;
    EXPECT_EQ(r.TakeCounts(), want_sel);
    Router::Stats st = r.TakeStats();
    EXPECT_EQ(st.forwards, 1);
    EXPECT_EQ(st.dropped, ref.dropped);
    EXPECT_GT(ref.dropped, 0);
    EXPECT_NEAR(st.aux, ref_aux, 1e-6 * ref_aux);
    EXPECT_EQ(st.z, 0.0);  // the last forward was a recompute (record = false)
    EXPECT_EQ(r.TakeCounts(), std::vector<double>(E, 0.0));
    ASSERT_TRUE(r.Forward(xt).ok());
    ASSERT_TRUE(r.Backward(Wrap(dw), 1.0f).ok());
    st = r.TakeStats();
    EXPECT_NEAR(st.z, ref_z, 1e-6 * ref_z);
    EXPECT_NEAR(st.aux, ref_aux, 1e-6 * ref_aux);
  }
}

TEST(RoutingMath, ExpAndLogWithinTwoUlp) {
  for (float x = -87.0f; x <= 88.0f; x += 0.0137f) {
    const double want = std::exp(static_cast<double>(x));
    ASSERT_NEAR(ri::Exp(x), want, 2.5e-7 * want) << x;
  }
  EXPECT_EQ(ri::Exp(-100.0f), 0.0f);
  EXPECT_EQ(ri::Exp(100.0f), std::numeric_limits<float>::infinity());
  EXPECT_EQ(ri::Exp(0.0f), 1.0f);
  for (float x = 1e-30f; x < 1e30f; x *= 1.0173f) {
    const double want = std::log(static_cast<double>(x));
    ASSERT_NEAR(ri::Log(x), want, 2.5e-7 * std::max(1.0, std::abs(want))) << x;
  }
  EXPECT_EQ(ri::Log(1.0f), 0.0f);
}

}  // namespace
}  // namespace gtp::layers::moe
