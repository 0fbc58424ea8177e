// cuda::MaskedMeanAccumulate / FillReciprocal / CountValid against the closed form.
#include <vector>

#include "core/cuda_runtime.h"
#include "core/kernels/cuda.h"
#include "core/kernels/testing/gpu.h"
#include "core/kernels/testing/harness.h"
#include "gtest/gtest.h"

namespace gtp::kernels::testing {
namespace {

TEST(CudaLoss, MaskedMeanAndReciprocal) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << NoGpuReason();
  Rng rng(3);
  for (int64_t n : {1, 7, 8192, 100003}) {
    std::vector<float> loss = rng.Normal(n, 5.0f, 1.0f);
    std::vector<int32_t> tg(n);
    double sum = 0;
    int64_t valid = 0;
    for (int64_t i = 0; i < n; ++i) {
      tg[i] = (i % 4 == 3) ? -1 : 1;
      if (tg[i] >= 0) sum += loss[i], ++valid;
    }
    DeviceBuffer<float> dl(loss), acc(std::vector<float>{1.0f}), count(1), out(n);
    DeviceBuffer<int32_t> dt(tg);
    cuda::MaskedMeanAccumulate(dl.get(), dt.get(), n, acc.get(), count.get(), nullptr);
    cuda::FillReciprocal(count.get(), out.get(), n, nullptr);
    const float a = acc.Download()[0], c = count.Download()[0];
    EXPECT_EQ(c, static_cast<float>(valid));
    EXPECT_NEAR(a, 1.0 + sum / valid, 1e-5);
    for (float v : out.Download()) ASSERT_EQ(v, 1.0f / static_cast<float>(valid));
    // Deterministic: the same inputs give the same bits.
    acc.Upload({1.0f});
    cuda::MaskedMeanAccumulate(dl.get(), dt.get(), n, acc.get(), count.get(), nullptr);
    EXPECT_EQ(acc.Download()[0], a);
    // CountValid alone: the same count, before any loss exists.
    DeviceBuffer<float> count2(std::vector<float>{-7.0f});
    cuda::CountValid(dt.get(), n, count2.get(), nullptr);
    EXPECT_EQ(count2.Download()[0], static_cast<float>(valid));
  }
}

}  // namespace
}  // namespace gtp::kernels::testing
