// Bidirectional (TransformerConfig::causal = false) attention in the block,
// on the CPU: the output at position 0 depends on later positions only when
// non-causal (and the gradient flows back the same way); context parallelism
// refuses it.
#include "layers/transformer.h"

#include <cmath>
#include <vector>

#include "comm/local/local_communicator.h"
#include "core/philox.h"
#include "gtest/gtest.h"
#include "parallel/parallel_config.h"
#include "parallel/process_groups.h"

namespace gtp::layers {
namespace {

constexpr int64_t kB = 2, kT = 7, kC = 16;

TransformerConfig Config(bool causal, DType dtype) {
  TransformerConfig c;
  c.n_embd = kC;
  c.n_head = 4;
  c.n_kv_head = 2;  // GQA
  c.causal = causal;
  c.dtype = dtype;
  c.seed = 5;
  c.init_std = 0.2f;  // large enough that attention is far from uniform
  return c;
}

float Uniform(uint64_t key, int64_t i) {
  return static_cast<float>(PhiloxRaw(key, static_cast<uint64_t>(i)).v[0] % 2001) / 1000.0f - 1.0f;
}

Tensor Input(HeapAllocator& host, DType dtype, bool perturb_last) {
  std::vector<float> x(kB * kT * kC);
  for (size_t i = 0; i < x.size(); ++i) x[i] = Uniform(1, static_cast<int64_t>(i));
  if (perturb_last) {  // every sequence's last token (not by a constant: the norm removes that)
    for (int64_t b = 0; b < kB; ++b)
      for (int64_t c = 0; c < kC; ++c) x[(b * kT + kT - 1) * kC + c] += 2.0f * Uniform(2, c);
  }
  return TensorFromHost(kernels::Exec::Cpu(host), x.data(), {kB * kT, kC}, dtype);
}

std::vector<float> Host(const Tensor& t, HeapAllocator& host) {
  const kernels::Exec e = kernels::Exec::Cpu(host);
  Tensor f = t;
  if (t.dtype() != DType::kF32) {
    f = e.Empty(t.shape(), DType::kF32);
    kernels::ops::Cast(e, t, f);
  }
  return std::vector<float>(f.data<float>(), f.data<float>() + f.numel());
}

// Max |a − b| over the rows of position t of every sequence.
double MaxDiffAt(const std::vector<float>& a, const std::vector<float>& b, int64_t t) {
  double m = 0;
  for (int64_t bb = 0; bb < kB; ++bb)
    for (int64_t c = 0; c < kC; ++c) {
      const size_t i = (bb * kT + t) * kC + c;
      m = std::max(m, static_cast<double>(std::fabs(a[i] - b[i])));
    }
  return m;
}

struct Outcome {
  std::vector<float> y, y_perturbed, dx;  // dx: for dy = 1 at position 0 only
};

Outcome RunBlock(bool causal, DType dtype) {
  Outcome r;
  absl::Status st = comm::RunRanks(1, [&](comm::Communicator& w) -> absl::Status {
    HeapAllocator host;
    GTP_ASSIGN_OR_RETURN(auto pgs, parallel::ProcessGroupCollection::Build({}, w));
    GtpChain chain(kernels::Exec::Cpu(host), GtpOptions{});
    GTP_ASSIGN_OR_RETURN(auto block,
                         Block::Create("h.0", Config(causal, dtype), kB, kT, pgs, &chain));
    GTP_ASSIGN_OR_RETURN(Tensor yp, block->Forward(Input(host, dtype, true)));
    r.y_perturbed = Host(yp, host);
    block->DropActivations();
    GTP_ASSIGN_OR_RETURN(Tensor y, block->Forward(Input(host, dtype, false)));
    r.y = Host(y, host);
    std::vector<float> dy(kB * kT * kC, 0.0f);
    for (int64_t b = 0; b < kB; ++b)
      for (int64_t c = 0; c < kC; ++c) dy[b * kT * kC + c] = 1.0f;
    GTP_ASSIGN_OR_RETURN(
        Tensor dx,
        block->Backward(TensorFromHost(kernels::Exec::Cpu(host), dy.data(), {kB * kT, kC}, dtype)));
    r.dx = Host(dx, host);
    return chain.FinishBackward();
  });
  EXPECT_TRUE(st.ok()) << st;
  return r;
}

class BlockCausality : public ::testing::TestWithParam<DType> {};

TEST_P(BlockCausality, CausalPositionZeroIgnoresLaterTokens) {
  const Outcome r = RunBlock(/*causal=*/true, GetParam());
  ASSERT_EQ(r.y.size(), static_cast<size_t>(kB * kT * kC));
  for (float v : r.y) ASSERT_TRUE(std::isfinite(v));
  // Bit-identical at position 0; the perturbed last position itself changes.
  EXPECT_EQ(MaxDiffAt(r.y, r.y_perturbed, 0), 0.0);
  EXPECT_GT(MaxDiffAt(r.y, r.y_perturbed, kT - 1), 1e-3);
  // A loss on position 0 only: no gradient reaches later tokens.
  const std::vector<float> zeros(r.dx.size(), 0.0f);
  for (int64_t t = 1; t < kT; ++t) EXPECT_EQ(MaxDiffAt(r.dx, zeros, t), 0.0) << t;
}

TEST_P(BlockCausality, BidirectionalPositionZeroSeesLaterTokens) {
  const Outcome r = RunBlock(/*causal=*/false, GetParam());
  ASSERT_EQ(r.y.size(), static_cast<size_t>(kB * kT * kC));
  for (float v : r.y) ASSERT_TRUE(std::isfinite(v));
  EXPECT_GT(MaxDiffAt(r.y, r.y_perturbed, 0), 1e-3);
  for (float v : r.dx) ASSERT_TRUE(std::isfinite(v));
  const std::vector<float> zeros(r.dx.size(), 0.0f);
  for (int64_t t = 1; t < kT; ++t) EXPECT_GT(MaxDiffAt(r.dx, zeros, t), 1e-6) << t;
}

INSTANTIATE_TEST_SUITE_P(DType, BlockCausality, ::testing::Values(DType::kF32, DType::kBF16),
                         [](const auto& i) { return i.param == DType::kF32 ? "f32" : "bf16"; });

TEST(Block, BidirectionalWithContextParallelismIsRefused) {
  absl::Status st = comm::RunRanks(2, [&](comm::Communicator& w) -> absl::Status {
    HeapAllocator host;
    parallel::ParallelConfig pc;
    pc.cp = 2;
    GTP_ASSIGN_OR_RETURN(auto pgs, parallel::ProcessGroupCollection::Build(pc, w));
    GtpChain chain(kernels::Exec::Cpu(host), GtpOptions{});
    // T = 8: this rank's share of a 16-token sequence (two ring chunks of 4).
    auto block = Block::Create("h.0", Config(/*causal=*/false, DType::kF32), kB, 8, pgs, &chain);
    EXPECT_EQ(block.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(block.status().message().find("causal"), std::string::npos) << block.status();
    EXPECT_NE(block.status().message().find("context parallelism"), std::string::npos)
        << block.status();
    // The causal block builds under the same groups.
    auto causal = Block::Create("h.1", Config(/*causal=*/true, DType::kF32), kB, 8, pgs, &chain);
    EXPECT_TRUE(causal.ok()) << causal.status();
    return absl::OkStatus();
  });
  EXPECT_TRUE(st.ok()) << st;
}

}  // namespace
}  // namespace gtp::layers
