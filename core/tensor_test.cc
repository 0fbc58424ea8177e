#include "core/tensor.h"

#include <numeric>

#include "core/allocator.h"
#include "core/cuda_runtime.h"
#include "gtest/gtest.h"

namespace gtp {
namespace {

TEST(Shape, NumelStridesString) {
  Shape s{2, 3, 4};
  EXPECT_EQ(s.numel(), 24);
  EXPECT_EQ(s.ContiguousStrides(), (Shape{12, 4, 1}));
  EXPECT_EQ(s.ToString(), "[2, 3, 4]");
  EXPECT_EQ(Shape{}.numel(), 1);
}

TEST(Tensor, SliceSharesStorageWithoutCopy) {
  HeapAllocator host;
  Tensor t = Tensor::Empty({5, 3}, DType::kF32, host);
  float* p = t.data<float>();
  std::iota(p, p + 15, 0.0f);
  Tensor s = t.Slice(2, 4);
  EXPECT_EQ(s.shape(), (Shape{2, 3}));
  EXPECT_EQ(s.data<float>(), p + 6);
  EXPECT_EQ(s.data<float>()[0], 6.0f);
  EXPECT_TRUE(s.is_contiguous());
  EXPECT_EQ(s.storage(), t.storage());
  EXPECT_EQ(host.stats().num_allocs, 1);
}

TEST(Tensor, StoragePersistsWhileViewsLive) {
  HeapAllocator host;
  Tensor view;
  {
    Tensor t = Tensor::Zeros({4, 4}, DType::kBF16, host);
    view = t.Slice(1, 2);
  }
  EXPECT_EQ(host.stats().bytes_in_use, 64);
  view = Tensor();
  EXPECT_EQ(host.stats().bytes_in_use, 0);
  EXPECT_EQ(host.stats().peak_bytes_in_use, 64);
}

TEST(Tensor, TransposeAndStridedCopy) {
  HeapAllocator host;
  Tensor a = Tensor::Empty({2, 3}, DType::kF32, host);
  std::iota(a.data<float>(), a.data<float>() + 6, 0.0f);
  Tensor at = a.Transpose(0, 1);
  EXPECT_FALSE(at.is_contiguous());
  Tensor b = Tensor::Empty({3, 2}, DType::kF32, host);
  ASSERT_TRUE(Copy(at, b).ok());
  const float expect[] = {0, 3, 1, 4, 2, 5};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(b.data<float>()[i], expect[i]);
}

TEST(Tensor, ViewAndErrors) {
  HeapAllocator host;
  Tensor a = Tensor::Empty({2, 6}, DType::kF32, host);
  EXPECT_EQ(a.View({3, 4}).shape(), (Shape{3, 4}));
  Tensor c = Tensor::Empty({3, 4}, DType::kBF16, host);
  absl::Status st = Copy(a.View({3, 4}), c);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_DEATH(a.Slice(1, 3), "out of range");
}

TEST(Tensor, StridedBoundsChecked) {
  HeapAllocator host;
  Tensor a = Tensor::Empty({10}, DType::kF32, host);
  EXPECT_EQ(a.Strided({5}, {2}).numel(), 5);
  EXPECT_DEATH(a.Strided({6}, {2}), "out of storage bounds");
}

TEST(CudaRuntime, NoGpuIsNotAnError) {
  int n = CudaDeviceCount();
  EXPECT_GE(n, 0);
  if (n == 0) {
    EXPECT_NE(NoGpuReason().find("no CUDA device"), std::string::npos);
  }
}

TEST(CudaCachingAllocator, RoundSize) {
  EXPECT_EQ(CudaCachingAllocator::RoundSize(1), 512u);
  EXPECT_EQ(CudaCachingAllocator::RoundSize(513), 1024u);
  EXPECT_EQ(CudaCachingAllocator::RoundSize((1 << 20) + 1), 2u << 20);
  EXPECT_EQ(CudaCachingAllocator::RoundSize(5u << 20), 6u << 20);
}

}  // namespace
}  // namespace gtp
