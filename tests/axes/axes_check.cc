// One cell of the axis-combination matrix (DESIGN.md §1 tests/): trains a
// small GPT for 4 SGD steps under the layout given by the flags and checks
// every step's loss against a single-rank run of the same model and data
// (computed in this process), within 1e-5 relative. Ranks are threads
// (comm/local) unless started by a launcher (gtprun → UCX processes).
//   axes_check --tp=2 --gtp=2 --dp=1 [--sp] [--llama]
// Exit 0 on agreement; 1 with a line naming the layout and step otherwise.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "comm/local/local_communicator.h"
#include "comm/ucx/ucx_communicator.h"
#include "core/philox.h"
#include "layers/gpt.h"
#include "optimizer/grad_sync.h"
#include "parallel/parallel_config.h"
#include "parallel/process_groups.h"

ABSL_FLAG(int, tp, 1, "tensor-parallel size");
ABSL_FLAG(int, gtp, 1, "GTP size (weight shards per TP slice)");
ABSL_FLAG(int, dp, 1, "data-parallel size");
ABSL_FLAG(bool, sp, false, "sequence parallelism");
ABSL_FLAG(bool, llama, false, "RMSNorm, SwiGLU, RoPE, GQA, untied, no bias (else GPT-2 style)");

namespace gtp {
namespace {

constexpr int kSteps = 4;
constexpr int64_t kGlobalBatch = 8, kSeq = 8, kVocab = 97;

layers::GptConfig Model(bool llama, bool sp) {
  layers::GptConfig c = layers::GptConfig::Gpt2(kVocab, 16, 2, 16, 4);
  c.block.seed = 21;
  c.block.init_std = 0.2f;
  c.block.ffn_hidden = 24;
  if (llama) {
    c.block.norm = layers::NormKind::kRMSNorm;
    c.block.activation = layers::Activation::kSwiGlu;
    c.block.bias = false;
    c.block.rope = true;
    c.block.n_kv_head = 2;
    c.learned_positions = false;
    c.tied_embeddings = false;
  }
  c.block.sequence_parallel = sp;
  return c;
}

int32_t Token(int step, int64_t s, int64_t t) {
  int32_t x = static_cast<int32_t>(PhiloxRaw(MixKey(KeyFromName("axes.data"), step), s).v[0] % kVocab);
  for (int64_t i = 0; i < t; ++i) x = (5 * x + 2) % kVocab;
  return x;
}

// Trains under (tp, gtp, sp) on `w`; returns rank 0's global losses.
absl::Status Train(comm::Communicator& w, int tp, int gtp, bool sp, bool llama,
                   std::vector<float>* losses) {
  parallel::ParallelConfig pc;
  pc.tp = tp;
  pc.tp_num_weight_shards = tp * gtp;
  pc.sequence_parallel = sp;
  GTP_ASSIGN_OR_RETURN(auto pgs, parallel::ProcessGroupCollection::Build(pc, w));
  GTP_ASSIGN_OR_RETURN(comm::Communicator * data, pgs.Get("data"));
  HeapAllocator host;
  const int64_t B = kGlobalBatch / data->size();
  kernels::Exec exec = kernels::Exec::Cpu(host);
  GTP_ASSIGN_OR_RETURN(auto model,
                       layers::GptModel::Create(Model(llama, sp && tp > 1), B, kSeq, pgs, exec));
  optimizer::ParamSet ps{model->sharded_params(), model->replicated_params()};
  for (int step = 0; step < kSteps; ++step) {
    Tensor tok = Tensor::Empty({B, kSeq}, DType::kI32, host), tgt = Tensor::Empty({B, kSeq}, DType::kI32, host);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < kSeq; ++t) {
        tok.data<int32_t>()[b * kSeq + t] = Token(step, data->rank() * B + b, t);
        tgt.data<int32_t>()[b * kSeq + t] = Token(step, data->rank() * B + b, t + 1);
      }
    GTP_ASSIGN_OR_RETURN(float loss, model->Forward(tok, tgt));
    GTP_RETURN_IF_ERROR(model->Backward());
    GTP_RETURN_IF_ERROR(optimizer::FinalizeGrads(ps, pgs));
    optimizer::SgdStep(ps, exec, 0.5f);
    optimizer::ZeroGrads(ps, exec);
    GTP_RETURN_IF_ERROR(comm::Run(data->AllReduce(&loss, &loss, 1, DType::kF32, comm::ReduceOp::kMean)));
    if (w.rank() == 0) losses->push_back(loss);
  }
  return absl::OkStatus();
}

int Main() {
  const int tp = absl::GetFlag(FLAGS_tp), gtp = absl::GetFlag(FLAGS_gtp), dp = absl::GetFlag(FLAGS_dp);
  const bool sp = absl::GetFlag(FLAGS_sp), llama = absl::GetFlag(FLAGS_llama);
  const std::string name = "tp" + std::to_string(tp) + "_gtp" + std::to_string(gtp) + "_dp" +
                           std::to_string(dp) + (sp ? "_sp" : "") + (llama ? "_llama" : "_gpt2");
  std::vector<float> ref, got;
  absl::Status st = comm::RunRanks(1, [&](comm::Communicator& w) {
    return Train(w, 1, 1, false, llama, &ref);
  });
  bool rank0 = true;
  if (st.ok() && std::getenv("RANK") != nullptr) {
    auto world = comm::CreateUcxWorldFromEnv({});
    st = world.status();
    if (st.ok()) {
      rank0 = (*world)->rank() == 0;
      st = Train(**world, tp, gtp, sp, llama, &got);
    }
  } else if (st.ok()) {
    st = comm::RunRanks(tp * gtp * dp, [&](comm::Communicator& w) {
      return Train(w, tp, gtp, sp, llama, &got);
    });
  }
  if (!st.ok()) {
    std::fprintf(stderr, "%s: %s\n", name.c_str(), std::string(st.message()).c_str());
    return 1;
  }
  if (!rank0) return 0;
  for (int s = 0; s < kSteps; ++s) {
    const bool ok = s < static_cast<int>(got.size()) && std::abs(got[s] - ref[s]) <= 1e-5 * std::abs(ref[s]);
    std::printf("%s step %d: loss %.7f, single rank %.7f%s\n", name.c_str(), s,
                s < static_cast<int>(got.size()) ? got[s] : NAN, ref[s], ok ? "" : "  MISMATCH");
    if (!ok) return 1;
  }
  return 0;
}

}  // namespace
}  // namespace gtp

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return gtp::Main();
}
