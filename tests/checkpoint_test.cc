// Checkpoints across layouts (issue 7): save under layout A, load under B,
// for 10 (A, B) pairs changing TP, GTP and DP: the loaded global tensors are
// bit-identical and the next 5 training steps match the uninterrupted run
// (bit-identical when A = B). Plus: crash safety (a saver killed mid-write
// leaves `latest` on the previous checkpoint, which loads), corruption
// detection naming the file, and parallel saves (each of N ranks writes
// about 1/N of the bytes).
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "checkpoint/model_state.h"
#include "checkpoint/metadata.pb.h"
#include "comm/local/local_communicator.h"
#include "core/philox.h"
#include "gtest/gtest.h"
#include "layers/gpt.h"
#include "optimizer/grad_sync.h"
#include "parallel/parallel_config.h"
#include "parallel/process_groups.h"

namespace gtp {
namespace {

namespace fs = std::filesystem;
constexpr int64_t kGlobalBatch = 8, kSeq = 8, kVocab = 97;

struct Layout {
  const char* name;
  int tp, gtp, dp;
};

std::string Tmp(const std::string& name) {
  const char* d = std::getenv("TEST_TMPDIR");
  std::string p = std::string(d ? d : "/tmp") + "/" + name;
  fs::remove_all(p);
  return p;
}

int32_t Token(int step, int64_t s, int64_t t) {
  return PhiloxRaw(MixKey(KeyFromName("ckpt.data"), step), s * (kSeq + 1) + t).v[0] % kVocab;
}

struct Ctx {
  comm::Communicator* world;
  parallel::ProcessGroupCollection* pgs;
  layers::GptModel* model;
  HeapAllocator* host;
  int lane, lanes;
};

// One SGD step on this lane's part of global batch `step`; returns the global loss.
absl::StatusOr<float> Step(Ctx& c, int step) {
  const int64_t B = kGlobalBatch / c.lanes;
  Tensor tok = Tensor::Empty({B, kSeq}, DType::kI32, *c.host), tgt = Tensor::Empty({B, kSeq}, DType::kI32, *c.host);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < kSeq; ++t) {
      tok.data<int32_t>()[b * kSeq + t] = Token(step, c.lane * B + b, t);
      tgt.data<int32_t>()[b * kSeq + t] = Token(step, c.lane * B + b, t + 1);
    }
  GTP_ASSIGN_OR_RETURN(float loss, c.model->Forward(tok, tgt));
  GTP_RETURN_IF_ERROR(c.model->Backward());
  optimizer::ParamSet ps{c.model->sharded_params(), c.model->replicated_params()};
  GTP_RETURN_IF_ERROR(optimizer::FinalizeGrads(ps, *c.pgs));
  kernels::Exec exec = kernels::Exec::Cpu(*c.host);
  optimizer::SgdStep(ps, exec, 0.5f);
  optimizer::ZeroGrads(ps, exec);
  GTP_ASSIGN_OR_RETURN(comm::Communicator * data, c.pgs->Get("data"));
  GTP_RETURN_IF_ERROR(comm::Run(data->AllReduce(&loss, &loss, 1, DType::kF32, comm::ReduceOp::kMean)));
  return loss;
}

// Builds the model under `l` on every rank and runs fn.
absl::Status WithModel(const Layout& l, uint64_t seed, const std::function<absl::Status(Ctx&)>& fn) {
  HeapAllocator host;
  return comm::RunRanks(l.tp * l.gtp * l.dp, [&](comm::Communicator& w) -> absl::Status {
    parallel::ParallelConfig pc;
    pc.tp = l.tp;
    pc.tp_num_weight_shards = l.tp * l.gtp;
    GTP_ASSIGN_OR_RETURN(auto pgs, parallel::ProcessGroupCollection::Build(pc, w));
    GTP_ASSIGN_OR_RETURN(comm::Communicator * data, pgs.Get("data"));
    layers::GptConfig cfg = layers::GptConfig::Gpt2(kVocab, 16, 2, 16, 4);
    cfg.block.seed = seed;
    cfg.block.init_std = 0.2f;
    GTP_ASSIGN_OR_RETURN(auto model, layers::GptModel::Create(cfg, kGlobalBatch / data->size(), kSeq,
                                                              pgs, kernels::Exec::Cpu(host)));
    Ctx c{&w, &pgs, model.get(), &host, data->rank(), data->size()};
    return fn(c);
  });
}

absl::StatusOr<std::vector<checkpoint::TensorPiece>> Pieces(Ctx& c) {
  return checkpoint::ModelPieces({c.model->sharded_params(), c.model->replicated_params()}, *c.pgs);
}

struct Pair {
  Layout a, b;
};

class Reshard : public ::testing::TestWithParam<Pair> {};

TEST_P(Reshard, LoadsAnyLayoutAndContinuesTheSameLosses) {
  const Pair p = GetParam();
  const std::string dir_a = Tmp(std::string("a_") + p.a.name + "_" + p.b.name);
  const std::string dir_b = Tmp(std::string("b_") + p.a.name + "_" + p.b.name);
  std::vector<float> uninterrupted, resumed;
  std::mutex mu;
  absl::Status st = WithModel(p.a, 3, [&](Ctx& c) -> absl::Status {
    for (int s = 0; s < 3; ++s) GTP_RETURN_IF_ERROR(Step(c, s).status());
    GTP_ASSIGN_OR_RETURN(auto pieces, Pieces(c));
    checkpoint::SaveOptions opt;
    opt.iteration = 3;
    GTP_RETURN_IF_ERROR(checkpoint::Save(dir_a, pieces, *c.world, opt));
    for (int s = 3; s < 8; ++s) {
      GTP_ASSIGN_OR_RETURN(float loss, Step(c, s));
      if (c.world->rank() == 0) uninterrupted.push_back(loss);
    }
    return absl::OkStatus();
  });
  ASSERT_TRUE(st.ok()) << st;
  st = WithModel(p.b, /*different init*/ 99, [&](Ctx& c) -> absl::Status {
    GTP_ASSIGN_OR_RETURN(auto pieces, Pieces(c));
    GTP_ASSIGN_OR_RETURN(auto r, checkpoint::Load(dir_a, std::nullopt, pieces, *c.world));
    if (r.iteration != 3) return absl::InternalError("wrong iteration");
    checkpoint::SaveOptions opt;
    opt.iteration = 3;
    GTP_RETURN_IF_ERROR(checkpoint::Save(dir_b, pieces, *c.world, opt));
    for (int s = 3; s < 8; ++s) {
      GTP_ASSIGN_OR_RETURN(float loss, Step(c, s));
      if (c.world->rank() == 0) resumed.push_back(loss);
    }
    return absl::OkStatus();
  });
  ASSERT_TRUE(st.ok()) << st;
  // Global tensors: bit-identical after the reshard.
  auto ga = checkpoint::ReadAllGlobal(checkpoint::IterationDir(dir_a, 3));
  auto gb = checkpoint::ReadAllGlobal(checkpoint::IterationDir(dir_b, 3));
  ASSERT_TRUE(ga.ok()) << ga.status();
  ASSERT_TRUE(gb.ok()) << gb.status();
  ASSERT_EQ(ga->size(), gb->size());
  for (size_t i = 0; i < ga->size(); ++i) {
    EXPECT_EQ((*ga)[i].key, (*gb)[i].key);
    EXPECT_TRUE((*ga)[i].bytes == (*gb)[i].bytes) << (*ga)[i].key;
  }
  ASSERT_EQ(resumed.size(), uninterrupted.size());
  const bool same = std::string(p.a.name) == p.b.name;
  for (size_t i = 0; i < resumed.size(); ++i) {
    if (same) {
      EXPECT_EQ(resumed[i], uninterrupted[i]) << "step " << i;
    } else {
      EXPECT_NEAR(resumed[i], uninterrupted[i], 1e-5 * std::abs(uninterrupted[i])) << "step " << i;
    }
  }
}

const Layout kSingle{"single", 1, 1, 1}, kDP4{"DP4", 1, 1, 4}, kGTP4{"GTP4", 1, 4, 1},
    kGTP2{"GTP2", 1, 2, 1}, kTP2GTP2{"TP2_GTP2", 2, 2, 1}, kTP2DP2{"TP2_DP2", 2, 1, 2},
    kDP2GTP2{"DP2_GTP2", 1, 2, 2}, kTP4{"TP4", 4, 1, 1};

INSTANTIATE_TEST_SUITE_P(
    Pairs, Reshard,
    ::testing::Values(Pair{kSingle, kTP2GTP2}, Pair{kDP4, kGTP4}, Pair{kGTP4, kTP2DP2},
                      Pair{kTP2GTP2, kSingle}, Pair{kDP2GTP2, kTP2GTP2}, Pair{kGTP2, kGTP4},
                      Pair{kTP4, kTP2GTP2}, Pair{kTP2GTP2, kTP2GTP2}, Pair{kGTP4, kDP4},
                      Pair{kTP2DP2, kDP2GTP2}),
    [](const auto& i) { return std::string(i.param.a.name) + "_to_" + i.param.b.name; });

TEST(Checkpoint, ParallelSaveSpreadsBytesOverRanks) {
  const std::string dir = Tmp("parallel");
  ASSERT_TRUE(WithModel(kDP4, 3, [&](Ctx& c) -> absl::Status {
                GTP_ASSIGN_OR_RETURN(auto pieces, Pieces(c));
                return checkpoint::Save(dir, pieces, *c.world, {});
              }).ok());
  auto read = checkpoint::ReadCheckpointMetadata(checkpoint::IterationDir(dir, 0));
  ASSERT_TRUE(read.ok()) << read.status();
  const checkpoint::proto::Metadata& meta = *read;
  std::map<int, int64_t> bytes;
  int64_t total = 0;
  for (const auto& e : meta.tensors())
    for (const auto& p : e.pieces()) {
      bytes[p.writer_rank()] += p.bytes();
      total += p.bytes();
    }
  ASSERT_EQ(bytes.size(), 4u);
  for (const auto& [rank, b] : bytes) {
    EXPECT_NEAR(static_cast<double>(b) / total, 0.25, 0.02) << "rank " << rank;
  }
}

TEST(Checkpoint, KilledSaverLeavesThePreviousCheckpointLoadable) {
  const std::string dir = Tmp("crash");
  ASSERT_TRUE(WithModel(kGTP2, 3, [&](Ctx& c) -> absl::Status {
                GTP_ASSIGN_OR_RETURN(auto pieces, Pieces(c));
                checkpoint::SaveOptions opt;
                opt.iteration = 1;
                return checkpoint::Save(dir, pieces, *c.world, opt);
              }).ok());
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // The child trains a step and dies in the middle of writing iteration 2.
    (void)WithModel(kGTP2, 3, [&](Ctx& c) -> absl::Status {
      GTP_RETURN_IF_ERROR(Step(c, 0).status());
      GTP_ASSIGN_OR_RETURN(auto pieces, Pieces(c));
      checkpoint::SaveOptions opt;
      opt.iteration = 2;
      opt.testing_crash_after_bytes = 1000;
      return checkpoint::Save(dir, pieces, *c.world, opt);
    });
    std::_Exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 3) << "the saver should have died mid-write";
  auto latest = checkpoint::LatestIteration(dir);
  ASSERT_TRUE(latest.ok());
  EXPECT_EQ(*latest, 1);
  EXPECT_TRUE(WithModel(kGTP2, 99, [&](Ctx& c) -> absl::Status {
                GTP_ASSIGN_OR_RETURN(auto pieces, Pieces(c));
                return checkpoint::Load(dir, std::nullopt, pieces, *c.world).status();
              }).ok());
}

TEST(Checkpoint, KilledBeforeLatestWasRenamedResumesFromTheFinishedDirectory) {
  // The first save published iter_0000004 and died before renaming
  // latest.tmp: the pointer is pending, the data complete.
  const std::string dir = Tmp("pending_latest");
  ASSERT_TRUE(WithModel(kGTP2, 3, [&](Ctx& c) -> absl::Status {
                GTP_ASSIGN_OR_RETURN(auto pieces, Pieces(c));
                checkpoint::SaveOptions opt;
                opt.iteration = 4;
                return checkpoint::Save(dir, pieces, *c.world, opt);
              }).ok());
  ASSERT_EQ(std::rename((dir + "/latest").c_str(), (dir + "/latest.tmp").c_str()), 0);
  auto latest = checkpoint::LatestIteration(dir);
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(*latest, 4);
  EXPECT_TRUE(WithModel(kGTP2, 99, [&](Ctx& c) -> absl::Status {
                GTP_ASSIGN_OR_RETURN(auto pieces, Pieces(c));
                return checkpoint::Load(dir, std::nullopt, pieces, *c.world).status();
              }).ok());
  // A latest.tmp cut short (no newline) or naming no finished directory is
  // not trusted: the directories are named instead.
  for (const char* text : {"4", "7\n"}) {
    std::ofstream(dir + "/latest.tmp", std::ios::trunc) << text;
    auto bad = checkpoint::LatestIteration(dir);
    ASSERT_FALSE(bad.ok()) << text;
    EXPECT_NE(bad.status().message().find("iter_0000004"), std::string::npos) << bad.status();
  }
}

TEST(Checkpoint, FlippedByteIsDetectedAndNamed) {
  const std::string dir = Tmp("flip");
  ASSERT_TRUE(WithModel(kGTP2, 3, [&](Ctx& c) -> absl::Status {
                GTP_ASSIGN_OR_RETURN(auto pieces, Pieces(c));
                return checkpoint::Save(dir, pieces, *c.world, {});
              }).ok());
  const std::string file = checkpoint::IterationDir(dir, 0) + "/rank_00001.bin";
  {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    char b;
    f.seekg(100);
    f.read(&b, 1);
    b ^= 0x10;
    f.seekp(100);
    f.write(&b, 1);
  }
  absl::Status st = WithModel(kSingle, 3, [&](Ctx& c) -> absl::Status {
    GTP_ASSIGN_OR_RETURN(auto pieces, Pieces(c));
    return checkpoint::Load(dir, std::nullopt, pieces, *c.world).status();
  });
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << st;
  EXPECT_NE(st.message().find("checksum mismatch"), std::string::npos) << st;
  EXPECT_NE(st.message().find("rank_00001.bin"), std::string::npos) << st;
}

// A rank's data file deleted after the save: "missing", naming it, not "not
// a gtp checkpoint data file".
TEST(Checkpoint, DeletedRankFileIsNamedAsMissing) {
  const std::string dir = Tmp("deleted");
  ASSERT_TRUE(WithModel(kGTP2, 3, [&](Ctx& c) -> absl::Status {
                GTP_ASSIGN_OR_RETURN(auto pieces, Pieces(c));
                return checkpoint::Save(dir, pieces, *c.world, {});
              }).ok());
  const std::string file = checkpoint::IterationDir(dir, 0) + "/rank_00001.bin";
  ASSERT_EQ(std::remove(file.c_str()), 0);
  absl::Status st = WithModel(kSingle, 3, [&](Ctx& c) -> absl::Status {
    GTP_ASSIGN_OR_RETURN(auto pieces, Pieces(c));
    return checkpoint::Load(dir, std::nullopt, pieces, *c.world).status();
  });
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << st;
  EXPECT_NE(st.message().find("rank_00001.bin is missing"), std::string::npos) << st;
}

TEST(Checkpoint, MissingCheckpointAndWrongModelAreClearErrors) {
  absl::Status st = WithModel(kSingle, 3, [&](Ctx& c) -> absl::Status {
    GTP_ASSIGN_OR_RETURN(auto pieces, Pieces(c));
    return checkpoint::Load(Tmp("nothing"), std::nullopt, pieces, *c.world).status();
  });
  EXPECT_NE(st.message().find("no checkpoint"), std::string::npos) << st;
}

TEST(Checkpoint, AsyncSaveSnapshotsTheStepItStartedAt) {
  // Training continues while the async save writes; the checkpoint must hold
  // the values of the step at which it started, bit for bit (compared with a
  // synchronous save of the same step).
  const std::string sync_dir = Tmp("sync"), async_dir = Tmp("async");
  ASSERT_TRUE(WithModel(kTP2GTP2, 3, [&](Ctx& c) -> absl::Status {
                GTP_RETURN_IF_ERROR(Step(c, 0).status());
                GTP_ASSIGN_OR_RETURN(auto pieces, Pieces(c));
                checkpoint::SaveOptions opt;
                opt.iteration = 1;
                GTP_RETURN_IF_ERROR(checkpoint::Save(sync_dir, pieces, *c.world, opt));
                GTP_ASSIGN_OR_RETURN(auto saver_comm, c.world->Split({{0, 1, 2, 3}}, "ckpt"));
                checkpoint::AsyncSaver saver(*saver_comm);
                GTP_RETURN_IF_ERROR(saver.Start(async_dir, pieces, opt));
                for (int s = 1; s < 4; ++s) GTP_RETURN_IF_ERROR(Step(c, s).status());  // overlaps the write
                return saver.Wait();
              }).ok());
  auto a = checkpoint::ReadAllGlobal(checkpoint::IterationDir(sync_dir, 1));
  auto b = checkpoint::ReadAllGlobal(checkpoint::IterationDir(async_dir, 1));
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ(a->size(), b->size());
  for (size_t i = 0; i < a->size(); ++i) EXPECT_TRUE((*a)[i].bytes == (*b)[i].bytes) << (*a)[i].key;
}

}  // namespace
}  // namespace gtp
