// The Mamba-2 mixer: every parameter's gradient and the input gradient
// against central finite differences of a linear loss on one rank, and
// TP / GTP layouts equal to one rank (outputs, input gradients, every
// parameter gradient); the bf16 mixer against the f32 one.
#include "layers/mamba/mamba_mixer.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "comm/local/local_communicator.h"
#include "core/philox.h"
#include "gtest/gtest.h"
#include "layers/mamba/mixer_testing.h"
#include "parallel/parallel_config.h"
#include "parallel/process_groups.h"

namespace gtp::layers::mamba {
namespace {

constexpr int64_t kB = 2, kT = 10, kC = 16;

MambaConfig Config() {
  MambaConfig c;
  c.d_model = kC;
  c.d_state = 8;
  c.head_dim = 8;  // d_inner 32: 4 heads
  c.n_groups = 2;
  c.chunk = 4;     // T = 10: chunks of 4, 4, 2
  c.init_std = 0.3f;
  c.out_std = 0.3f;
  c.seed = 17;
  return c;
}

struct Result {
  double loss = 0;
  bool bc_one_buffer = false;  // in_proj_B's and in_proj_C's shards share storage (packed, GTP 1)
  std::vector<float> out, dh;
  std::map<std::string, std::vector<float>> grads;  // global tensors
};

using Perturb = std::function<void(std::vector<ShardedParam*>&, std::vector<ReplicatedParam*>&)>;

Result RunMixer(int tp, int gtp, const std::vector<float>& h, const Perturb& perturb = {},
                ProjectionPacking packing = ProjectionPacking::kOff) {
  Result res;
  std::mutex mu;
  absl::Status st = comm::RunRanks(tp * gtp, [&](comm::Communicator& w) -> absl::Status {
    HeapAllocator host;
    parallel::ParallelConfig pc;
    pc.tp = tp;
    pc.tp_num_weight_shards = tp * gtp;
    GTP_ASSIGN_OR_RETURN(auto pgs, parallel::ProcessGroupCollection::Build(pc, w));
    const kernels::Exec e = kernels::Exec::Cpu(host);
    GtpChain chain(e, {});
    MambaConfig config = Config();
    config.packing = packing;
    GTP_ASSIGN_OR_RETURN(auto m, MambaMixer::Create("m", config, kB, kT, pgs, &chain));
    std::vector<ShardedParam*> sharded;
    std::vector<ReplicatedParam*> repl;
    m->CollectParams(&sharded, &repl);
    const Storage* b_storage = nullptr;
    bool bc_one_buffer = false;
    for (ShardedParam* p : sharded) {
      if (p->name() == "m.in_proj_B.weight") b_storage = p->shard().storage().get();
      if (p->name() == "m.in_proj_C.weight")
        bc_one_buffer = p->shard().storage().get() == b_storage;
    }
    if (perturb) perturb(sharded, repl);
    Tensor x = TensorFromHost(e, h.data(), {kB * kT, kC}, DType::kF32);
    GTP_ASSIGN_OR_RETURN(Tensor out, m->Forward(x, Tensor(), Direction::kForward));
    Tensor r = e.Empty(out.shape());
    double loss = 0;
    for (int64_t i = 0; i < out.numel(); ++i) {
      r.data<float>()[i] = PhiloxNormal(123, i);
      loss += static_cast<double>(out.data<float>()[i]) * r.data<float>()[i];
    }
    GTP_ASSIGN_OR_RETURN(Tensor dh, m->Backward(r));
    GTP_RETURN_IF_ERROR(chain.FinishBackward());
    std::lock_guard<std::mutex> g(mu);
    if (w.rank() == 0) {
      res.loss = loss;
      res.bc_one_buffer = bc_one_buffer;
      res.out.assign(out.data<float>(), out.data<float>() + out.numel());
      res.dh.assign(dh.data<float>(), dh.data<float>() + dh.numel());
    }
    // GTP lanes see the same input here: every rank's pieces agree where they overlap.
    for (ShardedParam* p : sharded) {
      auto& v = res.grads[p->name()];
      v.resize(p->global_layout().global_rows * p->global_layout().global_cols);
      StoreShardToGlobal(*p, p->main_grad(), v.data());
    }
    for (ReplicatedParam* p : repl) {
      auto& v = res.grads[p->name];
      const auto& l = p->layout;
      v.resize(l.global_rows * l.global_cols);
      for (int64_t row = 0; row < p->grad.numel() / l.global_cols; ++row)
        for (int64_t c = 0; c < l.global_cols; ++c)
          v[l.row_map(row) * l.global_cols + c] = p->grad.data<float>()[row * l.global_cols + c];
    }
    return absl::OkStatus();
  });
  EXPECT_TRUE(st.ok()) << st;
  return res;
}

std::vector<float> Input() {
  std::vector<float> h(kB * kT * kC);
  for (size_t i = 0; i < h.size(); ++i) h[i] = PhiloxNormal(5, i);
  return h;
}

// The value tensor holding global element `i` of param `name` on one rank.
float* At(std::vector<ShardedParam*>& s, std::vector<ReplicatedParam*>& r, const std::string& name,
          int64_t i) {
  for (ShardedParam* p : s)
    if (p->name() == name) return &p->shard().data<float>()[i];
  for (ReplicatedParam* p : r)
    if (p->name == name) return &p->value.data<float>()[i];
  return nullptr;
}

TEST(MambaMixer, GradientsMatchFiniteDifferences) {
  const std::vector<float> h = Input();
  const Result base = RunMixer(1, 1, h);
  ASSERT_TRUE(std::isfinite(base.loss));
  const float eps = 3e-3f;
  int checked = 0;
  for (const auto& [name, g] : base.grads) {
    std::vector<int64_t> idx(g.size());
    for (size_t i = 0; i < idx.size(); ++i) idx[i] = static_cast<int64_t>(i);
    std::partial_sort(idx.begin(), idx.begin() + 2, idx.end(),
                      [&](int64_t a, int64_t b) { return std::fabs(g[a]) > std::fabs(g[b]); });
    for (int k = 0; k < 2; ++k) {
      const int64_t i = idx[k];
      auto at = [&](float d) {
        return RunMixer(1, 1, h, [&](auto& s, auto& r) {
                 float* v = At(s, r, name, i);
                 ASSERT_NE(v, nullptr) << name;
                 *v += d;
               }).loss;
      };
      const double fd = (at(eps) - at(-eps)) / (2 * eps);
      EXPECT_NEAR(g[i], fd, 2e-3 + 0.02 * std::fabs(fd)) << name << "[" << i << "]";
      ++checked;
    }
  }
  EXPECT_EQ(checked, 2 * 16);  // 6 projections + 10 per-head params
  // The input gradient.
  for (int64_t i : {0L, 17L, 100L, 300L}) {
    std::vector<float> hi = h, lo = h;
    hi[i] += eps;
    lo[i] -= eps;
    const double fd = (RunMixer(1, 1, hi).loss - RunMixer(1, 1, lo).loss) / (2 * eps);
    EXPECT_NEAR(base.dh[i], fd, 2e-3 + 0.02 * std::fabs(fd)) << "dh[" << i << "]";
  }
}

TEST(MambaMixer, IsCausal) {
  // Changing token t = 6 of sequence 1 leaves every output before it (and
  // all of sequence 0) bit-identical, and moves the outputs from t on.
  const std::vector<float> h = Input();
  std::vector<float> h2 = h;
  for (int64_t c = 0; c < kC; ++c) h2[(1 * kT + 6) * kC + c] += 1.0f;
  const Result a = RunMixer(1, 1, h), b = RunMixer(1, 1, h2);
  for (int64_t s = 0; s < kB; ++s)
    for (int64_t t = 0; t < kT; ++t) {
      double d = 0;
      for (int64_t c = 0; c < kC; ++c) d += std::fabs(a.out[(s * kT + t) * kC + c] - b.out[(s * kT + t) * kC + c]);
      if (s == 0 || t < 6) {
        EXPECT_EQ(d, 0.0) << "sequence " << s << " position " << t;
      } else {
        EXPECT_GT(d, 1e-6) << "sequence " << s << " position " << t;
      }
    }
}

// r against the one-rank run to f32 rounding: outputs and input gradients
// 1e-5, parameter gradients 1e-4 relative (sums over tokens in another order).
void ExpectMatchesOneRank(const Result& r, const Result& one, int tp, int gtp) {
  SCOPED_TRACE(absl::StrCat("tp ", tp, " gtp ", gtp));
  for (size_t i = 0; i < one.out.size(); ++i) ASSERT_NEAR(r.out[i], one.out[i], 1e-5) << i;
  for (size_t i = 0; i < one.dh.size(); ++i) ASSERT_NEAR(r.dh[i], one.dh[i], 1e-5) << i;
  for (const auto& [name, g1] : one.grads) {
    const auto& g = r.grads.at(name);
    ASSERT_EQ(g.size(), g1.size()) << name;
    for (size_t i = 0; i < g1.size(); ++i) {
      ASSERT_NEAR(g[i], g1[i], 1e-4 * (1 + std::fabs(g1[i]))) << name << "[" << i << "]";
    }
  }
}

TEST(MambaMixer, LayoutsMatchOneRank) {
  const std::vector<float> h = Input();
  const Result one = RunMixer(1, 1, h);
  for (auto [tp, gtp] : {std::pair{2, 1}, std::pair{1, 2}, std::pair{2, 2}}) {
    ExpectMatchesOneRank(RunMixer(tp, gtp, h), one, tp, gtp);
  }
}

// in_proj's B, C and dt packed in one GEMM (ProjectionPacking::kOn): the
// three-GEMM mixer's results (checked against finite differences above) to
// f32 rounding — the same products summed in another GEMM's order — on one
// rank (weights read in place) and TP2, GTP2, TP2·GTP2 (copies); and the
// packed weights' own gradients against finite differences.
TEST(MambaMixer, PackedBcDtMatchesThreeGemms) {
  const std::vector<float> h = Input();
  const Result one = RunMixer(1, 1, h);
  EXPECT_FALSE(one.bc_one_buffer);
  for (auto [tp, gtp] : {std::pair{1, 1}, std::pair{2, 1}, std::pair{1, 2}, std::pair{2, 2}}) {
    const Result r = RunMixer(tp, gtp, h, {}, ProjectionPacking::kOn);
    ASSERT_TRUE(std::isfinite(r.loss));
    if (gtp == 1 && tp == 1) EXPECT_TRUE(r.bc_one_buffer);
    ExpectMatchesOneRank(r, one, tp, gtp);
  }
  const Result base = RunMixer(1, 1, h, {}, ProjectionPacking::kOn);
  const float eps = 3e-3f;
  for (const char* name : {"m.in_proj_B.weight", "m.in_proj_C.weight", "m.in_proj_dt.weight"}) {
    const std::vector<float>& g = base.grads.at(name);
    const int64_t i =
        std::max_element(g.begin(), g.end(),
                         [](float a, float b) { return std::fabs(a) < std::fabs(b); }) -
        g.begin();
    auto at = [&](float d) {
      return RunMixer(
                 1, 1, h, [&](auto& s, auto& r) { *At(s, r, name, i) += d; },
                 ProjectionPacking::kOn)
          .loss;
    };
    const double fd = (at(eps) - at(-eps)) / (2 * eps);
    EXPECT_NEAR(g[i], fd, 2e-3 + 0.02 * std::fabs(fd)) << name << "[" << i << "]";
  }
}

// Context parallelism: CP rank r holds chunks r and 2·CP−1−r of each
// sequence (layers/cp). The mixer on CP ranks (× TP) against one rank on the
// whole sequences: outputs and input gradients row for row, and every
// parameter gradient summed over the CP ranks (what the dp_cp reduction
// does). The conv and the scan run on whole sequences in both, so the only
// differences are sums over tokens split in two (weight gradients) and
// GEMMs over fewer rows: f32 rounding, the tolerances of LayoutsMatchOneRank.
struct CpCase {
  int tp, cp;
  int64_t expand, n_groups;
};

Result RunMixerCp(const CpCase& k, int64_t T, const std::vector<float>& h) {
  Result res;
  std::mutex mu;
  MambaConfig c = Config();
  c.expand = k.expand;
  c.n_groups = k.n_groups;
  const int64_t Tl = T / k.cp, Tc = Tl / 2;
  res.out.assign(kB * T * kC, 0.0f);
  res.dh.assign(kB * T * kC, 0.0f);
  absl::Status st = comm::RunRanks(k.tp * k.cp, [&](comm::Communicator& w) -> absl::Status {
    HeapAllocator host;
    parallel::ParallelConfig pc;
    pc.tp = k.tp;
    pc.tp_num_weight_shards = k.tp;
    pc.cp = k.cp;
    GTP_ASSIGN_OR_RETURN(auto pgs, parallel::ProcessGroupCollection::Build(pc, w));
    GTP_ASSIGN_OR_RETURN(comm::Communicator * cp, pgs.Get("cp"));
    GTP_ASSIGN_OR_RETURN(comm::Communicator * tp, pgs.Get("tp"));
    const int r = k.cp > 1 ? cp->rank() : 0;
    // Local row (b, t) is global row b·T + g(t).
    auto global_t = [&](int64_t t) { return t < Tc ? r * Tc + t : (2 * k.cp - 1 - r) * Tc + t - Tc; };
    const kernels::Exec e = kernels::Exec::Cpu(host);
    GtpChain chain(e, {});
    GTP_ASSIGN_OR_RETURN(auto m, MambaMixer::Create("m", c, kB, Tl, pgs, &chain));
    std::vector<ShardedParam*> sharded;
    std::vector<ReplicatedParam*> repl;
    m->CollectParams(&sharded, &repl);
    std::vector<float> hl(kB * Tl * kC), rl(kB * Tl * kC);
    for (int64_t b = 0; b < kB; ++b)
      for (int64_t t = 0; t < Tl; ++t)
        for (int64_t i = 0; i < kC; ++i) {
          const int64_t g = (b * T + global_t(t)) * kC + i, l = (b * Tl + t) * kC + i;
          hl[l] = h[g];
          rl[l] = PhiloxNormal(123, g);
        }
    Tensor x = TensorFromHost(e, hl.data(), {kB * Tl, kC}, DType::kF32);
    GTP_ASSIGN_OR_RETURN(Tensor out, m->Forward(x, Tensor(), Direction::kForward));
    GTP_ASSIGN_OR_RETURN(Tensor dh, m->Backward(TensorFromHost(e, rl.data(), {kB * Tl, kC}, DType::kF32)));
    GTP_RETURN_IF_ERROR(chain.FinishBackward());
    std::lock_guard<std::mutex> g(mu);
    if (tp->rank() == 0) {
      for (int64_t b = 0; b < kB; ++b)
        for (int64_t t = 0; t < Tl; ++t)
          for (int64_t i = 0; i < kC; ++i) {
            const int64_t gi = (b * T + global_t(t)) * kC + i, l = (b * Tl + t) * kC + i;
            res.out[gi] = out.data<float>()[l];
            res.dh[gi] = dh.data<float>()[l];
          }
    }
    // Each rank's pieces (TP rows) summed over the ranks: Σ over CP.
    for (ShardedParam* p : sharded) {
      std::vector<float> piece(p->global_layout().global_rows * p->global_layout().global_cols, 0.0f);
      StoreShardToGlobal(*p, p->main_grad(), piece.data());
      auto& v = res.grads[p->name()];
      v.resize(piece.size(), 0.0f);
      for (size_t i = 0; i < piece.size(); ++i) v[i] += piece[i];
    }
    for (ReplicatedParam* p : repl) {
      const auto& l = p->layout;
      auto& v = res.grads[p->name];
      v.resize(l.global_rows * l.global_cols, 0.0f);
      for (int64_t row = 0; row < p->grad.numel() / l.global_cols; ++row)
        for (int64_t col = 0; col < l.global_cols; ++col)
          v[l.row_map(row) * l.global_cols + col] += p->grad.data<float>()[row * l.global_cols + col];
    }
    return absl::OkStatus();
  });
  EXPECT_TRUE(st.ok()) << st;
  return res;
}

TEST(MambaMixer, ContextParallelMatchesOneRank) {
  // T = 24: 2·CP chunks of 6 (CP2), 4 (CP3), 3 (CP4), scan chunks of 4
  // across them. Heads: 4 (expand 2) or 6 (expand 3) of head_dim 8.
  constexpr int64_t T = 24;
  std::vector<float> h(kB * T * kC);
  for (size_t i = 0; i < h.size(); ++i) h[i] = PhiloxNormal(5, i);
  for (const CpCase& k : {CpCase{1, 2, 2, 2},    // 2 heads per part: one whole group each
                          CpCase{1, 4, 2, 2},    // 1 head per part: two parts per group
                          CpCase{1, 3, 3, 3},    // 6 heads, 3 groups: one group per part
                          CpCase{1, 3, 3, 1},    // 6 heads, 1 group shared by all parts
                          CpCase{2, 2, 2, 2}}) { // TP2·CP2: 2 heads, 1 group per TP rank
    const Result one = RunMixerCp(CpCase{1, 1, k.expand, k.n_groups}, T, h);
    const Result r = RunMixerCp(k, T, h);
    const std::string what = absl::StrCat("tp ", k.tp, " cp ", k.cp, " expand ", k.expand,
                                          " groups ", k.n_groups);
    for (size_t i = 0; i < one.out.size(); ++i) ASSERT_NEAR(r.out[i], one.out[i], 1e-5) << what << " out " << i;
    for (size_t i = 0; i < one.dh.size(); ++i) ASSERT_NEAR(r.dh[i], one.dh[i], 1e-5) << what << " dh " << i;
    ASSERT_EQ(r.grads.size(), one.grads.size()) << what;
    for (const auto& [name, g1] : one.grads) {
      const auto& g = r.grads.at(name);
      ASSERT_EQ(g.size(), g1.size()) << name;
      for (size_t i = 0; i < g1.size(); ++i) {
        ASSERT_NEAR(g[i], g1[i], 1e-4 * (1 + std::fabs(g1[i]))) << what << " " << name << "[" << i << "]";
      }
    }
  }
}

// Creates the mixer of `c` for B sequences of T tokens on `world`
// threads; rank 0's error ("" when it was created). Every rank must agree.
std::string CreateError(const parallel::ParallelConfig& pc, int world, const MambaConfig& c,
                        int64_t T) {
  std::mutex mu;
  std::vector<std::string> errors(world);
  absl::Status st = comm::RunRanks(world, [&](comm::Communicator& w) -> absl::Status {
    HeapAllocator host;
    GTP_ASSIGN_OR_RETURN(auto pgs, parallel::ProcessGroupCollection::Build(pc, w));
    GtpChain chain(kernels::Exec::Cpu(host), {});
    auto m = MambaMixer::Create("m", c, kB, T, pgs, &chain);
    std::lock_guard<std::mutex> g(mu);
    errors[w.rank()] = m.ok() ? "" : std::string(m.status().message());
    return absl::OkStatus();
  });
  EXPECT_TRUE(st.ok()) << st;
  for (const std::string& e : errors) EXPECT_EQ(e, errors[0]);
  return errors[0];
}

// Splits the mixer cannot make exactly are refused by name: 4 heads over
// CP3; 6 heads in 2 groups (3 per group) over CP3 (2 heads per part).
TEST(MambaMixer, ContextParallelSplitsItCannotMakeAreNamed) {
  parallel::ParallelConfig pc;
  pc.cp = 3;
  for (auto [expand, groups, want] :
       {std::tuple{int64_t{2}, int64_t{2}, "4 Mamba heads"}, std::tuple{int64_t{3}, int64_t{2}, "model.mamba.n_groups"}}) {
    MambaConfig c = Config();
    c.expand = expand;
    c.n_groups = groups;
    const std::string e = CreateError(pc, 3, c, 8);
    EXPECT_NE(e.find(want), std::string::npos) << e;
    EXPECT_NE(e.find("parallel.cp = 3"), std::string::npos) << e;
  }
}

// Mixed precision: bf16 projections, values and activations with the SSM in
// f32 compute the f32 mixer's output and gradients to bf16 accuracy (the f32
// mixer is the reference: it matches finite differences above).
TEST(MambaMixer, Bf16MatchesF32) {
  HeapAllocator host;
  const kernels::Exec e = kernels::Exec::Cpu(host);
  MambaConfig c = Config();
  const testing::MixerRun ref = testing::RunMixer(e, c, kB, kT);
  c.dtype = DType::kBF16;
  const testing::MixerRun got = testing::RunMixer(e, c, kB, kT);
  EXPECT_LT(testing::RelErr(got.out, ref.out), 2e-2);
  EXPECT_LT(testing::RelErr(got.dh, ref.dh), 2e-2);
  ASSERT_EQ(got.grads.size(), ref.grads.size());
  ASSERT_EQ(ref.grads.size(), 16u);  // 6 projections + 10 per-head params
  for (size_t i = 0; i < ref.grads.size(); ++i) {
    ASSERT_EQ(got.grads[i].first, ref.grads[i].first);
    EXPECT_LT(testing::RelErr(got.grads[i].second, ref.grads[i].second), 3e-2)
        << ref.grads[i].first;
  }
  // And not trivially: bf16 rounding moved the output.
  EXPECT_GT(testing::RelErr(got.out, ref.out), 1e-5);
}

TEST(MambaMixer, BadConfigsAreNamed) {
  parallel::ParallelConfig pc;
  pc.tp = 2;
  MambaConfig c = Config();
  c.n_groups = 1;  // 1 group over TP 2
  std::string e = CreateError(pc, 2, c, kT);
  EXPECT_NE(e.find("divisible by TP = 2"), std::string::npos) << e;
  c = Config();
  c.n_groups = 3;
  e = CreateError(pc, 2, c, kT);
  EXPECT_NE(e.find("4 heads are not divisible by 3 groups"), std::string::npos) << e;
}

}  // namespace
}  // namespace gtp::layers::mamba
