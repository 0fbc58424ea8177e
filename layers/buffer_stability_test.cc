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

INSTANTIATE_TEST_SUITE_P(Recompute, BufferStability, ::testing::Values(false, true),
                         [](const auto& i) { return i.param ? "recompute" : "plain"; });

}  // namespace
}  // namespace gtp::layers
