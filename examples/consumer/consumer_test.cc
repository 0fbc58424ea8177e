// A consumer workspace builds against @gtp//core alone.
#include <cstring>

#include "core/dtype.h"
#include "core/philox.h"
#include "core/tensor.h"
#include "core/version.h"
#include "gtest/gtest.h"

TEST(Consumer, UsesCoreTensorsAndVersion) {
  gtp::HeapAllocator host;
  gtp::Tensor t = gtp::Tensor::Zeros({4, 8}, gtp::DType::kBF16, host);
  EXPECT_EQ(t.nbytes(), 64u);
  EXPECT_EQ(t.Slice(1, 3).numel(), 16);
  EXPECT_EQ(gtp::BF16BitsToF32(gtp::F32ToBF16Bits(1.5f)), 1.5f);
  EXPECT_GE(gtp::core::kVersionMajor, 0);
  EXPECT_GT(std::strlen(gtp::core::kVersion), 0u);
  EXPECT_EQ(gtp::Philox4x32_10(0, 0, 0, 0, 0, 0).v[0], 0x6627e8d5u);
}
