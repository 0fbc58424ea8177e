// The chunk reductions of the UCX backend against comm/internal/ops.h, bit
// for bit: every dtype and op, odd counts, NaN/inf/-0 inputs, in place too.
#include "comm/ucx/ucx_reduce.h"

#include <cstring>
#include <random>
#include <vector>

#include "comm/internal/ops.h"
#include "gtest/gtest.h"

namespace gtp::comm::ucx_internal {
namespace {

// Random bytes for `count` elements of `dtype`, with specials mixed in.
std::vector<char> Random(DType dtype, int64_t count, std::mt19937& rng) {
  std::vector<char> v(count * SizeOf(dtype) + 1);
  std::uniform_real_distribution<float> u(-100, 100);
  for (int64_t i = 0; i < count; ++i) {
    float f = u(rng);
    if (i % 7 == 3) f = std::nanf("");
    if (i % 11 == 5) f = -0.0f;
    if (i % 13 == 6) f = i % 2 ? INFINITY : -INFINITY;
    char* p = v.data() + i * SizeOf(dtype);
    switch (dtype) {
      case DType::kF32: std::memcpy(p, &f, 4); break;
      case DType::kBF16: { uint16_t b = F32ToBF16Bits(f); std::memcpy(p, &b, 2); break; }
      case DType::kF16: { uint16_t b = F32ToF16Bits(f); std::memcpy(p, &b, 2); break; }
      case DType::kI32: { int32_t x = static_cast<int32_t>(rng()); std::memcpy(p, &x, 4); break; }
      default: { int64_t x = static_cast<int64_t>(rng()) << 20; std::memcpy(p, &x, 8); break; }
    }
  }
  return v;
}

TEST(UcxReduce, MatchesInternalOpsBitForBit) {
  std::mt19937 rng(7);
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16, DType::kI32, DType::kI64}) {
    const DType wide = internal::WideType(dt);
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMean, ReduceOp::kMax, ReduceOp::kMin}) {
      for (int64_t count : {0, 1, 15, 16, 17, 100, 1027}) {
        for (int group_size : {1, 3}) {
          SCOPED_TRACE(testing::Message() << DTypeName(dt) << " " << ReduceOpName(op) << " count "
                                          << count << " group " << group_size);
          std::vector<char> acc_narrow = Random(dt, count, rng), src = Random(dt, count, rng);
          std::vector<char> acc(count * SizeOf(wide) + 1);
          internal::Widen(dt, acc_narrow.data(), acc.data(), count);
          // Reference: combine in place, then finish.
          std::vector<char> want_acc = acc;
          internal::CombineNarrow(dt, op, want_acc.data(), src.data(), count);
          std::vector<char> want(count * SizeOf(dt) + 1);
          internal::Finish(dt, op, group_size, want_acc.data(), want.data(), count);

          std::vector<char> got_acc = acc;
          CombineChunk(dt, op, got_acc.data(), src.data(), count);
          EXPECT_EQ(got_acc, want_acc);
          std::vector<char> got(count * SizeOf(dt) + 1), in = acc;
          CombineFinishChunk(dt, op, group_size, in.data(), src.data(), got.data(), count);
          EXPECT_EQ(got, want);
          EXPECT_EQ(in, acc);  // in_wide untouched
          std::vector<char> in_place = src;
          CombineFinishChunk(dt, op, group_size, acc.data(), in_place.data(), in_place.data(),
                             count);
          EXPECT_EQ(in_place, want);
          // The first step's partial arrives narrow.
          std::vector<char> wide_out(acc.size());
          WidenCombineChunk(dt, op, acc_narrow.data(), src.data(), wide_out.data(), count);
          EXPECT_EQ(wide_out, want_acc);
          std::vector<char> got2(want.size());
          WidenCombineFinishChunk(dt, op, group_size, acc_narrow.data(), src.data(), got2.data(),
                                  count);
          EXPECT_EQ(got2, want);
          std::vector<char> in_place2 = src;
          WidenCombineFinishChunk(dt, op, group_size, acc_narrow.data(), in_place2.data(),
                                  in_place2.data(), count);
          EXPECT_EQ(in_place2, want);
        }
      }
    }
  }
}

}  // namespace
}  // namespace gtp::comm::ucx_internal
