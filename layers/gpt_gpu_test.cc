// The GPT model on a CUDA device computes what it computes on the CPU:
// same initial weights, same tokens, three SGD steps, losses within 1e-5
// relative (f32 everywhere; cuBLASLt in plain f32, not TF32).
#include <cmath>
#include <vector>

#include "comm/local/local_communicator.h"
#include "core/cuda_runtime.h"
#include "core/kernels/cuda.h"
#include "core/philox.h"
#include "gtest/gtest.h"
#include "layers/gpt.h"
#include "optimizer/grad_sync.h"
#include "parallel/parallel_config.h"
#include "parallel/process_groups.h"

namespace gtp::layers {
namespace {

std::vector<float> Train(const kernels::Exec& exec, bool llama) {
  std::vector<float> losses;
  GptConfig c = GptConfig::Gpt2(300, 32, 2, 64, 4);
  c.block.seed = 11;
  if (llama) {
    c.block.rope = true;
    c.learned_positions = false;
    c.block.norm = NormKind::kRMSNorm;
    c.block.activation = Activation::kSwiGlu;
    c.block.bias = false;
    c.block.n_kv_head = 2;
    c.tied_embeddings = false;
  }
  const int64_t B = 4, T = 32;
  absl::Status st = comm::RunRanks(1, [&](comm::Communicator& w) -> absl::Status {
    GTP_ASSIGN_OR_RETURN(auto pgs, parallel::ProcessGroupCollection::Build({}, w));
    GTP_ASSIGN_OR_RETURN(auto model, GptModel::Create(c, B, T, pgs, exec));
    optimizer::ParamSet ps{model->sharded_params(), model->replicated_params()};
    HeapAllocator host;
    for (int step = 0; step < 3; ++step) {
      std::vector<int32_t> tok(B * T), tgt(B * T);
      for (int64_t i = 0; i < B * T; ++i) {
        tok[i] = PhiloxRaw(7, i).v[0] % 300;  // one batch, so the loss must fall
        tgt[i] = PhiloxRaw(7, i).v[1] % 300;
      }
      Tensor dtok = exec.Empty({B, T}, DType::kI32), dtgt = exec.Empty({B, T}, DType::kI32);
      GTP_RETURN_IF_ERROR(Copy(Tensor::Wrap(tok.data(), {B, T}, DType::kI32, Device::Cpu()), dtok, exec.stream));
      GTP_RETURN_IF_ERROR(Copy(Tensor::Wrap(tgt.data(), {B, T}, DType::kI32, Device::Cpu()), dtgt, exec.stream));
      GTP_ASSIGN_OR_RETURN(float loss, model->Forward(dtok, dtgt));
      GTP_RETURN_IF_ERROR(model->Backward());
      GTP_RETURN_IF_ERROR(optimizer::FinalizeGrads(ps, pgs));
      optimizer::SgdStep(ps, exec, 1.0f);
      optimizer::ZeroGrads(ps, exec);
      losses.push_back(loss);
    }
    return absl::OkStatus();
  });
  EXPECT_TRUE(st.ok()) << st;
  return losses;
}

class GptGpu : public ::testing::TestWithParam<bool> {};

TEST_P(GptGpu, MatchesCpu) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << NoGpuReason();
  HeapAllocator host;
  CudaCachingAllocator dev(0);
  auto stream = Stream::Create(0);
  ASSERT_TRUE(stream.ok());
  kernels::cuda::BlasContext blas(0);
  kernels::Exec gpu{Device::Cuda(0), &dev, stream->get(), &blas};
  std::vector<float> cpu = Train(kernels::Exec::Cpu(host), GetParam());
  std::vector<float> cuda = Train(gpu, GetParam());
  ASSERT_EQ(cpu.size(), cuda.size());
  for (size_t i = 0; i < cpu.size(); ++i) {
    EXPECT_NEAR(cuda[i], cpu[i], 1e-5 * std::abs(cpu[i])) << "step " << i;
  }
  EXPECT_LT(cpu.back(), cpu.front());
  std::printf("device peak bytes: %lld\n", static_cast<long long>(dev.stats().peak_bytes_in_use));
}

INSTANTIATE_TEST_SUITE_P(Styles, GptGpu, ::testing::Values(false, true),
                         [](const auto& i) { return i.param ? "llama" : "gpt2"; });

}  // namespace
}  // namespace gtp::layers
