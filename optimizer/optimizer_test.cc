// DistributedOptimizer: the AdamW and Muon update rules against hand-computed
// references, weight-decay masks, bf16 params with f32 masters, the memory
// test (per-rank state = total / (TP·GTP·DP) ± padding, from allocator
// statistics), Muon ownership balance (stacked expert blocks each owned
// alone), blockwise mode, the non-distributed all-reduce path and
// configuration errors.
#include "optimizer/optimizer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "comm/local/local_communicator.h"
#include "core/kernels/cpu.h"
#include "gtest/gtest.h"
#include "layers/linear.h"
#include "optimizer/testing/train_harness.h"
#include "parallel/parallel_config.h"

namespace gtp::optimizer {
namespace {

using Snapshot = std::map<std::string, std::vector<float>>;

std::vector<float> HostCopy(const Tensor& t) {
  const float* d = t.data<float>();
  return std::vector<float>(d, d + t.numel());
}

// Snapshots params and finished grads before step 0 and params before step 1
// (= after one update), on a single rank.
struct OneStep {
  Snapshot p0, g0, p1;
  std::vector<MuonMatrixInfo> muon;
};

OneStep RunOneStep(testing::RunConfig c) {
  OneStep out;
  c.layout = {"single"};
  c.steps = 2;
  c.on_setup = [&](testing::RankContext& ctx) { out.muon = ctx.opt->muon_matrices(); };
  c.before_step = [&](testing::RankContext& ctx, int step) {
    for (const GradParam& p : ctx.grads->params()) {
      (step == 0 ? out.p0 : out.p1)[p.name] = HostCopy(p.value());
    }
    if (step != 0) return;
    ASSERT_TRUE(ctx.grads->FinishGradSync().ok());
    for (const GradParam& p : ctx.grads->params()) {
      out.g0[p.name] = HostCopy(ctx.grads->data().Slice(p.offset, p.offset + p.numel));
    }
  };
  const testing::RunResult r = testing::Train(c);
  EXPECT_TRUE(r.status.ok()) << r.status;
  EXPECT_FLOAT_EQ(r.stats[0].lr, LrAt(c.opt.lr, 0));
  return out;
}

// Newton–Schulz in double, written from the math (not from the kernel):
// X = G/(‖G‖_F + 1e-7), transposed when M > N; X ← aX + (bA + cA²)X with A =
// XXᵀ, the quintic coefficients per step.
std::vector<double> NewtonSchulzDouble(const std::vector<double>& G, int64_t M, int64_t N, int steps) {
  const bool tr = M > N;
  const int64_t R = tr ? N : M, K = tr ? M : N;
  double norm = 0;
  for (double v : G) norm += v * v;
  norm = std::sqrt(norm) + 1e-7;
  std::vector<double> X(R * K);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) (tr ? X[j * M + i] : X[i * N + j]) = G[i * N + j] / norm;
  for (int s = 0; s < steps; ++s) {
    float a, b, c;
    kernels::NsCoefficientsAt(kernels::NsCoefficients::kQuintic, s, &a, &b, &c);
    std::vector<double> A(R * R, 0.0), P(R * R, 0.0), Y(R * K, 0.0);
    for (int64_t i = 0; i < R; ++i)
      for (int64_t j = 0; j < R; ++j)
        for (int64_t k = 0; k < K; ++k) A[i * R + j] += X[i * K + k] * X[j * K + k];
    for (int64_t i = 0; i < R; ++i)
      for (int64_t j = 0; j < R; ++j) {
        double aa = 0;
        for (int64_t k = 0; k < R; ++k) aa += A[i * R + k] * A[k * R + j];
        P[i * R + j] = b * A[i * R + j] + c * aa;
      }
    for (int64_t i = 0; i < R; ++i)
      for (int64_t j = 0; j < K; ++j) {
        double px = 0;
        for (int64_t k = 0; k < R; ++k) px += P[i * R + k] * X[k * K + j];
        Y[i * K + j] = a * X[i * K + j] + px;
      }
    X.swap(Y);
  }
  std::vector<double> out(M * N);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) out[i * N + j] = tr ? X[j * M + i] : X[i * N + j];
  return out;
}

// Three Muon steps with Nesterov momentum, weight decay and the lr
// multiplier, each scale mode, against a double-precision Muon fed the same
// gradients: a wide [64, 16] and a square [16, 16] matrix.
TEST(DistributedOptimizer, MultiStepMuonMatchesADoubleReference) {
  for (MuonScale scale : {MuonScale::kSpectral, MuonScale::kShape, MuonScale::kUnitRms}) {
    SCOPED_TRACE(static_cast<int>(scale));
    testing::RunConfig c;
    c.model = testing::SmallModel(false);
    c.layout = {"single"};
    c.steps = 3;
    c.opt.matrices = MatrixOptimizer::kMuon;
    c.buffer.reduce = ReduceMode::kAllReduce;
    c.opt.lr = {LrDecay::kConstant, 1e-2f};
    c.opt.muon.nesterov = true;
    c.opt.muon.momentum = 0.9f;
    c.opt.muon.weight_decay = 0.3f;
    c.opt.muon.lr_multiplier = 2.0f;
    c.opt.muon.scale = scale;
    const std::vector<std::string> names = {"h.1.mlp.fc.weight", "h.0.attn.q.weight"};
    std::map<std::string, std::vector<float>> p0, p_end;
    std::map<std::string, std::vector<std::vector<float>>> grads;
    c.before_step = [&](testing::RankContext& ctx, int step) {
      ASSERT_TRUE(ctx.grads->FinishGradSync().ok());
      for (const GradParam& p : ctx.grads->params()) {
        if (std::find(names.begin(), names.end(), p.name) == names.end()) continue;
        if (step == 0) p0[p.name] = HostCopy(p.value());
        grads[p.name].push_back(HostCopy(ctx.grads->data().Slice(p.offset, p.offset + p.numel)));
      }
    };
    const testing::RunResult r = testing::Train(c);
    ASSERT_TRUE(r.status.ok()) << r.status;
    for (const std::string& name : names) {
      SCOPED_TRACE(name);
      const std::vector<float>& got = r.params.at(name);
      const int64_t M = name.find("fc") != std::string::npos ? 64 : 16, N = 16;
      ASSERT_EQ(static_cast<int64_t>(got.size()), M * N);
      const double sc = scale == MuonScale::kSpectral ? std::sqrt(static_cast<double>(std::max(M, N)))
                        : scale == MuonScale::kShape  ? std::sqrt(std::max(1.0, double(M) / N))
                                                      : std::sqrt(double(M) / N);
      const double lr = 2e-2, wd = 0.3, beta = 0.9;
      std::vector<double> p(p0.at(name).begin(), p0.at(name).end()), m(M * N, 0.0), u(M * N);
      ASSERT_EQ(grads.at(name).size(), 3u);
      for (const std::vector<float>& g : grads.at(name)) {
        for (int64_t i = 0; i < M * N; ++i) {
          m[i] = beta * m[i] + (1 - beta) * g[i];
          u[i] = (1 - beta) * g[i] + beta * m[i];
        }
        const std::vector<double> X = NewtonSchulzDouble(u, M, N, 5);
        for (int64_t i = 0; i < M * N; ++i) p[i] = p[i] * (1 - lr * wd) - lr * sc * X[i];
      }
      double num = 0, den = 0;
      for (int64_t i = 0; i < M * N; ++i) {
        ASSERT_TRUE(std::isfinite(got[i]));
        num += (got[i] - p[i]) * (got[i] - p[i]);
        den += p[i] * p[i];
      }
      EXPECT_LT(std::sqrt(num / den), 1e-5);
    }
  }
}

// Replica consistency: after several AdamW and Muon steps every copy of a
// replicated tensor (norms, biases, positions: over the whole world; column-
// parallel biases over gtp and replicate; GTP shards over replicate) is
// bit-identical, with and without sequence parallelism.
TEST(DistributedOptimizer, ReplicasStayBitIdentical) {
  for (MatrixOptimizer m : {MatrixOptimizer::kAdamW, MatrixOptimizer::kMuon}) {
    for (const testing::Layout& l : {testing::Layout{"DP2_GTP2", 1, 2, 2}, testing::Layout{"TP2_GTP2", 2, 2, 1},
                                     testing::Layout{"TP2_DP2", 2, 1, 2}}) {
      for (bool sp : {false, true}) {
        if (sp && l.tp == 1) continue;
        SCOPED_TRACE(std::string(l.name) + (sp ? " SP" : "") +
                     (m == MatrixOptimizer::kMuon ? " muon" : " adamw"));
        testing::RunConfig c;
        c.model = testing::SmallModel(/*llama=*/sp);
        c.model.block.sequence_parallel = sp;
        c.layout = l;
        c.steps = 3;
        c.opt.matrices = m;
        c.opt.adamw.weight_decay = 0.1f;
        c.opt.clip_grad = 0.5;
        if (m == MatrixOptimizer::kMuon) c.buffer.reduce = ReduceMode::kAllReduce;
        const testing::RunResult r = testing::Train(c);
        ASSERT_TRUE(r.status.ok()) << r.status;
        EXPECT_TRUE(r.replica_mismatches.empty())
            << r.replica_mismatches.size() << " tensors differ, first: " << r.replica_mismatches[0];
      }
    }
  }
  // The check can fail: with the optimizer state kept whole on every rank
  // (distributed = false, all-reduced grads), one rank's gradient of a norm
  // weight flipped after the sync makes that rank's copy drift.
  testing::RunConfig c;
  c.model = testing::SmallModel(false);
  c.layout = {"DP2_GTP2", 1, 2, 2};
  c.steps = 1;
  c.opt.distributed = false;
  c.buffer.reduce = ReduceMode::kAllReduce;
  c.before_step = [](testing::RankContext& ctx, int) {
    ASSERT_TRUE(ctx.grads->FinishGradSync().ok());
    if (ctx.world_rank != 3) return;
    for (const GradParam& p : ctx.grads->params()) {
      if (p.name.find("ln1.weight") == std::string::npos) continue;
      float& g = ctx.grads->data().data<float>()[p.offset];
      g = -g - 1.0f;  // a sign flip: Adam's first step moves by ±lr whatever the size
      return;
    }
  };
  const testing::RunResult bad = testing::Train(c);
  ASSERT_TRUE(bad.status.ok()) << bad.status;
  ASSERT_FALSE(bad.replica_mismatches.empty());
  EXPECT_NE(bad.replica_mismatches[0].find("ln1.weight"), std::string::npos) << bad.replica_mismatches[0];
}

TEST(DistributedOptimizer, AdamWStepMatchesTheFormulaWithDecayMask) {
  testing::RunConfig c;
  c.model = testing::SmallModel(false);
  c.opt.lr = {LrDecay::kConstant, 1e-2f};
  c.opt.adamw.weight_decay = 0.5f;
  const OneStep s = RunOneStep(c);
  const double lr = 1e-2, wd = 0.5, eps = c.opt.adamw.eps;
  int decayed = 0, plain = 0;
  for (const auto& [name, p0] : s.p0) {
    const std::vector<float>& g = s.g0.at(name);
    const std::vector<float>& p1 = s.p1.at(name);
    // Weights (rank 2) decay; norms and biases (rank 1) do not.
    const bool decay = name.find(".bias") == std::string::npos && name.find("ln") == std::string::npos;
    (decay ? decayed : plain)++;
    for (size_t i = 0; i < p0.size(); ++i) {
      // Step 1: m̂ = g, v̂ = g², so the update is g/(|g| + eps).
      const double want = p0[i] - lr * (g[i] / (std::abs(double(g[i])) + eps) + (decay ? wd * p0[i] : 0.0));
      ASSERT_NEAR(p1[i], want, 1e-6 + 1e-5 * std::abs(want)) << name << "[" << i << "]";
    }
  }
  EXPECT_GT(decayed, 0);
  EXPECT_GT(plain, 0);
}

TEST(DistributedOptimizer, MuonStepMatchesNewtonSchulzOfTheMomentum) {
  testing::RunConfig c;
  c.model = testing::SmallModel(false);
  c.opt.matrices = MatrixOptimizer::kMuon;
  c.buffer.reduce = ReduceMode::kAllReduce;
  c.opt.lr = {LrDecay::kConstant, 1e-2f};
  c.opt.muon.weight_decay = 0.5f;
  c.opt.muon.lr_multiplier = 2.0f;
  const OneStep s = RunOneStep(c);
  // GPT-2 block: q, k, v, o, fc, proj per layer; never the embedding.
  ASSERT_EQ(s.muon.size(), 12u);
  for (const MuonMatrixInfo& m : s.muon) EXPECT_EQ(m.name.find("wte"), std::string::npos);
  const std::string name = "h.1.mlp.fc.weight";  // [64, 16]: spectral scale √64 = 8
  const std::vector<float>& g = s.g0.at(name);
  const int64_t M = 64, N = 16;
  ASSERT_EQ(static_cast<int64_t>(g.size()), M * N);
  std::vector<float> mom(g.size()), X(g.size()), scratch(2 * N * N + 2 * M * N + 3);
  for (size_t i = 0; i < g.size(); ++i) mom[i] = (1.0f - 0.95f) * g[i];
  kernels::cpu::NewtonSchulz(mom.data(), X.data(), scratch.data(), M, N, 5,
                             kernels::NsCoefficients::kQuintic);
  const double lr = 2e-2;  // lr · lr_multiplier
  const std::vector<float>& p0 = s.p0.at(name);
  const std::vector<float>& p1 = s.p1.at(name);
  for (size_t i = 0; i < p0.size(); ++i) {
    const double want = p0[i] * (1 - lr * 0.5) - lr * 8.0 * X[i];
    ASSERT_NEAR(p1[i], want, 1e-6) << name << "[" << i << "]";
  }
  // The embedding still gets AdamW (first step: ≈ sign(g)·lr, no multiplier).
  const std::vector<float>& w0 = s.p0.at("wte.weight");
  const std::vector<float>& w1 = s.p1.at("wte.weight");
  const std::vector<float>& wg = s.g0.at("wte.weight");
  for (size_t i = 0; i < w0.size(); ++i) {
    if (std::abs(wg[i]) < 1e-4f) continue;
    ASSERT_NEAR(w1[i], w0[i] - 1e-2 * (wg[i] > 0 ? 1 : -1), 1e-5) << i;
  }
}

// The memory test: optimizer state per rank, read from the allocator the
// optimizer allocates through, is the whole model's state divided by
// TP·GTP·DP, up to bucket padding and the few replicated (norm) params that
// every TP and GTP rank keeps.
TEST(DistributedOptimizer, StateBytesPerRankAreTotalOverTpGtpDp) {
  layers::GptConfig model = testing::SmallModel(/*llama=*/true);
  model.block.n_embd = 32;
  model.block.ffn_hidden = 48;
  model.learned_positions = false;  // keep the replicated (per-GTP-rank) part small
  auto run = [&](const testing::Layout& l, int64_t* sharded, int64_t* replicated,
                 int64_t* buckets) {
    testing::RunConfig c;
    c.model = model;
    c.layout = l;
    c.steps = 1;
    c.buffer.bucket_elements = 6000;
    std::mutex mu;
    c.on_setup = [&](testing::RankContext& ctx) {
      std::lock_guard<std::mutex> lock(mu);
      *sharded = *replicated = 0;
      for (const GradParam& p : ctx.grads->params()) (p.sharded ? *sharded : *replicated) += p.numel;
      *buckets = static_cast<int64_t>(ctx.grads->buckets().size());
    };
    return testing::Train(c);
  };
  int64_t S = 0, Rg = 0, nb = 0;
  const testing::RunResult single = run({"single"}, &S, &Rg, &nb);
  ASSERT_TRUE(single.status.ok()) << single.status;
  const int64_t total = single.state_bytes[0];
  EXPECT_EQ(total, 8 * (S + Rg));  // exp_avg + exp_avg_sq, f32, nothing else
  for (const testing::Layout& l :
       {testing::Layout{"DP4", 1, 1, 4}, testing::Layout{"DP2_GTP2", 1, 2, 2},
        testing::Layout{"GTP4", 1, 4, 1}, testing::Layout{"TP2_GTP2", 2, 2, 1},
        testing::Layout{"TP2_GTP2_DP2", 2, 2, 2}}) {
    int64_t s_local = 0, r_local = 0, buckets = 0;
    const testing::RunResult r = run(l, &s_local, &r_local, &buckets);
    ASSERT_TRUE(r.status.ok()) << l.name << ": " << r.status;
    const int shards = l.tp * l.gtp, dp = l.dp;
    const double ideal = static_cast<double>(total) / (shards * dp);
    // Padding: each bucket pads to a multiple of 16·DP elements; replicated
    // params are whole on every TP×GTP rank (their share beyond 1/(TP·GTP)).
    const double slack = 8.0 * (buckets * 16.0 * dp + r_local - double(Rg) / shards + (s_local - double(S) / shards)) / dp + 8.0 * 16;
    ASSERT_LT(slack, 0.08 * ideal) << l.name << ": the tolerance would not mean much";
    int64_t sum = 0;
    for (size_t k = 0; k < r.state_bytes.size(); ++k) {
      // What the allocator saw: the state tensors, each rounded to 64 bytes.
      EXPECT_GE(r.allocator_bytes[k], r.state_bytes[k]) << l.name << " rank " << k;
      EXPECT_LE(r.allocator_bytes[k], r.state_bytes[k] + 2 * 64) << l.name << " rank " << k;
      EXPECT_NEAR(static_cast<double>(r.allocator_bytes[k]), ideal, slack) << l.name << " rank " << k;
      sum += r.state_bytes[k];
    }
    // Each element's state lives on exactly one rank of its replicate group.
    EXPECT_EQ(sum, 8 * shards * (s_local + r_local)) << l.name;
  }
}

TEST(DistributedOptimizer, MuonOwnersAreBalancedAndMomentumIsSharded) {
  for (const testing::Layout& l : {testing::Layout{"DP4", 1, 1, 4}, testing::Layout{"TP2_DP2", 2, 1, 2}}) {
    testing::RunConfig c;
    c.model = testing::SmallModel(false);
    c.layout = l;
    c.steps = 1;
    c.opt.matrices = MatrixOptimizer::kMuon;
    c.buffer.reduce = ReduceMode::kAllReduce;
    std::mutex mu;
    std::vector<MuonMatrixInfo> mats;
    int64_t momentum_bytes = 0, shard_elems = 0;
    c.on_setup = [&](testing::RankContext& ctx) {
      std::lock_guard<std::mutex> lock(mu);
      if (ctx.world_rank == 0) mats = ctx.opt->muon_matrices();
      for (const StateTensor& t : ctx.opt->state_tensors()) {
        if (t.kind == "momentum") momentum_bytes += t.tensor.nbytes();
      }
      if (ctx.pgs->RankIn("replicate").value() == 0) {
        for (const GradParam& p : ctx.grads->params()) {
          if (DefaultMuonParam(p)) shard_elems += p.numel;
        }
      }
    };
    ASSERT_TRUE(testing::Train(c).status.ok());
    std::vector<double> load(l.dp, 0.0);
    double biggest = 0;
    for (const MuonMatrixInfo& m : mats) {
      ASSERT_GE(m.owner, 0);
      ASSERT_LT(m.owner, l.dp);
      load[m.owner] += m.cost;
      biggest = std::max(biggest, m.cost);
      EXPECT_DOUBLE_EQ(m.cost, double(std::max(m.rows, m.cols)) * std::min(m.rows, m.cols) *
                                   std::min(m.rows, m.cols));
    }
    const auto [lo, hi] = std::minmax_element(load.begin(), load.end());
    EXPECT_GT(*lo, 0) << l.name << ": every replicate rank owns something";
    EXPECT_LE(*hi - *lo, biggest) << l.name;
    // Momentum for every matrix shard exactly once per replicate group.
    EXPECT_EQ(momentum_bytes, 4 * shard_elems) << l.name;
  }
}

// kDuplicated over TP2·GTP2 (DP1): every matrix is orthogonalised by exactly
// one of the four ranks (its ns_rank), the ranks' Newton–Schulz work is
// balanced, and the parameters still match the single-rank run.
TEST(DistributedOptimizer, MuonOrthogonalisesEachMatrixOnceOverTpGtp) {
  auto cfg = [](const testing::Layout& l) {
    testing::RunConfig c;
    c.model = testing::SmallModel(true);
    c.layout = l;
    c.steps = 3;
    c.opt.matrices = MatrixOptimizer::kMuon;
    c.opt.lr = {LrDecay::kConstant, 2e-2f};
    c.buffer.reduce = ReduceMode::kAllReduce;
    return c;
  };
  testing::RunConfig c = cfg({"TP2_GTP2", 2, 2, 1});
  std::mutex mu;
  std::vector<MuonMatrixInfo> mats;
  std::vector<int64_t> calls(4, -1), grid_rank(4, -1);
  c.on_setup = [&](testing::RankContext& ctx) {
    std::lock_guard<std::mutex> lock(mu);
    if (ctx.world_rank == 0) mats = ctx.opt->muon_matrices();
    grid_rank[ctx.world_rank] =
        ctx.pgs->RankIn("tp").value() * 2 + ctx.pgs->RankIn("gtp").value();
  };
  c.before_step = [&](testing::RankContext& ctx, int step) {
    std::lock_guard<std::mutex> lock(mu);
    if (step == 2) calls[ctx.world_rank] = ctx.opt->muon_newton_schulz_calls();  // 2 steps done
  };
  const testing::RunResult got = testing::Train(c);
  ASSERT_TRUE(got.status.ok()) << got.status;
  ASSERT_FALSE(mats.empty());
  std::vector<int64_t> owned(4, 0);
  std::vector<double> load(4, 0.0);
  double biggest = 0;
  for (const MuonMatrixInfo& m : mats) {
    ASSERT_GE(m.ns_rank, 0);
    ASSERT_LT(m.ns_rank, 4);
    ++owned[m.ns_rank];
    load[m.ns_rank] += m.cost;
    biggest = std::max(biggest, m.cost);
  }
  int64_t total = 0;
  for (int r = 0; r < 4; ++r) {
    SCOPED_TRACE(r);
    EXPECT_EQ(calls[r], 2 * owned[grid_rank[r]]) << "rank " << r << " (grid rank " << grid_rank[r] << ")";
    EXPECT_GT(calls[r], 0) << "every rank orthogonalises something";
    total += calls[r];
  }
  EXPECT_EQ(total, 2 * static_cast<int64_t>(mats.size())) << "each matrix once per step";
  const auto [lo, hi] = std::minmax_element(load.begin(), load.end());
  EXPECT_LE(*hi - *lo, biggest);
  const testing::RunResult ref = testing::Train(cfg({"single"}));
  ASSERT_TRUE(ref.status.ok()) << ref.status;
  const auto d = testing::CompareParams(got.params, ref.params, 2e-5, 1e-4);
  EXPECT_LE(d.worst, 1.0) << d.where;
}


// Stacked matrices (MoE experts, ShardedParam::set_matrix_layout with 4
// blocks) built by hand on comm/local ranks: a column-parallel f32 stack
// "moe.fc.weight" (4 × [16, 8], padded over GTP so shards straddle experts),
// a row-parallel bf16 stack "moe.proj.weight" (4 × [8, 16]) and one dense
// [8, 8] matrix "attn.q.weight". Gradients are a fixed function of the
// global element and the step, so every layout sees the same ones.
struct StackedRun {
  absl::Status status;
  std::map<std::string, std::vector<float>> params;  // global values after training
  std::vector<int64_t> calls;  // Newton–Schulz runs per (replicate rank · TP·GTP + tp · GTP + gtp)
  std::vector<MuonMatrixInfo> mats;
  int replica_mismatches = 0;
};

StackedRun RunStacked(const testing::Layout& l, bool nesterov, int steps) {
  constexpr int kE = 4;
  struct Spec {
    const char* name;
    int64_t M, N;  // global, the whole stack
    bool column_parallel;
    DType dtype;
    int blocks;
  };
  const std::vector<Spec> specs = {{"moe.fc.weight", kE * 16, 8, true, DType::kF32, kE},
                                   {"moe.proj.weight", kE * 8, 16, false, DType::kBF16, kE},
                                   {"attn.q.weight", 8, 8, true, DType::kF32, 1}};
  const int T = l.tp, G = l.gtp, R = l.dp, P = T * G * R;
  StackedRun out;
  out.calls.assign(P, -1);
  for (const Spec& s : specs) out.params[s.name].assign(s.M * s.N, NAN);
  std::vector<std::map<std::string, std::vector<float>>> per_rank(P);
  std::mutex mu;
  HeapAllocator host;
  auto value = [](int which, int64_t r, int64_t c, int step) {
    return static_cast<float>(std::sin(0.37 * r + 1.3 * c + 0.71 * step + 2.1 * which) *
                              (step < 0 ? 0.2 : 1.0 + 0.1 * r));
  };
  out.status = comm::RunRanks(P, [&](comm::Communicator& w) -> absl::Status {
    parallel::ParallelConfig pc;
    pc.tp = T;
    pc.tp_num_weight_shards = T * G;
    GTP_ASSIGN_OR_RETURN(auto pgs, parallel::ProcessGroupCollection::Build(pc, w));
    GTP_ASSIGN_OR_RETURN(comm::Communicator * gtp, pgs.Get("gtp"));
    GTP_ASSIGN_OR_RETURN(const int t, pgs.RankIn("tp"));
    GTP_ASSIGN_OR_RETURN(const int g, pgs.RankIn("gtp"));
    GTP_ASSIGN_OR_RETURN(const int rep, pgs.RankIn("replicate"));
    const kernels::Exec exec = kernels::Exec::Cpu(host);
    layers::GtpOptions go;
    go.alignment = 3;
    layers::GtpChain chain(exec, go);
    std::vector<std::unique_ptr<layers::ShardedParam>> ps;
    std::vector<layers::ShardedParam::GlobalLayout> layouts;
    for (const Spec& s : specs) {
      const int64_t Mb = s.M / s.blocks;
      const int64_t rows = s.column_parallel ? s.M / T : s.M, cols = s.column_parallel ? s.N : s.N / T;
      // Column-parallel: TP rank t holds rows [t·Mb/T, (t+1)·Mb/T) of every block.
      const int64_t rb = Mb / T;
      std::function<int64_t(int64_t)> map = [=](int64_t r) {
        return s.column_parallel ? (r / rb) * Mb + t * rb + r % rb : r;
      };
      layers::ShardedParam::GlobalLayout L{s.M, s.N, map, s.column_parallel ? 0 : t * cols};
      ps.push_back(std::make_unique<layers::ShardedParam>(s.name, rows, cols, s.dtype, gtp, &chain));
      ps.back()->set_global_layout(L);
      if (s.blocks > 1) ps.back()->set_matrix_layout(L, s.blocks);
      layouts.push_back(L);
    }
    // Fills every shard's valid rows from f(global row, global col); pad rows 0.
    auto fill = [&](size_t k, const Tensor& dst, const std::function<float(int64_t, int64_t)>& f) {
      const layers::ShardedParam& p = *ps[k];
      std::vector<float> v(p.shard_rows() * p.cols(), 0.0f);
      for (int64_t sr = 0; sr < p.shard_rows(); ++sr) {
        const int64_t r = p.shard_row_begin() + sr;
        if (r >= p.rows()) continue;
        for (int64_t c = 0; c < p.cols(); ++c) {
          v[sr * p.cols() + c] = f(layouts[k].row_map(r), layouts[k].col_offset + c);
        }
      }
      if (dst.dtype() == DType::kBF16) {
        kernels::cpu::CastF32ToBF16(v.data(), dst.data<bf16>(), v.size());
      } else {
        std::copy(v.begin(), v.end(), dst.data<float>());
      }
    };
    ParamSet set;
    for (size_t k = 0; k < ps.size(); ++k) {
      fill(k, ps[k]->shard(), [&](int64_t r, int64_t c) { return value(k, r, c, -1); });
      set.sharded.push_back(ps[k].get());
    }
    GradBufferOptions bo;
    bo.reduce = ReduceMode::kAllReduce;
    GTP_ASSIGN_OR_RETURN(auto grads, GradBuffer::Create(set, pgs, exec, bo));
    OptimizerConfig oc;
    oc.matrices = MatrixOptimizer::kMuon;
    oc.lr = {LrDecay::kConstant, 2e-2f};
    oc.muon.nesterov = nesterov;
    oc.muon.weight_decay = 0.1f;
    GTP_ASSIGN_OR_RETURN(auto opt, DistributedOptimizer::Create(grads.get(), pgs, exec, oc));
    for (int step = 0; step < steps; ++step) {
      // Replicate rank 0 carries R·g, the others 0: the mean over DP is g exactly.
      for (size_t k = 0; k < ps.size(); ++k) {
        fill(k, ps[k]->main_grad(), [&](int64_t r, int64_t c) {
          return rep == 0 ? static_cast<float>(R) * value(k + 7, r, c, step) : 0.0f;
        });
      }
      GTP_ASSIGN_OR_RETURN(StepStats st, opt->Step());
      if (st.skipped) return absl::InternalError("step skipped");
    }
    std::lock_guard<std::mutex> lock(mu);
    if (w.rank() == 0) out.mats = opt->muon_matrices();
    out.calls[rep * T * G + t * G + g] = opt->muon_newton_schulz_calls();
    for (size_t k = 0; k < ps.size(); ++k) {
      const layers::ShardedParam& p = *ps[k];
      std::vector<float> v(p.shard().numel());
      if (p.dtype() == DType::kBF16) {
        kernels::cpu::CastBF16ToF32(p.shard().data<bf16>(), v.data(), v.size());
      } else {
        std::copy(p.shard().data<float>(), p.shard().data<float>() + v.size(), v.data());
      }
      std::vector<float>& dst = out.params[specs[k].name];
      for (int64_t sr = 0; sr < p.shard_rows(); ++sr) {
        const int64_t r = p.shard_row_begin() + sr;
        if (r >= p.rows()) continue;
        for (int64_t c = 0; c < p.cols(); ++c) {
          float& d = dst[layouts[k].row_map(r) * specs[k].N + layouts[k].col_offset + c];
          const float x = v[sr * p.cols() + c];
          if (!std::isnan(d) && std::memcmp(&d, &x, sizeof(float)) != 0) ++out.replica_mismatches;
          d = x;
        }
      }
    }
    return absl::OkStatus();
  });
  return out;
}

// One owner per stacked matrix: the 8 expert blocks (cost 16·8² = 8·16² =
// 1024 each) and the dense matrix (8·8² = 512) are 9 units balanced over the
// DP × TP × GTP ranks, so each rank's Newton–Schulz count is its share, and
// the parameters are the single rank's.
TEST(DistributedOptimizer, MuonBalancesStackedExpertBlocksOverAllRanks) {
  constexpr int kSteps = 3;
  for (bool nesterov : {false, true}) {
    SCOPED_TRACE(nesterov ? "nesterov" : "plain");
    const StackedRun ref = RunStacked({"single"}, nesterov, kSteps);
    ASSERT_TRUE(ref.status.ok()) << ref.status;
    EXPECT_EQ(ref.calls, std::vector<int64_t>{kSteps * 9});
    ASSERT_EQ(ref.mats.size(), 9u);
    std::map<std::string, MuonMatrixInfo> by_name;
    for (const MuonMatrixInfo& m : ref.mats) by_name[m.name] = m;
    for (int b = 0; b < 4; ++b) {
      const MuonMatrixInfo& fc = by_name["moe.fc.weight[" + std::to_string(b) + "]"];
      EXPECT_EQ(fc.block, b);
      EXPECT_EQ(fc.rows, 16);
      EXPECT_DOUBLE_EQ(fc.cost, 1024.0);
      EXPECT_EQ(by_name["moe.proj.weight[" + std::to_string(b) + "]"].rows, 8);
    }
    EXPECT_DOUBLE_EQ(by_name["attn.q.weight"].cost, 512.0);
    EXPECT_EQ(by_name.size(), 9u);
    for (const testing::Layout& l :
         {testing::Layout{"TP2", 2, 1, 1}, testing::Layout{"GTP2", 1, 2, 1}, testing::Layout{"DP2", 1, 1, 2},
          testing::Layout{"TP2_GTP2", 2, 2, 1}, testing::Layout{"DP2_GTP2", 1, 2, 2},
          testing::Layout{"TP2_DP2", 2, 1, 2}}) {
      SCOPED_TRACE(l.name);
      const StackedRun got = RunStacked(l, nesterov, kSteps);
      ASSERT_TRUE(got.status.ok()) << got.status;
      // Greedy by cost: the 8 blocks go round-robin over the P ranks, the
      // dense matrix (cheapest, last) to the first: P = 2 → {5, 4}; P = 4 → {3, 2, 2, 2}.
      const std::vector<int64_t> share =
          l.tp * l.gtp * l.dp == 2 ? std::vector<int64_t>{5, 4} : std::vector<int64_t>{3, 2, 2, 2};
      std::vector<int64_t> want;
      for (int64_t s : share) want.push_back(kSteps * s);
      EXPECT_EQ(got.calls, want);
      EXPECT_EQ(got.replica_mismatches, 0);
      const auto d = testing::CompareParams(got.params, ref.params, 2e-5, 1e-4);
      EXPECT_LE(d.worst, 1.0) << d.where;
      // Same Newton–Schulz inputs wherever it runs: the single rank's bits.
      for (const auto& [name, v] : ref.params) {
        EXPECT_EQ(std::memcmp(v.data(), got.params.at(name).data(), v.size() * sizeof(float)), 0) << name;
      }
    }
  }
}

TEST(DistributedOptimizer, MuonBlockwiseIsLayoutDependentDuplicatedIsNot) {
  auto cfg = [](MuonMode mode, const testing::Layout& l) {
    testing::RunConfig c;
    c.model = testing::SmallModel(true);  // no k bias: its gradient is pure noise
    c.layout = l;
    c.steps = 3;
    c.opt.matrices = MatrixOptimizer::kMuon;
    c.opt.muon.mode = mode;
    c.opt.lr = {LrDecay::kConstant, 2e-2f};
    c.buffer.reduce = ReduceMode::kAllReduce;
    return c;
  };
  const testing::RunResult dup = testing::Train(cfg(MuonMode::kDuplicated, {"single"}));
  const testing::RunResult blk = testing::Train(cfg(MuonMode::kBlockwise, {"single"}));
  const testing::RunResult blk_dp = testing::Train(cfg(MuonMode::kBlockwise, {"DP2", 1, 1, 2}));
  const testing::RunResult blk_gtp = testing::Train(cfg(MuonMode::kBlockwise, {"GTP2", 1, 2, 1}));
  for (const auto* r : {&dup, &blk, &blk_dp, &blk_gtp}) ASSERT_TRUE(r->status.ok()) << r->status;
  // Unsharded, a block is the whole matrix.
  EXPECT_LE(testing::CompareParams(blk.params, dup.params, 1e-6, 1e-5).worst, 1.0);
  // DP does not change the blocks; GTP does.
  EXPECT_LE(testing::CompareParams(blk_dp.params, blk.params, 2e-5, 1e-4).worst, 1.0);
  EXPECT_GT(testing::CompareParams(blk_gtp.params, blk.params, 2e-5, 1e-4).worst, 10.0);
}

TEST(DistributedOptimizer, NonDistributedAllReducePathMatchesSingleRank) {
  auto cfg = [](const testing::Layout& l) {
    testing::RunConfig c;
    c.model = testing::SmallModel(true);
    c.layout = l;
    c.steps = 3;
    c.buffer.reduce = ReduceMode::kAllReduce;
    c.opt.distributed = false;
    c.opt.lr = {LrDecay::kConstant, 1e-2f};
    return c;
  };
  const testing::RunResult ref = testing::Train(cfg({"single"}));
  ASSERT_TRUE(ref.status.ok()) << ref.status;
  for (const testing::Layout& l : {testing::Layout{"DP2_GTP2", 1, 2, 2}, testing::Layout{"TP2_DP2", 2, 1, 2}}) {
    const testing::RunResult got = testing::Train(cfg(l));
    ASSERT_TRUE(got.status.ok()) << got.status;
    const auto d = testing::CompareParams(got.params, ref.params, 2e-5, 1e-4);
    EXPECT_LE(d.worst, 1.0) << l.name << ": " << d.where;
    // Unsharded state: every DP rank holds all of its TP×GTP part.
    EXPECT_NEAR(double(got.state_bytes[0]), double(ref.state_bytes[0]) / (l.tp * l.gtp),
                0.05 * ref.state_bytes[0] / (l.tp * l.gtp))
        << l.name;
  }
}

TEST(DistributedOptimizer, RejectsInconsistentConfigurations) {
  testing::RunConfig c;
  c.model = testing::SmallModel(false);
  c.steps = 1;
  c.opt.matrices = MatrixOptimizer::kMuon;  // with reduce-scattered grads
  testing::RunResult r = testing::Train(c);
  EXPECT_EQ(r.status.code(), absl::StatusCode::kInvalidArgument) << r.status;
  c.opt.matrices = MatrixOptimizer::kAdamW;
  c.opt.distributed = false;
  r = testing::Train(c);
  EXPECT_EQ(r.status.code(), absl::StatusCode::kInvalidArgument) << r.status;
  c.opt.distributed = true;
  c.opt.lr = {LrDecay::kCosine, 1.0f, 0.0f, 10, 5};
  r = testing::Train(c);
  EXPECT_NE(r.status.message().find("decay_steps"), std::string::npos) << r.status;
}

// A bf16 weight sharded over DP2: AdamW keeps an f32 master for the owned
// half, updates it and all-gathers; both ranks end with bf16(master).
TEST(DistributedOptimizer, Bf16ParamsKeepF32MastersAndGatherTheCastValues) {
  constexpr int64_t kRows = 8, kCols = 6;
  HeapAllocator host;
  std::mutex mu;
  std::vector<std::vector<float>> finals(2);
  absl::Status st = comm::RunRanks(2, [&](comm::Communicator& w) -> absl::Status {
    parallel::ParallelConfig pc;  // DP2
    GTP_ASSIGN_OR_RETURN(auto pgs, parallel::ProcessGroupCollection::Build(pc, w));
    GTP_ASSIGN_OR_RETURN(comm::Communicator * gtp, pgs.Get("gtp"));
    const kernels::Exec exec = kernels::Exec::Cpu(host);
    layers::GtpChain chain(exec, {});
    layers::ShardedParam p("w", kRows, kCols, DType::kBF16, gtp, &chain);
    p.set_global_layout({kRows, kCols, [](int64_t r) { return r; }, 0});
    std::vector<float> init(kRows * kCols);
    for (size_t i = 0; i < init.size(); ++i) init[i] = 0.1f * static_cast<float>(i) - 2.0f;
    kernels::cpu::CastF32ToBF16(init.data(), p.shard().data<bf16>(), init.size());
    GTP_ASSIGN_OR_RETURN(auto grads, GradBuffer::Create({{&p}, {}}, pgs, exec));
    OptimizerConfig oc;
    oc.lr = {LrDecay::kConstant, 0.25f};
    GTP_ASSIGN_OR_RETURN(auto opt, DistributedOptimizer::Create(grads.get(), pgs, exec, oc));
    int masters = 0;
    for (const StateTensor& t : opt->state_tensors()) masters += t.kind == "master";
    EXPECT_EQ(masters, 1);
    // Buckets pad to 16·DP = 32 elements: rank 0 owns elements [0, 32),
    // rank 1 the remaining 16 (and the padding).
    EXPECT_EQ(opt->state_bytes(), 12 * (w.rank() == 0 ? 32 : 16));
    // Gradient: +1 on rank 0, +3 on rank 1 → mean 2 > 0 everywhere.
    kernels::ops::Fill(exec, p.main_grad(), w.rank() == 0 ? 1.0f : 3.0f);
    GTP_ASSIGN_OR_RETURN(StepStats s, opt->Step());
    EXPECT_FALSE(s.skipped);
    std::vector<float> out(kRows * kCols);
    kernels::cpu::CastBF16ToF32(p.shard().data<bf16>(), out.data(), out.size());
    std::lock_guard<std::mutex> lock(mu);
    finals[w.rank()] = out;
    for (size_t i = 0; i < out.size(); ++i) {
      // The master moved by exactly lr (sign of g); the param is its bf16.
      float master = 0;
      {
        bf16 b;
        kernels::cpu::CastF32ToBF16(&init[i], &b, 1);
        kernels::cpu::CastBF16ToF32(&b, &master, 1);
      }
      master -= 0.25f;
      bf16 b;
      float want;
      kernels::cpu::CastF32ToBF16(&master, &b, 1);
      kernels::cpu::CastBF16ToF32(&b, &want, 1);
      EXPECT_NEAR(out[i], want, 1e-6f) << i;
    }
    return absl::OkStatus();
  });
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_EQ(finals[0], finals[1]);
}

}  // namespace
}  // namespace gtp::optimizer
