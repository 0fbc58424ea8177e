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
#include "core/kernels/testing/reference.h"
#include "core/status.h"
#include "gtest/gtest.h"

namespace gtp::kernels::testing {
namespace {

struct Shape {
  int64_t N, C;
};
// bf16 C = 256·k, k ≤ 8, takes the fused backward (dw/db inside the dx
// kernel): 256, 768, 1024 and 1536 with its column sums in registers, 1792
// and 2048 in shared memory.
// bf16 forwards with k ≤ 8 keep the row in registers: 2048 is the widest.
const Shape kShapes[] = {{1, 1},     {3, 5},     {1, 257},   {257, 3},   {33, 64},
                         {257, 768}, {5000, 7},  {64, 4099}, {300, 256}, {129, 1024},
                         {70, 1536}, {40, 1792}, {17, 2048}};
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

// The residual gradient fused into dx (f32 and bf16, LayerNorm and RMSNorm)
// equals dx computed without it plus the residual (the CPU kernel's f32 sum).
TEST(NormGpu, ResidualGradientIsAddedIntoDx) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << NoGpuReason();
  Stream stream = TestStream();
  Rng rng(23);
  for (const Shape& s : {Shape{257, 768}, Shape{33, 64}, Shape{5, 7}}) {
    for (bool rms : {false, true}) {
      SCOPED_TRACE(absl::StrCat(Describe(s), rms ? " rms" : " ln"));
      const std::vector<float> x = Input(rng, s), w = rng.Normal(s.C), b = rng.Normal(s.C);
      const std::vector<float> g = rng.Normal(s.N * s.C), res = rng.Normal(s.N * s.C);
      std::vector<float> y(s.N * s.C), mean(s.N), rstd(s.N), dx(s.N * s.C), dw(s.C, 0.0f),
          db(s.C, 0.0f);
      if (rms) {
        cpu::RMSNormForward(x.data(), w.data(), y.data(), rstd.data(), s.N, s.C, kEps);
        cpu::RMSNormBackward(g.data(), x.data(), w.data(), rstd.data(), dx.data(), dw.data(), s.N,
                             s.C);
      } else {
        cpu::LayerNormForward(x.data(), w.data(), b.data(), y.data(), mean.data(), rstd.data(),
                              s.N, s.C, kEps);
        cpu::LayerNormBackward(g.data(), x.data(), w.data(), mean.data(), rstd.data(), dx.data(),
                               dw.data(), db.data(), s.N, s.C);
      }
      std::vector<double> want(s.N * s.C);
      for (size_t i = 0; i < want.size(); ++i) want[i] = static_cast<double>(dx[i]) + res[i];
      // f32
      DeviceBuffer<float> d_g(g), d_x(x), d_w(w), d_mean(mean), d_rstd(rstd), d_res(res),
          d_dx(s.N * s.C), d_dw(s.C), d_db(s.C),
          scratch(cuda::LayerNormBackwardScratchFloats(s.N, s.C));
      if (rms) {
        cuda::RMSNormBackward(d_g.get(), d_x.get(), d_w.get(), d_rstd.get(), d_dx.get(), d_dw.get(),
                              scratch.get(), s.N, s.C, stream.get(), d_res.get());
      } else {
        cuda::LayerNormBackward(d_g.get(), d_x.get(), d_w.get(), d_mean.get(), d_rstd.get(),
                                d_dx.get(), d_dw.get(), d_db.get(), scratch.get(), s.N, s.C,
                                stream.get(), d_res.get());
      }
      EXPECT_TRUE(RelClose(d_dx.Download(), want, 1e-5));
      // bf16 (one rounding of the fused sum)
      auto b16 = [](const std::vector<float>& v) {
        std::vector<bf16> o(v.size());
        for (size_t i = 0; i < v.size(); ++i) o[i] = gtp::ToBF16(v[i]);
        return o;
      };
      DeviceBuffer<bf16> e_g(b16(g)), e_x(b16(x)), e_w(b16(w)), e_res(b16(res)), e_dx(s.N * s.C);
      if (rms) {
        cuda::RMSNormBackward(e_g.get(), e_x.get(), e_w.get(), d_rstd.get(), e_dx.get(), d_dw.get(),
                              scratch.get(), s.N, s.C, stream.get(), e_res.get());
      } else {
        cuda::LayerNormBackward(e_g.get(), e_x.get(), e_w.get(), d_mean.get(), d_rstd.get(),
                                e_dx.get(), d_dw.get(), d_db.get(), scratch.get(), s.N, s.C,
                                stream.get(), e_res.get());
      }
      EXPECT_TRUE(RelClose(e_dx.Download(), want, 3e-2));
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

// ---- bf16 against the double reference ------------------------------------
// Inputs rounded to bf16, the reference run on the rounded values. bf16
// outputs carry one rounding (≤ 2⁻⁸ relative per element); f32 statistics and
// parameter gradients only f32 arithmetic. Shapes with C % 8 == 0 take the
// 16-byte path, the others the scalar one; Bf16UnalignedTakesScalarPath forces
// the scalar path on a C % 8 == 0 shape.
constexpr double kBf16Tol = 5e-3;
constexpr double kF32Tol = 1e-4;

// Checks the bf16 LayerNorm forward + backward of one shape against the
// reference; `offset` elements of misalignment on every bf16 buffer.
void CheckLayerNormBf16(Rng& rng, const Shape& s, bool with_bias, int offset, cudaStream_t stream) {
  const std::vector<bf16> x = ToBF16(Input(rng, s)), w = ToBF16(rng.Normal(s.C)),
                          b = ToBF16(rng.Normal(s.C)), g = ToBF16(rng.Normal(s.N * s.C));
  const std::vector<float> dw0 = rng.Uniform(s.C), db0 = rng.Uniform(s.C);
  auto padded = [&](const std::vector<bf16>& v) {
    std::vector<bf16> p(offset, bf16{0});
    p.insert(p.end(), v.begin(), v.end());
    return p;
  };
  DeviceBuffer<bf16> d_x(padded(x)), d_w(padded(w)), d_b(padded(b)), d_g(padded(g)),
      d_y(s.N * s.C + offset), d_dx(s.N * s.C + offset);
  DeviceBuffer<float> d_mean(s.N), d_rstd(s.N), d_dw(dw0), d_db(db0),
      scratch(cuda::LayerNormBackwardScratchFloats(s.N, s.C));
  cuda::LayerNormForward(d_x.get() + offset, d_w.get() + offset,
                         with_bias ? d_b.get() + offset : nullptr, d_y.get() + offset, d_mean.get(),
                         d_rstd.get(), s.N, s.C, kEps, stream);
  cuda::LayerNormBackward(d_g.get() + offset, d_x.get() + offset, d_w.get() + offset, d_mean.get(),
                          d_rstd.get(), d_dx.get() + offset, d_dw.get(),
                          with_bias ? d_db.get() : nullptr, scratch.get(), s.N, s.C, stream);
  const std::vector<double> xd = ToDouble(x), wd = ToDouble(w);
  std::vector<double> ref_mean, ref_rstd, ref_dx, ref_dw, ref_db;
  const std::vector<double> ref_y =
      RefLayerNorm(xd, wd, with_bias ? ToDouble(b) : std::vector<double>(), s.N, s.C, kEps,
                   &ref_mean, &ref_rstd);
  RefLayerNormBackward(ToDouble(g), xd, wd, s.N, s.C, kEps, &ref_dx, &ref_dw, &ref_db);
  for (int64_t c = 0; c < s.C; ++c) ref_dw[c] += dw0[c], ref_db[c] += db0[c];
  std::vector<bf16> y = d_y.Download(), dx = d_dx.Download();
  y.erase(y.begin(), y.begin() + offset);
  dx.erase(dx.begin(), dx.begin() + offset);
  EXPECT_TRUE(RelClose(y, ref_y, kBf16Tol));
  EXPECT_TRUE(RoundedOnce(y, ref_y));
  EXPECT_TRUE(RelClose(d_mean.Download(), ref_mean, kF32Tol));
  EXPECT_TRUE(RelClose(d_rstd.Download(), ref_rstd, kF32Tol));
  EXPECT_TRUE(RelClose(dx, ref_dx, kBf16Tol));  // C = 1: reference exactly 0 (absolute)
  EXPECT_TRUE(RoundedOnce(dx, ref_dx));
  const std::vector<float> dw = d_dw.Download(), db = d_db.Download();
  EXPECT_TRUE(RelClose(dw, ref_dw, kF32Tol));
  if (with_bias) {
    EXPECT_TRUE(RelClose(db, ref_db, kF32Tol));
  } else {
    EXPECT_TRUE(BitEqual(db, db0));  // untouched
  }
}

TEST(LayerNormGpu, Bf16MatchesReference) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << NoGpuReason();
  Stream stream = TestStream();
  Rng rng(26);
  for (const Shape& s : kShapes) {
    for (bool with_bias : {true, false}) {
      SCOPED_TRACE(absl::StrCat(Describe(s), " bias=", with_bias));
      CheckLayerNormBf16(rng, s, with_bias, /*offset=*/0, stream.get());
    }
  }
}

// Buffers misaligned by one element take the scalar path on C % 8 == 0 rows.
TEST(LayerNormGpu, Bf16UnalignedTakesScalarPath) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << NoGpuReason();
  Stream stream = TestStream();
  Rng rng(27);
  for (const Shape& s : {Shape{33, 64}, Shape{257, 768}}) {
    for (bool with_bias : {true, false}) {
      SCOPED_TRACE(absl::StrCat(Describe(s), " bias=", with_bias));
      CheckLayerNormBf16(rng, s, with_bias, /*offset=*/1, stream.get());
    }
  }
}

TEST(RMSNormGpu, Bf16MatchesReference) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << NoGpuReason();
  Stream stream = TestStream();
  Rng rng(28);
  for (const Shape& s : kShapes) {
    for (int offset : {0, 1}) {
      if (offset == 1 && s.C % 8 != 0) continue;  // already the scalar path
      SCOPED_TRACE(absl::StrCat(Describe(s), " offset=", offset));
      const std::vector<bf16> x = ToBF16(Input(rng, s)), w = ToBF16(rng.Normal(s.C)),
                              g = ToBF16(rng.Normal(s.N * s.C));
      const std::vector<float> dw0 = rng.Uniform(s.C);
      std::vector<bf16> xp(offset, bf16{0}), wp(offset, bf16{0}), gp(offset, bf16{0});
      xp.insert(xp.end(), x.begin(), x.end());
      wp.insert(wp.end(), w.begin(), w.end());
      gp.insert(gp.end(), g.begin(), g.end());
      DeviceBuffer<bf16> d_x(xp), d_w(wp), d_g(gp), d_y(s.N * s.C + offset),
          d_dx(s.N * s.C + offset);
      DeviceBuffer<float> d_rstd(s.N), d_dw(dw0),
          scratch(cuda::RMSNormBackwardScratchFloats(s.N, s.C));
      cuda::RMSNormForward(d_x.get() + offset, d_w.get() + offset, d_y.get() + offset, d_rstd.get(),
                           s.N, s.C, kEps, stream.get());
      cuda::RMSNormBackward(d_g.get() + offset, d_x.get() + offset, d_w.get() + offset,
                            d_rstd.get(), d_dx.get() + offset, d_dw.get(), scratch.get(), s.N, s.C,
                            stream.get());
      std::vector<double> ref_rstd, ref_dx, ref_dw;
      const std::vector<double> ref_y =
          RefRMSNorm(ToDouble(x), ToDouble(w), s.N, s.C, kEps, &ref_rstd);
      RefRMSNormBackward(ToDouble(g), ToDouble(x), ToDouble(w), s.N, s.C, kEps, &ref_dx, &ref_dw);
      for (int64_t c = 0; c < s.C; ++c) ref_dw[c] += dw0[c];
      std::vector<bf16> y = d_y.Download(), dx = d_dx.Download();
      y.erase(y.begin(), y.begin() + offset);
      dx.erase(dx.begin(), dx.begin() + offset);
      EXPECT_TRUE(RelClose(y, ref_y, kBf16Tol));
      EXPECT_TRUE(RoundedOnce(y, ref_y));
      EXPECT_TRUE(RelClose(d_rstd.Download(), ref_rstd, kF32Tol));
      // C = 1: dx is all cancellation (see RMSNormGpu.BackwardMatchesCpu).
      if (s.C > 1) {
        EXPECT_TRUE(RelClose(dx, ref_dx, kBf16Tol));
        EXPECT_TRUE(RoundedOnce(dx, ref_dx));
      }
      EXPECT_TRUE(RelClose(d_dw.Download(), ref_dw, kF32Tol));
    }
  }
}

TEST(LayerNormGpu, Bf16BackwardIsDeterministic) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << NoGpuReason();
  Stream stream = TestStream();
  Rng rng(29);
  const Shape s{8192, 768};
  DeviceBuffer<bf16> d_x(ToBF16(Input(rng, s))), d_w(ToBF16(rng.Normal(s.C))),
      d_b(ToBF16(rng.Normal(s.C))), d_y(s.N * s.C), d_g(ToBF16(rng.Normal(s.N * s.C))),
      d_dx(s.N * s.C);
  DeviceBuffer<float> d_mean(s.N), d_rstd(s.N), d_dw(s.C), d_db(s.C),
      scratch(cuda::LayerNormBackwardScratchFloats(s.N, s.C));
  cuda::LayerNormForward(d_x.get(), d_w.get(), d_b.get(), d_y.get(), d_mean.get(), d_rstd.get(),
                         s.N, s.C, kEps, stream.get());
  std::vector<float> first_dw, first_db;
  std::vector<bf16> first_dx;
  for (int i = 0; i < 3; ++i) {
    d_dw.Upload(std::vector<float>(s.C, 0.0f));
    d_db.Upload(std::vector<float>(s.C, 0.0f));
    cuda::LayerNormBackward(d_g.get(), d_x.get(), d_w.get(), d_mean.get(), d_rstd.get(), d_dx.get(),
                            d_dw.get(), d_db.get(), scratch.get(), s.N, s.C, stream.get());
    if (i == 0) {
      first_dw = d_dw.Download();
      first_db = d_db.Download();
      first_dx = d_dx.Download();
    } else {
      EXPECT_TRUE(BitEqual(d_dw.Download(), first_dw));
      EXPECT_TRUE(BitEqual(d_db.Download(), first_db));
      EXPECT_TRUE(BitEqual(d_dx.Download(), first_dx));
    }
  }
}

}  // namespace
}  // namespace gtp::kernels::testing
