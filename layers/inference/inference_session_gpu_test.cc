// The KV-cache decoder on CUDA against the same decoder on the CPU, over the
// same weights (a CPU model's, loaded into a CUDA model): greedy tokens
// equal, and every step's logits (the prompt's rows too) within 1e-4 of the
// CPU's, relative to the largest |logit| — for a GPT-2-style model
// (LayerNorm, GELU, learned positions, biases, tied) and Llama-style ones
// (RMSNorm, SwiGLU, RoPE, no biases, untied; GQA 2 and 4 query heads per KV
// head; HS 16 and 64). A Reset session decodes the same again; a CUDA model refuses a CPU
// Exec.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "comm/local/local_communicator.h"
#include "core/cuda_runtime.h"
#include "core/kernels/cuda.h"
#include "core/philox.h"
#include "gtest/gtest.h"
#include "layers/gpt.h"
#include "layers/inference/inference_session.h"
#include "layers/inference/sampling.h"
#include "layers/inference/testing.h"
#include "parallel/parallel_config.h"
#include "parallel/process_groups.h"

namespace gtp::layers::inference {
namespace {

constexpr int64_t kT = 40, kV = 53;

struct Style {
  std::string name;
  GptConfig config;
};

GptConfig Gpt2Style() {
  GptConfig c = GptConfig::Gpt2(kV, kT, 2, 64, 4);  // HS 16
  c.block.init_std = 0.3f;                          // spread logits: no near-ties for argmax
  c.block.seed = 21;
  return c;
}

GptConfig LlamaStyle(int64_t kv_heads, int64_t embd, int64_t heads) {
  GptConfig c = GptConfig::Gpt2(kV, kT, 3, embd, heads);
  c.block.n_kv_head = kv_heads;
  c.block.ffn_hidden = 96;
  c.block.norm = NormKind::kRMSNorm;
  c.block.activation = Activation::kSwiGlu;
  c.block.bias = false;
  c.block.rope = true;
  c.learned_positions = false;
  c.tied_embeddings = false;
  c.block.init_std = 0.3f;
  c.block.seed = 22;
  return c;
}

absl::Status PerturbReplicated(GptModel& m) { return testing::PerturbReplicated(m, 77); }

// Every parameter of the single-rank CPU model `src` into `dst` (tools/generate's path:
// host values through LoadGlobal).
absl::Status CopyWeights(const GptModel& src, GptModel& dst) {
  for (const ShardedParam* p : src.sharded_params()) {
    const Tensor t = p->shard().Slice(0, p->rows());
    GTP_RETURN_IF_ERROR(dst.LoadGlobal(p->name(), t.data<float>(), t.shape()));
  }
  for (const ReplicatedParam* p : src.replicated_params()) {
    GTP_RETURN_IF_ERROR(dst.LoadGlobal(p->name, p->value.data<float>(), p->value.shape()));
  }
  return absl::OkStatus();
}

struct Trace {
  std::vector<float> prompt_logits;  // [n_prompt, V]
  std::vector<int32_t> tokens;
  std::vector<std::vector<float>> logits;  // per generated token: [V]
};

absl::StatusOr<Trace> Greedy(InferenceSession& s, const std::vector<int32_t>& prompt) {
  Trace tr;
  GTP_ASSIGN_OR_RETURN(tr.prompt_logits, s.Append(prompt));
  std::vector<float> last(tr.prompt_logits.end() - kV, tr.prompt_logits.end());
  const size_t n = kT - prompt.size();
  while (tr.tokens.size() < n) {
    tr.logits.push_back(last);
    tr.tokens.push_back(Argmax(last));
    if (tr.tokens.size() < n) {
      GTP_ASSIGN_OR_RETURN(last, s.Append({tr.tokens.back()}));
    }
  }
  return tr;
}

// max |got − want| ≤ tol · max |want|.
::testing::AssertionResult Close(const std::vector<float>& got, const std::vector<float>& want,
                                 double tol) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << "size " << got.size() << " != " << want.size();
  double scale = 0, err = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    scale = std::max(scale, std::fabs(double(want[i])));
    const double e = std::fabs(double(got[i]) - want[i]);
    if (!(e <= err)) err = e;  // NaN sticks
  }
  if (!(err <= tol * scale)) {
    return ::testing::AssertionFailure() << "max |Δlogit| " << err << " of " << scale;
  }
  return ::testing::AssertionSuccess();
}

void ExpectSameDecoding(const Trace& got, const Trace& want) {
  EXPECT_EQ(got.tokens, want.tokens);
  EXPECT_TRUE(Close(got.prompt_logits, want.prompt_logits, 1e-4)) << "prompt";
  ASSERT_EQ(got.logits.size(), want.logits.size());
  for (size_t s = 0; s < got.logits.size(); ++s) {
    // Past a token mismatch the inputs differ: compare while they agree.
    if (s > 0 && got.tokens[s - 1] != want.tokens[s - 1]) break;
    EXPECT_TRUE(Close(got.logits[s], want.logits[s], 1e-4)) << "step " << s;
  }
}

class InferenceSessionGpu : public ::testing::TestWithParam<Style> {};

TEST_P(InferenceSessionGpu, GreedyMatchesCpu) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << NoGpuReason();
  const GptConfig c = GetParam().config;
  HeapAllocator host;
  CudaCachingAllocator dev(0);
  absl::StatusOr<Stream> stream = Stream::Create(0);
  ASSERT_TRUE(stream.ok()) << stream.status();
  kernels::cuda::BlasContext blas(0);
  const kernels::Exec gpu{Device::Cuda(0), &dev, stream->get(), &blas};
  absl::Status st = comm::RunRanks(1, [&](comm::Communicator& w) -> absl::Status {
    parallel::ParallelConfig pc;
    GTP_ASSIGN_OR_RETURN(auto pgs, parallel::ProcessGroupCollection::Build(pc, w));
    GTP_ASSIGN_OR_RETURN(auto cm, GptModel::Create(c, 1, kT, pgs, kernels::Exec::Cpu(host)));
    GTP_RETURN_IF_ERROR(PerturbReplicated(*cm));
    GTP_ASSIGN_OR_RETURN(auto gm, GptModel::Create(c, 1, kT, pgs, gpu));
    GTP_RETURN_IF_ERROR(CopyWeights(*cm, *gm));
    GTP_ASSIGN_OR_RETURN(auto cs, InferenceSession::Create(*cm, kT));
    GTP_ASSIGN_OR_RETURN(auto gs, InferenceSession::Create(*gm, kT, gpu));
    const std::vector<int32_t> prompt = {7, 3, 41, 12, 0};
    GTP_ASSIGN_OR_RETURN(Trace want, Greedy(*cs, prompt));
    GTP_ASSIGN_OR_RETURN(Trace got, Greedy(*gs, prompt));
    ExpectSameDecoding(got, want);
    EXPECT_EQ(gs->length(), kT - 1);
    // Full: refused, nothing cached.
    EXPECT_EQ(gs->Append({1, 2}).status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(gs->length(), kT - 1);
    gs->Reset();
    GTP_ASSIGN_OR_RETURN(Trace again, Greedy(*gs, prompt));
    ExpectSameDecoding(again, want);
    // The CUDA model's parameters with a CPU Exec.
    EXPECT_EQ(InferenceSession::Create(*gm, kT).status().code(),
              absl::StatusCode::kInvalidArgument);
    return absl::OkStatus();
  });
  ASSERT_TRUE(st.ok()) << st;
}

INSTANTIATE_TEST_SUITE_P(Styles, InferenceSessionGpu,
                         ::testing::Values(Style{"gpt2", Gpt2Style()},
                                           Style{"llama_gqa2", LlamaStyle(2, 64, 4)},
                                           Style{"llama_gqa4_hs64", LlamaStyle(1, 256, 4)}),
                         [](const auto& i) { return i.param.name; });

}  // namespace
}  // namespace gtp::layers::inference
