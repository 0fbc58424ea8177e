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

// Row-pitched views (a column block; one chunk of each sequence) copy row
// by row, both ways, and match the element-wise reference.
TEST(Tensor, PitchedCopies) {
  HeapAllocator host;
  Tensor m = Tensor::Empty({4, 6}, DType::kF32, host);
  std::iota(m.data<float>(), m.data<float>() + 24, 0.0f);
  Tensor cols = m.Strided({4, 2}, {6, 1}, /*offset=*/3);  // columns 3, 4
  Tensor block = Tensor::Empty({4, 2}, DType::kF32, host);
  ASSERT_TRUE(Copy(cols, block).ok());
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(block.data<float>()[2 * r], 6 * r + 3);
    EXPECT_EQ(block.data<float>()[2 * r + 1], 6 * r + 4);
  }
  // Back into columns 0, 1 of a zeroed matrix; the rest stays zero.
  Tensor z = Tensor::Zeros({4, 6}, DType::kF32, host);
  ASSERT_TRUE(Copy(block, z.Strided({4, 2}, {6, 1})).ok());
  for (int r = 0; r < 4; ++r) {
    for (int c = 0; c < 6; ++c) {
      const float want = c == 0 ? 6 * r + 3 : c == 1 ? 6 * r + 4 : 0;
      EXPECT_EQ(z.data<float>()[6 * r + c], want) << r << "," << c;
    }
  }
  // 3-D: chunk 1 of 2 (2 steps × 3 channels) of each of 2 sequences.
  Tensor seq = Tensor::Empty({2, 4, 3}, DType::kF32, host);
  std::iota(seq.data<float>(), seq.data<float>() + 24, 0.0f);
  Tensor chunk = seq.Strided({2, 2, 3}, {12, 3, 1}, /*offset=*/6);
  Tensor out = Tensor::Empty({2, 2, 3}, DType::kF32, host);
  ASSERT_TRUE(Copy(chunk, out).ok());
  for (int b = 0; b < 2; ++b) {
    for (int i = 0; i < 6; ++i) EXPECT_EQ(out.data<float>()[6 * b + i], 12 * b + 6 + i);
  }
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
