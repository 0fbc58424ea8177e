// GPU tests of cuda::NewtonSchulz against cpu::NewtonSchulz: wide, tall
// (transposed internally) and square matrices, both coefficient sets.
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

struct Shape {
  int64_t M, N;
};
const Shape kShapes[] = {{1, 1}, {1, 7}, {7, 1}, {3, 5}, {5, 3}, {33, 17}, {64, 64}, {65, 257}};

int64_t ScratchFloats(int64_t M, int64_t N) {
  const int64_t r = M < N ? M : N;
  return 2 * r * r + 2 * M * N;
}

TEST(NewtonSchulzGpu, MatchesCpu) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << NoGpuReason();
  Stream stream = TestStream();
  cuda::BlasContext ctx(0);
  Rng rng(91);
  for (const Shape& s : kShapes) {
    for (NsCoefficients coeffs : {NsCoefficients::kSimple, NsCoefficients::kQuintic}) {
      for (int steps : {0, 1, 5}) {
        SCOPED_TRACE(absl::StrCat("M=", s.M, " N=", s.N, " steps=", steps,
                                  " quintic=", coeffs == NsCoefficients::kQuintic));
        const std::vector<float> G = rng.Normal(s.M * s.N, 0.0f, 3.0f);
        std::vector<float> X(s.M * s.N), scratch(ScratchFloats(s.M, s.N));
        cpu::NewtonSchulz(G.data(), X.data(), scratch.data(), s.M, s.N, steps, coeffs);
        DeviceBuffer<float> d_G(G), d_X(s.M * s.N), d_scratch(ScratchFloats(s.M, s.N) + 1);
        cuda::NewtonSchulz(ctx, d_G.get(), d_X.get(), d_scratch.get(), s.M, s.N, steps, coeffs,
                           stream.get());
        // The iteration amplifies rounding differences of the GEMMs (each step
        // can stretch a small singular value's error by up to a ≈ 3.4–4.1).
        EXPECT_TRUE(RelClose(d_X.Download(), ToDouble(X), steps == 0 ? 1e-6 : 1e-4));
      }
    }
  }
}

TEST(NewtonSchulzGpu, IsDeterministic) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << NoGpuReason();
  Stream stream = TestStream();
  cuda::BlasContext ctx(0);
  Rng rng(92);
  const Shape s{768, 3072};
  DeviceBuffer<float> G(rng.Normal(s.M * s.N)), X(s.M * s.N), scratch(ScratchFloats(s.M, s.N) + 1);
  std::vector<float> first;
  for (int i = 0; i < 3; ++i) {
    cuda::NewtonSchulz(ctx, G.get(), X.get(), scratch.get(), s.M, s.N, 5, NsCoefficients::kQuintic,
                       stream.get());
    if (i == 0) {
      first = X.Download();
    } else {
      EXPECT_TRUE(BitEqual(X.Download(), first));
    }
  }
}

}  // namespace
}  // namespace gtp::kernels::testing
