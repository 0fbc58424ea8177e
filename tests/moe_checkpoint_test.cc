// MoE checkpoints across expert layouts (issue 13): a small MoE GPT trained
// 2 SGD steps under dense TP2·GTP2·DP2 with experts EP4·EGTP2 (8 ranks) is
// saved, then loaded and saved again along EP4·EGTP2 → DP2|EP2 → 1 rank →
// EP4·EGTP2: every global tensor (expert weights by global expert index
// included) is bit-identical at each hop, and the last hop's next step gives
// exactly the uninterrupted run's loss.
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "checkpoint/model_state.h"
#include "comm/local/local_communicator.h"
#include "core/philox.h"
#include "gtest/gtest.h"
#include "layers/gpt.h"
#include "optimizer/grad_sync.h"
#include "parallel/parallel_config.h"
#include "parallel/process_groups.h"
#include "tests/ckpt_testing.h"

namespace gtp {
namespace {

namespace fs = std::filesystem;
constexpr int64_t kGlobalBatch = 8, kSeq = 8, kVocab = 97;

struct Layout {
  const char* name;
  int tp, gtp, dp, ep, egtp;
};

std::string Tmp(const std::string& name) { return testing::FreshDir("moe_ckpt_" + name); }

struct Ctx {
  comm::Communicator* world;
  parallel::ProcessGroupCollection* pgs;
  layers::GptModel* model;
  HeapAllocator* host;
};

absl::StatusOr<float> Step(Ctx& c, int step) {
  GTP_ASSIGN_OR_RETURN(comm::Communicator * data, c.pgs->Get("data"));
  const int64_t B = kGlobalBatch / data->size();
  Tensor tok = Tensor::Empty({B, kSeq}, DType::kI32, *c.host);
  Tensor tgt = Tensor::Empty({B, kSeq}, DType::kI32, *c.host);
  testing::FillStep("moe.ckpt.data", step, data->rank() * B, kVocab, tok, tgt);
  GTP_ASSIGN_OR_RETURN(float loss, c.model->Forward(tok, tgt));
  GTP_RETURN_IF_ERROR(c.model->Backward());
  kernels::Exec exec = kernels::Exec::Cpu(*c.host);
  optimizer::ParamSet ps{c.model->sharded_params(), c.model->replicated_params()};
  optimizer::ParamSet experts{c.model->expert_params(), {}};
  GTP_RETURN_IF_ERROR(optimizer::FinalizeGrads(ps, *c.pgs));
  GTP_ASSIGN_OR_RETURN(comm::Communicator * edp, c.pgs->Get("edp"));
  for (layers::ShardedParam* p : experts.sharded) {
    const Tensor& g = p->main_grad();
    GTP_RETURN_IF_ERROR(comm::Run(
        edp->AllReduce(g.raw_data(), g.raw_data(), g.numel(), DType::kF32, comm::ReduceOp::kMean)));
  }
  for (optimizer::ParamSet* s : {&ps, &experts}) {
    optimizer::SgdStep(*s, exec, 0.5f);
    optimizer::ZeroGrads(*s, exec);
  }
  GTP_RETURN_IF_ERROR(comm::Run(data->AllReduce(&loss, &loss, 1, DType::kF32, comm::ReduceOp::kMean)));
  return loss;
}

absl::Status WithModel(const Layout& l, uint64_t seed, const std::function<absl::Status(Ctx&)>& fn) {
  HeapAllocator host;
  return comm::RunRanks(l.tp * l.gtp * l.dp, [&](comm::Communicator& w) -> absl::Status {
    parallel::ParallelConfig pc;
    pc.tp = l.tp;
    pc.tp_num_weight_shards = l.tp * l.gtp;
    pc.ep = l.ep;
    pc.etp = 1;
    pc.expert_tp_num_weight_shards = l.egtp;
    parallel::ModelFacts facts;
    facts.num_experts = 8;
    GTP_ASSIGN_OR_RETURN(auto pgs, parallel::ProcessGroupCollection::Build(pc, w, facts));
    GTP_ASSIGN_OR_RETURN(comm::Communicator * data, pgs.Get("data"));
    layers::GptConfig cfg = layers::GptConfig::Gpt2(kVocab, 16, 2, 16, 4);
    cfg.block.seed = seed;
    cfg.block.init_std = 0.2f;
    cfg.block.moe.router.num_experts = 8;
    cfg.block.moe.router.top_k = 2;
    cfg.block.moe.ffn_hidden = 12;
    GTP_ASSIGN_OR_RETURN(auto model, layers::GptModel::Create(cfg, kGlobalBatch / data->size(), kSeq,
                                                              pgs, kernels::Exec::Cpu(host)));
    Ctx c{&w, &pgs, model.get(), &host};
    return fn(c);
  });
}

absl::StatusOr<std::vector<checkpoint::TensorPiece>> Pieces(Ctx& c) {
  optimizer::ParamSet experts{c.model->expert_params(), {}};
  return checkpoint::ModelPieces({c.model->sharded_params(), c.model->replicated_params()}, *c.pgs,
                                 &experts);
}

TEST(MoeCheckpoint, RoundTripAcrossExpertLayoutsIsBitIdentical) {
  const Layout kA{"TP2_GTP2_DP2__EP4_EGTP2", 2, 2, 2, 4, 2}, kB{"DP2__EP2", 1, 1, 2, 2, 1},
      kC{"single", 1, 1, 1, 1, 1};
  std::vector<std::string> dirs;
  float uninterrupted = 0, resumed = -1;
  dirs.push_back(Tmp("0"));
  absl::Status st = WithModel(kA, 3, [&](Ctx& c) -> absl::Status {
    for (int s = 0; s < 2; ++s) GTP_RETURN_IF_ERROR(Step(c, s).status());
    GTP_ASSIGN_OR_RETURN(auto pieces, Pieces(c));
    checkpoint::SaveOptions opt;
    opt.iteration = 2;
    GTP_RETURN_IF_ERROR(checkpoint::Save(dirs[0], pieces, *c.world, opt));
    GTP_ASSIGN_OR_RETURN(float loss, Step(c, 2));
    if (c.world->rank() == 0) uninterrupted = loss;
    return absl::OkStatus();
  });
  ASSERT_TRUE(st.ok()) << st;
  for (const Layout* l : {&kB, &kC, &kA}) {
    const std::string from = dirs.back(), to = Tmp(std::to_string(dirs.size()));
    dirs.push_back(to);
    st = WithModel(*l, /*different init*/ 99, [&](Ctx& c) -> absl::Status {
      GTP_ASSIGN_OR_RETURN(auto pieces, Pieces(c));
      GTP_ASSIGN_OR_RETURN(auto r, checkpoint::Load(from, std::nullopt, pieces, *c.world));
      if (r.iteration != 2) return absl::InternalError("wrong iteration");
      checkpoint::SaveOptions opt;
      opt.iteration = 2;
      GTP_RETURN_IF_ERROR(checkpoint::Save(to, pieces, *c.world, opt));
      if (l == &kA) {
        GTP_ASSIGN_OR_RETURN(float loss, Step(c, 2));
        if (c.world->rank() == 0) resumed = loss;
      }
      return absl::OkStatus();
    });
    ASSERT_TRUE(st.ok()) << l->name << ": " << st;
  }
  auto g0 = checkpoint::ReadAllGlobal(checkpoint::IterationDir(dirs[0], 2));
  ASSERT_TRUE(g0.ok()) << g0.status();
  int experts = 0;
  for (const auto& t : *g0) experts += t.key.find(".experts.") != std::string::npos;
  EXPECT_EQ(experts, 4);  // fc1 and fc2 of both layers
  for (size_t h = 1; h < dirs.size(); ++h) {
    EXPECT_TRUE(testing::SameGlobalTensors(dirs[0], dirs[h], 2)) << "hop " << h;
  }
  EXPECT_TRUE(std::isfinite(uninterrupted));
  EXPECT_EQ(resumed, uninterrupted);
}

}  // namespace
}  // namespace gtp
