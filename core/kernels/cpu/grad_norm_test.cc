// cpu::GradNormWords / GradNormFinalize against closed forms.
#include <cmath>
#include <limits>
#include <vector>

#include "core/kernels/cpu.h"
#include "gtest/gtest.h"

namespace gtp::kernels {
namespace {

TEST(GradNormWords, CountsThePrefixAndCarriesNaNOfTheRest) {
  const std::vector<double> ss = {1.0, 2.5, 1e-9, 7.0};
  float w[2];
  cpu::GradNormWords(ss.data(), 3, 4, w);
  EXPECT_EQ(static_cast<double>(w[0]) + w[1], 1.0 + 2.5 + 1e-9);
  std::vector<double> bad = ss;
  bad[3] = std::numeric_limits<double>::quiet_NaN();
  cpu::GradNormWords(bad.data(), 3, 4, w);  // an uncounted NaN still poisons
  EXPECT_TRUE(std::isnan(w[0]));
  EXPECT_EQ(w[1], 0.0f);
  cpu::GradNormWords(ss.data(), 0, 0, w);
  EXPECT_EQ(w[0], 0.0f);
}

TEST(GradNormFinalize, NormScaleAndSkip) {
  const float words[4] = {9.0f, 0.0f, 16.0f, 0.0f};  // two buffers: 9 + 16
  float out[3];
  cpu::GradNormFinalize(words, 2, 1.0, out);
  EXPECT_EQ(out[0], 5.0f);
  EXPECT_EQ(out[1], static_cast<float>(1.0 / (5.0 + 1e-6)));
  EXPECT_EQ(out[2], 0.0f);
  cpu::GradNormFinalize(words, 2, 10.0, out);  // below the limit: no clipping
  EXPECT_EQ(out[1], 1.0f);
  cpu::GradNormFinalize(words, 2, 0.0, out);  // clipping off
  EXPECT_EQ(out[1], 1.0f);
  const float inf[2] = {std::numeric_limits<float>::infinity(), 0.0f};
  cpu::GradNormFinalize(inf, 1, 1.0, out);
  EXPECT_EQ(out[2], 1.0f);
  EXPECT_EQ(out[1], 1.0f);
}

}  // namespace
}  // namespace gtp::kernels
