// The cross-entropy CUDA kernels (core/kernels/cuda/cross_entropy.cu: the
// row statistics, Σexp, the loss and the backward of a vocabulary shard, and
// the fused bf16 forward+backward of the TP = 1 training step) run on the
// CPU by the warp emulator (core/kernels/cuda/testing/warp_emulator.h)
// against softmax cross-entropy in double, in three orders of each block's
// threads (bit-identical outputs). cross_entropy_gpu_test runs the same
// kernels on a GPU.
// The emulator before the kernel source:
// clang-format off
#define GTP_CUDA_HOST_EMULATION
#include "core/kernels/cuda/testing/warp_emulator.h"
#include "core/kernels/cuda/cross_entropy.cu"
// clang-format on
// (cross_entropy.cu's launchers now run the grids on the host, synchronously)

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "core/kernels/cuda/testing/emulation_checks.h"
#include "gtest/gtest.h"

namespace gtp::kernels::cuda {
namespace {

alignas(16) double smem[1024];  // the blocks' dynamic shared memory (these kernels take none)

using DVec = std::vector<double>;
using FVec = std::vector<float>;

template <class T>
T From(float f) {
  if constexpr (std::is_same_v<T, float>) {
    return f;
  } else {
    return ToBF16(f);
  }
}
template <class T>
float To(T v) {
  if constexpr (std::is_same_v<T, float>) {
    return v;
  } else {
    return ToF32(v);
  }
}

struct Case {
  int64_t N, V, ld, vocab_start;
};

// N rows of logits (ld columns, V of them vocabulary), targets in the
// shard, outside it and −1 (ignored), and the reference in double.
template <class T>
struct Problem {
  std::vector<T> logits;
  std::vector<int32_t> targets;
  FVec dloss;
  DVec row_max, target_logit, sumexp, loss, dlogits;
};
template <class T>
Problem<T> MakeProblem(const Case& c) {
  Problem<T> p;
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.0f, 3.0f);
  p.logits.resize(c.N * c.ld);
  for (int64_t i = 0; i < c.N * c.ld; ++i) p.logits[i] = From<T>(i % c.ld < c.V ? dist(rng) : NAN);
  for (int64_t n = 0; n < c.N; ++n) {
    const int64_t r = n % 5;
    p.targets.push_back(r == 4   ? -1
                        : r == 3 ? static_cast<int32_t>(c.vocab_start + c.V + n)  // another shard
                                 : static_cast<int32_t>(c.vocab_start + (n * 37) % c.V));
    p.dloss.push_back(0.25f + 0.01f * static_cast<float>(n));
  }
  p.dlogits.assign(c.N * c.ld, 0.0);
  for (int64_t n = 0; n < c.N; ++n) {
    double mx = -INFINITY, se = 0.0;
    for (int64_t v = 0; v < c.V; ++v) mx = std::fmax(mx, To(p.logits[n * c.ld + v]));
    for (int64_t v = 0; v < c.V; ++v) se += std::exp(To(p.logits[n * c.ld + v]) - mx);
    const int64_t col = int64_t{p.targets[n]} - c.vocab_start;
    const bool here = p.targets[n] >= 0 && col >= 0 && col < c.V;
    p.row_max.push_back(mx);
    p.sumexp.push_back(se);
    p.target_logit.push_back(here ? To(p.logits[n * c.ld + col]) : 0.0);
    p.loss.push_back(p.targets[n] < 0 ? 0.0 : std::log(se) + mx - p.target_logit.back());
    if (p.targets[n] < 0) continue;
    for (int64_t v = 0; v < c.V; ++v) {
      p.dlogits[n * c.ld + v] =
          p.dloss[n] * (std::exp(To(p.logits[n * c.ld + v]) - mx) / se - (v == col ? 1.0 : 0.0));
    }
  }
  return p;
}

// The logits are O(3): f32 sums of up to V = 520 exps, well within 1e-5
// relative to the largest value; bf16 dlogits are rounded to bf16 (2⁻⁹).
template <class T>
void RunShard(const Case& c) {
  gtp::emu::SetShared(smem, sizeof(smem));
  const Problem<T> p = MakeProblem<T>(c);
  const auto out = gtp::emu::InEverySchedule([&] {
    FVec row_max(c.N, NAN), target_logit(c.N, NAN), sumexp(c.N, NAN), loss(c.N, NAN);
    std::vector<T> dl(c.N * c.ld, From<T>(NAN));
    CrossEntropyStats(p.logits.data(), p.targets.data(), row_max.data(), target_logit.data(), c.N,
                      c.V, c.vocab_start, nullptr, c.ld);
    CrossEntropySumExp(p.logits.data(), row_max.data(), sumexp.data(), c.N, c.V, nullptr, c.ld);
    CrossEntropyLoss(row_max.data(), sumexp.data(), target_logit.data(), p.targets.data(),
                     loss.data(), c.N, nullptr);
    CrossEntropyBackward(p.logits.data(), row_max.data(), sumexp.data(), p.targets.data(),
                         p.dloss.data(), dl.data(), c.N, c.V, c.vocab_start, nullptr, c.ld);
    FVec dlf;
    for (const T& v : dl) dlf.push_back(To(v));
    return std::vector<FVec>{row_max, target_logit, sumexp, loss, dlf};
  });
  EXPECT_TRUE(gtp::emu::Near(out[0], p.row_max, 1e-6, "row_max"));
  EXPECT_TRUE(gtp::emu::Near(out[1], p.target_logit, 1e-6, "target_logit"));
  EXPECT_TRUE(gtp::emu::Near(out[2], p.sumexp, 1e-5, "sumexp"));
  EXPECT_TRUE(gtp::emu::Near(out[3], p.loss, 1e-5, "loss"));
  EXPECT_TRUE(gtp::emu::Near(out[4], p.dlogits, std::is_same_v<T, float> ? 1e-5 : 1e-2, "dlogits"));
}

class CrossEntropyEmulationTest : public ::testing::TestWithParam<Case> {};

TEST_P(CrossEntropyEmulationTest, ShardF32MatchesTheDefinition) { RunShard<float>(GetParam()); }
TEST_P(CrossEntropyEmulationTest, ShardBf16MatchesTheDefinition) { RunShard<bf16>(GetParam()); }

// The fused bf16 pass (unsharded): loss, and the logits overwritten by
// their gradient (0 in the pad columns and the ignored rows; a target past V,
// which the data loader refuses, gets no one-hot, not even in the padding:
// this test found the fused kernel writing −dloss into a pad column there).
TEST_P(CrossEntropyEmulationTest, FusedBf16MatchesTheDefinition) {
  Case c = GetParam();
  if (c.vocab_start != 0 || c.ld % kBf16Vec != 0) GTEST_SKIP() << "the fused pass: unsharded rows";
  gtp::emu::SetShared(smem, sizeof(smem));
  const Problem<bf16> p = MakeProblem<bf16>(c);
  const auto out = gtp::emu::InEverySchedule([&] {
    std::vector<bf16> l = p.logits;
    FVec loss(c.N, NAN);
    CrossEntropyFused(l.data(), p.targets.data(), p.dloss.data(), loss.data(), c.N, c.V, c.ld,
                      nullptr);
    FVec lf;
    for (const bf16& v : l) lf.push_back(ToF32(v));
    return std::vector<FVec>{loss, lf};
  });
  EXPECT_TRUE(gtp::emu::Near(out[0], p.loss, 1e-5, "loss"));
  EXPECT_TRUE(gtp::emu::Near(out[1], p.dlogits, 1e-2, "dlogits"));
}

// V a multiple of the 16-byte vector and not; pad columns (ld > V); a shard
// starting at vocab_start = 1000; more rows than the fused pass's grid (4
// blocks an SM by threads × the emulator's 4 SMs); and rows past the fused
// pass's shared-memory stage (ld = 57352: 2 bytes over kStageBytes), which
// read the row twice from memory.
INSTANTIATE_TEST_SUITE_P(Shapes, CrossEntropyEmulationTest,
                         ::testing::Values(Case{7, 520, 520, 0}, Case{5, 517, 528, 0},
                                           Case{30, 64, 72, 0}, Case{6, 300, 300, 1000},
                                           Case{2, 57347, 57352, 0}));

}  // namespace
}  // namespace gtp::kernels::cuda
