#include "core/allocator.h"

#include "core/cuda_runtime.h"
#include "core/tensor.h"
#include "gtest/gtest.h"

namespace gtp {
namespace {

TEST(CudaCachingAllocatorGpu, StatsAndReuse) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << NoGpuReason();
  CudaCachingAllocator alloc(0);
  {
    Tensor a = Tensor::Empty({1000}, DType::kF32, alloc);  // 4000 -> 4096
    EXPECT_EQ(alloc.stats().bytes_in_use, 4096);
    Tensor b = Tensor::Empty({3 << 20}, DType::kBF16, alloc);  // 6 MiB
    EXPECT_EQ(alloc.stats().bytes_in_use, 4096 + (6 << 20));
  }
  AllocatorStats s = alloc.stats();
  EXPECT_EQ(s.bytes_in_use, 0);
  EXPECT_EQ(s.peak_bytes_in_use, 4096 + (6 << 20));
  EXPECT_EQ(s.bytes_reserved, 4096 + (6 << 20));
  Tensor c = Tensor::Empty({1000}, DType::kF32, alloc);
  EXPECT_EQ(alloc.stats().num_cache_hits, 1);
  alloc.EmptyCache();
  EXPECT_EQ(alloc.stats().bytes_reserved, 4096);
}

TEST(CudaCachingAllocatorGpu, HostDeviceRoundTrip) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << NoGpuReason();
  CudaCachingAllocator dev(0);
  HeapAllocator host;
  Tensor h = Tensor::Empty({257}, DType::kF32, host);
  for (int i = 0; i < 257; ++i) h.data<float>()[i] = i * 0.5f;
  auto d = CopyTo(h, dev);
  ASSERT_TRUE(d.ok());
  auto back = CopyTo(*d, host);
  ASSERT_TRUE(back.ok());
  for (int i = 0; i < 257; ++i) EXPECT_EQ(back->data<float>()[i], i * 0.5f);
}

TEST(CudaCachingAllocatorGpu, OutOfMemoryIsAStatus) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << NoGpuReason();
  CudaCachingAllocator alloc(0);
  auto p = alloc.Allocate(size_t{1} << 50);
  EXPECT_EQ(p.status().code(), absl::StatusCode::kResourceExhausted) << p.status();
}

}  // namespace
}  // namespace gtp

namespace gtp {
namespace {

TEST(PinnedHostAllocatorGpu, PageLockedAndCounted) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << NoGpuReason();
  PinnedHostAllocator pinned;
  {
    Tensor h = Tensor::Empty({1000}, DType::kF32, pinned);
    EXPECT_EQ(pinned.stats().bytes_in_use, 4000);
    cudaPointerAttributes attr{};
    ASSERT_EQ(cudaPointerGetAttributes(&attr, h.raw_data()), cudaSuccess);
    EXPECT_EQ(attr.type, cudaMemoryTypeHost);  // page-locked, registered with CUDA
    for (int i = 0; i < 1000; ++i) h.data<float>()[i] = static_cast<float>(i) - 0.5f;
    CudaCachingAllocator dev(0);
    Tensor d = Tensor::Empty({1000}, DType::kF32, dev);
    Tensor back = Tensor::Empty({1000}, DType::kF32, pinned);
    ASSERT_TRUE(Copy(h, d, nullptr, /*sync=*/false).ok());
    ASSERT_TRUE(Copy(d, back, nullptr, /*sync=*/true).ok());
    for (int i = 0; i < 1000; ++i) ASSERT_EQ(back.data<float>()[i], static_cast<float>(i) - 0.5f);
  }
  EXPECT_EQ(pinned.stats().bytes_in_use, 0);
}

}  // namespace
// Row-pitched copies on the GPU (one cudaMemcpy2DAsync): columns 3, 4 of a
// device matrix into a device block, and back into columns 0, 1 of another.
TEST(CudaCachingAllocatorGpu, PitchedDeviceCopies) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << NoGpuReason();
  CudaCachingAllocator dev(0);
  HeapAllocator host;
  Tensor h = Tensor::Empty({4, 6}, DType::kF32, host);
  for (int i = 0; i < 24; ++i) h.data<float>()[i] = static_cast<float>(i);
  auto m = CopyTo(h, dev);
  ASSERT_TRUE(m.ok());
  Tensor block = Tensor::Empty({4, 2}, DType::kF32, dev);
  ASSERT_TRUE(Copy(m->Strided({4, 2}, {6, 1}, 3), block).ok());
  Tensor z = Tensor::Zeros({4, 6}, DType::kF32, dev);
  ASSERT_TRUE(Copy(block, z.Strided({4, 2}, {6, 1})).ok());
  auto back = CopyTo(z, host);
  ASSERT_TRUE(back.ok());
  for (int r = 0; r < 4; ++r) {
    for (int c = 0; c < 6; ++c) {
      const float want = c == 0 ? 6 * r + 3 : c == 1 ? 6 * r + 4 : 0;
      EXPECT_EQ(back->data<float>()[6 * r + c], want) << r << "," << c;
    }
  }
  // Not pitched (a transpose) is refused by name, not copied wrong.
  Tensor t = Tensor::Empty({6, 4}, DType::kF32, dev);
  EXPECT_EQ(Copy(m->Transpose(0, 1), t).code(), absl::StatusCode::kUnimplemented);
}

}  // namespace gtp
