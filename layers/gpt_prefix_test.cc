// Prefix embeddings (GptConfig::prefix_len, the MIMO language model's image
// rows): the prefix gradient against central finite differences of the loss,
// prefix positions independent of their token ids, and TP / SP / GTP layouts
// equal to one rank.
#include <algorithm>
#include <cmath>
#include <vector>

#include "comm/local/local_communicator.h"
#include "core/philox.h"
#include "gtest/gtest.h"
#include "layers/gpt.h"
#include "parallel/parallel_config.h"
#include "parallel/process_groups.h"

namespace gtp::layers {
namespace {

constexpr int64_t kB = 2, kT = 12, kP = 4, kC = 16, kV = 40;

struct Layout {
  int tp = 1, gtp = 1;
  bool sp = false;
};

struct Result {
  float loss = 0;
  std::vector<float> dprefix;
};

std::vector<float> Prefix() {
  std::vector<float> p(kB * kP * kC);
  for (size_t i = 0; i < p.size(); ++i) p[i] = 0.5f * PhiloxNormal(77, i);
  return p;
}

// One forward + backward; rank 0's loss and prefix gradient. `token_salt`
// changes the ids at prefix positions only.
Result RunModel(const Layout& l, const std::vector<float>& prefix, uint32_t token_salt = 0) {
  Result out;
  const int world = l.tp * l.gtp;
  absl::Status st = comm::RunRanks(world, [&](comm::Communicator& w) -> absl::Status {
    HeapAllocator host;
    parallel::ParallelConfig pc;
    pc.tp = l.tp;
    pc.tp_num_weight_shards = l.tp * l.gtp;
    GTP_ASSIGN_OR_RETURN(auto pgs, parallel::ProcessGroupCollection::Build(pc, w));
    GptConfig c = GptConfig::Gpt2(kV, kT, 2, kC, 4);
    c.block.seed = 3;
    c.block.sequence_parallel = l.sp;
    c.prefix_len = kP;
    const kernels::Exec e = kernels::Exec::Cpu(host);
    GTP_ASSIGN_OR_RETURN(auto model, GptModel::Create(c, kB, kT, pgs, e));
    Tensor tok = Tensor::Empty({kB, kT}, DType::kI32, host);
    Tensor tgt = Tensor::Empty({kB, kT}, DType::kI32, host);
    for (int64_t i = 0; i < kB * kT; ++i) {
      const bool in_prefix = i % kT < kP;
      tok.data<int32_t>()[i] = (PhiloxRaw(5, i).v[0] + (in_prefix ? token_salt : 0)) % kV;
      tgt.data<int32_t>()[i] = in_prefix ? -1 : static_cast<int32_t>(PhiloxRaw(5, i).v[1] % kV);
    }
    Tensor p = TensorFromHost(e, prefix.data(), {kB * kP, kC}, DType::kF32);
    GTP_RETURN_IF_ERROR(model->SetPrefix(p));
    GTP_ASSIGN_OR_RETURN(float loss, model->Forward(tok, tgt));
    GTP_RETURN_IF_ERROR(model->Backward());
    const Tensor& g = model->prefix_grad();
    if (g.numel() != kB * kP * kC) return absl::InternalError("no prefix gradient");
    if (w.rank() == 0) {
      out.loss = loss;
      out.dprefix.assign(g.data<float>(), g.data<float>() + g.numel());
    }
    return absl::OkStatus();
  });
  EXPECT_TRUE(st.ok()) << st;
  return out;
}

TEST(GptPrefix, GradientMatchesFiniteDifferences) {
  const std::vector<float> p = Prefix();
  const Result r = RunModel({}, p);
  ASSERT_TRUE(std::isfinite(r.loss));
  float gmax = 0;
  for (float g : r.dprefix) gmax = std::max(gmax, std::fabs(g));
  ASSERT_GT(gmax, 1e-4f);
  // The elements with the largest gradients (f32 finite differences resolve
  // ~1e-5 here), and a few others.
  std::vector<int64_t> idx(r.dprefix.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = static_cast<int64_t>(i);
  std::partial_sort(idx.begin(), idx.begin() + 6, idx.end(), [&](int64_t a, int64_t b) {
    return std::fabs(r.dprefix[a]) > std::fabs(r.dprefix[b]);
  });
  idx.resize(6);
  for (int64_t i : {5L, 40L, 99L}) idx.push_back(i);
  const float eps = 0.05f;
  for (int64_t i : idx) {
    std::vector<float> hi = p, lo = p;
    hi[i] += eps;
    lo[i] -= eps;
    const double fd =
        (static_cast<double>(RunModel({}, hi).loss) - RunModel({}, lo).loss) / (2 * eps);
    EXPECT_NEAR(r.dprefix[i], fd, 2e-5 + 0.05 * std::fabs(fd)) << "element " << i;
  }
}

TEST(GptPrefix, PrefixPositionsIgnoreTheirTokenIds) {
  const std::vector<float> p = Prefix();
  const Result a = RunModel({}, p, 0), b = RunModel({}, p, 11);
  EXPECT_EQ(a.loss, b.loss);
  EXPECT_EQ(a.dprefix, b.dprefix);
}

TEST(GptPrefix, LayoutsMatchOneRank) {
  const std::vector<float> p = Prefix();
  const Result one = RunModel({}, p);
  for (const Layout& l : {Layout{2, 1, false}, Layout{2, 1, true}, Layout{1, 2, false},
                          Layout{2, 2, true}}) {
    const Result r = RunModel(l, p);
    EXPECT_NEAR(r.loss, one.loss, 1e-5) << "tp " << l.tp << " gtp " << l.gtp << " sp " << l.sp;
    ASSERT_EQ(r.dprefix.size(), one.dprefix.size());
    for (size_t i = 0; i < one.dprefix.size(); ++i) {
      ASSERT_NEAR(r.dprefix[i], one.dprefix[i], 1e-5) << i << " tp " << l.tp << " sp " << l.sp;
    }
  }
}

TEST(GptPrefix, ShapeAndConfigErrorsAreNamed) {
  absl::Status st = comm::RunRanks(1, [&](comm::Communicator& w) -> absl::Status {
    HeapAllocator host;
    GTP_ASSIGN_OR_RETURN(auto pgs, parallel::ProcessGroupCollection::Build({}, w));
    const kernels::Exec e = kernels::Exec::Cpu(host);
    GptConfig c = GptConfig::Gpt2(kV, kT, 1, kC, 4);
    GTP_ASSIGN_OR_RETURN(auto plain, GptModel::Create(c, kB, kT, pgs, e));
    EXPECT_EQ(plain->SetPrefix(e.Zeros({kB * kP, kC})).code(),
              absl::StatusCode::kFailedPrecondition);
    c.prefix_len = kP;
    GTP_ASSIGN_OR_RETURN(auto m, GptModel::Create(c, kB, kT, pgs, e));
    absl::Status bad = m->SetPrefix(e.Zeros({kB * kP + 1, kC}));
    EXPECT_NE(bad.message().find("prefix must be [B·prefix_len = 8, 16]"), std::string::npos) << bad;
    c.prefix_len = kT + 1;
    EXPECT_FALSE(GptModel::Create(c, kB, kT, pgs, e).ok());
    return absl::OkStatus();
  });
  EXPECT_TRUE(st.ok()) << st;
}

}  // namespace
}  // namespace gtp::layers
