// GPU tests of the staged cross-entropy ops (vocab-sharded) and the
// unsharded CrossEntropyForward against the CPU versions. Targets include
// ignored rows (−1) and ids held by other shards.
#include <cuda_runtime_api.h>

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

}  // namespace
}  // namespace gtp::kernels::testing
