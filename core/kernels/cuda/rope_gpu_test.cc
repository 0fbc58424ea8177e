// cuda::RopeForward/Backward against the CPU versions.
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/cuda_runtime.h"
#include "core/kernels/cpu.h"
#include "core/kernels/cuda.h"
#include "core/kernels/testing/gpu.h"
#include "core/kernels/testing/harness.h"
#include "core/kernels/testing/reference.h"
#include "gtest/gtest.h"

namespace gtp::kernels::testing {
namespace {

TEST(CudaRope, MatchesCpu) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << NoGpuReason();
  Stream stream = TestStream();
  Rng rng(4);
  struct D { int64_t B, T, NH, HS; };
  for (D s : {D{1, 1, 1, 2}, D{2, 37, 3, 64}, D{4, 1024, 12, 64}}) {
    const int64_t n = s.B * s.T * s.NH * s.HS;
    auto x = rng.Normal(n);
    std::vector<float> want(n), want_back(n);
    cpu::RopeForward(x.data(), want.data(), s.B, s.T, s.NH, s.HS, 10000.0f);
    cpu::RopeBackward(x.data(), want_back.data(), s.B, s.T, s.NH, s.HS, 10000.0f);
    DeviceBuffer<float> dx(x), dy(n);
    cuda::RopeForward(dx.get(), dy.get(), s.B, s.T, s.NH, s.HS, 10000.0f, stream.get());
    EXPECT_TRUE(RelClose(dy.Download(), ToDouble(want), 1e-6));
    cuda::RopeBackward(dx.get(), dx.get(), s.B, s.T, s.NH, s.HS, 10000.0f, stream.get());  // in place
    EXPECT_TRUE(RelClose(dx.Download(), ToDouble(want_back), 1e-6));
  }
}

// bf16 against the double reference on the rounded input: rotated in f32,
// rounded once (≤ 2⁻⁸ relative per element); backward in place.
TEST(CudaRope, Bf16MatchesReference) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << NoGpuReason();
  Stream stream = TestStream();
  Rng rng(5);
  struct D {
    int64_t B, T, NH, HS;
  };
  for (D s : {D{1, 1, 1, 2}, D{2, 37, 3, 64}, D{4, 1024, 12, 64}}) {
    SCOPED_TRACE(absl::StrCat("B=", s.B, " T=", s.T, " NH=", s.NH, " HS=", s.HS));
    const int64_t n = s.B * s.T * s.NH * s.HS;
    const std::vector<bf16> x = ToBF16(rng.Normal(n));
    DeviceBuffer<bf16> dx(x), dy(n);
    const std::vector<double> ref_y = RefRope(ToDouble(x), s.B, s.T, s.NH, s.HS, 10000.0, 1.0),
                              ref_dx = RefRope(ToDouble(x), s.B, s.T, s.NH, s.HS, 10000.0, -1.0);
    cuda::RopeForward(dx.get(), dy.get(), s.B, s.T, s.NH, s.HS, 10000.0f, stream.get());
    EXPECT_TRUE(RelClose(dy.Download(), ref_y, 5e-3));
    EXPECT_TRUE(RoundedOnce(dy.Download(), ref_y));
    cuda::RopeBackward(dx.get(), dx.get(), s.B, s.T, s.NH, s.HS, 10000.0f, stream.get());
    EXPECT_TRUE(RelClose(dx.Download(), ref_dx, 5e-3));
    EXPECT_TRUE(RoundedOnce(dx.Download(), ref_dx));
  }
}

TEST(CudaRope, PositionsMatchCpu) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << NoGpuReason();
  Stream stream = TestStream();
  Rng rng(6);
  const int64_t B = 2, T = 6, NH = 3, HS = 64, n = B * T * NH * HS;
  const std::vector<int32_t> pos = {0, 5, 6, 11, 1, 10};
  auto x = rng.Normal(n);
  std::vector<float> want(n), want_back(n);
  cpu::RopeForward(x.data(), want.data(), B, T, NH, HS, 10000.0f, pos.data());
  cpu::RopeBackward(x.data(), want_back.data(), B, T, NH, HS, 10000.0f, pos.data());
  DeviceBuffer<float> dx(x), dy(n);
  DeviceBuffer<int32_t> dpos(pos);
  cuda::RopeForward(dx.get(), dy.get(), B, T, NH, HS, 10000.0f, stream.get(), dpos.get());
  EXPECT_TRUE(RelClose(dy.Download(), ToDouble(want), 1e-6));
  cuda::RopeBackward(dx.get(), dx.get(), B, T, NH, HS, 10000.0f, stream.get(), dpos.get());
  EXPECT_TRUE(RelClose(dx.Download(), ToDouble(want_back), 1e-6));
}

// row_stride: the heads as a column block of wider rows (q and k in place in
// a packed QKV matrix), against the CPU kernel on the same packed rows; the
// other columns untouched (they hold the input).
TEST(CudaRope, RowStrideMatchesCpu) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << NoGpuReason();
  Stream stream = TestStream();
  Rng rng(8);
  const int64_t B = 2, T = 64, NH = 16, HS = 64, R = 24 * HS,
                col = 0;  // q + k of NH 12, NKV 4 (GQA)
  auto x = rng.Normal(B * T * R);
  std::vector<float> want = x, want_back = x;
  cpu::RopeForward(want.data() + col, want.data() + col, B, T, NH, HS, 10000.0f, nullptr, R);
  cpu::RopeBackward(want_back.data() + col, want_back.data() + col, B, T, NH, HS, 10000.0f, nullptr,
                    R);
  DeviceBuffer<float> dx(x), db(x);
  cuda::RopeForward(dx.get() + col, dx.get() + col, B, T, NH, HS, 10000.0f, stream.get(), nullptr,
                    R);
  EXPECT_TRUE(RelClose(dx.Download(), ToDouble(want), 1e-6));
  cuda::RopeBackward(db.get() + col, db.get() + col, B, T, NH, HS, 10000.0f, stream.get(), nullptr,
                     R);
  EXPECT_TRUE(RelClose(db.Download(), ToDouble(want_back), 1e-6));
  // Untouched columns are exactly the input (RelClose is norm-wise).
  const std::vector<float> got = dx.Download();
  for (int64_t r = 0; r < B * T; ++r)
    for (int64_t c = NH * HS; c < R; ++c) ASSERT_EQ(got[r * R + c], x[r * R + c]) << r << "," << c;
}

}  // namespace
}  // namespace gtp::kernels::testing
