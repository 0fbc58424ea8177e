// cpu::DecodeAttention and ops::DecodeAttention (CPU) against a double
// reference: several cache lengths (1 included, odd ones), GQA ratios 1/2/4,
// head sizes 16/64 (and 40, 256), one query or a causal block of prompt
// queries. Cache rows past the last position hold NaN, so reading one fails.
#include "core/kernels/decode_attention.h"

#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/allocator.h"
#include "core/kernels/decode_attention_kernels.h"
#include "core/kernels/decode_attention_reference.h"
#include "core/kernels/testing/harness.h"
#include "gtest/gtest.h"

namespace gtp::kernels::testing {
namespace {

struct Case {
  int64_t L, n, NKV, group, HS;  // L: keys of the last query (pos0 + n)
};

std::vector<Case> Cases() {
  std::vector<Case> cs;
  for (int64_t L : {1, 2, 7, 31, 33, 100, 257})
    for (int64_t group : {1, 2, 4})
      for (int64_t HS : {16, 64}) {
        cs.push_back({L, 1, 2, group, HS});
        if (L >= 3) cs.push_back({L, 3, 2, group, HS});
      }
  cs.push_back({1, 1, 1, 1, 16});     // a single head
  cs.push_back({45, 5, 3, 2, 40});    // HS not a multiple of 32
  cs.push_back({19, 19, 1, 4, 256});  // a whole prompt at once, the largest CUDA head
  return cs;
}

// Cache [L + 3, NKV, HS] with NaN past row L.
std::vector<float> Cache(Rng& rng, const Case& c) {
  std::vector<float> x = rng.Normal((c.L + 3) * c.NKV * c.HS);
  for (size_t j = c.L * c.NKV * c.HS; j < x.size(); ++j) x[j] = NAN;
  return x;
}

TEST(DecodeAttention, CpuMatchesReference) {
  Rng rng(21);
  for (const Case& c : Cases()) {
    const int64_t NH = c.NKV * c.group, pos0 = c.L - c.n;
    SCOPED_TRACE(absl::StrCat("L=", c.L, " n=", c.n, " NH=", NH, " NKV=", c.NKV, " HS=", c.HS));
    const std::vector<float> q = rng.Normal(c.n * NH * c.HS, 0.0f, 1.5f);
    const std::vector<float> k = Cache(rng, c), v = Cache(rng, c);
    std::vector<float> out = NaNs(q.size());
    cpu::DecodeAttention(q.data(), k.data(), v.data(), out.data(), c.n, pos0, NH, c.NKV, c.HS);
    EXPECT_TRUE(RelClose(out, RefDecodeAttention(q, k, v, c.n, pos0, NH, c.NKV, c.HS), 1e-5));
  }
}

TEST(DecodeAttention, OpDispatchesToCpu) {
  HeapAllocator host;
  const Exec e = Exec::Cpu(host);
  Rng rng(22);
  const Case c{12, 4, 2, 2, 16};
  const int64_t NH = 4, pos0 = c.L - c.n;
  std::vector<float> q = rng.Normal(c.n * NH * c.HS), k = Cache(rng, c), v = Cache(rng, c);
  std::vector<float> out = NaNs(q.size());
  const Device cpu = Device::Cpu();
  const Tensor tq = Tensor::Wrap(q.data(), {c.n, NH, c.HS}, DType::kF32, cpu);
  const Tensor tk = Tensor::Wrap(k.data(), {c.L + 3, c.NKV, c.HS}, DType::kF32, cpu);
  const Tensor tv = Tensor::Wrap(v.data(), {c.L + 3, c.NKV, c.HS}, DType::kF32, cpu);
  const Tensor to = Tensor::Wrap(out.data(), {c.n, NH, c.HS}, DType::kF32, cpu);
  ops::DecodeAttention(e, tq, tk, tv, pos0, to);
  EXPECT_TRUE(RelClose(out, RefDecodeAttention(q, k, v, c.n, pos0, NH, c.NKV, c.HS), 1e-5));
  // Query i of the block equals a one-query call at position pos0 + i.
  for (int64_t i = 0; i < c.n; ++i) {
    std::vector<float> one = NaNs(NH * c.HS);
    cpu::DecodeAttention(q.data() + i * NH * c.HS, k.data(), v.data(), one.data(), 1, pos0 + i, NH,
                         c.NKV, c.HS);
    for (int64_t j = 0; j < NH * c.HS; ++j) EXPECT_EQ(one[j], out[i * NH * c.HS + j]) << i;
  }
  ops::DecodeAttention(e, tq.Slice(0, 0), tk, tv, c.L, to.Slice(0, 0));  // n = 0: nothing
}

TEST(DecodeAttentionDeathTest, RefusesPositionsPastTheCache) {
  HeapAllocator host;
  const Exec e = Exec::Cpu(host);
  const Tensor q = e.Zeros({2, 4, 16}), k = e.Zeros({5, 2, 16}), v = e.Zeros({5, 2, 16});
  EXPECT_DEATH(ops::DecodeAttention(e, q, k, v, 4, e.Empty({2, 4, 16})), "outside the cache");
  EXPECT_DEATH(ops::DecodeAttention(e, e.Zeros({2, 3, 16}), k, v, 0, e.Empty({2, 3, 16})),
               "multiple of NKV");
}

}  // namespace
}  // namespace gtp::kernels::testing
