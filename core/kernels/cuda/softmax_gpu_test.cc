// GPU tests of cuda::SoftmaxForward/Backward against the CPU versions.
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

TEST(SoftmaxGpu, ForwardAndBackwardMatchCpu) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << NoGpuReason();
  Stream stream = TestStream();
  Rng rng(41);
  for (int64_t N : {1, 3, 257}) {
    for (int64_t C : {1, 3, 32, 257, 5000}) {
      SCOPED_TRACE(absl::StrCat("N=", N, " C=", C));
      // Large logits: the max subtraction must happen.
      const std::vector<float> x = rng.Normal(N * C, 50.0f, 10.0f), dy = rng.Normal(N * C);
      std::vector<float> y(N * C), dx(N * C);
      cpu::SoftmaxForward(x.data(), y.data(), N, C);
      cpu::SoftmaxBackward(dy.data(), y.data(), dx.data(), N, C);
      DeviceBuffer<float> d_x(x), d_dy(dy), d_y(N * C), d_yc(y), d_dx(N * C);
      cuda::SoftmaxForward(d_x.get(), d_y.get(), N, C, stream.get());
      // The backward gets the CPU's y, so it is tested on its own.
      cuda::SoftmaxBackward(d_dy.get(), d_yc.get(), d_dx.get(), N, C, stream.get());
      EXPECT_TRUE(RelClose(d_y.Download(), ToDouble(y), 1e-5));
      EXPECT_TRUE(RelClose(d_dx.Download(), ToDouble(dx), 1e-5));
    }
  }
}

}  // namespace
}  // namespace gtp::kernels::testing
