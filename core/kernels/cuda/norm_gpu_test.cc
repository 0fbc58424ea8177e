// GPU tests of cuda::LayerNorm*/RMSNorm* against the CPU versions, forward
// and backward (dw/db accumulate), plus run-to-run determinism of the
// two-pass dw/db reduction.
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
  int64_t N, C;
};
const Shape kShapes[] = {{1, 1},   {3, 5},     {1, 257},  {257, 3},
                         {33, 64}, {257, 768}, {5000, 7}, {64, 4099}};
constexpr float kEps = 1e-5f;

std::string Describe(const Shape& s) { return absl::StrCat("N=", s.N, " C=", s.C); }

// x with a common offset per row, so the centring matters.
std::vector<float> Input(Rng& rng, const Shape& s) {
  std::vector<float> x = rng.Normal(s.N * s.C, 0.0f, 2.0f);
  for (int64_t n = 0; n < s.N; ++n) {
    for (int64_t c = 0; c < s.C; ++c) x[n * s.C + c] += static_cast<float>(n % 5);
  }
  return x;
}

TEST(LayerNormGpu, ForwardMatchesCpu) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << NoGpuReason();
  Stream stream = TestStream();
  Rng rng(21);
  for (const Shape& s : kShapes) {
    for (bool with_bias : {true, false}) {
      SCOPED_TRACE(absl::StrCat(Describe(s), " bias=", with_bias));
      const std::vector<float> x = Input(rng, s), w = rng.Normal(s.C), b = rng.Normal(s.C);
      std::vector<float> y(s.N * s.C), mean(s.N), rstd(s.N);
      cpu::LayerNormForward(x.data(), w.data(), with_bias ? b.data() : nullptr, y.data(),
                            mean.data(), rstd.data(), s.N, s.C, kEps);
      DeviceBuffer<float> dx(x), dw(w), db(b), dy(s.N * s.C), dmean(s.N), drstd(s.N);
      cuda::LayerNormForward(dx.get(), dw.get(), with_bias ? db.get() : nullptr, dy.get(),
                             dmean.get(), drstd.get(), s.N, s.C, kEps, stream.get());
      EXPECT_TRUE(RelClose(dy.Download(), ToDouble(y), 1e-5));
      EXPECT_TRUE(RelClose(dmean.Download(), ToDouble(mean), 1e-5));
      EXPECT_TRUE(RelClose(drstd.Download(), ToDouble(rstd), 1e-5));
    }
  }
}

TEST(LayerNormGpu, BackwardMatchesCpu) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << NoGpuReason();
  Stream stream = TestStream();
  Rng rng(22);
  for (const Shape& s : kShapes) {
    for (bool with_bias : {true, false}) {
      SCOPED_TRACE(absl::StrCat(Describe(s), " bias=", with_bias));
      const std::vector<float> x = Input(rng, s), w = rng.Normal(s.C), b = rng.Normal(s.C);
      const std::vector<float> g = rng.Normal(s.N * s.C);
      const std::vector<float> dw0 = rng.Uniform(s.C), db0 = rng.Uniform(s.C);
      std::vector<float> y(s.N * s.C), mean(s.N), rstd(s.N);
      cpu::LayerNormForward(x.data(), w.data(), b.data(), y.data(), mean.data(), rstd.data(), s.N,
                            s.C, kEps);
      std::vector<float> dx(s.N * s.C), dw = dw0, db = db0;
      cpu::LayerNormBackward(g.data(), x.data(), w.data(), mean.data(), rstd.data(), dx.data(),
                             dw.data(), with_bias ? db.data() : nullptr, s.N, s.C);

      DeviceBuffer<float> d_g(g), d_x(x), d_w(w), d_mean(mean), d_rstd(rstd), d_dx(s.N * s.C),
          d_dw(dw0), d_db(db0), scratch(cuda::LayerNormBackwardScratchFloats(s.N, s.C));
      cuda::LayerNormBackward(d_g.get(), d_x.get(), d_w.get(), d_mean.get(), d_rstd.get(),
                              d_dx.get(), d_dw.get(), with_bias ? d_db.get() : nullptr,
                              scratch.get(), s.N, s.C, stream.get());
      EXPECT_TRUE(RelClose(d_dx.Download(), ToDouble(dx), 1e-5));
      EXPECT_TRUE(RelClose(d_dw.Download(), ToDouble(dw), 1e-5));
      if (with_bias) {
        EXPECT_TRUE(RelClose(d_db.Download(), ToDouble(db), 1e-5));
      } else {
        EXPECT_TRUE(BitEqual(d_db.Download(), db0));  // untouched
      }
    }
  }
}

TEST(RMSNormGpu, ForwardMatchesCpu) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << NoGpuReason();
  Stream stream = TestStream();
  Rng rng(23);
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(Describe(s));
    const std::vector<float> x = Input(rng, s), w = rng.Normal(s.C);
    std::vector<float> y(s.N * s.C), rstd(s.N);
    cpu::RMSNormForward(x.data(), w.data(), y.data(), rstd.data(), s.N, s.C, kEps);
    DeviceBuffer<float> dx(x), dw(w), dy(s.N * s.C), drstd(s.N);
    cuda::RMSNormForward(dx.get(), dw.get(), dy.get(), drstd.get(), s.N, s.C, kEps, stream.get());
    EXPECT_TRUE(RelClose(dy.Download(), ToDouble(y), 1e-5));
    EXPECT_TRUE(RelClose(drstd.Download(), ToDouble(rstd), 1e-5));
  }
}

TEST(RMSNormGpu, BackwardMatchesCpu) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << NoGpuReason();
  Stream stream = TestStream();
  Rng rng(24);
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(Describe(s));
    const std::vector<float> x = Input(rng, s), w = rng.Normal(s.C), g = rng.Normal(s.N * s.C);
    const std::vector<float> dw0 = rng.Uniform(s.C);
    std::vector<float> y(s.N * s.C), rstd(s.N);
    cpu::RMSNormForward(x.data(), w.data(), y.data(), rstd.data(), s.N, s.C, kEps);
    std::vector<float> dx(s.N * s.C), dw = dw0;
    cpu::RMSNormBackward(g.data(), x.data(), w.data(), rstd.data(), dx.data(), dw.data(), s.N, s.C);
    ASSERT_LE(cuda::RMSNormBackwardScratchFloats(s.N, s.C),
              cuda::LayerNormBackwardScratchFloats(s.N, s.C));
    DeviceBuffer<float> d_g(g), d_x(x), d_w(w), d_rstd(rstd), d_dx(s.N * s.C), d_dw(dw0),
        scratch(cuda::RMSNormBackwardScratchFloats(s.N, s.C));
    cuda::RMSNormBackward(d_g.get(), d_x.get(), d_w.get(), d_rstd.get(), d_dx.get(), d_dw.get(),
                          scratch.get(), s.N, s.C, stream.get());
    // With C = 1, dx = rstd·g·eps/(x² + eps) is all cancellation (rounding
    // noise on both backends), so only C > 1 compares dx.
    if (s.C > 1) {
      EXPECT_TRUE(RelClose(d_dx.Download(), ToDouble(dx), 1e-5));
    }
    EXPECT_TRUE(RelClose(d_dw.Download(), ToDouble(dw), 1e-5));
  }
}

TEST(LayerNormGpu, BackwardIsDeterministic) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << NoGpuReason();
  Stream stream = TestStream();
  Rng rng(25);
  const Shape s{8192, 768};
  const std::vector<float> x = Input(rng, s), w = rng.Normal(s.C), b = rng.Normal(s.C);
  DeviceBuffer<float> d_x(x), d_w(w), d_b(b), d_y(s.N * s.C), d_mean(s.N), d_rstd(s.N),
      d_g(rng.Normal(s.N * s.C)), d_dx(s.N * s.C), d_dw(s.C), d_db(s.C),
      scratch(cuda::LayerNormBackwardScratchFloats(s.N, s.C));
  cuda::LayerNormForward(d_x.get(), d_w.get(), d_b.get(), d_y.get(), d_mean.get(), d_rstd.get(),
                         s.N, s.C, kEps, stream.get());
  std::vector<float> first_dw, first_db;
  for (int i = 0; i < 3; ++i) {
    d_dw.Upload(std::vector<float>(s.C, 0.0f));
    d_db.Upload(std::vector<float>(s.C, 0.0f));
    cuda::LayerNormBackward(d_g.get(), d_x.get(), d_w.get(), d_mean.get(), d_rstd.get(), d_dx.get(),
                            d_dw.get(), d_db.get(), scratch.get(), s.N, s.C, stream.get());
    if (i == 0) {
      first_dw = d_dw.Download();
      first_db = d_db.Download();
    } else {
      EXPECT_TRUE(BitEqual(d_dw.Download(), first_dw));
      EXPECT_TRUE(BitEqual(d_db.Download(), first_db));
    }
  }
}

}  // namespace
}  // namespace gtp::kernels::testing
