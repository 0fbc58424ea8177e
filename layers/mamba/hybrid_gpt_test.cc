// A hybrid GptModel (layer pattern "M*-M-": Mamba, attention, MLP, Mamba,
// MLP) in bf16 against the same model in f32 on the CPU, over two SGD steps
// on one batch: losses and every gradient to bf16 accuracy, and the loss
// falls. The f32 mixer is checked against finite differences in
// mamba_mixer_test, the attention and MLP blocks elsewhere.
#include <cmath>

#include "core/allocator.h"
#include "gtest/gtest.h"
#include "layers/mamba/mixer_testing.h"

namespace gtp::layers::mamba {
namespace {

TEST(HybridGpt, Bf16MatchesF32OverTwoSteps) {
  HeapAllocator host;
  const kernels::Exec e = kernels::Exec::Cpu(host);
  const auto ref = testing::TrainHybrid(e, DType::kF32, 2);
  const auto got = testing::TrainHybrid(e, DType::kBF16, 2);
  ASSERT_EQ(ref.size(), 2u);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_LT(ref[1].loss, ref[0].loss);
  for (size_t s = 0; s < ref.size(); ++s) {
    SCOPED_TRACE(s);
    ASSERT_TRUE(std::isfinite(got[s].loss));
    EXPECT_NEAR(got[s].loss, ref[s].loss, 1e-2 * ref[s].loss);
    ASSERT_EQ(got[s].grads.size(), ref[s].grads.size());
    int mixer_params = 0;
    for (size_t i = 0; i < ref[s].grads.size(); ++i) {
      const auto& [name, want] = ref[s].grads[i];
      ASSERT_EQ(got[s].grads[i].first, name);
      if (name.find(".mixer.") != std::string::npos) ++mixer_params;
      if (name.find("attn.k.bias") != std::string::npos) continue;  // true gradient is 0
      EXPECT_LT(testing::RelErr(got[s].grads[i].second, want), testing::Bf16GradTolerance(name))
          << name;
    }
    EXPECT_EQ(mixer_params, 2 * 16);  // both Mamba layers' params are in the model
  }
}

}  // namespace
}  // namespace gtp::layers::mamba
