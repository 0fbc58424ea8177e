// Activation recompute: the same gradients bit for bit, a lower activation
// peak, and recompute gathers on their own chain (the backward chain's
// prefetches are unchanged) — for a GPT-2 stack and a hybrid Mamba one
// (pipeline stages recompute, so hybrid stacks under PP need it).
#include <vector>

#include "comm/local/local_communicator.h"
#include "core/philox.h"
#include "gtest/gtest.h"
#include "layers/gpt.h"
#include "parallel/parallel_config.h"
#include "parallel/process_groups.h"

namespace gtp::layers {
namespace {

struct Outcome {
  std::vector<float> grads;
  int64_t peak = 0;
  int backward_prefetches = 0, recompute_gathers = 0;
  float loss = 0;
};

Outcome Train(bool recompute, bool hybrid = false) {
  Outcome out;
  absl::Status st = comm::RunRanks(2, [&](comm::Communicator& w) -> absl::Status {
    HeapAllocator host;  // per rank: peak is this rank's
    parallel::ParallelConfig pc;
    pc.tp_num_weight_shards = 2;  // GTP 2
    GTP_ASSIGN_OR_RETURN(auto pgs, parallel::ProcessGroupCollection::Build(pc, w));
    GptConfig c = GptConfig::Gpt2(64, 32, 3, 32, 4);
    if (hybrid) {
      c = GptConfig::Gpt2(64, 32, 4, 32, 4);
      c.layer_pattern = "M*-M";  // Mamba, attention, MLP, Mamba
      c.block.mamba.d_state = 8;
      c.block.mamba.head_dim = 8;  // d_inner 64: 8 heads
      c.block.mamba.n_groups = 2;
      c.block.mamba.chunk = 12;    // T = 32: chunks of 12, 12, 8
    }
    c.block.recompute = recompute;
    c.block.seed = 9;
    const int64_t B = 4, T = 32;
    GTP_ASSIGN_OR_RETURN(auto model, GptModel::Create(c, B, T, pgs, kernels::Exec::Cpu(host)));
    model->chain().set_tracing(true);
    Tensor tok = Tensor::Empty({B, T}, DType::kI32, host), tgt = Tensor::Empty({B, T}, DType::kI32, host);
    for (int64_t i = 0; i < B * T; ++i) {
      tok.data<int32_t>()[i] = PhiloxRaw(w.rank(), i).v[0] % 64;
      tgt.data<int32_t>()[i] = PhiloxRaw(w.rank(), i).v[1] % 64;
    }
    for (int iter = 0; iter < 2; ++iter) {  // the second iteration has a recorded chain
      host.ResetPeak();
      GTP_ASSIGN_OR_RETURN(float loss, model->Forward(tok, tgt));
      GTP_RETURN_IF_ERROR(model->Backward());
      if (w.rank() == 0) out.loss = loss;
    }
    if (w.rank() != 0) return absl::OkStatus();
    out.peak = host.stats().peak_bytes_in_use;
    for (ShardedParam* p : model->sharded_params())
      for (int64_t i = 0; i < p->main_grad().numel(); ++i)
        out.grads.push_back(p->main_grad().data<float>()[i]);
    for (const GtpTraceEvent& e : model->chain().trace()) {
      if (e.kind != GtpTraceEvent::kGatherIssued) continue;
      if (e.dir == Direction::kBackward && e.async) ++out.backward_prefetches;
      if (e.dir == Direction::kRecompute) ++out.recompute_gathers;
    }
    return absl::OkStatus();
  });
  EXPECT_TRUE(st.ok()) << st;
  return out;
}

TEST(Recompute, SameGradientsLessMemoryOwnChain) {
  const Outcome base = Train(false), rc = Train(true);
  EXPECT_EQ(rc.loss, base.loss);
  ASSERT_EQ(rc.grads.size(), base.grads.size());
  for (size_t i = 0; i < base.grads.size(); ++i) ASSERT_EQ(rc.grads[i], base.grads[i]) << i;
  EXPECT_LT(rc.peak, base.peak) << "recompute should lower the activation peak";
  EXPECT_EQ(rc.backward_prefetches, base.backward_prefetches);
  // 3 blocks × 6 weights (q, k, v, o, fc, proj), 2 iterations.
  EXPECT_EQ(rc.recompute_gathers, 2 * 3 * 6);
  EXPECT_EQ(base.recompute_gathers, 0);
  std::printf("peak bytes: %lld without recompute, %lld with\n", (long long)base.peak,
              (long long)rc.peak);
}

// Mamba layers recompute too: the mixer's forward again (its five in_proj
// parts and out_proj gathered on the recompute chain), bit-identical.
TEST(Recompute, HybridMambaSameGradientsLessMemory) {
  const Outcome base = Train(false, true), rc = Train(true, true);
  EXPECT_EQ(rc.loss, base.loss);
  ASSERT_EQ(rc.grads.size(), base.grads.size());
  ASSERT_GT(base.grads.size(), 0u);
  for (size_t i = 0; i < base.grads.size(); ++i) ASSERT_EQ(rc.grads[i], base.grads[i]) << i;
  EXPECT_LT(rc.peak, base.peak) << "recompute should lower the activation peak";
  // Per iteration: 2 Mamba blocks × 6 weights (in_proj z, x, B, C, dt; out_proj),
  // 1 attention block × 4 (q, k, v, o), 1 MLP block × 2 (fc, proj).
  EXPECT_EQ(rc.recompute_gathers, 2 * (2 * 6 + 4 + 2));
  EXPECT_EQ(base.recompute_gathers, 0);
}

}  // namespace
}  // namespace gtp::layers
