// cuda::DecodeAttention against the CPU version and a double reference:
// cache lengths 1 to 300 (non-multiples of the 8 warps and of 32 included),
// GQA ratios 1/2/4, head sizes 16/64 (and 8, 40, 96, 256), one query or a
// causal block of prompt queries. Outputs start as NaN and cache rows past
// the last position hold NaN, so an unwritten output or an over-read fails;
// two runs give the same bits; ops::DecodeAttention dispatches to it.
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/cuda_runtime.h"
#include "core/kernels/decode_attention.h"
#include "core/kernels/decode_attention_kernels.h"
#include "core/kernels/decode_attention_reference.h"
#include "core/kernels/testing/gpu.h"
#include "core/kernels/testing/harness.h"
#include "gtest/gtest.h"

namespace gtp::kernels::testing {
namespace {

struct Case {
  int64_t L, n, NKV, group, HS;  // L: keys of the last query (pos0 + n)
};

std::vector<Case> Cases() {
  std::vector<Case> cs;
  for (int64_t L : {1, 2, 7, 8, 9, 31, 33, 100, 257, 300})
    for (int64_t group : {1, 2, 4})
      for (int64_t HS : {16, 64}) {
        cs.push_back({L, 1, 2, group, HS});
        if (L >= 3) cs.push_back({L, 3, 2, group, HS});
      }
  cs.push_back({1, 1, 1, 1, 8});
  cs.push_back({45, 5, 3, 2, 40});
  cs.push_back({70, 2, 2, 4, 96});
  cs.push_back({19, 19, 1, 4, 256});  // a whole prompt at once
  cs.push_back({1024, 1, 4, 4, 128});
  return cs;
}

std::vector<float> Cache(Rng& rng, const Case& c) {
  std::vector<float> x = rng.Normal((c.L + 3) * c.NKV * c.HS);
  for (size_t j = c.L * c.NKV * c.HS; j < x.size(); ++j) x[j] = NAN;
  return x;
}

TEST(CudaDecodeAttention, MatchesCpu) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << NoGpuReason();
  Stream stream = TestStream();
  Rng rng(31);
  for (const Case& c : Cases()) {
    const int64_t NH = c.NKV * c.group, pos0 = c.L - c.n;
    SCOPED_TRACE(absl::StrCat("L=", c.L, " n=", c.n, " NH=", NH, " NKV=", c.NKV, " HS=", c.HS));
    const std::vector<float> q = rng.Normal(c.n * NH * c.HS, 0.0f, 1.5f);
    const std::vector<float> k = Cache(rng, c), v = Cache(rng, c);
    std::vector<float> want = NaNs(q.size());
    cpu::DecodeAttention(q.data(), k.data(), v.data(), want.data(), c.n, pos0, NH, c.NKV, c.HS);
    DeviceBuffer<float> dq(q), dk(k), dv(v), dout(q.size());  // dout: NaN
    cuda::DecodeAttention(dq.get(), dk.get(), dv.get(), dout.get(), c.n, pos0, NH, c.NKV, c.HS,
                          stream.get());
    const std::vector<float> got = dout.Download();
    EXPECT_TRUE(RelClose(got, ToDouble(want), 1e-5));
    EXPECT_TRUE(RelClose(got, RefDecodeAttention(q, k, v, c.n, pos0, NH, c.NKV, c.HS), 1e-5));
    dout.Poison();
    cuda::DecodeAttention(dq.get(), dk.get(), dv.get(), dout.get(), c.n, pos0, NH, c.NKV, c.HS,
                          stream.get());
    EXPECT_TRUE(BitEqual(dout.Download(), got));  // deterministic
  }
}

// A NaN in a cache row the query reads reaches its output.
TEST(CudaDecodeAttention, PropagatesNaN) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << NoGpuReason();
  Stream stream = TestStream();
  Rng rng(32);
  const Case c{40, 1, 2, 2, 64};
  const int64_t NH = 4, pos0 = c.L - 1;
  const std::vector<float> q = rng.Normal(NH * c.HS);
  std::vector<float> k = Cache(rng, c), v = Cache(rng, c);
  v[(17 * c.NKV + 1) * c.HS + 5] = NAN;  // row 17, KV head 1: query heads 2 and 3
  DeviceBuffer<float> dq(q), dk(k), dv(v), dout(q.size());
  cuda::DecodeAttention(dq.get(), dk.get(), dv.get(), dout.get(), 1, pos0, NH, c.NKV, c.HS,
                        stream.get());
  const std::vector<float> got = dout.Download();
  for (int64_t h = 0; h < NH; ++h) {
    EXPECT_EQ(std::isnan(got[h * c.HS + 5]), h >= 2) << "head " << h;
    EXPECT_FALSE(std::isnan(got[h * c.HS + 6])) << "head " << h;
  }
}

TEST(CudaDecodeAttention, OpDispatchesToCuda) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << NoGpuReason();
  Stream stream = TestStream();
  Rng rng(33);
  const Case c{50, 4, 2, 2, 64};
  const int64_t NH = 4, pos0 = c.L - c.n;
  const std::vector<float> q = rng.Normal(c.n * NH * c.HS);
  const std::vector<float> k = Cache(rng, c), v = Cache(rng, c);
  DeviceBuffer<float> dq(q), dk(k), dv(v), dout(q.size());
  const Device gpu = Device::Cuda(0);
  Exec e;
  e.device = gpu;
  e.stream = stream.get();
  ops::DecodeAttention(e, Tensor::Wrap(dq.get(), {c.n, NH, c.HS}, DType::kF32, gpu),
                       Tensor::Wrap(dk.get(), {c.L + 3, c.NKV, c.HS}, DType::kF32, gpu),
                       Tensor::Wrap(dv.get(), {c.L + 3, c.NKV, c.HS}, DType::kF32, gpu), pos0,
                       Tensor::Wrap(dout.get(), {c.n, NH, c.HS}, DType::kF32, gpu));
  EXPECT_TRUE(
      RelClose(dout.Download(), RefDecodeAttention(q, k, v, c.n, pos0, NH, c.NKV, c.HS), 1e-5));
}

}  // namespace
}  // namespace gtp::kernels::testing
