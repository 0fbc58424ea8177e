// The KV-cache decoder against the model's own full forward: at temperature
// 0 the tokens generated incrementally equal those from recomputing the
// whole causal forward (GptModel::Forward) over the growing sequence at every
// step, and each step's cached logits match the full forward's within 1e-5
// (relative to the largest logit) — for a GPT-2-style model (LayerNorm,
// GELU, learned positions, biases, tied) and a Llama-style one (RMSNorm,
// SwiGLU, RoPE, GQA, no biases, untied).
#include "layers/inference/inference_session.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "comm/local/local_communicator.h"
#include "core/philox.h"
#include "gtest/gtest.h"
#include "layers/gpt.h"
#include "layers/inference/sampling.h"
#include "layers/inference/testing.h"
#include "parallel/parallel_config.h"
#include "parallel/process_groups.h"

namespace gtp::layers::inference {
namespace {

constexpr int64_t kT = 14, kV = 53;

GptConfig Gpt2Style() {
  GptConfig c = GptConfig::Gpt2(kV, kT, 2, 32, 4);
  c.block.init_std = 0.3f;  // spread logits: no near-ties for argmax
  c.block.seed = 11;
  return c;
}

GptConfig LlamaStyle() {
  GptConfig c = GptConfig::Gpt2(kV, kT, 3, 32, 4);
  c.block.n_kv_head = 2;
  c.block.ffn_hidden = 48;
  c.block.norm = NormKind::kRMSNorm;
  c.block.activation = Activation::kSwiGlu;
  c.block.bias = false;
  c.block.rope = true;
  c.learned_positions = false;
  c.tied_embeddings = false;
  c.block.init_std = 0.3f;
  c.block.seed = 12;
  return c;
}

absl::Status PerturbReplicated(GptModel& m) { return testing::PerturbReplicated(m, 99); }

struct Trace {
  std::vector<int32_t> tokens;
  std::vector<std::vector<float>> logits;  // per generated token: [V]
};

// Greedy decoding from `prompt` to kT tokens by full forwards over [1, kT]
// (positions past the sequence hold 0s: causality keeps them out).
absl::StatusOr<Trace> FullForwardGreedy(GptModel& m, const std::vector<int32_t>& prompt,
                                        HeapAllocator& host) {
  Trace tr;
  std::vector<int32_t> seq = prompt;
  Tensor tok = Tensor::Empty({1, kT}, DType::kI32, host);
  Tensor tgt = Tensor::Zeros({1, kT}, DType::kI32, host);
  while (static_cast<int64_t>(seq.size()) < kT) {
    for (int64_t t = 0; t < kT; ++t)
      tok.data<int32_t>()[t] = t < static_cast<int64_t>(seq.size()) ? seq[t] : 0;
    GTP_RETURN_IF_ERROR(m.Forward(tok, tgt).status());
    const Tensor& lg = m.logits();  // [kT, V_pad]
    const float* row = lg.data<float>() + (seq.size() - 1) * lg.dim(1);
    tr.logits.emplace_back(row, row + kV);
    seq.push_back(Argmax(tr.logits.back()));
    tr.tokens.push_back(seq.back());
  }
  return tr;
}

absl::StatusOr<Trace> CachedGreedy(const GptModel& m, const std::vector<int32_t>& prompt) {
  Trace tr;
  GTP_ASSIGN_OR_RETURN(auto s, InferenceSession::Create(m, kT));
  GTP_ASSIGN_OR_RETURN(std::vector<float> lg, s->Append(prompt));
  std::vector<float> last(lg.end() - kV, lg.end());
  const size_t n = kT - prompt.size();
  while (tr.tokens.size() < n) {
    tr.logits.push_back(last);
    tr.tokens.push_back(Argmax(last));
    if (tr.tokens.size() < n) {
      GTP_ASSIGN_OR_RETURN(last, s->Append({tr.tokens.back()}));
    }
  }
  return tr;
}

void CheckCacheMatchesFullForward(const GptConfig& c) {
  absl::Status st = comm::RunRanks(1, [&](comm::Communicator& w) -> absl::Status {
    HeapAllocator host;
    parallel::ParallelConfig pc;
    GTP_ASSIGN_OR_RETURN(auto pgs, parallel::ProcessGroupCollection::Build(pc, w));
    GTP_ASSIGN_OR_RETURN(auto m, GptModel::Create(c, 1, kT, pgs, kernels::Exec::Cpu(host)));
    GTP_RETURN_IF_ERROR(PerturbReplicated(*m));
    const std::vector<int32_t> prompt = {7, 3, 41};
    GTP_ASSIGN_OR_RETURN(Trace ref, FullForwardGreedy(*m, prompt, host));
    GTP_ASSIGN_OR_RETURN(Trace got, CachedGreedy(*m, prompt));
    EXPECT_EQ(got.tokens, ref.tokens);
    EXPECT_EQ(got.logits.size(), ref.logits.size());
    for (size_t s = 0; s < std::min(got.logits.size(), ref.logits.size()); ++s) {
      double scale = 0, err = 0;
      for (int64_t i = 0; i < kV; ++i) {
        scale = std::max(scale, std::fabs(double(ref.logits[s][i])));
        err = std::max(err, std::fabs(double(got.logits[s][i]) - ref.logits[s][i]));
      }
      EXPECT_LE(err, 1e-5 * scale) << "step " << s << ": max |Δlogit| " << err << " of " << scale;
    }
    return absl::OkStatus();
  });
  ASSERT_TRUE(st.ok()) << st;
}

TEST(InferenceSession, Gpt2StyleCacheMatchesFullForward) {
  CheckCacheMatchesFullForward(Gpt2Style());
}

TEST(InferenceSession, LlamaStyleCacheMatchesFullForward) {
  CheckCacheMatchesFullForward(LlamaStyle());
}

TEST(InferenceSession, PromptAtOnceEqualsOneByOne) {
  absl::Status st = comm::RunRanks(1, [&](comm::Communicator& w) -> absl::Status {
    HeapAllocator host;
    parallel::ParallelConfig pc;
    GTP_ASSIGN_OR_RETURN(auto pgs, parallel::ProcessGroupCollection::Build(pc, w));
    GTP_ASSIGN_OR_RETURN(auto m,
                         GptModel::Create(LlamaStyle(), 1, kT, pgs, kernels::Exec::Cpu(host)));
    GTP_ASSIGN_OR_RETURN(auto a, InferenceSession::Create(*m, kT));
    GTP_ASSIGN_OR_RETURN(auto b, InferenceSession::Create(*m, kT));
    const std::vector<int32_t> prompt = {1, 2, 3, 4, 5, 6};
    GTP_ASSIGN_OR_RETURN(std::vector<float> all, a->Append(prompt));
    for (size_t i = 0; i < prompt.size(); ++i) {
      GTP_ASSIGN_OR_RETURN(std::vector<float> one, b->Append({prompt[i]}));
      for (int64_t v = 0; v < kV; ++v) EXPECT_NEAR(one[v], all[i * kV + v], 1e-5f) << i;
    }
    EXPECT_EQ(a->length(), 6);
    // Past max_len and out-of-vocabulary ids are refused, nothing cached.
    EXPECT_EQ(a->Append(std::vector<int32_t>(kT, 0)).status().code(),
              absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(a->Append({static_cast<int32_t>(kV)}).status().code(),
              absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(a->length(), 6);
    a->Reset();
    EXPECT_EQ(a->length(), 0);
    return absl::OkStatus();
  });
  ASSERT_TRUE(st.ok()) << st;
}

TEST(InferenceSession, RefusesWhatItCannotRun) {
  absl::Status st = comm::RunRanks(1, [&](comm::Communicator& w) -> absl::Status {
    HeapAllocator host;
    parallel::ParallelConfig pc;
    GTP_ASSIGN_OR_RETURN(auto pgs, parallel::ProcessGroupCollection::Build(pc, w));
    GptConfig c = Gpt2Style();
    c.block.dtype = DType::kBF16;
    GTP_ASSIGN_OR_RETURN(auto m, GptModel::Create(c, 1, kT, pgs, kernels::Exec::Cpu(host)));
    EXPECT_EQ(InferenceSession::Create(*m, kT).status().code(), absl::StatusCode::kUnimplemented);
    GTP_ASSIGN_OR_RETURN(auto f,
                         GptModel::Create(Gpt2Style(), 1, kT, pgs, kernels::Exec::Cpu(host)));
    EXPECT_EQ(InferenceSession::Create(*f, kT + 1).status().code(),
              absl::StatusCode::kInvalidArgument);  // learned positions end at max_seq_len
    return absl::OkStatus();
  });
  ASSERT_TRUE(st.ok()) << st;
}

}  // namespace
}  // namespace gtp::layers::inference
