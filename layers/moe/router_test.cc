// Router math against direct double-precision references and finite
// differences (layers/moe/router.h).
#include "layers/moe/router.h"

#include <cmath>
#include <functional>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace gtp::layers::moe {
namespace {

std::vector<float> RandomLogits(int64_t n, int E, uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, 1.5f);
  std::vector<float> l(n * E);
  for (float& v : l) v = d(g);
  return l;
}

TEST(Router, TopKTiesGoToTheLowerExpert) {
  RouterConfig c;
  c.num_experts = 4;
  c.top_k = 2;
  const std::vector<float> l = {1, 3, 3, 2, /*second token*/ 0, 0, 0, 0};
  Routing r = Route(c, l.data(), 2, nullptr);
  EXPECT_EQ(r.selected, (std::vector<int32_t>{1, 2, 0, 1}));
  EXPECT_FLOAT_EQ(r.weight[0], r.weight[1]);
  EXPECT_FLOAT_EQ(r.weight[2], 0.25f);
  EXPECT_EQ(r.counts, (std::vector<int64_t>{1, 2, 1, 0}));
}

TEST(Router, WeightsOfEachScoreFunction) {
  const std::vector<float> l = {0.5f, -1.0f, 2.0f, 1.0f};
  RouterConfig c;
  c.num_experts = 4;
  c.top_k = 2;
  c.topk_scaling = 2.5f;
  double z = 0;
  for (float v : l) z += std::exp(static_cast<double>(v));
  // Pre-softmax: the full softmax's probabilities of experts 2 and 3, scaled.
  Routing pre = Route(c, l.data(), 1, nullptr);
  EXPECT_EQ(pre.selected, (std::vector<int32_t>{2, 3}));
  EXPECT_NEAR(pre.weight[0], 2.5 * std::exp(2.0) / z, 1e-6);
  EXPECT_NEAR(pre.weight[1], 2.5 * std::exp(1.0) / z, 1e-6);
  // Post-softmax: softmax over the two selected logits.
  c.pre_softmax = false;
  Routing post = Route(c, l.data(), 1, nullptr);
  EXPECT_NEAR(post.weight[0], 2.5 / (1 + std::exp(-1.0)), 1e-6);
  EXPECT_NEAR(post.weight[1], 2.5 / (1 + std::exp(1.0)), 1e-6);
  // Sigmoid, normalised over the selected.
  c.score = ScoreFunction::kSigmoid;
  Routing sg = Route(c, l.data(), 1, nullptr);
  const double s2 = 1 / (1 + std::exp(-2.0)), s3 = 1 / (1 + std::exp(-1.0));
  EXPECT_NEAR(sg.weight[0], 2.5 * s2 / (s2 + s3), 1e-6);
  EXPECT_NEAR(sg.weight[1], 2.5 * s3 / (s2 + s3), 1e-6);
}

TEST(Router, GroupLimitedRoutingKeepsOnlyTheBestGroups) {
  RouterConfig c;
  c.num_experts = 8;
  c.top_k = 4;
  c.num_groups = 4;
  c.group_topk = 2;  // group score: sum of its top 2
  c.pre_softmax = false;
  ASSERT_TRUE(c.Validate().ok());
  const std::vector<float> l = {5, 0, 4.9f, 4.8f, 4.85f, 0, 0, 0};
  Routing r = Route(c, l.data(), 1, nullptr);
  // Groups {0,1}: 5, {2,3}: 9.7, {4,5}: 4.85 → groups 1 and 0; e4 is not eligible.
  EXPECT_EQ(r.selected, (std::vector<int32_t>{0, 2, 3, 1}));
  c.num_groups = 0;
  Routing plain = Route(c, l.data(), 1, nullptr);
  EXPECT_EQ(plain.selected, (std::vector<int32_t>{0, 2, 4, 3}));
}

TEST(Router, CapacityDropsByProbabilityOrPosition) {
  RouterConfig c;
  c.num_experts = 2;
  c.top_k = 1;
  c.capacity_factor = 1.0f;  // capacity ceil(1·4·1/2) = 2
  c.score = ScoreFunction::kSigmoid;
  // Every token prefers expert 0; sigmoid weights increase with the logit.
  const std::vector<float> l = {0.6f, 0, 0.9f, 0, 0.7f, 0, 0.8f, 0};
  Routing r = Route(c, l.data(), 4, nullptr);
  EXPECT_EQ(ApplyCapacity(c, &r), 2);
  EXPECT_EQ(r.expert, (std::vector<int32_t>{-1, 0, -1, 0}));
  EXPECT_EQ(r.counts, (std::vector<int64_t>{2, 0}));
  EXPECT_EQ(r.dropped, 2);
  c.drop_policy = DropPolicy::kPosition;
  Routing p = Route(c, l.data(), 4, nullptr);
  ApplyCapacity(c, &p);
  EXPECT_EQ(p.expert, (std::vector<int32_t>{0, 0, -1, -1}));
}

TEST(Router, AuxLossEqualsTheSwitchFormula) {
  const int64_t n = 16;
  const int E = 4;
  const std::vector<float> l = RandomLogits(n, E, 7);
  for (AuxLossType type : {AuxLossType::kLane, AuxLossType::kSequence}) {
    RouterConfig c;
    c.num_experts = E;
    c.top_k = 2;
    c.aux_loss_coeff = 0.01f;
    c.aux_loss_type = type;
    const int G = type == AuxLossType::kLane ? 1 : 4;  // 4 sequences of 4
    std::vector<int32_t> group_of(n);
    for (int64_t t = 0; t < n; ++t) group_of[t] = G == 1 ? 0 : static_cast<int32_t>(t / 4);
    std::vector<int64_t> group_tokens(G, n / G);
    Routing r = Route(c, l.data(), n, nullptr);
    std::vector<float> q = AuxProbabilities(c, l.data(), n);
    std::vector<float> counts = SelectionCounts(r, group_of, G);
    double aux = 0;
    AuxGradient(c, q, n, group_of, counts, group_tokens, &aux);
    // Direct: coeff·E/k · mean over groups of (1/N_g²) Σ_e c_ge · Σ_{t∈g} softmax(l_t)_e.
    double ref = 0;
    for (int g = 0; g < G; ++g) {
      const double ng = static_cast<double>(n / G);
      for (int e = 0; e < E; ++e) {
        double ce = 0, pe = 0;
        for (int64_t t = 0; t < n; ++t) {
          if (group_of[t] != g) continue;
          for (int j = 0; j < 2; ++j) ce += r.selected[t * 2 + j] == e;
          double z = 0;
          for (int i = 0; i < E; ++i) z += std::exp(static_cast<double>(l[t * E + i]));
          pe += std::exp(static_cast<double>(l[t * E + e])) / z;
        }
        ref += 0.01 * E / 2.0 / G / (ng * ng) * ce * pe;
      }
    }
    EXPECT_NEAR(aux, ref, 1e-7 * std::abs(ref) + 1e-12) << "type " << static_cast<int>(type);
    EXPECT_GT(ref, 0.0);
  }
}

// J(l) = Σ_s dw_s·weight_s(l) + Σ daux·q(l) + z(l) in double, with the
// selection held fixed: an independent reference for RouteBackward.
double ReferenceObjective(const RouterConfig& c, const std::vector<double>& l, int64_t n,
                          const std::vector<int32_t>& sel, const std::vector<float>& dw,
                          const std::vector<float>& daux, int64_t z_tokens) {
  const int E = c.num_experts, k = c.top_k;
  double J = 0;
  for (int64_t t = 0; t < n; ++t) {
    const double* x = l.data() + t * E;
    std::vector<double> sm(E), sg(E);
    double m = x[0];
    for (int e = 1; e < E; ++e) m = std::max(m, x[e]);
    double Z = 0, S = 0;
    for (int e = 0; e < E; ++e) Z += std::exp(x[e] - m);
    for (int e = 0; e < E; ++e) {
      sm[e] = std::exp(x[e] - m) / Z;
      sg[e] = 1 / (1 + std::exp(-x[e]));
      S += sg[e];
    }
    std::vector<double> w(k);
    if (c.score == ScoreFunction::kSigmoid) {
      double ss = 0;
      for (int j = 0; j < k; ++j) ss += sg[sel[t * k + j]];
      for (int j = 0; j < k; ++j) w[j] = k > 1 ? sg[sel[t * k + j]] / ss : sg[sel[t * k + j]];
    } else if (c.pre_softmax) {
      for (int j = 0; j < k; ++j) w[j] = sm[sel[t * k + j]];
    } else {
      double zz = 0;
      for (int j = 0; j < k; ++j) zz += std::exp(x[sel[t * k + j]]);
      for (int j = 0; j < k; ++j) w[j] = std::exp(x[sel[t * k + j]]) / zz;
    }
    for (int j = 0; j < k; ++j) J += dw[t * k + j] * c.topk_scaling * w[j];
    for (int e = 0; e < E; ++e) {
      const double q = c.score == ScoreFunction::kSigmoid ? sg[e] / S : sm[e];
      if (!daux.empty()) J += daux[t * E + e] * q;
    }
    const double lse = m + std::log(Z);
    J += c.z_loss_coeff * lse * lse / z_tokens;
  }
  return J;
}

TEST(Router, BackwardMatchesFiniteDifferencesOfADirectReference) {
  const int64_t n = 6;
  const int E = 6;
  const std::vector<float> l = RandomLogits(n, E, 11);
  std::mt19937 g(3);
  std::normal_distribution<float> d(0.0f, 1.0f);
  struct Mode {
    ScoreFunction score;
    bool pre;
    int k;
  };
  for (Mode mode : {Mode{ScoreFunction::kSoftmax, true, 2}, Mode{ScoreFunction::kSoftmax, false, 3},
                    Mode{ScoreFunction::kSigmoid, true, 2}, Mode{ScoreFunction::kSigmoid, true, 1}}) {
    RouterConfig c;
    c.num_experts = E;
    c.top_k = mode.k;
    c.score = mode.score;
    c.pre_softmax = mode.pre;
    c.topk_scaling = 1.5f;
    c.aux_loss_coeff = 0.1f;
    c.z_loss_coeff = 0.01f;
    Routing r = Route(c, l.data(), n, nullptr);
    std::vector<float> dw(n * c.top_k);
    for (float& v : dw) v = d(g);
    std::vector<int32_t> group_of(n, 0);
    std::vector<float> q = AuxProbabilities(c, l.data(), n);
    std::vector<float> counts = SelectionCounts(r, group_of, 1);
    std::vector<float> daux = AuxGradient(c, q, n, group_of, counts, {n}, nullptr);
    std::vector<float> dl(n * E);
    double zpart = 0;
    RouteBackward(c, r, l.data(), dw.data(), daux, n, 1.0f, dl.data(), &zpart);
    std::vector<double> ld(l.begin(), l.end());
    double max_err = 0, max_ref = 0;
    for (int64_t i = 0; i < n * E; ++i) {
      const double h = 1e-5;
      std::vector<double> lp = ld, lm = ld;
      lp[i] += h;
      lm[i] -= h;
      const double fd = (ReferenceObjective(c, lp, n, r.selected, dw, daux, n) -
                         ReferenceObjective(c, lm, n, r.selected, dw, daux, n)) /
                        (2 * h);
      max_err = std::max(max_err, std::abs(fd - dl[i]));
      max_ref = std::max(max_ref, std::abs(fd));
    }
    EXPECT_LT(max_err, 2e-5 * std::max(1.0, max_ref))
        << "score " << static_cast<int>(mode.score) << " pre " << mode.pre << " k " << mode.k;
    EXPECT_GT(max_ref, 1e-3);
    EXPECT_GT(zpart, 0.0);
  }
}

TEST(Router, DroppedSlotsGetNoGradient) {
  RouterConfig c;
  c.num_experts = 2;
  c.top_k = 1;
  c.capacity_factor = 0.5f;  // capacity 1 of 2 tokens
  const std::vector<float> l = {2, 0, 1, 0};
  Routing r = Route(c, l.data(), 2, nullptr);
  ApplyCapacity(c, &r);
  ASSERT_EQ(r.expert, (std::vector<int32_t>{0, -1}));
  const std::vector<float> dw = {1.0f, 1.0f};
  std::vector<float> dl(4);
  RouteBackward(c, r, l.data(), dw.data(), {}, 2, 1.0f, dl.data(), nullptr);
  EXPECT_NE(dl[0], 0.0f);
  EXPECT_EQ(dl[2], 0.0f);
  EXPECT_EQ(dl[3], 0.0f);
}

TEST(Router, ExpertBiasShiftsSelectionNotWeightsAndFollowsTheLoad) {
  RouterConfig c;
  c.num_experts = 3;
  c.top_k = 1;
  c.expert_bias = true;
  c.bias_update_rate = 0.5f;
  const std::vector<float> l = {1.0f, 0.8f, 0.0f};
  std::vector<float> bias = {0, 0, 0};
  // Expert 0 took every token, expert 2 none: 0 goes down, 2 up, 1 (at the mean) stays.
  UpdateExpertBias(c, {6, 2, 0}, bias.data());
  EXPECT_EQ(bias, (std::vector<float>{-0.5f, 0.5f, 0.5f}));
  Routing r = Route(c, l.data(), 1, bias.data());
  EXPECT_EQ(r.selected[0], 1);  // 0.8 + 0.5 beats 1.0 − 0.5 and 0.0 + 0.5
  double z = std::exp(1.0) + std::exp(0.8) + 1.0;
  EXPECT_NEAR(r.weight[0], std::exp(0.8) / z, 1e-6);  // the unbiased probability
}

TEST(Router, ConfigErrorsNameTheField) {
  RouterConfig c;
  c.num_experts = 8;
  c.top_k = 9;
  EXPECT_NE(c.Validate().message().find("top_k"), std::string::npos);
  c.top_k = 2;
  c.num_groups = 3;
  EXPECT_NE(c.Validate().message().find("num_groups"), std::string::npos);
  c.num_groups = 0;
  EXPECT_TRUE(c.Validate().ok());
}

}  // namespace
}  // namespace gtp::layers::moe
