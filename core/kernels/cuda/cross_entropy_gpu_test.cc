// GPU tests of the staged cross-entropy ops (vocab-sharded), the unsharded
// CrossEntropyForward and the fused forward + backward against the CPU
// versions and the double references. Targets include
// ignored rows (−1) and ids held by other shards.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "core/cuda_runtime.h"
#include "core/kernels/cpu.h"
#include "core/kernels/cuda.h"
#include "core/kernels/testing/gpu.h"
#include "core/kernels/testing/harness.h"
#include "core/kernels/testing/reference.h"
#include "core/status.h"
#include "gtest/gtest.h"

namespace gtp::kernels::testing {
namespace {

struct Case {
  int64_t N, V, vocab_start, global_vocab;
};
const Case kCases[] = {{1, 1, 0, 1},        {3, 5, 0, 5},         {257, 3, 0, 3},
                       {33, 257, 257, 600}, {7, 50257, 0, 50257}, {5, 1000, 500, 3000},
                       {300, 64, 64, 256}};

std::string Describe(const Case& c) {
  return absl::StrCat("N=", c.N, " V=", c.V, " vocab_start=", c.vocab_start,
                      " global_vocab=", c.global_vocab);
}

std::vector<int32_t> Targets(Rng& rng, const Case& c) {
  std::vector<int32_t> t = rng.Ints(c.N, 0, static_cast<int32_t>(c.global_vocab) - 1);
  for (size_t i = 0; i < t.size(); i += 5) t[i] = -1;  // ignored rows
  return t;
}

// Padded rows (ld > V, the LM head over the padded vocabulary) and the
// in-place backward, bf16: the statistics ignore the pad columns, dlogits is
// 0 there, and in place gives the out-of-place bits.
TEST(CrossEntropyGpu, PaddedRowsAndInPlaceBackward) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << NoGpuReason();
  Stream stream = TestStream();
  Rng rng(44);
  const int64_t N = 37, V = 1001, ld = 1024;
  std::vector<float> full = rng.Normal(N * ld, 0.0f, 3.0f);
  std::vector<bf16> lg(N * ld);
  for (int64_t i = 0; i < N * ld; ++i) lg[i] = gtp::ToBF16(i % ld < V ? full[i] : 1e4f);  // pad: huge
  std::vector<int32_t> tg(N);
  for (int64_t n = 0; n < N; ++n) tg[n] = n % 5 == 4 ? -1 : static_cast<int32_t>((n * 37) % V);
  // Reference on the unpadded rows.
  std::vector<double> dense(N * V);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t v = 0; v < V; ++v) dense[n * V + v] = gtp::ToF32(lg[n * ld + v]);
  const std::vector<double> ref_loss = RefCrossEntropy(dense, tg, N, V);
  DeviceBuffer<bf16> d_lg(lg), d_dl(N * ld);
  DeviceBuffer<int32_t> d_tg(tg);
  DeviceBuffer<float> mx(N), tl(N), se(N), loss(N), dloss(std::vector<float>(N, 0.5f));
  cuda::CrossEntropyStats(d_lg.get(), d_tg.get(), mx.get(), tl.get(), N, V, 0, stream.get(), ld);
  cuda::CrossEntropySumExp(d_lg.get(), mx.get(), se.get(), N, V, stream.get(), ld);
  cuda::CrossEntropyLoss(mx.get(), se.get(), tl.get(), d_tg.get(), loss.get(), N, stream.get());
  EXPECT_TRUE(RelClose(loss.Download(), ref_loss, 1e-5));
  cuda::CrossEntropyBackward(d_lg.get(), mx.get(), se.get(), d_tg.get(), dloss.get(), d_dl.get(), N,
                             V, 0, stream.get(), ld);
  const std::vector<bf16> out_of_place = d_dl.Download();
  for (int64_t n = 0; n < N; ++n)
    for (int64_t v = V; v < ld; ++v) ASSERT_EQ(out_of_place[n * ld + v].bits, 0) << n << "," << v;
  cuda::CrossEntropyBackward(d_lg.get(), mx.get(), se.get(), d_tg.get(), dloss.get(), d_lg.get(), N,
                             V, 0, stream.get(), ld);
  EXPECT_TRUE(BitEqual(d_lg.Download(), out_of_place));
}

TEST(CrossEntropyGpu, StagesMatchCpu) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << NoGpuReason();
  Stream stream = TestStream();
  Rng rng(61);
  for (const Case& c : kCases) {
    SCOPED_TRACE(Describe(c));
    const std::vector<float> logits = rng.Normal(c.N * c.V, 0.0f, 4.0f);
    const std::vector<int32_t> targets = Targets(rng, c);
    const std::vector<float> dloss = rng.Uniform(c.N, 0.5f, 2.0f);
    std::vector<float> row_max(c.N), target_logit(c.N), sumexp(c.N), loss(c.N), dlogits(c.N * c.V);
    cpu::CrossEntropyStats(logits.data(), targets.data(), row_max.data(), target_logit.data(), c.N,
                           c.V, c.vocab_start);
    cpu::CrossEntropySumExp(logits.data(), row_max.data(), sumexp.data(), c.N, c.V);
    cpu::CrossEntropyLoss(row_max.data(), sumexp.data(), target_logit.data(), targets.data(),
                          loss.data(), c.N);
    cpu::CrossEntropyBackward(logits.data(), row_max.data(), sumexp.data(), targets.data(),
                              dloss.data(), dlogits.data(), c.N, c.V, c.vocab_start);

    DeviceBuffer<float> d_logits(logits), d_dloss(dloss), d_row_max(c.N), d_target_logit(c.N),
        d_sumexp(c.N), d_loss(c.N), d_dlogits(c.N * c.V);
    DeviceBuffer<int32_t> d_targets(targets);
    cuda::CrossEntropyStats(d_logits.get(), d_targets.get(), d_row_max.get(), d_target_logit.get(),
                            c.N, c.V, c.vocab_start, stream.get());
    // Max and a copied logit are exact.
    EXPECT_TRUE(BitEqual(d_row_max.Download(), row_max));
    EXPECT_TRUE(BitEqual(d_target_logit.Download(), target_logit));
    cuda::CrossEntropySumExp(d_logits.get(), d_row_max.get(), d_sumexp.get(), c.N, c.V,
                             stream.get());
    // Against a double sum: the CPU's sequential f32 sum drifts by ~1e-4 over
    // V = 50257 terms, the GPU's tree sum much less.
    std::vector<double> sumexp_ref(c.N, 0.0);
    for (int64_t n = 0; n < c.N; ++n) {
      for (int64_t v = 0; v < c.V; ++v) {
        sumexp_ref[n] += std::exp(static_cast<double>(logits[n * c.V + v]) - row_max[n]);
      }
    }
    EXPECT_TRUE(RelClose(d_sumexp.Download(), sumexp_ref, 1e-5));
    // Later stages get the CPU's statistics, so each is tested on its own.
    DeviceBuffer<float> c_sumexp(sumexp);
    cuda::CrossEntropyLoss(d_row_max.get(), c_sumexp.get(), d_target_logit.get(), d_targets.get(),
                           d_loss.get(), c.N, stream.get());
    EXPECT_TRUE(RelClose(d_loss.Download(), ToDouble(loss), 1e-5));
    cuda::CrossEntropyBackward(d_logits.get(), d_row_max.get(), c_sumexp.get(), d_targets.get(),
                               d_dloss.get(), d_dlogits.get(), c.N, c.V, c.vocab_start,
                               stream.get());
    EXPECT_TRUE(RelClose(d_dlogits.Download(), ToDouble(dlogits), 1e-5));
  }
}

TEST(CrossEntropyGpu, ForwardMatchesCpu) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << NoGpuReason();
  Stream stream = TestStream();
  Rng rng(62);
  for (const Case& c : kCases) {
    if (c.vocab_start != 0 || c.global_vocab != c.V) continue;  // unsharded only
    SCOPED_TRACE(Describe(c));
    const std::vector<float> logits = rng.Normal(c.N * c.V, 0.0f, 4.0f);
    const std::vector<int32_t> targets = Targets(rng, c);
    std::vector<float> loss(c.N), scratch(3 * c.N);
    cpu::CrossEntropyForward(logits.data(), targets.data(), loss.data(), scratch.data(), c.N, c.V);
    DeviceBuffer<float> d_logits(logits), d_loss(c.N), d_scratch(3 * c.N);
    DeviceBuffer<int32_t> d_targets(targets);
    cuda::CrossEntropyForward(d_logits.get(), d_targets.get(), d_loss.get(), d_scratch.get(), c.N,
                              c.V, stream.get());
    EXPECT_TRUE(RelClose(d_loss.Download(), ToDouble(loss), 1e-5));
  }
}

// ---- bf16 logits against the double reference -------------------------------
// Row max and target logit are exact widenings; sumexp an f32 sum; dlogits
// rounded to bf16 once. V % 8 == 0 (64, 1000) takes the 16-byte path, the
// rest (50257, 257, ...) the scalar one. The backward reference uses the
// kernel's own (f32) statistics, so sharded cases are checked too.
TEST(CrossEntropyGpu, Bf16StagesMatchReference) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << NoGpuReason();
  Stream stream = TestStream();
  Rng rng(63);
  for (const Case& c : kCases) {
    SCOPED_TRACE(Describe(c));
    const std::vector<bf16> logits = ToBF16(rng.Normal(c.N * c.V, 0.0f, 4.0f));
    const std::vector<int32_t> targets = Targets(rng, c);
    const std::vector<float> dloss = rng.Uniform(c.N, 0.5f, 2.0f);
    DeviceBuffer<bf16> d_logits(logits), d_dlogits(c.N * c.V);
    DeviceBuffer<float> d_dloss(dloss), d_row_max(c.N), d_target_logit(c.N), d_sumexp(c.N);
    DeviceBuffer<int32_t> d_targets(targets);
    cuda::CrossEntropyStats(d_logits.get(), d_targets.get(), d_row_max.get(), d_target_logit.get(),
                            c.N, c.V, c.vocab_start, stream.get());
    cuda::CrossEntropySumExp(d_logits.get(), d_row_max.get(), d_sumexp.get(), c.N, c.V,
                             stream.get());
    cuda::CrossEntropyBackward(d_logits.get(), d_row_max.get(), d_sumexp.get(), d_targets.get(),
                               d_dloss.get(), d_dlogits.get(), c.N, c.V, c.vocab_start,
                               stream.get());
    const std::vector<double> l = ToDouble(logits);
    std::vector<double> ref_max(c.N), ref_target(c.N, 0.0), ref_sum(c.N, 0.0);
    for (int64_t n = 0; n < c.N; ++n) {
      ref_max[n] = *std::max_element(&l[n * c.V], &l[n * c.V] + c.V);
      for (int64_t v = 0; v < c.V; ++v) ref_sum[n] += std::exp(l[n * c.V + v] - ref_max[n]);
      const int64_t col = targets[n] - c.vocab_start;
      if (targets[n] >= 0 && col >= 0 && col < c.V) ref_target[n] = l[n * c.V + col];
    }
    const std::vector<float> row_max = d_row_max.Download(), sumexp = d_sumexp.Download();
    EXPECT_TRUE(RelClose(row_max, ref_max, 0.0));
    EXPECT_TRUE(RelClose(d_target_logit.Download(), ref_target, 0.0));
    EXPECT_TRUE(RelClose(sumexp, ref_sum, 1e-5));
    std::vector<double> ref_dl(c.N * c.V, 0.0);
    for (int64_t n = 0; n < c.N; ++n) {
      if (targets[n] < 0) continue;
      const int64_t col = targets[n] - c.vocab_start;
      for (int64_t v = 0; v < c.V; ++v) {
        ref_dl[n * c.V + v] =
            dloss[n] * (std::exp(l[n * c.V + v] - row_max[n]) / sumexp[n] - (v == col ? 1.0 : 0.0));
      }
    }
    EXPECT_TRUE(RelClose(d_dlogits.Download(), ref_dl, 5e-3));
    EXPECT_TRUE(RoundedOnce(d_dlogits.Download(), ref_dl));
  }
}

// The fused forward + backward (one pass, in place) against the double
// references: padded rows (pad logits huge, must not count; gradient 0 there),
// ignored targets, per-row dloss; vocabularies from one 16-byte vector per
// row to rows longer than a few block strides; and the same bits on a
// second run.
TEST(CrossEntropyGpu, FusedMatchesReference) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << NoGpuReason();
  Stream stream = TestStream();
  Rng rng(45);
  struct FusedCase {
    int64_t N, V, ld;
  };
  for (const FusedCase& c : {FusedCase{5, 8, 8}, FusedCase{37, 1001, 1024},
                             FusedCase{19, 50257, 50304}, FusedCase{3, 65536, 65536},
                             FusedCase{70, 8191, 8200}, FusedCase{2, 150001, 150008}}) {
    SCOPED_TRACE(absl::StrCat("N=", c.N, " V=", c.V, " ld=", c.ld));
    ASSERT_TRUE(cuda::CrossEntropyFusedSupported(reinterpret_cast<void*>(256), c.V, c.ld));
    const std::vector<float> full = rng.Normal(c.N * c.ld, 0.0f, 3.0f);
    std::vector<bf16> lg(c.N * c.ld);
    for (int64_t i = 0; i < c.N * c.ld; ++i) lg[i] = gtp::ToBF16(i % c.ld < c.V ? full[i] : 1e4f);
    std::vector<int32_t> tg(c.N);
    for (int64_t n = 0; n < c.N; ++n) {
      tg[n] = n % 5 == 4 ? -1 : static_cast<int32_t>((n * 7919 + 3) % c.V);
    }
    const std::vector<float> dloss = rng.Uniform(c.N, 0.5f, 2.0f);
    std::vector<double> dense(c.N * c.V);
    for (int64_t n = 0; n < c.N; ++n)
      for (int64_t v = 0; v < c.V; ++v) dense[n * c.V + v] = gtp::ToF32(lg[n * c.ld + v]);
    const std::vector<double> ref_loss = RefCrossEntropy(dense, tg, c.N, c.V);
    const std::vector<double> ref_dl =
        RefCrossEntropyBackward(dense, tg, std::vector<double>(dloss.begin(), dloss.end()), c.N, c.V);
    std::vector<bf16> first;
    for (int run = 0; run < 2; ++run) {
      DeviceBuffer<bf16> d_lg(lg);
      DeviceBuffer<int32_t> d_tg(tg);
      DeviceBuffer<float> d_dloss(dloss), d_loss(c.N);
      cuda::CrossEntropyFused(d_lg.get(), d_tg.get(), d_dloss.get(), d_loss.get(), c.N, c.V, c.ld,
                              stream.get());
      const std::vector<bf16> out = d_lg.Download();
      if (run == 1) {
        EXPECT_TRUE(BitEqual(out, first));
        continue;
      }
      first = out;
      EXPECT_TRUE(RelClose(d_loss.Download(), ref_loss, 1e-5));
      std::vector<bf16> got(c.N * c.V);
      for (int64_t n = 0; n < c.N; ++n) {
        for (int64_t v = 0; v < c.ld; ++v) {
          if (v < c.V) {
            got[n * c.V + v] = out[n * c.ld + v];
          } else {
            ASSERT_EQ(out[n * c.ld + v].bits, 0) << n << "," << v;
          }
        }
      }
      EXPECT_TRUE(RelClose(got, ref_dl, 5e-3));
    }
  }
  EXPECT_FALSE(cuda::CrossEntropyFusedSupported(reinterpret_cast<void*>(258), 64, 64));
  EXPECT_FALSE(cuda::CrossEntropyFusedSupported(reinterpret_cast<void*>(256), 60, 60));
}

}  // namespace
}  // namespace gtp::kernels::testing
