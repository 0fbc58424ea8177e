// ColumnSumAccumulate on CUDA (cuda/column_sum.cu) gives the CPU's bits
// (cpu/column_sum.cc runs the same documented order, kernels.h): f32 and
// bf16, the vectorised path (C % 8 == 0, aligned) and the scalar one (odd C,
// or x one element off alignment), partial slabs and lanes, more slabs than the
// total's kernel stages at once (20000 rows: 313), sums that start
// non-zero (it accumulates), and a bit-identical rerun. The CPU's accuracy
// is cpu/column_sum_test.cc's.
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "core/cuda_runtime.h"
#include "core/kernels/cpu.h"
#include "core/kernels/cuda.h"
#include "core/kernels/testing/gpu.h"
#include "core/kernels/testing/harness.h"
#include "gtest/gtest.h"

namespace gtp::kernels {
namespace {

using testing::DeviceBuffer;

template <typename T>
void CheckShape(const std::vector<T>& x_host, int offset, int64_t R, int64_t C, cudaStream_t stream) {
  SCOPED_TRACE(::testing::Message() << "R=" << R << " C=" << C << " offset=" << offset);
  std::vector<float> sums(C);
  for (int64_t c = 0; c < C; ++c) sums[c] = 0.125f * static_cast<float>(c % 7) - 0.25f;
  std::vector<float> want = sums;
  cpu::ColumnSumAccumulate(x_host.data() + offset, R, C, want.data());
  DeviceBuffer<T> x(x_host);
  DeviceBuffer<float> s(sums), partial(static_cast<size_t>(cuda::ColumnSumPartials(R, C)));
  cuda::ColumnSumAccumulate(x.get() + offset, R, C, s.get(), partial.get(), stream);
  GTP_CUDA_CHECK(cudaStreamSynchronize(stream));
  EXPECT_TRUE(testing::CompareBits(s.Download(), want, /*nans_match=*/false));
  // Deterministic, and it accumulates: a second call adds the same total again.
  cpu::ColumnSumAccumulate(x_host.data() + offset, R, C, want.data());
  cuda::ColumnSumAccumulate(x.get() + offset, R, C, s.get(), partial.get(), stream);
  GTP_CUDA_CHECK(cudaStreamSynchronize(stream));
  EXPECT_TRUE(testing::CompareBits(s.Download(), want, /*nans_match=*/false));
}

TEST(CudaColumnSum, MatchesTheCpuBitForBit) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << NoGpuReason();
  Stream stream = testing::TestStream();
  testing::Rng rng(17);
  struct Shape {
    int64_t R, C;
  };
  for (const Shape sh :
       {Shape{8192, 768}, Shape{1000, 3072}, Shape{37, 24}, Shape{130, 13}, Shape{5, 1},
        Shape{64, 8}, Shape{65, 16}, Shape{300, 2304}, Shape{20000, 40}}) {
    for (int offset : {0, 1}) {
      const std::vector<float> xf = rng.Normal(sh.R * sh.C + offset);
      CheckShape(xf, offset, sh.R, sh.C, stream.get());
      CheckShape(testing::ToBF16(xf), offset, sh.R, sh.C, stream.get());
    }
  }
}

}  // namespace
}  // namespace gtp::kernels
