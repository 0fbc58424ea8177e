#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/kernels/cpu.h"
#include "core/kernels/testing/harness.h"
#include "core/kernels/testing/reference.h"
#include "gtest/gtest.h"

namespace gtp::kernels::testing {
namespace {

struct Case {
  int64_t N, V, C, vocab_start;
  int32_t global_vocab;  // ids are drawn from [0, global_vocab)
};

// Unsharded, and shards whose local range covers only part of the ids.
const Case kCases[] = {{1, 1, 1, 0, 1},   {3, 5, 3, 0, 5},      {257, 11, 7, 0, 11},
                       {33, 7, 5, 5, 20}, {257, 4, 64, 16, 20}, {8, 3, 257, 0, 6}};

TEST(EmbeddingForward, GathersLocalRowsAndZeroesOthers) {
  Rng rng(11);
  for (const Case& c : kCases) {
    SCOPED_TRACE(absl::StrCat("N=", c.N, " V=", c.V, " C=", c.C, " vocab_start=", c.vocab_start));
    std::vector<int32_t> idx = rng.Ints(c.N, 0, c.global_vocab - 1);
    std::vector<float> table = rng.Uniform(c.V * c.C), out = NaNs(c.N * c.C);
    cpu::EmbeddingForward(idx.data(), table.data(), out.data(), c.N, c.V, c.C, c.vocab_start);
    EXPECT_TRUE(RelClose(out, RefEmbedding(idx, ToDouble(table), c.V, c.C, c.vocab_start), 0.0));
  }
}

TEST(EmbeddingBackward, MatchesFiniteDifferencesAndAccumulates) {
  Rng rng(12);
  for (const Case& c : kCases) {
    SCOPED_TRACE(absl::StrCat("N=", c.N, " V=", c.V, " C=", c.C, " vocab_start=", c.vocab_start));
    // N ≫ V in most cases, so ids repeat and their gradients must add up.
    std::vector<int32_t> idx = rng.Ints(c.N, 0, c.global_vocab - 1);
    std::vector<float> table = rng.Uniform(c.V * c.C), dout = rng.Uniform(c.N * c.C);
    std::vector<double> fd = FiniteDifferenceGradient(
        [&](const std::vector<double>& t) { return RefEmbedding(idx, t, c.V, c.C, c.vocab_start); },
        ToDouble(table), ToDouble(dout));
    std::vector<float> dtable0 = rng.Uniform(c.V * c.C), dtable = dtable0;
    cpu::EmbeddingBackward(idx.data(), dout.data(), dtable.data(), c.N, c.V, c.C, c.vocab_start);
    for (size_t i = 0; i < fd.size(); ++i) fd[i] += dtable0[i];  // += semantics
    EXPECT_TRUE(RelClose(dtable, fd, 1e-6));
  }
}

// Repeated ids add up in token order: bit-identical to a sequential f32 sum,
// which is what makes the op deterministic on every backend.
TEST(EmbeddingBackward, AccumulatesInTokenOrder) {
  Rng rng(13);
  const int64_t N = 1000, V = 3, C = 5;
  std::vector<int32_t> idx = rng.Ints(N, 0, V - 1);
  // Mixed magnitudes make the f32 sum order-sensitive.
  std::vector<float> dout = rng.Uniform(N * C);
  for (size_t i = 0; i < dout.size(); i += 7) dout[i] *= 1e4f;
  std::vector<float> expect(V * C, 0.0f), dtable(V * C, 0.0f);
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t c = 0; c < C; ++c) expect[idx[n] * C + c] += dout[n * C + c];
  }
  cpu::EmbeddingBackward(idx.data(), dout.data(), dtable.data(), N, V, C, 0);
  EXPECT_EQ(0, std::memcmp(expect.data(), dtable.data(), sizeof(float) * V * C));
}

// ---- bf16 -----------------------------------------------------------------
// Forward copies bf16 rows (exact); backward widens bf16 dout exactly and adds
// it into the f32 dtable in token order, so it equals the f32 kernel run on
// the widened dout bit for bit.
TEST(EmbeddingBf16, ForwardCopiesRowsExactly) {
  Rng rng(14);
  for (const Case& c : kCases) {
    SCOPED_TRACE(absl::StrCat("N=", c.N, " V=", c.V, " C=", c.C, " vocab_start=", c.vocab_start));
    const std::vector<int32_t> idx = rng.Ints(c.N, 0, c.global_vocab - 1);
    const std::vector<bf16> table = ToBF16(rng.Uniform(c.V * c.C));
    std::vector<bf16> out = ToBF16(NaNs(c.N * c.C));
    cpu::EmbeddingForward(idx.data(), table.data(), out.data(), c.N, c.V, c.C, c.vocab_start);
    EXPECT_TRUE(RelClose(out, RefEmbedding(idx, ToDouble(table), c.V, c.C, c.vocab_start), 0.0));
  }
}

TEST(EmbeddingBf16, BackwardAccumulatesIntoF32) {
  Rng rng(15);
  for (const Case& c : kCases) {
    SCOPED_TRACE(absl::StrCat("N=", c.N, " V=", c.V, " C=", c.C, " vocab_start=", c.vocab_start));
    const std::vector<int32_t> idx = rng.Ints(c.N, 0, c.global_vocab - 1);
    const std::vector<bf16> dout = ToBF16(rng.Uniform(c.N * c.C));
    const std::vector<float> dtable0 = rng.Uniform(c.V * c.C);
    std::vector<double> ref(dtable0.begin(), dtable0.end());
    for (int64_t n = 0; n < c.N; ++n) {
      const int64_t row = idx[n] - c.vocab_start;
      if (row < 0 || row >= c.V) continue;
      for (int64_t k = 0; k < c.C; ++k) ref[row * c.C + k] += ToF32(dout[n * c.C + k]);
    }
    std::vector<float> dtable = dtable0, dtable_f32 = dtable0;
    cpu::EmbeddingBackward(idx.data(), dout.data(), dtable.data(), c.N, c.V, c.C, c.vocab_start);
    EXPECT_TRUE(RelClose(dtable, ref, 1e-6));
    cpu::EmbeddingBackward(idx.data(), ToFloat(dout).data(), dtable_f32.data(), c.N, c.V, c.C,
                           c.vocab_start);
    EXPECT_EQ(0, std::memcmp(dtable.data(), dtable_f32.data(), sizeof(float) * dtable.size()));
  }
}

}  // namespace
}  // namespace gtp::kernels::testing
