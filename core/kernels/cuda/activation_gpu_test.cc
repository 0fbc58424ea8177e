// GPU tests of cuda::Gelu*/SwiGlu* against the CPU versions.
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

const int64_t kSizes[] = {1, 3, 32, 257, 100003};

TEST(GeluGpu, ForwardAndBackwardMatchCpu) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << NoGpuReason();
  Stream stream = TestStream();
  Rng rng(31);
  for (int64_t n : kSizes) {
    SCOPED_TRACE(absl::StrCat("n=", n));
    const std::vector<float> x = rng.Normal(n, 0.0f, 3.0f), dy = rng.Normal(n);
    std::vector<float> y(n), dx(n);
    cpu::GeluForward(x.data(), y.data(), n);
    cpu::GeluBackward(dy.data(), x.data(), dx.data(), n);
    DeviceBuffer<float> d_x(x), d_dy(dy), d_y(n), d_dx(n);
    cuda::GeluForward(d_x.get(), d_y.get(), n, stream.get());
    cuda::GeluBackward(d_dy.get(), d_x.get(), d_dx.get(), n, stream.get());
    EXPECT_TRUE(RelClose(d_y.Download(), ToDouble(y), 1e-5));
    EXPECT_TRUE(RelClose(d_dx.Download(), ToDouble(dx), 1e-5));
  }
}

TEST(SwiGluGpu, ForwardAndBackwardMatchCpu) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << NoGpuReason();
  Stream stream = TestStream();
  Rng rng(32);
  for (int64_t N : {1, 3, 257}) {
    for (int64_t H : {1, 3, 64, 257}) {
      SCOPED_TRACE(absl::StrCat("N=", N, " H=", H));
      const std::vector<float> x = rng.Normal(N * 2 * H, 0.0f, 3.0f), dy = rng.Normal(N * H);
      std::vector<float> y(N * H), dx(N * 2 * H);
      cpu::SwiGluForward(x.data(), y.data(), N, H);
      cpu::SwiGluBackward(dy.data(), x.data(), dx.data(), N, H);
      DeviceBuffer<float> d_x(x), d_dy(dy), d_y(N * H), d_dx(N * 2 * H);
      cuda::SwiGluForward(d_x.get(), d_y.get(), N, H, stream.get());
      cuda::SwiGluBackward(d_dy.get(), d_x.get(), d_dx.get(), N, H, stream.get());
      EXPECT_TRUE(RelClose(d_y.Download(), ToDouble(y), 1e-5));
      EXPECT_TRUE(RelClose(d_dx.Download(), ToDouble(dx), 1e-5));
    }
  }
}

// ---- bf16 against the double reference ------------------------------------
// Inputs rounded to bf16, the reference run on the rounded values; one
// rounding of each output (≤ 2⁻⁸ relative per element). `offset` misaligns
// every buffer by one element, which takes the scalar path.
constexpr double kBf16Tol = 5e-3;

// Copies v to the device `offset` elements into the buffer.
DeviceBuffer<bf16> Padded(const std::vector<bf16>& v, int offset) {
  std::vector<bf16> p(offset, bf16{0});
  p.insert(p.end(), v.begin(), v.end());
  return DeviceBuffer<bf16>(p);
}

std::vector<bf16> Unpadded(const DeviceBuffer<bf16>& d, int offset) {
  std::vector<bf16> v = d.Download();
  v.erase(v.begin(), v.begin() + offset);
  return v;
}

TEST(GeluGpu, Bf16MatchesReference) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << NoGpuReason();
  Stream stream = TestStream();
  Rng rng(33);
  for (int64_t n : kSizes) {
    for (int offset : {0, 1}) {
      SCOPED_TRACE(absl::StrCat("n=", n, " offset=", offset));
      const std::vector<bf16> x = ToBF16(rng.Normal(n, 0.0f, 3.0f)), dy = ToBF16(rng.Normal(n));
      DeviceBuffer<bf16> d_x = Padded(x, offset), d_dy = Padded(dy, offset), d_y(n + offset),
                         d_dx(n + offset);
      cuda::GeluForward(d_x.get() + offset, d_y.get() + offset, n, stream.get());
      cuda::GeluBackward(d_dy.get() + offset, d_x.get() + offset, d_dx.get() + offset, n,
                         stream.get());
      const std::vector<double> ref_y = RefGelu(ToDouble(x)),
                                ref_dx = RefGeluBackward(ToDouble(dy), ToDouble(x));
      EXPECT_TRUE(RelClose(Unpadded(d_y, offset), ref_y, kBf16Tol));
      EXPECT_TRUE(RoundedOnce(Unpadded(d_y, offset), ref_y));
      EXPECT_TRUE(RelClose(Unpadded(d_dx, offset), ref_dx, kBf16Tol));
      EXPECT_TRUE(RoundedOnce(Unpadded(d_dx, offset), ref_dx));
    }
  }
}

TEST(SwiGluGpu, Bf16MatchesReference) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << NoGpuReason();
  Stream stream = TestStream();
  Rng rng(34);
  for (int64_t N : {1, 3, 257}) {
    for (int64_t H : {1, 3, 64, 257}) {
      for (int offset : {0, 1}) {
        SCOPED_TRACE(absl::StrCat("N=", N, " H=", H, " offset=", offset));
        const std::vector<bf16> x = ToBF16(rng.Normal(N * 2 * H, 0.0f, 3.0f)),
                                dy = ToBF16(rng.Normal(N * H));
        DeviceBuffer<bf16> d_x = Padded(x, offset), d_dy = Padded(dy, offset), d_y(N * H + offset),
                           d_dx(N * 2 * H + offset);
        cuda::SwiGluForward(d_x.get() + offset, d_y.get() + offset, N, H, stream.get());
        cuda::SwiGluBackward(d_dy.get() + offset, d_x.get() + offset, d_dx.get() + offset, N, H,
                             stream.get());
        const std::vector<double> ref_y = RefSwiGlu(ToDouble(x), N, H),
                                  ref_dx = RefSwiGluBackward(ToDouble(dy), ToDouble(x), N, H);
        EXPECT_TRUE(RelClose(Unpadded(d_y, offset), ref_y, kBf16Tol));
        EXPECT_TRUE(RoundedOnce(Unpadded(d_y, offset), ref_y));
        EXPECT_TRUE(RelClose(Unpadded(d_dx, offset), ref_dx, kBf16Tol));
        EXPECT_TRUE(RoundedOnce(Unpadded(d_dx, offset), ref_dx));
      }
    }
  }
}

}  // namespace
}  // namespace gtp::kernels::testing
