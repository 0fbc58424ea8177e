// LoadGlobalWeights against the layout that saved: a Llama-style model
// (GQA, RoPE, SwiGLU, untied) saved under TP2·GTP2 (4 ranks) and loaded on
// one rank gives the same loss as the 4-rank model on the same batch, and
// the KV-cache decoder over the loaded model reproduces that model's
// full-forward logits; a checkpoint lacking a tensor is refused by name.
#include "tools/generate/checkpoint_model.h"

#include <cmath>
#include <filesystem>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "checkpoint/model_state.h"
#include "comm/local/local_communicator.h"
#include "core/philox.h"
#include "gtest/gtest.h"
#include "layers/inference/inference_session.h"
#include "parallel/parallel_config.h"
#include "parallel/process_groups.h"

namespace gtp::tools {
namespace {

constexpr int64_t kB = 2, kT = 8, kV = 70;

layers::GptConfig Config() {
  layers::GptConfig c = layers::GptConfig::Gpt2(kV, kT, 2, 32, 4);
  c.block.n_kv_head = 2;
  c.block.norm = layers::NormKind::kRMSNorm;
  c.block.activation = layers::Activation::kSwiGlu;
  c.block.bias = false;
  c.block.rope = true;
  c.learned_positions = false;
  c.tied_embeddings = false;
  c.block.init_std = 0.4f;
  c.block.seed = 5;
  return c;
}

std::vector<int32_t> Ids(uint64_t key) {
  std::vector<int32_t> v(kB * kT);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<int32_t>(PhiloxRaw(key, i).v[0] % kV);
  return v;
}

TEST(LoadGlobalWeights, SingleRankEqualsSavedLayout) {
  const std::string root = std::string(getenv("TEST_TMPDIR") ? getenv("TEST_TMPDIR") : "/tmp") +
                           "/checkpoint_model_test";
  std::filesystem::remove_all(root);
  const std::vector<int32_t> tok = Ids(1), tgt = Ids(2);
  float saved_loss = 0;
  // A different seed than the loading model's: only the checkpoint makes them equal.
  absl::Status st = comm::RunRanks(4, [&](comm::Communicator& w) -> absl::Status {
    HeapAllocator host;
    parallel::ParallelConfig pc;
    pc.tp = 2;
    pc.tp_num_weight_shards = 4;
    GTP_ASSIGN_OR_RETURN(auto pgs, parallel::ProcessGroupCollection::Build(pc, w));
    layers::GptConfig c = Config();
    c.block.seed = 77;
    GTP_ASSIGN_OR_RETURN(auto m,
                         layers::GptModel::Create(c, kB, kT, pgs, kernels::Exec::Cpu(host)));
    Tensor t = Tensor::Wrap(const_cast<int32_t*>(tok.data()), {kB, kT}, DType::kI32, Device::Cpu());
    Tensor y = Tensor::Wrap(const_cast<int32_t*>(tgt.data()), {kB, kT}, DType::kI32, Device::Cpu());
    GTP_ASSIGN_OR_RETURN(float loss, m->Forward(t, y));
    if (w.rank() == 0) saved_loss = loss;
    optimizer::ParamSet ps{m->sharded_params(), m->replicated_params()};
    GTP_ASSIGN_OR_RETURN(auto pieces, checkpoint::ModelPieces(ps, pgs));
    checkpoint::SaveOptions so;
    so.iteration = 3;
    return checkpoint::Save(root, pieces, w, so);
  });
  ASSERT_TRUE(st.ok()) << st;
  st = comm::RunRanks(1, [&](comm::Communicator& w) -> absl::Status {
    HeapAllocator host;
    parallel::ParallelConfig pc;
    GTP_ASSIGN_OR_RETURN(auto pgs, parallel::ProcessGroupCollection::Build(pc, w));
    GTP_ASSIGN_OR_RETURN(auto m,
                         layers::GptModel::Create(Config(), kB, kT, pgs, kernels::Exec::Cpu(host)));
    Tensor t = Tensor::Wrap(const_cast<int32_t*>(tok.data()), {kB, kT}, DType::kI32, Device::Cpu());
    Tensor y = Tensor::Wrap(const_cast<int32_t*>(tgt.data()), {kB, kT}, DType::kI32, Device::Cpu());
    GTP_ASSIGN_OR_RETURN(float before, m->Forward(t, y));
    EXPECT_GT(std::fabs(before - saved_loss), 1e-2f);  // other weights before loading
    GTP_RETURN_IF_ERROR(LoadGlobalWeights(checkpoint::IterationDir(root, 3), *m));
    GTP_ASSIGN_OR_RETURN(float loss, m->Forward(t, y));
    EXPECT_NEAR(loss, saved_loss, 1e-5f * saved_loss);
    // The decoder over the loaded weights: sample 0's logits.
    const Tensor& full = m->logits();  // [kB·kT, V_pad]
    GTP_ASSIGN_OR_RETURN(auto s, layers::inference::InferenceSession::Create(*m, kT));
    GTP_ASSIGN_OR_RETURN(std::vector<float> got, s->Append(absl::MakeConstSpan(tok.data(), kT)));
    for (int64_t r = 0; r < kT; ++r)
      for (int64_t v = 0; v < kV; ++v)
        EXPECT_NEAR(got[r * kV + v], full.data<float>()[r * full.dim(1) + v], 1e-4f)
            << r << " " << v;
    return absl::OkStatus();
  });
  ASSERT_TRUE(st.ok()) << st;
  // A model with a tensor the checkpoint lacks (biases) is refused by name.
  st = comm::RunRanks(1, [&](comm::Communicator& w) -> absl::Status {
    HeapAllocator host;
    parallel::ParallelConfig pc;
    GTP_ASSIGN_OR_RETURN(auto pgs, parallel::ProcessGroupCollection::Build(pc, w));
    layers::GptConfig c = Config();
    c.block.bias = true;
    GTP_ASSIGN_OR_RETURN(auto m,
                         layers::GptModel::Create(c, kB, kT, pgs, kernels::Exec::Cpu(host)));
    absl::Status load = LoadGlobalWeights(checkpoint::IterationDir(root, 3), *m);
    EXPECT_EQ(load.code(), absl::StatusCode::kNotFound) << load;
    EXPECT_NE(load.message().find(".bias"), std::string::npos) << load;
    return absl::OkStatus();
  });
  ASSERT_TRUE(st.ok()) << st;
}

}  // namespace
}  // namespace gtp::tools
