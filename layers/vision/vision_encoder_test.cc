// VisionEncoder: parameter gradients against central finite differences of
// a linear loss, bidirectional attention (patch 0 sees the last patch), and
// TP / GTP layouts equal to one rank.
#include "layers/vision/vision_encoder.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <vector>

#include "comm/local/local_communicator.h"
#include "core/philox.h"
#include "gtest/gtest.h"
#include "parallel/parallel_config.h"
#include "parallel/process_groups.h"

namespace gtp::layers::vision {
namespace {

constexpr int64_t kB = 2, kNp = 4, kPd = 12, kC = 16, kOut = 8;

VisionEncoderConfig Config() {
  VisionEncoderConfig c;
  c.patch_dim = kPd;
  c.num_patches = kNp;
  c.n_layer = 2;
  c.block.n_embd = kC;
  c.block.n_head = 4;
  c.block.seed = 21;
  c.block.init_std = 0.2f;  // large enough that every path moves the loss
  c.projector_hidden = 12;
  c.out_dim = kOut;
  return c;
}

std::vector<float> Patches(float last_patch_shift = 0) {
  std::vector<float> p(kB * kNp * kPd);
  for (size_t i = 0; i < p.size(); ++i) p[i] = PhiloxUniform(8, i);
  for (int64_t b = 0; b < kB; ++b)
    for (int64_t j = 0; j < kPd; ++j) p[(b * kNp + kNp - 1) * kPd + j] += last_patch_shift;
  return p;
}

struct Result {
  double loss = 0;
  std::vector<float> out;
  std::map<std::string, std::vector<float>> grads;  // rank 0's (1 rank: whole)
};

// loss = Σ out ∘ R; `perturb` edits the params of rank 0 before the forward.
using Perturb = std::function<void(VisionEncoder&)>;
Result RunEncoder(int tp, int gtp, const std::vector<float>& patches, const Perturb& perturb = {}) {
  Result res;
  absl::Status st = comm::RunRanks(tp * gtp, [&](comm::Communicator& w) -> absl::Status {
    HeapAllocator host;
    parallel::ParallelConfig pc;
    pc.tp = tp;
    pc.tp_num_weight_shards = tp * gtp;
    GTP_ASSIGN_OR_RETURN(auto pgs, parallel::ProcessGroupCollection::Build(pc, w));
    const kernels::Exec e = kernels::Exec::Cpu(host);
    GTP_ASSIGN_OR_RETURN(auto enc, VisionEncoder::Create(Config(), kB, pgs, e));
    if (perturb) perturb(*enc);
    Tensor x = TensorFromHost(e, patches.data(), {kB * kNp, kPd}, DType::kF32);
    GTP_ASSIGN_OR_RETURN(Tensor out, enc->Forward(x));
    Tensor r = e.Empty(out.shape());
    double loss = 0;
    for (int64_t i = 0; i < out.numel(); ++i) {
      r.data<float>()[i] = PhiloxNormal(99, i);
      loss += static_cast<double>(out.data<float>()[i]) * r.data<float>()[i];
    }
    GTP_RETURN_IF_ERROR(enc->Backward(r));
    if (w.rank() != 0) return absl::OkStatus();
    res.loss = loss;
    res.out.assign(out.data<float>(), out.data<float>() + out.numel());
    for (ShardedParam* p : enc->sharded_params()) {
      const Tensor& g = p->main_grad();
      res.grads[p->name()].assign(g.data<float>(), g.data<float>() + g.numel());
    }
    for (ReplicatedParam* p : enc->replicated_params()) {
      res.grads[p->name].assign(p->grad.data<float>(), p->grad.data<float>() + p->grad.numel());
    }
    return absl::OkStatus();
  });
  EXPECT_TRUE(st.ok()) << st;
  return res;
}

// The value tensor of param `name` on one rank.
Tensor Value(VisionEncoder& enc, const std::string& name) {
  for (ShardedParam* p : enc.sharded_params())
    if (p->name() == name) return p->shard();
  for (ReplicatedParam* p : enc.replicated_params())
    if (p->name == name) return p->value;
  ADD_FAILURE() << "no param " << name;
  return Tensor();
}

TEST(VisionEncoder, GradientsMatchFiniteDifferences) {
  const std::vector<float> x = Patches();
  const Result base = RunEncoder(1, 1, x);
  ASSERT_TRUE(std::isfinite(base.loss));
  const float eps = 1e-2f;
  int checked = 0;
  for (const auto& [name, g] : base.grads) {
    // The two largest-gradient elements of every parameter.
    std::vector<int64_t> idx(g.size());
    for (size_t i = 0; i < idx.size(); ++i) idx[i] = static_cast<int64_t>(i);
    std::partial_sort(idx.begin(), idx.begin() + 2, idx.end(),
                      [&](int64_t a, int64_t b) { return std::fabs(g[a]) > std::fabs(g[b]); });
    for (int k = 0; k < 2; ++k) {
      const int64_t i = idx[k];
      auto at = [&](float d) {
        return RunEncoder(1, 1, x, [&](VisionEncoder& enc) { Value(enc, name).data<float>()[i] += d; })
            .loss;
      };
      const double fd = (at(eps) - at(-eps)) / (2 * eps);
      EXPECT_NEAR(g[i], fd, 1e-3 + 0.02 * std::fabs(fd)) << name << "[" << i << "]";
      // (A key bias shifts every score of a query equally: softmax ignores it.)
      if (name.find("attn.k.bias") == std::string::npos) {
        ASSERT_GT(std::fabs(fd), 1e-3) << name << ": a gradient path that does not move the loss";
      }
      ++checked;
    }
  }
  // patch w/b, pos, 2 blocks × (2 norms × 2 + q, k, v, o, fc, proj + biases), ln_post, projector.
  EXPECT_GE(checked, 2 * 20);
}

TEST(VisionEncoder, AttentionIsBidirectional) {
  const Result a = RunEncoder(1, 1, Patches()), b = RunEncoder(1, 1, Patches(0.5f));
  // Patch 0's output moves when only the last patch's pixels change.
  double diff = 0;
  for (int64_t j = 0; j < kOut; ++j) diff += std::fabs(a.out[j] - b.out[j]);
  EXPECT_GT(diff, 1e-3);
}

TEST(VisionEncoder, LayoutsMatchOneRank) {
  const std::vector<float> x = Patches();
  const Result one = RunEncoder(1, 1, x);
  for (auto [tp, gtp] : {std::pair{2, 1}, std::pair{1, 2}, std::pair{2, 2}}) {
    const Result r = RunEncoder(tp, gtp, x);
    EXPECT_NEAR(r.loss, one.loss, 1e-4 * std::max(1.0, std::fabs(one.loss))) << tp << " " << gtp;
    ASSERT_EQ(r.out.size(), one.out.size());
    for (size_t i = 0; i < one.out.size(); ++i) ASSERT_NEAR(r.out[i], one.out[i], 1e-5) << i;
    // Replicated params are whole on every rank: their gradients match.
    for (const char* n : {"vision.patch.weight", "vision.pos.weight", "vision.ln_post.weight"}) {
      const auto& g1 = one.grads.at(n);
      const auto& g = r.grads.at(n);
      ASSERT_EQ(g.size(), g1.size()) << n;
      for (size_t i = 0; i < g1.size(); ++i) ASSERT_NEAR(g[i], g1[i], 1e-4) << n << "[" << i << "]";
    }
  }
}

}  // namespace
}  // namespace gtp::layers::vision
