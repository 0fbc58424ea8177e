// Pipeline checkpoints across layouts (issue 14): a tied-embedding GPT of 4
// layers trained 2 steps under PP2·GTP2 is saved, then loaded and saved
// again along PP2·GTP2 → PP4 → 1 rank → PP2·GTP2: every global tensor is
// bit-identical at each hop (the head's copy of wte is never saved, and is
// filled on load), and the last hop's next step equals the uninterrupted
// run's loss exactly.
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
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
#include "pipeline/runner.h"
#include "tests/ckpt_testing.h"

namespace gtp {
namespace {

namespace fs = std::filesystem;
constexpr int64_t kGlobalBatch = 8, kSeq = 8, kVocab = 97;
constexpr int kMicro = 4;

struct Layout {
  const char* name;
  int gtp, pp;
};

std::string Tmp(const std::string& name) { return testing::FreshDir("pp_ckpt_" + name); }

struct Ctx {
  comm::Communicator* world;
  parallel::ProcessGroupCollection* pgs;
  std::vector<std::unique_ptr<layers::GptModel>>* parts;
  optimizer::ParamSet params;
  HeapAllocator* host;
};

absl::StatusOr<float> Step(Ctx& c, int step) {
  GTP_ASSIGN_OR_RETURN(comm::Communicator * data, c.pgs->Get("data"));
  GTP_ASSIGN_OR_RETURN(comm::Communicator * pp, c.pgs->Get("pp"));
  const int64_t B = kGlobalBatch / data->size() / kMicro;
  std::vector<layers::GptModel*> raw;
  for (auto& p : *c.parts) raw.push_back(p.get());
  kernels::Exec exec = kernels::Exec::Cpu(*c.host);
  GTP_ASSIGN_OR_RETURN(std::unique_ptr<pipeline::PipelineRunner> runner,
                       pipeline::PipelineRunner::Create(raw, pp, exec));
  auto micro = [&](int m) -> absl::StatusOr<pipeline::MicroBatch> {
    pipeline::MicroBatch mb{Tensor::Empty({B, kSeq}, DType::kI32, *c.host),
                            Tensor::Empty({B, kSeq}, DType::kI32, *c.host)};
    testing::FillStep("pp.ckpt.data", step, (data->rank() * kMicro + m) * B, kVocab, mb.tokens,
                      mb.targets);
    return mb;
  };
  GTP_RETURN_IF_ERROR(runner->Step(kMicro, micro).status());
  float loss = 0;
  if (c.parts->back()->has_head()) {
    GTP_ASSIGN_OR_RETURN(loss, c.parts->back()->TakeLossSum());
  }
  GTP_RETURN_IF_ERROR(comm::Run(pp->Broadcast(&loss, 1, DType::kF32, pp->size() - 1)));
  if ((*c.pgs->Group("embd"))->is_member()) {
    GTP_ASSIGN_OR_RETURN(comm::Communicator * embd, c.pgs->Get("embd"));
    for (auto& p : *c.parts) GTP_RETURN_IF_ERROR(p->SyncTiedEmbedding(*embd));
  }
  GTP_RETURN_IF_ERROR(optimizer::FinalizeGrads(c.params, *c.pgs));
  optimizer::SgdStep(c.params, exec, 0.5f);
  optimizer::ZeroGrads(c.params, exec);
  GTP_RETURN_IF_ERROR(comm::Run(data->AllReduce(&loss, &loss, 1, DType::kF32, comm::ReduceOp::kMean)));
  return loss / kMicro;
}

absl::Status WithModel(const Layout& l, uint64_t seed, const std::function<absl::Status(Ctx&)>& fn) {
  HeapAllocator host;
  return comm::RunRanks(l.gtp * l.pp, [&](comm::Communicator& w) -> absl::Status {
    parallel::ParallelConfig pc;
    pc.tp_num_weight_shards = l.gtp;
    pc.pp = l.pp;
    GTP_ASSIGN_OR_RETURN(auto pgs, parallel::ProcessGroupCollection::Build(pc, w));
    GTP_ASSIGN_OR_RETURN(comm::Communicator * data, pgs.Get("data"));
    GTP_ASSIGN_OR_RETURN(comm::Communicator * pp, pgs.Get("pp"));
    std::vector<std::unique_ptr<layers::GptModel>> parts;
    layers::GptConfig cfg = layers::GptConfig::Gpt2(kVocab, 16, 4, 16, 4);
    cfg.block.seed = seed;
    cfg.block.init_std = 0.2f;
    cfg.pipeline.index = pp->rank();
    cfg.pipeline.count = l.pp;
    GTP_ASSIGN_OR_RETURN(auto model, layers::GptModel::Create(cfg, kGlobalBatch / data->size() / kMicro,
                                                              kSeq, pgs, kernels::Exec::Cpu(host)));
    Ctx c{&w, &pgs, &parts, {model->sharded_params(), model->replicated_params()}, &host};
    parts.push_back(std::move(model));
    return fn(c);
  });
}

TEST(PipelineCheckpoint, RoundTripAcrossPipelineLayoutsIsBitIdentical) {
  const Layout kA{"PP2_GTP2", 2, 2}, kB{"PP4", 1, 4}, kC{"single", 1, 1};
  std::vector<std::string> dirs{Tmp("0")};
  float uninterrupted = 0, resumed = -1;
  absl::Status st = WithModel(kA, 3, [&](Ctx& c) -> absl::Status {
    for (int s = 0; s < 2; ++s) GTP_RETURN_IF_ERROR(Step(c, s).status());
    GTP_ASSIGN_OR_RETURN(auto pieces, checkpoint::ModelPieces(c.params, *c.pgs));
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
      GTP_ASSIGN_OR_RETURN(auto load, checkpoint::ModelPieces(c.params, *c.pgs, nullptr,
                                                              /*with_tied_copies=*/true));
      GTP_ASSIGN_OR_RETURN(auto r, checkpoint::Load(from, std::nullopt, load, *c.world));
      if (r.iteration != 2) return absl::InternalError("wrong iteration");
      GTP_ASSIGN_OR_RETURN(auto save, checkpoint::ModelPieces(c.params, *c.pgs));
      checkpoint::SaveOptions opt;
      opt.iteration = 2;
      GTP_RETURN_IF_ERROR(checkpoint::Save(to, save, *c.world, opt));
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
  int wte = 0;
  for (const auto& t : *g0) wte += t.key == "wte.weight";
  EXPECT_EQ(wte, 1);
  for (size_t h = 1; h < dirs.size(); ++h) {
    EXPECT_TRUE(testing::SameGlobalTensors(dirs[0], dirs[h], 2)) << "hop " << h;
  }
  EXPECT_TRUE(std::isfinite(uninterrupted));
  EXPECT_EQ(resumed, uninterrupted);
}

}  // namespace
}  // namespace gtp
