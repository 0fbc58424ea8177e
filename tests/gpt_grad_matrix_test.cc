// Layer parity matrix at model level: for every (TP, GTP) in {1,2,4}² with
// TP·GTP ≤ 8, SP on and off, one forward/backward of a small GPT (GPT-2
// style with a vocabulary and a hidden size that need padding, and
// Llama-style) gives the single-rank loss and, after gradient finalisation,
// the single-rank gradient of every parameter (embedding, attention q/k/v/o,
// MLP, norms, biases, LM head), reassembled from the shards.
#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "comm/local/local_communicator.h"
#include "core/kernels/testing/harness.h"
#include "core/philox.h"
#include "gtest/gtest.h"
#include "layers/gpt.h"
#include "optimizer/grad_sync.h"
#include "parallel/parallel_config.h"
#include "parallel/process_groups.h"

namespace gtp {
namespace {

constexpr int64_t kBatch = 8, kSeq = 4, kVocab = 250;

layers::GptConfig Model(bool llama) {
  layers::GptConfig c = layers::GptConfig::Gpt2(kVocab, 8, 2, 16, 4);
  c.vocab_pad_multiple = 4;  // 250 → 252: TP 4 gets 63 rows, GTP pads further
  c.block.ffn_hidden = 40;
  c.block.seed = 5;
  c.block.init_std = 0.3f;
  if (llama) {
    c.block.rope = true;
    c.learned_positions = false;
    c.block.norm = layers::NormKind::kRMSNorm;
    c.block.activation = layers::Activation::kSwiGlu;
    c.block.bias = false;
    c.block.n_kv_head = 4;
    c.tied_embeddings = false;
  }
  return c;
}

int32_t Token(int64_t i) { return PhiloxRaw(KeyFromName("matrix.data"), i).v[0] % kVocab; }

struct Result {
  float loss = 0;
  std::map<std::string, std::vector<float>> grads;  // global, reassembled
};

Result RunLayout(int tp, int gtp, bool sp, bool llama) {
  Result out;
  HeapAllocator host;
  std::mutex mu;
  absl::Status st = comm::RunRanks(tp * gtp, [&](comm::Communicator& w) -> absl::Status {
    parallel::ParallelConfig pc;
    pc.tp = tp;
    pc.tp_num_weight_shards = tp * gtp;
    pc.sequence_parallel = sp;
    GTP_ASSIGN_OR_RETURN(auto pgs, parallel::ProcessGroupCollection::Build(pc, w));
    GTP_ASSIGN_OR_RETURN(comm::Communicator * data, pgs.Get("data"));
    GTP_ASSIGN_OR_RETURN(comm::Communicator * tp_gtp, pgs.Get("tp_gtp"));
    layers::GptConfig cfg = Model(llama);
    cfg.block.sequence_parallel = sp;
    const int64_t B = kBatch / data->size(), s0 = data->rank() * B;
    kernels::Exec exec = kernels::Exec::Cpu(host);
    GTP_ASSIGN_OR_RETURN(auto model, layers::GptModel::Create(cfg, B, kSeq, pgs, exec));
    Tensor tok = Tensor::Empty({B, kSeq}, DType::kI32, host), tgt = Tensor::Empty({B, kSeq}, DType::kI32, host);
    for (int64_t i = 0; i < B * kSeq; ++i) {
      const int64_t g = s0 * kSeq + i;
      tok.data<int32_t>()[i] = Token(2 * g);
      tgt.data<int32_t>()[i] = Token(2 * g + 1);
    }
    GTP_ASSIGN_OR_RETURN(float loss, model->Forward(tok, tgt));
    GTP_RETURN_IF_ERROR(model->Backward());
    optimizer::ParamSet ps{model->sharded_params(), model->replicated_params()};
    GTP_RETURN_IF_ERROR(optimizer::FinalizeGrads(ps, pgs));
    GTP_RETURN_IF_ERROR(comm::Run(data->AllReduce(&loss, &loss, 1, DType::kF32, comm::ReduceOp::kMean)));
    std::map<std::string, std::vector<float>> grads;
    for (layers::ShardedParam* p : ps.sharded) {
      const auto& L = p->global_layout();
      std::vector<float> g(L.global_rows * L.global_cols, 0.0f);
      layers::StoreShardToGlobal(*p, p->main_grad(), g.data());
      // The pieces of one model replica are disjoint: a sum reassembles them.
      GTP_RETURN_IF_ERROR(comm::Run(tp_gtp->AllReduce(g.data(), g.data(), g.size(), DType::kF32,
                                                      comm::ReduceOp::kSum)));
      grads[p->name()] = g;
    }
    GTP_ASSIGN_OR_RETURN(comm::Communicator * tpc, pgs.Get("tp"));
    for (layers::ReplicatedParam* p : ps.replicated) {
      const float* g = p->grad.data<float>();
      if (!p->tp_sharded) {
        grads[p->name] = std::vector<float>(g, g + p->grad.numel());
        continue;
      }
      std::vector<float> full(p->layout.global_rows, 0.0f);
      for (int64_t r = 0; r < p->grad.numel(); ++r) full[p->layout.row_map(r)] = g[r];
      GTP_RETURN_IF_ERROR(comm::Run(tpc->AllReduce(full.data(), full.data(), full.size(),
                                                   DType::kF32, comm::ReduceOp::kSum)));
      grads[p->name] = full;
    }
    if (w.rank() == 0) {
      std::lock_guard<std::mutex> lock(mu);
      out.loss = loss;
      out.grads = std::move(grads);
    }
    return absl::OkStatus();
  });
  EXPECT_TRUE(st.ok()) << "tp" << tp << " gtp" << gtp << ": " << st;
  return out;
}

struct Case {
  int tp, gtp;
  bool sp;
};

class GradMatrix : public ::testing::TestWithParam<std::tuple<Case, bool>> {};

TEST_P(GradMatrix, EveryGradientMatchesSingleRank) {
  const auto [k, llama] = GetParam();
  const Result ref = RunLayout(1, 1, false, llama);
  const Result got = RunLayout(k.tp, k.gtp, k.sp, llama);
  EXPECT_NEAR(got.loss, ref.loss, 1e-5 * std::abs(ref.loss));
  ASSERT_EQ(got.grads.size(), ref.grads.size());
  for (const auto& [name, g] : ref.grads) {
    ASSERT_TRUE(got.grads.count(name)) << name;
    const std::vector<float>& o = got.grads.at(name);
    ASSERT_EQ(o.size(), g.size()) << name;
    if (name.find("attn.k.bias") != std::string::npos) {
      // Exactly zero in exact arithmetic (softmax ignores a per-row shift):
      // both sides are rounding noise, so check they are tiny instead.
      for (float v : o) EXPECT_LT(std::abs(v), 1e-6f) << name;
      continue;
    }
    double err = 0, nrm = 0;
    for (size_t i = 0; i < g.size(); ++i) {
      err += (double(o[i]) - g[i]) * (double(o[i]) - g[i]);
      nrm += double(g[i]) * g[i];
    }
    EXPECT_LE(std::sqrt(err) / std::sqrt(nrm), 2e-5) << name;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Matrix, GradMatrix,
    ::testing::Combine(::testing::Values(Case{1, 2, false}, Case{1, 4, false}, Case{2, 1, false},
                                         Case{2, 2, false}, Case{2, 4, false}, Case{4, 1, false},
                                         Case{4, 2, false}, Case{2, 2, true}, Case{4, 2, true},
                                         Case{2, 4, true}),
                       ::testing::Bool()),
    [](const auto& i) {
      const Case& k = std::get<0>(i.param);
      return "tp" + std::to_string(k.tp) + "_gtp" + std::to_string(k.gtp) + (k.sp ? "_sp" : "") +
             (std::get<1>(i.param) ? "_llama" : "_gpt2");
    });

}  // namespace
}  // namespace gtp
