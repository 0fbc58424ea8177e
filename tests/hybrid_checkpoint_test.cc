// Hybrid Mamba checkpoints across layouts (issue 16): a small hybrid GPT
// ("M*-M-": Mamba, attention, MLP blocks) trained 2 SGD steps under
// TP2·GTP2 (4 ranks) is saved, then loaded and saved again along GTP4 →
// TP2·DP2 → 1 rank → TP2·GTP2: every global tensor (the five in_proj parts,
// out_proj, and the per-head conv / dt_bias / A_log / D / norm tensors) is
// bit-identical at each hop, and the last hop's next step gives exactly the
// uninterrupted run's loss.
#include <cmath>
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

constexpr int64_t kGlobalBatch = 4, kSeq = 12, kVocab = 97;

struct Layout {
  const char* name;
  int tp, gtp, dp;
};

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
  testing::FillStep("hybrid.ckpt.data", step, data->rank() * B, kVocab, tok, tgt);
  GTP_ASSIGN_OR_RETURN(float loss, c.model->Forward(tok, tgt));
  GTP_RETURN_IF_ERROR(c.model->Backward());
  kernels::Exec exec = kernels::Exec::Cpu(*c.host);
  optimizer::ParamSet ps{c.model->sharded_params(), c.model->replicated_params()};
  GTP_RETURN_IF_ERROR(optimizer::FinalizeGrads(ps, *c.pgs));
  optimizer::SgdStep(ps, exec, 0.5f);
  optimizer::ZeroGrads(ps, exec);
  GTP_RETURN_IF_ERROR(
      comm::Run(data->AllReduce(&loss, &loss, 1, DType::kF32, comm::ReduceOp::kMean)));
  return loss;
}

absl::Status WithModel(const Layout& l, uint64_t seed, const std::function<absl::Status(Ctx&)>& fn) {
  HeapAllocator host;
  return comm::RunRanks(l.tp * l.gtp * l.dp, [&](comm::Communicator& w) -> absl::Status {
    parallel::ParallelConfig pc;
    pc.tp = l.tp;
    pc.tp_num_weight_shards = l.tp * l.gtp;
    GTP_ASSIGN_OR_RETURN(auto pgs, parallel::ProcessGroupCollection::Build(pc, w));
    GTP_ASSIGN_OR_RETURN(comm::Communicator * data, pgs.Get("data"));
    layers::GptConfig cfg = layers::GptConfig::Gpt2(kVocab, 16, 5, 16, 4);
    cfg.layer_pattern = "M*-M-";
    cfg.block.seed = seed;
    cfg.block.init_std = 0.2f;
    cfg.block.mamba.d_state = 8;
    cfg.block.mamba.head_dim = 8;  // 32 / 8 = 4 heads
    cfg.block.mamba.n_groups = 2;
    cfg.block.mamba.chunk = 5;  // T = 12: chunks of 5, 5, 2
    GTP_ASSIGN_OR_RETURN(auto model, layers::GptModel::Create(cfg, kGlobalBatch / data->size(), kSeq,
                                                              pgs, kernels::Exec::Cpu(host)));
    Ctx c{&w, &pgs, model.get(), &host};
    return fn(c);
  });
}

absl::StatusOr<std::vector<checkpoint::TensorPiece>> Pieces(Ctx& c) {
  return checkpoint::ModelPieces({c.model->sharded_params(), c.model->replicated_params()}, *c.pgs);
}

TEST(HybridCheckpoint, RoundTripAcrossLayoutsIsBitIdentical) {
  const Layout kA{"TP2_GTP2", 2, 2, 1}, kB{"GTP4", 1, 4, 1}, kC{"TP2_DP2", 2, 1, 2},
      kD{"single", 1, 1, 1};
  std::vector<std::string> dirs;
  float uninterrupted = 0, resumed = -1;
  dirs.push_back(testing::FreshDir("hybrid_ckpt_0"));
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
  for (const Layout* l : {&kB, &kC, &kD, &kA}) {
    const std::string from = dirs.back(),
                      to = testing::FreshDir("hybrid_ckpt_" + std::to_string(dirs.size()));
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
  // The Mamba tensors are there as global (unsharded, unpadded) tensors.
  int in_proj = 0, a_log = 0;
  for (const auto& t : *g0) {
    in_proj += t.key.find(".in_proj_") != std::string::npos;
    if (t.key.find("A_log") != std::string::npos) {
      ++a_log;
      EXPECT_EQ(t.bytes.size(), 4 * sizeof(float)) << t.key;  // every head, not one TP rank's
    }
  }
  EXPECT_EQ(in_proj, 10);  // z, x, B, C, dt of both Mamba layers
  EXPECT_EQ(a_log, 2);
  for (size_t h = 1; h < dirs.size(); ++h) {
    EXPECT_TRUE(testing::SameGlobalTensors(dirs[0], dirs[h], 2)) << "hop " << h;
  }
  EXPECT_TRUE(std::isfinite(uninterrupted));
  EXPECT_EQ(resumed, uninterrupted);
}

}  // namespace
}  // namespace gtp
