// Sampling against hand-computed distributions: greedy, top-k = 1, seeds,
// temperature, and the top-k / top-p supports.
#include "layers/inference/sampling.h"

#include <cmath>
#include <map>
#include <vector>

#include "gtest/gtest.h"

namespace gtp::layers::inference {
namespace {

// log of p = {0.5, 0.2, 0.15, 0.1, 0.05}, shuffled so that id order is not
// probability order: ids 0..4 hold p[2], p[0], p[4], p[1], p[3].
const std::vector<float> kLogits = {std::log(0.15f), std::log(0.5f), std::log(0.05f),
                                    std::log(0.2f), std::log(0.1f)};

std::vector<float> Ramp(int n, uint64_t salt) {
  std::vector<float> v(n);
  for (int i = 0; i < n; ++i) v[i] = std::sin(0.37f * i + salt);
  return v;
}

TEST(Sampling, GreedyIsArgmaxLowestIdOnTies) {
  EXPECT_EQ(Argmax(kLogits), 1);
  EXPECT_EQ(Argmax(std::vector<float>{1, 3, 3, 2}), 1);
  SamplingOptions o;
  o.temperature = 0;
  for (uint64_t s = 0; s < 5; ++s) EXPECT_EQ(SampleToken(kLogits, o, s), 1);
}

TEST(Sampling, TopK1EqualsGreedy) {
  SamplingOptions o;
  o.top_k = 1;
  for (uint64_t seed = 0; seed < 20; ++seed) {
    o.seed = seed;
    const std::vector<float> l = Ramp(100, seed);
    EXPECT_EQ(SampleToken(l, o, seed * 3), Argmax(l));
  }
}

TEST(Sampling, SameSeedSameSampleOtherSeedDiffers) {
  SamplingOptions a, b;
  a.seed = 1;
  b.seed = 2;
  const std::vector<float> flat(64, 0.0f);  // uniform: every draw is a fresh id
  std::vector<int32_t> x, y, z;
  for (uint64_t s = 0; s < 32; ++s) {
    x.push_back(SampleToken(flat, a, s));
    y.push_back(SampleToken(flat, a, s));
    z.push_back(SampleToken(flat, b, s));
  }
  EXPECT_EQ(x, y);
  EXPECT_NE(x, z);
}

TEST(Sampling, TemperatureSharpens) {
  SamplingOptions o;
  o.temperature = 0.5f;  // p^2 renormalised
  const std::vector<double> p = SamplingDistribution(kLogits, o);
  const double z = 0.15 * 0.15 + 0.5 * 0.5 + 0.05 * 0.05 + 0.2 * 0.2 + 0.1 * 0.1;
  EXPECT_NEAR(p[1], 0.25 / z, 1e-6);
  EXPECT_NEAR(p[2], 0.0025 / z, 1e-6);
}

TEST(Sampling, TopKAndTopPRestrictTheSupport) {
  SamplingOptions o;
  o.top_k = 2;  // {0.5, 0.2}
  std::vector<double> p = SamplingDistribution(kLogits, o);
  EXPECT_NEAR(p[1], 0.5 / 0.7, 1e-6);
  EXPECT_NEAR(p[3], 0.2 / 0.7, 1e-6);
  EXPECT_EQ(p[0] + p[2] + p[4], 0.0);
  o.top_k = 0;
  o.top_p = 0.8f;  // 0.5 + 0.2 < 0.8 ≤ 0.5 + 0.2 + 0.15
  p = SamplingDistribution(kLogits, o);
  EXPECT_NEAR(p[0], 0.15 / 0.85, 1e-6);
  EXPECT_EQ(p[2] + p[4], 0.0);
  o.top_p = 0.5f;  // exactly the top token's mass
  p = SamplingDistribution(kLogits, o);
  EXPECT_NEAR(p[1], 1.0, 1e-6);
  // Draws stay inside the support, at about the renormalised frequencies.
  o.top_p = 0.8f;
  std::map<int32_t, int> n;
  const int draws = 20000;
  for (int s = 0; s < draws; ++s) ++n[SampleToken(kLogits, o, s)];
  EXPECT_EQ(n.count(2) + n.count(4), 0u);
  EXPECT_NEAR(n[1] / double(draws), 0.5 / 0.85, 0.015);
  EXPECT_NEAR(n[3] / double(draws), 0.2 / 0.85, 0.015);
  EXPECT_NEAR(n[0] / double(draws), 0.15 / 0.85, 0.015);
}

}  // namespace
}  // namespace gtp::layers::inference
