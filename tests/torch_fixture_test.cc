// Independent gradient references: the loss, logits and every parameter
// gradient of a tiny GPT-2-style and a tiny Llama-style model match a float64
// PyTorch implementation written apart from this code base
// (tools/reference/torch_fixture.py; fixtures tests/fixtures/{gpt2,llama}.gtpfix),
// on one rank and on TP, GTP, TP·GTP with sequence parallelism, DP and TP·DP
// layouts on local threads. Unlike the sharded-vs-one-rank tests this catches
// bugs that every layout shares (tied-embedding gradient, loss scaling, RoPE
// convention, GQA grouping, vocabulary padding).
//
// Tolerance: per-tensor relative L2, ‖got − want‖ / max(‖want‖, kFloor) ≤
// 1e-5. Elementwise relative error is meaningless for the many entries near
// zero (cancellation, rows of tokens that never occur), while the L2 norm of
// the error against the tensor's own scale is what f32 rounding bounds (up to
// 1.4e-6 measured here). kFloor (absolute) covers gradients that are exactly
// zero in exact arithmetic — attn.k.bias, since softmax ignores a per-row
// shift: the reference holds ~1e-17, gtp's f32 rounding noise of Σ_rows dk
// (‖·‖ ≈ 4e-8 measured), accepted up to 3e-7. Every nonzero reference
// gradient here has norm ≥ 0.097 (checked), so the floor relaxes nothing else.
// The vocabulary pad rows of wte and lm_head must be exactly zero.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "comm/local/local_communicator.h"
#include "gtest/gtest.h"
#include "tests/gtpfix.h"
#include "layers/gpt.h"
#include "parallel/parallel_config.h"
#include "parallel/process_groups.h"

namespace gtp {
namespace {

constexpr double kTol = 1e-5;
constexpr double kFloor = 3e-2;  // absolute, in L2 norm

using testing::Fixture;
using testing::ReadFixture;
using Entry = testing::FixtureEntry;

layers::GptConfig ConfigOf(const Fixture& fx) {
  layers::GptConfig c = layers::GptConfig::Gpt2(fx.Int("vocab"), fx.Int("seq"), fx.Int("n_layer"),
                                                fx.Int("n_embd"), fx.Int("n_head"));
  c.block.n_kv_head = fx.Int("n_kv_head");
  c.block.ffn_hidden = fx.Int("ffn_hidden");
  c.block.norm_eps = static_cast<float>(fx.Real("norm_eps"));
  c.block.rope_theta = static_cast<float>(fx.Real("rope_theta"));
  if (fx.meta.at("style") == "llama") {
    c.block.rope = true;
    c.learned_positions = false;
    c.block.norm = layers::NormKind::kRMSNorm;
    c.block.activation = layers::Activation::kSwiGlu;
    c.block.bias = false;
    c.tied_embeddings = false;
  }
  return c;
}

// ---- One forward/backward on a layout, everything reassembled as global tensors ---------

struct Layout {
  int tp = 1, gtp = 1, dp = 1;
  bool sp = false;
  bool training = false;  // ForwardAsync(backward_follows) + TakeLossSum: the trainer's path
  // ≥ 0: GptConfig::head_chunk_bytes (1: 8-row chunks of the tied head's
  // logits, its backward taken in the forward); −1: the default.
  int64_t head_chunk_bytes = -1;
  std::string Name() const {
    return absl::StrCat("tp", tp, "_gtp", gtp, "_dp", dp, sp ? "_sp" : "", training ? "_train" : "",
                        head_chunk_bytes >= 0 ? "_chunked" : "");
  }
};

struct Result {
  double loss = 0;
  std::vector<float> logits;                        // [B·T, V]; empty on the training path
  std::map<std::string, std::vector<float>> grads;  // global; vocabulary tables [V_pad, C]
};

absl::StatusOr<Result> RunLayout(const Fixture& fx, const Layout& l) {
  const layers::GptConfig base = ConfigOf(fx);
  const int64_t B = fx.Int("B"), T = fx.Int("seq"), V = fx.Int("vocab");
  const std::vector<int32_t> tokens = fx.entries.at("tokens").as<int32_t>();
  const std::vector<int32_t> targets = fx.entries.at("targets").as<int32_t>();
  Result out;
  out.logits.assign(l.training ? 0 : B * T * V, 0.0f);
  std::mutex mu;
  absl::Status st = comm::RunRanks(l.tp * l.gtp * l.dp, [&](comm::Communicator& w) -> absl::Status {
    parallel::ParallelConfig pc;
    pc.tp = l.tp;
    pc.tp_num_weight_shards = l.tp * l.gtp;
    pc.sequence_parallel = l.sp;
    GTP_ASSIGN_OR_RETURN(auto pgs, parallel::ProcessGroupCollection::Build(pc, w));
    GTP_ASSIGN_OR_RETURN(comm::Communicator * data, pgs.Get("data"));
    GTP_ASSIGN_OR_RETURN(comm::Communicator * tp, pgs.Get("tp"));
    GTP_ASSIGN_OR_RETURN(comm::Communicator * dp, pgs.Get("dp"));
    GTP_ASSIGN_OR_RETURN(comm::Communicator * tp_gtp, pgs.Get("tp_gtp"));
    layers::GptConfig cfg = base;
    cfg.block.sequence_parallel = l.sp;
    if (l.head_chunk_bytes >= 0) cfg.head_chunk_bytes = l.head_chunk_bytes;
    const int64_t b_lane = B / data->size(), s0 = data->rank() * b_lane;
    HeapAllocator host;
    GTP_ASSIGN_OR_RETURN(auto model,
                         layers::GptModel::Create(cfg, b_lane, T, pgs, kernels::Exec::Cpu(host)));
    // Load every parameter; each must be in the fixture (and, below, have a gradient).
    for (layers::ShardedParam* p : model->sharded_params()) {
      const Entry& e = fx.entries.at(p->name());
      GTP_RETURN_IF_ERROR(model->LoadGlobal(p->name(), e.as<float>().data(), Shape(e.shape)));
    }
    for (layers::ReplicatedParam* p : model->replicated_params()) {
      const Entry& e = fx.entries.at(p->name);
      GTP_RETURN_IF_ERROR(model->LoadGlobal(p->name, e.as<float>().data(), Shape(e.shape)));
    }
    std::vector<int32_t> tok(tokens.begin() + s0 * T, tokens.begin() + (s0 + b_lane) * T);
    std::vector<int32_t> tgt(targets.begin() + s0 * T, targets.begin() + (s0 + b_lane) * T);
    Tensor ttok = Tensor::Wrap(tok.data(), {b_lane, T}, DType::kI32, Device::Cpu());
    Tensor ttgt = Tensor::Wrap(tgt.data(), {b_lane, T}, DType::kI32, Device::Cpu());
    float loss = 0;
    if (l.training) {
      GTP_RETURN_IF_ERROR(model->ForwardAsync(ttok, ttgt, /*backward_follows=*/true));
      GTP_RETURN_IF_ERROR(model->Backward());
      GTP_ASSIGN_OR_RETURN(loss, model->TakeLossSum());
    } else {
      GTP_ASSIGN_OR_RETURN(loss, model->Forward(ttok, ttgt));
      const Tensor& lg = model->logits();  // this lane's rows, this TP rank's columns
      const int64_t ld = lg.dim(1), cols = model->vocab_local(), v0 = model->vocab_start();
      std::lock_guard<std::mutex> lock(mu);  // lanes write distinct rows, TP ranks distinct columns
      for (int64_t r = 0; r < b_lane * T; ++r)
        for (int64_t c = 0; c < cols; ++c)
          out.logits[(s0 * T + r) * V + v0 + c] = lg.data<float>()[r * ld + c];
    }
    if (!l.training) GTP_RETURN_IF_ERROR(model->Backward());
    // Every lane has as many valid targets: the global mean is the mean of lane means.
    GTP_RETURN_IF_ERROR(
        comm::Run(data->AllReduce(&loss, &loss, 1, DType::kF32, comm::ReduceOp::kMean)));
    std::map<std::string, std::vector<float>> grads;
    auto mean = [](comm::Communicator* g, std::vector<float>& v) {
      return comm::Run(
          g->AllReduce(v.data(), v.data(), v.size(), DType::kF32, comm::ReduceOp::kMean));
    };
    auto sum = [](comm::Communicator* g, std::vector<float>& v) {
      return comm::Run(
          g->AllReduce(v.data(), v.data(), v.size(), DType::kF32, comm::ReduceOp::kSum));
    };
    for (layers::ShardedParam* p : model->sharded_params()) {
      // Main grads are already the mean over the GTP lanes; the pieces of one
      // replica are disjoint (a sum reassembles them); replicas average over DP.
      const auto& L = p->global_layout();
      std::vector<float> g(L.global_rows * L.global_cols, 0.0f);
      layers::StoreShardToGlobal(*p, p->main_grad(), g.data());
      GTP_RETURN_IF_ERROR(sum(tp_gtp, g));
      GTP_RETURN_IF_ERROR(mean(dp, g));
      grads[p->name()] = std::move(g);
    }
    for (layers::ReplicatedParam* p : model->replicated_params()) {
      // Local to the lane (SP: to this rank's rows); average over all lanes.
      std::vector<float> g(p->grad.data<float>(), p->grad.data<float>() + p->grad.numel());
      if (p->grad_needs_tp_sum) GTP_RETURN_IF_ERROR(sum(tp, g));
      GTP_RETURN_IF_ERROR(mean(data, g));
      if (p->tp_sharded) {  // column-parallel bias: this TP rank's rows
        std::vector<float> full(p->layout.global_rows, 0.0f);
        for (int64_t r = 0; r < p->grad.numel(); ++r) full[p->layout.row_map(r)] = g[r];
        GTP_RETURN_IF_ERROR(sum(tp, full));
        g = std::move(full);
      }
      grads[p->name] = std::move(g);
    }
    if (w.rank() == 0) {
      std::lock_guard<std::mutex> lock(mu);
      out.loss = loss;
      out.grads = std::move(grads);
    }
    return absl::OkStatus();
  });
  if (!st.ok()) return st;
  return out;
}

// ‖got − want‖ / max(‖want‖, floor) over the first want.size() elements.
double RelL2(const float* got, const std::vector<double>& want, double floor) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double d = got[i] - want[i];
    num += d * d;
    den += want[i] * want[i];
  }
  const double r = std::sqrt(num) / std::max(std::sqrt(den), floor);
  return std::isnan(r) ? INFINITY : r;
}

struct Case {
  std::string style;
  Layout layout;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.style << " " << c.layout.Name(); }

class TorchFixture : public ::testing::TestWithParam<Case> {};

TEST_P(TorchFixture, LossLogitsAndEveryGradientMatchFloat64PyTorch) {
  const Case& k = GetParam();
  auto fx = ReadFixture(absl::StrCat("tests/fixtures/", k.style, ".gtpfix"));
  ASSERT_TRUE(fx.ok()) << fx.status();
  ASSERT_EQ(fx->meta.at("style"), k.style);
  auto got = RunLayout(*fx, k.layout);
  ASSERT_TRUE(got.ok()) << got.status();

  const double want_loss = fx->entries.at("loss").as<double>()[0];
  EXPECT_LE(std::abs(got->loss - want_loss), kTol * std::abs(want_loss))
      << "loss " << got->loss << " vs " << want_loss;
  double worst = 0, worst_zero = 0, logits_err = -1;  // -1: not compared (training path)
  std::string worst_name;
  if (!got->logits.empty()) {
    logits_err = RelL2(got->logits.data(), fx->entries.at("logits").as<double>(), 0.0);
    EXPECT_LE(logits_err, kTol) << "logits";
  }
  size_t n_ref_grads = 0;
  for (const auto& [name, e] : fx->entries) n_ref_grads += name.rfind("grad.", 0) == 0;
  EXPECT_EQ(got->grads.size(), n_ref_grads) << "every reference gradient belongs to a parameter";
  for (const auto& [name, g] : got->grads) {
    SCOPED_TRACE(name);
    auto it = fx->entries.find("grad." + name);
    ASSERT_NE(it, fx->entries.end()) << "no reference gradient";
    const std::vector<double> want = it->second.as<double>();
    double ref_norm = 0;
    for (double v : want) ref_norm += v * v;
    ref_norm = std::sqrt(ref_norm);
    // The floor must act only on exactly-zero gradients (see the top).
    EXPECT_TRUE(ref_norm < 1e-12 || ref_norm > 3 * kFloor) << "reference norm " << ref_norm;
    ASSERT_GE(g.size(), want.size());
    // Vocabulary tables are [V_pad, C] here, [V, C] in the reference: pad rows are 0.
    for (size_t i = want.size(); i < g.size(); ++i) ASSERT_EQ(g[i], 0.0f) << "pad element " << i;
    const double e = RelL2(g.data(), want, kFloor);
    EXPECT_LE(e, kTol);
    if (ref_norm < 1e-12) {
      worst_zero = std::max(worst_zero, e);
    } else if (e > worst) {
      worst = e, worst_name = name;
    }
  }
  std::cout << k.style << " " << k.layout.Name() << ": loss rel err "
            << std::abs(got->loss - want_loss) / want_loss << ", logits " << logits_err
            << ", worst gradient " << worst << " (" << worst_name << "), zero gradients (floored) "
            << worst_zero << "\n";
  RecordProperty("worst_grad_rel_error", absl::StrCat(worst));
}

std::vector<Case> Cases() {
  const std::vector<Layout> layouts = {
      {1, 1, 1, false, false},    // one rank
      {1, 1, 1, false, true},     // one rank, fused loss gradient (training path)
      {2, 1, 1, false, false},    // TP2
      {1, 2, 1, false, false},    // GTP2 (tp_num_weight_shards 2)
      {2, 2, 1, true, false},     // TP2·GTP2, sequence parallel
      {1, 2, 1, false, true},     // GTP2, training path
      {1, 1, 1, false, true, 1},  // one rank, the tied head in 8-row chunks (llama: untied, whole)
      {1, 1, 2, false, true, 1},  // DP2, the same
      {1, 1, 2, false, false},    // DP2
      {2, 1, 2, true, false},     // TP2·DP2, sequence parallel
  };
  std::vector<Case> cases;
  for (const char* style : {"gpt2", "llama"})
    for (const Layout& l : layouts) cases.push_back({style, l});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Layouts, TorchFixture, ::testing::ValuesIn(Cases()),
                         [](const auto& i) { return i.param.style + "_" + i.param.layout.Name(); });

}  // namespace
}  // namespace gtp
