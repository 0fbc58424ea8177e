// GPT-2 compatibility: with the weights and tokens of a plain PyTorch GPT-2
// (tools/reference/gpt2_reference.py, run on the GPU machine; its float64
// logits and loss are the fixture layers/testdata/gpt2_small.safetensors),
// this model's logits and loss match — on one rank and under TP, GTP and
// TP·GTP layouts (vocabulary 500: padded to 512, split over TP).
#include <cmath>
#include <string>
#include <vector>

#include "checkpoint/safetensors.h"
#include "comm/local/local_communicator.h"
#include "core/kernels/testing/harness.h"
#include "gtest/gtest.h"
#include "layers/gpt.h"
#include "parallel/parallel_config.h"
#include "parallel/process_groups.h"

namespace gtp::layers {
namespace {

const char kFixture[] = "layers/testdata/gpt2_small.safetensors";

int64_t Meta(const checkpoint::SafeTensorsFile& f, const char* k) {
  return std::stoll(f.metadata.at(k));
}

struct Layout {
  int tp, gtp;
};

class Gpt2Compat : public ::testing::TestWithParam<Layout> {};

TEST_P(Gpt2Compat, LogitsAndLossMatchPyTorch) {
  auto fx = checkpoint::ReadSafeTensors(kFixture);
  ASSERT_TRUE(fx.ok()) << fx.status();
  const int64_t V = Meta(*fx, "vocab"), B = Meta(*fx, "B"), T = Meta(*fx, "T");
  GptConfig cfg = GptConfig::Gpt2(V, Meta(*fx, "n_pos"), Meta(*fx, "n_layer"), Meta(*fx, "n_embd"),
                                  Meta(*fx, "n_head"));
  const auto& ref_logits = fx->tensors.at("logits");
  const float ref_loss = fx->tensors.at("loss").data<float>()[0];
  const Layout l = GetParam();
  HeapAllocator host;
  absl::Status st = comm::RunRanks(l.tp * l.gtp, [&](comm::Communicator& w) -> absl::Status {
    parallel::ParallelConfig pc;
    pc.tp = l.tp;
    pc.tp_num_weight_shards = l.tp * l.gtp;
    GTP_ASSIGN_OR_RETURN(auto pgs, parallel::ProcessGroupCollection::Build(pc, w));
    GTP_ASSIGN_OR_RETURN(comm::Communicator * data, pgs.Get("data"));
    const int64_t b_lane = B / data->size();
    GTP_ASSIGN_OR_RETURN(auto model,
                         GptModel::Create(cfg, b_lane, T, pgs, kernels::Exec::Cpu(host)));
    for (const auto& [name, t] : fx->tensors) {
      if (name == "tokens" || name == "targets" || name == "logits" || name == "loss") continue;
      GTP_RETURN_IF_ERROR(model->LoadGlobal(name, t.data<float>(), t.shape));
    }
    // This lane's sequences.
    const int64_t s0 = data->rank() * b_lane;
    Tensor tok = Tensor::Empty({b_lane, T}, DType::kI32, host);
    Tensor tgt = Tensor::Empty({b_lane, T}, DType::kI32, host);
    std::copy_n(fx->tensors.at("tokens").data<int32_t>() + s0 * T, b_lane * T, tok.data<int32_t>());
    std::copy_n(fx->tensors.at("targets").data<int32_t>() + s0 * T, b_lane * T, tgt.data<int32_t>());
    GTP_ASSIGN_OR_RETURN(float loss, model->Forward(tok, tgt));
    GTP_RETURN_IF_ERROR(
        comm::Run(data->AllReduce(&loss, &loss, 1, DType::kF32, comm::ReduceOp::kMean)));
    EXPECT_NEAR(loss, ref_loss, 2e-5 * std::abs(ref_loss));
    // This rank's logit columns of this lane's rows.
    const Tensor& lg = model->logits();
    const int64_t ld = lg.dim(1), cols = model->vocab_local(), v0 = model->vocab_start();
    std::vector<double> want;
    std::vector<float> got;
    for (int64_t r = 0; r < b_lane * T; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        got.push_back(lg.data<float>()[r * ld + c]);
        want.push_back(ref_logits.data<float>()[(s0 * T + r) * V + v0 + c]);
      }
    EXPECT_TRUE(kernels::testing::RelClose(got, want, 1e-5)) << "rank " << w.rank();
    return absl::OkStatus();
  });
  ASSERT_TRUE(st.ok()) << st;
}

INSTANTIATE_TEST_SUITE_P(Layouts, Gpt2Compat,
                         ::testing::Values(Layout{1, 1}, Layout{2, 1}, Layout{1, 2}, Layout{2, 2},
                                           Layout{4, 1}),
                         [](const auto& i) {
                           return "tp" + std::to_string(i.param.tp) + "_gtp" +
                                  std::to_string(i.param.gtp);
                         });

}  // namespace
}  // namespace gtp::layers
