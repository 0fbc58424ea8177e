// The GTP buffer cache hands out the same addresses every iteration once the
// model is in steady state (what CUDA-graph capture of a step needs): every
// weight handed to a GEMM and every wgrad buffer reduced, per param and
// pass, sits at the address it had the iteration before — with GTP
// gathers and prefetching, tied embeddings, and activation recompute.
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "comm/local/local_communicator.h"
#include "core/philox.h"
#include "gtest/gtest.h"
#include "layers/gpt.h"
#include "parallel/parallel_config.h"
#include "parallel/process_groups.h"

namespace gtp::layers {
namespace {

using Event = std::tuple<int, std::string, int, const void*>;  // kind, param, direction, buffer

class BufferStability : public ::testing::TestWithParam<bool> {};

TEST_P(BufferStability, AddressesRepeatEveryIteration) {
  const bool recompute = GetParam();
  constexpr int kIters = 4;
  std::vector<std::vector<Event>> per_iter(kIters);
  HeapAllocator host;
  absl::Status st = comm::RunRanks(2, [&](comm::Communicator& w) -> absl::Status {
    parallel::ParallelConfig pc;
    pc.tp_num_weight_shards = 2;  // GTP2: every weight gathered
    GTP_ASSIGN_OR_RETURN(auto pgs, parallel::ProcessGroupCollection::Build(pc, w));
    GptConfig c = GptConfig::Gpt2(256, 16, 2, 32, 2);
    c.block.seed = 3;
    c.block.recompute = recompute;
    const int64_t B = 2, T = 16;
    GTP_ASSIGN_OR_RETURN(auto model, GptModel::Create(c, B, T, pgs, kernels::Exec::Cpu(host)));
    model->chain().set_tracing(true);
    Tensor tok = Tensor::Empty({B, T}, DType::kI32, host), tgt = Tensor::Empty({B, T}, DType::kI32, host);
    for (int it = 0; it < kIters; ++it) {
      for (int64_t i = 0; i < B * T; ++i) {
        tok.data<int32_t>()[i] = PhiloxRaw(it, i).v[0] % 256;
        tgt.data<int32_t>()[i] = PhiloxRaw(it, i).v[1] % 256;
      }
      model->chain().ClearTrace();
      GTP_RETURN_IF_ERROR(model->Forward(tok, tgt).status());
      GTP_RETURN_IF_ERROR(model->Backward());
      if (w.rank() != 0) continue;
      for (const GtpTraceEvent& e : model->chain().trace()) {
        if (e.kind != GtpTraceEvent::kConsumed && e.kind != GtpTraceEvent::kReduceIssued) continue;
        per_iter[it].emplace_back(e.kind, e.param, static_cast<int>(e.dir), e.buffer);
      }
    }
    return absl::OkStatus();
  });
  ASSERT_TRUE(st.ok()) << st;
  ASSERT_FALSE(per_iter[1].empty());
  for (const Event& e : per_iter[1]) ASSERT_NE(std::get<3>(e), nullptr);
  // From the second iteration on (the first records the chain and fills the
  // cache), the same events in the same order at the same addresses.
  for (int it = 2; it < kIters; ++it) {
    SCOPED_TRACE(absl::StrCat("iteration ", it, " vs ", it - 1));
    ASSERT_EQ(per_iter[it].size(), per_iter[it - 1].size());
    for (size_t i = 0; i < per_iter[it].size(); ++i) {
      EXPECT_EQ(per_iter[it][i], per_iter[it - 1][i])
          << "event " << i << ": " << std::get<1>(per_iter[it][i]) << " kind "
          << std::get<0>(per_iter[it][i]) << " direction " << std::get<2>(per_iter[it][i]);
    }
  }
}

// The tied LM head is part of the GTP prefetch chain in both directions: in
// steady state the only synchronous (cold) gathers of an iteration are the
// first of each pass — the embedding lookup's in forward, the head's in
// backward; the last block's proj prefetches the head in forward, and the
// head's backward prefetches that proj.
TEST(TiedHeadPrefetch, OnlyTheFirstGatherOfEachPassIsCold) {
  HeapAllocator host;
  std::vector<GtpTraceEvent> trace;
  absl::Status st = comm::RunRanks(2, [&](comm::Communicator& w) -> absl::Status {
    parallel::ParallelConfig pc;
    pc.tp_num_weight_shards = 2;
    GTP_ASSIGN_OR_RETURN(auto pgs, parallel::ProcessGroupCollection::Build(pc, w));
    GptConfig c = GptConfig::Gpt2(256, 16, 2, 32, 2);  // tied
    const int64_t B = 2, T = 16;
    GTP_ASSIGN_OR_RETURN(auto model, GptModel::Create(c, B, T, pgs, kernels::Exec::Cpu(host)));
    model->chain().set_tracing(true);
    Tensor tok = Tensor::Empty({B, T}, DType::kI32, host), tgt = Tensor::Empty({B, T}, DType::kI32, host);
    for (int64_t i = 0; i < B * T; ++i) {
      tok.data<int32_t>()[i] = static_cast<int32_t>(i % 256);
      tgt.data<int32_t>()[i] = static_cast<int32_t>((i * 7) % 256);
    }
    for (int it = 0; it < 3; ++it) {
      model->chain().ClearTrace();
      GTP_RETURN_IF_ERROR(model->Forward(tok, tgt).status());
      GTP_RETURN_IF_ERROR(model->Backward());
    }
    if (w.rank() == 0) trace = model->chain().trace();
    return absl::OkStatus();
  });
  ASSERT_TRUE(st.ok()) << st;
  std::vector<std::string> cold[2];
  int64_t head_fwd_issue = -1, proj_fwd_use = -1, proj_bwd_issue = -1, head_bwd_use = -1;
  for (const GtpTraceEvent& e : trace) {
    const int d = static_cast<int>(e.dir);
    if (e.kind == GtpTraceEvent::kGatherIssued && !e.async && d < 2) cold[d].push_back(e.param);
    if (e.kind == GtpTraceEvent::kGatherIssued && e.async && e.param == "wte.weight" && d == 0) head_fwd_issue = e.seq;
    if (e.kind == GtpTraceEvent::kConsumed && e.param == "h.1.mlp.proj.weight" && d == 0) proj_fwd_use = e.seq;
    if (e.kind == GtpTraceEvent::kGatherIssued && e.async && e.param == "h.1.mlp.proj.weight" && d == 1) proj_bwd_issue = e.seq;
    if (e.kind == GtpTraceEvent::kConsumed && e.param == "wte.weight" && d == 1) head_bwd_use = e.seq;
  }
  EXPECT_EQ(cold[0], std::vector<std::string>{"wte.weight"});  // the embedding lookup
  EXPECT_EQ(cold[1], std::vector<std::string>{"wte.weight"});  // the head's backward
  ASSERT_GE(head_fwd_issue, 0) << "the head was not prefetched in forward";
  // Issued inside the neighbour's materialisation, before it hands its weight over.
  EXPECT_LT(head_fwd_issue, proj_fwd_use);
  ASSERT_GE(proj_bwd_issue, 0) << "the last proj was not prefetched in backward";
  EXPECT_LT(proj_bwd_issue, head_bwd_use);
}

INSTANTIATE_TEST_SUITE_P(Recompute, BufferStability, ::testing::Values(false, true),
                         [](const auto& i) { return i.param ? "recompute" : "plain"; });

}  // namespace
}  // namespace gtp::layers
