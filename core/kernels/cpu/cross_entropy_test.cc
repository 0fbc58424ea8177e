#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/kernels/cpu.h"
#include "core/kernels/testing/harness.h"
#include "core/kernels/testing/reference.h"
#include "gtest/gtest.h"

namespace gtp::kernels::testing {
namespace {

struct Shape {
  int64_t N, V;
};
const Shape kShapes[] = {{1, 1}, {3, 5}, {33, 257}, {8, 1000}};

// Targets in [0, V) with about one in five ignored (−1); row 0 always counts.
std::vector<int32_t> Targets(Rng& rng, int64_t N, int64_t V) {
  std::vector<int32_t> t = rng.Ints(N, 0, static_cast<int32_t>(V) - 1);
  std::vector<int32_t> drop = rng.Ints(N, 0, 4);
  for (int64_t n = 1; n < N; ++n) {
    if (drop[n] == 0) t[n] = -1;
  }
  return t;
}

TEST(CrossEntropyForward, MatchesReference) {
  Rng rng(61);
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(absl::StrCat("N=", s.N, " V=", s.V));
    std::vector<float> logits = rng.Uniform(s.N * s.V, -4.0f, 4.0f), loss = NaNs(s.N);
    std::vector<int32_t> targets = Targets(rng, s.N, s.V);
    GuardedBuffer scratch(3 * s.N);
    cpu::CrossEntropyForward(logits.data(), targets.data(), loss.data(), scratch.data(), s.N, s.V);
    EXPECT_TRUE(scratch.GuardIntact());
    EXPECT_TRUE(RelClose(loss, RefCrossEntropy(ToDouble(logits), targets, s.N, s.V), 1e-5));
    for (int64_t n = 0; n < s.N; ++n) {
      if (targets[n] < 0) {
        EXPECT_EQ(loss[n], 0.0f) << "ignored row " << n;
      }
    }
  }
}

// Logits far outside exp's f32 range: the row max must be subtracted first.
TEST(CrossEntropyForward, StableForLargeLogits) {
  Rng rng(62);
  const int64_t N = 4, V = 100;
  std::vector<float> logits = rng.Uniform(N * V, -4.0f, 4.0f), loss(N), scratch(3 * N);
  for (int64_t v = 0; v < V; ++v) {
    logits[v] += 1000.0f;
    logits[V + v] -= 1000.0f;
  }
  std::vector<int32_t> targets = {3, 7, 99, 0};
  cpu::CrossEntropyForward(logits.data(), targets.data(), loss.data(), scratch.data(), N, V);
  // f32 logits near ±1000 carry an ulp of 6e-5, so allow a little more.
  EXPECT_TRUE(RelClose(loss, RefCrossEntropy(ToDouble(logits), targets, N, V), 1e-4));
}

// Runs stages 1–2 unsharded (vocab_start 0): row_max and sumexp for the backward.
void UnshardedStats(const std::vector<float>& logits, const std::vector<int32_t>& targets,
                    int64_t N, int64_t V, std::vector<float>* row_max, std::vector<float>* sumexp) {
  std::vector<float> target_logit(N);
  row_max->resize(N);
  sumexp->resize(N);
  cpu::CrossEntropyStats(logits.data(), targets.data(), row_max->data(), target_logit.data(), N, V,
                         0);
  cpu::CrossEntropySumExp(logits.data(), row_max->data(), sumexp->data(), N, V);
}

TEST(CrossEntropyBackward, MatchesFiniteDifferences) {
  Rng rng(63);
  for (const Shape& s : {Shape{1, 1}, Shape{3, 5}, Shape{9, 257}}) {
    SCOPED_TRACE(absl::StrCat("N=", s.N, " V=", s.V));
    std::vector<float> logits = rng.Uniform(s.N * s.V, -4.0f, 4.0f), dloss = rng.Normal(s.N);
    std::vector<int32_t> targets = Targets(rng, s.N, s.V);
    std::vector<float> row_max, sumexp, dlogits = NaNs(s.N * s.V);
    UnshardedStats(logits, targets, s.N, s.V, &row_max, &sumexp);
    cpu::CrossEntropyBackward(logits.data(), row_max.data(), sumexp.data(), targets.data(),
                              dloss.data(), dlogits.data(), s.N, s.V, 0);
    std::vector<double> fd = FiniteDifferenceGradient(
        [&](const std::vector<double>& l) { return RefCrossEntropy(l, targets, s.N, s.V); },
        ToDouble(logits), ToDouble(dloss));
    EXPECT_TRUE(RelClose(dlogits, fd, 1e-5));
    for (int64_t n = 0; n < s.N; ++n) {
      if (targets[n] >= 0) continue;
      for (int64_t v = 0; v < s.V; ++v)
        ASSERT_EQ(dlogits[n * s.V + v], 0.0f) << "ignored row " << n;
    }
  }
}

// The staged API run per vocab shard, with the all-reduces (max, sum) done on
// the host, gives the unsharded loss and gradient.
TEST(CrossEntropySharded, EqualsUnsharded) {
  Rng rng(64);
  const int64_t N = 17, V = 257;
  const std::vector<std::vector<int64_t>> layouts = {{128, 129}, {100, 57, 100}, {64, 64, 64, 65}};
  std::vector<float> logits = rng.Uniform(N * V, -5.0f, 5.0f), dloss = rng.Normal(N);
  std::vector<int32_t> targets = Targets(rng, N, V);
  targets[1] = 0;  // first and last column of the vocabulary, on the edge shards
  targets[2] = V - 1;

  std::vector<float> loss(N), scratch(3 * N), row_max, sumexp, dlogits(N * V);
  cpu::CrossEntropyForward(logits.data(), targets.data(), loss.data(), scratch.data(), N, V);
  UnshardedStats(logits, targets, N, V, &row_max, &sumexp);
  cpu::CrossEntropyBackward(logits.data(), row_max.data(), sumexp.data(), targets.data(),
                            dloss.data(), dlogits.data(), N, V, 0);

  for (const std::vector<int64_t>& widths : layouts) {
    SCOPED_TRACE(absl::StrCat("shards=", widths.size()));
    const size_t S = widths.size();
    std::vector<int64_t> starts(S, 0);
    for (size_t r = 1; r < S; ++r) starts[r] = starts[r - 1] + widths[r - 1];
    // Each rank's slice of the logits.
    std::vector<std::vector<float>> shard(S);
    for (size_t r = 0; r < S; ++r) {
      for (int64_t n = 0; n < N; ++n) {
        const float* row = &logits[n * V + starts[r]];
        shard[r].insert(shard[r].end(), row, row + widths[r]);
      }
    }
    // Stage 1 + all-reduce(max) of row_max, all-reduce(sum) of target_logit.
    std::vector<float> g_max(N, -INFINITY), g_target(N, 0.0f);
    for (size_t r = 0; r < S; ++r) {
      std::vector<float> m = NaNs(N), t = NaNs(N);
      cpu::CrossEntropyStats(shard[r].data(), targets.data(), m.data(), t.data(), N, widths[r],
                             starts[r]);
      for (int64_t n = 0; n < N; ++n) {
        g_max[n] = std::max(g_max[n], m[n]);
        g_target[n] += t[n];
      }
    }
    // Stage 2 + all-reduce(sum) of sumexp.
    std::vector<float> g_sum(N, 0.0f);
    for (size_t r = 0; r < S; ++r) {
      std::vector<float> e = NaNs(N);
      cpu::CrossEntropySumExp(shard[r].data(), g_max.data(), e.data(), N, widths[r]);
      for (int64_t n = 0; n < N; ++n) g_sum[n] += e[n];
    }
    // Stage 3 (identical on every rank) and stage 4 per shard.
    std::vector<float> s_loss = NaNs(N);
    cpu::CrossEntropyLoss(g_max.data(), g_sum.data(), g_target.data(), targets.data(),
                          s_loss.data(), N);
    EXPECT_TRUE(RelClose(s_loss, ToDouble(loss), 1e-6));
    std::vector<float> s_dlogits(N * V);
    for (size_t r = 0; r < S; ++r) {
      std::vector<float> d = NaNs(N * widths[r]);
      cpu::CrossEntropyBackward(shard[r].data(), g_max.data(), g_sum.data(), targets.data(),
                                dloss.data(), d.data(), N, widths[r], starts[r]);
      for (int64_t n = 0; n < N; ++n) {
        std::copy(&d[n * widths[r]], &d[n * widths[r]] + widths[r], &s_dlogits[n * V + starts[r]]);
      }
    }
    EXPECT_TRUE(RelClose(s_dlogits, ToDouble(dlogits), 1e-6));
  }
}

// ---- bf16 logits -------------------------------------------------------------
// Statistics stay f32 (row max and target logit are exact widenings; sumexp an
// f32 sum); dlogits are rounded to bf16 once. On the same (rounded) logits the
// bf16 kernels equal the f32 kernels (rounded once), bit for bit, sharded too.
TEST(RefCrossEntropyBackward, MatchesFiniteDifferences) {
  Rng rng(65);
  const int64_t N = 9, V = 37;
  const std::vector<double> logits = ToDouble(rng.Uniform(N * V, -4.0f, 4.0f)),
                            dloss = ToDouble(rng.Normal(N));
  const std::vector<int32_t> targets = Targets(rng, N, V);
  const std::vector<double> ref = RefCrossEntropyBackward(logits, targets, dloss, N, V);
  const std::vector<double> fd = FiniteDifferenceGradient(
      [&](const std::vector<double>& l) { return RefCrossEntropy(l, targets, N, V); }, logits,
      dloss);
  EXPECT_TRUE(RelClose(std::vector<float>(ref.begin(), ref.end()), fd, 1e-6));
}

TEST(CrossEntropyBf16, StagesMatchReferenceAndF32Kernels) {
  Rng rng(66);
  struct Case {
    int64_t N, V, vocab_start, global_vocab;
  };
  for (const Case& c : {Case{1, 1, 0, 1}, Case{3, 5, 0, 5}, Case{33, 257, 0, 257},
                        Case{4, 4099, 0, 4099}, Case{17, 100, 57, 257}}) {
    SCOPED_TRACE(absl::StrCat("N=", c.N, " V=", c.V, " vocab_start=", c.vocab_start));
    const std::vector<bf16> logits = ToBF16(rng.Uniform(c.N * c.V, -4.0f, 4.0f));
    const std::vector<float> dloss = rng.Normal(c.N);
    const std::vector<int32_t> targets = Targets(rng, c.N, static_cast<int32_t>(c.global_vocab));
    std::vector<float> row_max = NaNs(c.N), target_logit = NaNs(c.N), sumexp = NaNs(c.N);
    std::vector<bf16> dlogits = ToBF16(NaNs(c.N * c.V));
    cpu::CrossEntropyStats(logits.data(), targets.data(), row_max.data(), target_logit.data(), c.N,
                           c.V, c.vocab_start);
    cpu::CrossEntropySumExp(logits.data(), row_max.data(), sumexp.data(), c.N, c.V);
    cpu::CrossEntropyBackward(logits.data(), row_max.data(), sumexp.data(), targets.data(),
                              dloss.data(), dlogits.data(), c.N, c.V, c.vocab_start);
    const std::vector<double> ld = ToDouble(logits);
    std::vector<double> ref_max(c.N), ref_target(c.N, 0.0), ref_sum(c.N, 0.0);
    for (int64_t n = 0; n < c.N; ++n) {
      ref_max[n] = *std::max_element(&ld[n * c.V], &ld[n * c.V] + c.V);
      for (int64_t v = 0; v < c.V; ++v) ref_sum[n] += std::exp(ld[n * c.V + v] - ref_max[n]);
      const int64_t col = targets[n] - c.vocab_start;
      if (targets[n] >= 0 && col >= 0 && col < c.V) ref_target[n] = ld[n * c.V + col];
    }
    EXPECT_TRUE(RelClose(row_max, ref_max, 0.0));
    EXPECT_TRUE(RelClose(target_logit, ref_target, 0.0));
    EXPECT_TRUE(RelClose(sumexp, ref_sum, 1e-5));
    if (c.vocab_start == 0 && c.global_vocab == c.V) {
      const std::vector<double> ref =
          RefCrossEntropyBackward(ld, targets, ToDouble(dloss), c.N, c.V);
      EXPECT_TRUE(RelClose(dlogits, ref, 5e-3));
      EXPECT_TRUE(RoundedOnce(dlogits, ref));
    }

    const std::vector<float> lf = ToFloat(logits);
    std::vector<float> row_max_f(c.N), target_logit_f(c.N), sumexp_f(c.N), dlogits_f(c.N * c.V);
    cpu::CrossEntropyStats(lf.data(), targets.data(), row_max_f.data(), target_logit_f.data(), c.N,
                           c.V, c.vocab_start);
    cpu::CrossEntropySumExp(lf.data(), row_max_f.data(), sumexp_f.data(), c.N, c.V);
    cpu::CrossEntropyBackward(lf.data(), row_max_f.data(), sumexp_f.data(), targets.data(),
                              dloss.data(), dlogits_f.data(), c.N, c.V, c.vocab_start);
    EXPECT_EQ(row_max, row_max_f);
    EXPECT_EQ(target_logit, target_logit_f);
    EXPECT_EQ(sumexp, sumexp_f);
    EXPECT_EQ(ToFloat(dlogits), RoundToBF16(dlogits_f));
  }
}

}  // namespace
}  // namespace gtp::kernels::testing
