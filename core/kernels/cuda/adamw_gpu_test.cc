// GPU tests of cuda::AdamW: same bits as cpu::AdamW over several steps.
#include <cuda_runtime_api.h>

#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "core/cuda_runtime.h"
#include "core/kernels/cpu.h"
#include "core/kernels/cuda.h"
#include "core/kernels/testing/gpu.h"
#include "core/kernels/testing/harness.h"
#include "core/status.h"
#include "gtest/gtest.h"

namespace gtp::kernels::testing {
namespace {

TEST(AdamWGpu, BitIdenticalToCpuOverSteps) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << NoGpuReason();
  Stream stream = TestStream();
  Rng rng(81);
  for (int64_t n : {1, 3, 257, 100003}) {
    for (float wd : {0.0f, 0.1f}) {
      SCOPED_TRACE(absl::StrCat("n=", n, " wd=", wd));
      std::vector<float> p = rng.Normal(n), m(n, 0.0f), v(n, 0.0f);
      DeviceBuffer<float> d_p(p), d_m(m), d_v(v), d_g(n);
      AdamWParams hp;
      hp.lr = 3e-3f;
      hp.beta1 = 0.9f;
      hp.beta2 = 0.95f;
      hp.eps = 1e-8f;
      hp.weight_decay = wd;
      for (int64_t step = 1; step <= 5; ++step) {
        hp.step = step;
        const std::vector<float> g = rng.Normal(n, 0.0f, 0.1f);
        cpu::AdamW(p.data(), g.data(), m.data(), v.data(), n, hp);
        d_g.Upload(g);
        cuda::AdamW(d_p.get(), d_g.get(), d_m.get(), d_v.get(), n, hp, stream.get());
      }
      EXPECT_TRUE(BitEqual(d_p.Download(), p));
      EXPECT_TRUE(BitEqual(d_m.Download(), m));
      EXPECT_TRUE(BitEqual(d_v.Download(), v));
    }
  }
}

}  // namespace
}  // namespace gtp::kernels::testing
