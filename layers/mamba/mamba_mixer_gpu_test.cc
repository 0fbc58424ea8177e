// The Mamba-2 mixer and a hybrid GptModel on a CUDA device against the CPU,
// from the same seeded params and inputs (the CPU mixer matches finite
// differences in mamba_mixer_test; the CUDA SSM ops match the CPU ones in
// core/kernels/ssm/ssm_gpu_test).
//   f32:  output, input gradient and every parameter gradient within 1e-3
//         relative (L2) of the CPU's (the CUDA scan runs the plain recurrence,
//         the CPU one the chunked form, each op within ~2e-4 of the other:
//         ssm_gpu_test; cuBLAS in plain f32).
//   bf16: the same within bf16 accuracy of the CPU bf16 mixer and of the f32
//         one (the reference).
// The hybrid model ("M*-M-") over two SGD steps: losses and every gradient.
// Results are read back as f32 and any non-finite value fails (RelErr).
// Skips without a GPU.
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/allocator.h"
#include "core/cuda_runtime.h"
#include "core/kernels/cuda.h"
#include "gtest/gtest.h"
#include "layers/mamba/mamba_mixer.h"
#include "layers/mamba/mixer_testing.h"

namespace gtp::layers::mamba {
namespace {

using testing::RelErr;

#define SKIP_WITHOUT_GPU() \
  if (CudaDeviceCount() == 0) GTEST_SKIP() << NoGpuReason()

// A CUDA exec on device 0 and the CPU exec; owned for one test.
class Execs {
 public:
  Execs() : dev_(0), stream_(Stream::Create(0)), blas_(0) {
    GTP_CHECK_OK(stream_.status());
    gpu = kernels::Exec{Device::Cuda(0), &dev_, stream_->get(), &blas_};
    cpu = kernels::Exec::Cpu(host_);
  }
  kernels::Exec cpu, gpu;

 private:
  HeapAllocator host_;
  CudaCachingAllocator dev_;
  absl::StatusOr<Stream> stream_;
  kernels::cuda::BlasContext blas_;
};

struct MixerCase {
  int64_t d_model, d_state, head_dim, n_groups, chunk, B, T;
};

MambaConfig Config(const MixerCase& m, DType dt) {
  MambaConfig c;
  c.d_model = m.d_model;
  c.d_state = m.d_state;
  c.head_dim = m.head_dim;
  c.n_groups = m.n_groups;
  c.chunk = m.chunk;
  c.init_std = 0.1f;
  c.out_std = 0.1f;
  c.seed = 29;
  c.dtype = dt;
  return c;
}

void ExpectMixerClose(const testing::MixerRun& got, const testing::MixerRun& want, double tol,
                      const std::string& what) {
  SCOPED_TRACE(what);
  EXPECT_LT(RelErr(got.out, want.out), tol) << "out";
  EXPECT_LT(RelErr(got.dh, want.dh), tol) << "dh";
  ASSERT_EQ(got.grads.size(), want.grads.size());
  ASSERT_EQ(want.grads.size(), 16u);  // 6 projections + 10 per-head params
  for (size_t i = 0; i < want.grads.size(); ++i) {
    ASSERT_EQ(got.grads[i].first, want.grads[i].first);
    EXPECT_LT(RelErr(got.grads[i].second, want.grads[i].second), tol) << want.grads[i].first;
  }
}

class MambaMixerGpu : public ::testing::TestWithParam<MixerCase> {};

TEST_P(MambaMixerGpu, F32MatchesCpu) {
  SKIP_WITHOUT_GPU();
  const MixerCase m = GetParam();
  Execs x;
  const testing::MixerRun ref = testing::RunMixer(x.cpu, Config(m, DType::kF32), m.B, m.T);
  const testing::MixerRun got = testing::RunMixer(x.gpu, Config(m, DType::kF32), m.B, m.T);
  ExpectMixerClose(got, ref, 1e-3, "CUDA f32 vs CPU f32");
}

TEST_P(MambaMixerGpu, Bf16MatchesCpu) {
  SKIP_WITHOUT_GPU();
  const MixerCase m = GetParam();
  Execs x;
  const testing::MixerRun f32 = testing::RunMixer(x.cpu, Config(m, DType::kF32), m.B, m.T);
  const testing::MixerRun bf16 = testing::RunMixer(x.cpu, Config(m, DType::kBF16), m.B, m.T);
  const testing::MixerRun got = testing::RunMixer(x.gpu, Config(m, DType::kBF16), m.B, m.T);
  ExpectMixerClose(got, bf16, 3e-2, "CUDA bf16 vs CPU bf16");
  ExpectMixerClose(got, f32, 4e-2, "CUDA bf16 vs CPU f32");
}

// in_proj's B, C and dt packed in one GEMM (ProjectionPacking::kAuto: packs
// on CUDA): the CPU's three-GEMM mixer within the tolerances above.
TEST_P(MambaMixerGpu, PackedBcDtMatchesCpu) {
  SKIP_WITHOUT_GPU();
  const MixerCase m = GetParam();
  Execs x;
  for (const DType dt : {DType::kF32, DType::kBF16}) {
    MambaConfig packed = Config(m, dt);
    packed.packing = ProjectionPacking::kAuto;
    const testing::MixerRun ref = testing::RunMixer(x.cpu, Config(m, dt), m.B, m.T);
    const testing::MixerRun got = testing::RunMixer(x.gpu, packed, m.B, m.T);
    ExpectMixerClose(got, ref, dt == DType::kF32 ? 1e-3 : 3e-2,
                     absl::StrCat("CUDA packed vs CPU, ", DTypeName(dt)));
  }
}

// Odd T (not a multiple of the chunk), G < H; Mamba-2's d_state 64 and head
// dim 64; G == H per TP rank.
INSTANTIATE_TEST_SUITE_P(Shapes, MambaMixerGpu,
                         ::testing::Values(MixerCase{64, 16, 16, 2, 16, 2, 37},
                                           MixerCase{128, 64, 64, 1, 32, 2, 100},
                                           MixerCase{32, 8, 8, 8, 4, 3, 9}));

void ExpectStepsClose(const std::vector<testing::HybridStep>& got,
                      const std::vector<testing::HybridStep>& want, double loss_tol, bool bf16,
                      double grad_tol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t s = 0; s < want.size(); ++s) {
    SCOPED_TRACE(absl::StrCat("step ", s));
    ASSERT_TRUE(std::isfinite(got[s].loss));
    EXPECT_NEAR(got[s].loss, want[s].loss, loss_tol * want[s].loss);
    ASSERT_EQ(got[s].grads.size(), want[s].grads.size());
    for (size_t i = 0; i < want[s].grads.size(); ++i) {
      const auto& [name, w] = want[s].grads[i];
      ASSERT_EQ(got[s].grads[i].first, name);
      if (name.find("attn.k.bias") != std::string::npos) continue;  // true gradient is 0
      const double tol = bf16 ? testing::Bf16GradTolerance(name) * grad_tol : grad_tol;
      EXPECT_LT(RelErr(got[s].grads[i].second, w), tol) << name;
    }
  }
}

TEST(HybridGptGpu, F32MatchesCpuOverTwoSteps) {
  SKIP_WITHOUT_GPU();
  Execs x;
  const auto ref = testing::TrainHybrid(x.cpu, DType::kF32, 2);
  const auto got = testing::TrainHybrid(x.gpu, DType::kF32, 2);
  ExpectStepsClose(got, ref, 1e-4, /*bf16=*/false, 2e-3);
  ASSERT_EQ(ref.size(), 2u);
  EXPECT_LT(ref[1].loss, ref[0].loss);
}

// bf16 on the GPU (bf16 GEMMs, flash attention, the SSM in f32) against the
// f32 model on the CPU, with a little more room than the CPU's bf16 gets
// against it (hybrid_gpt_test), and against the CPU bf16 model.
TEST(HybridGptGpu, Bf16MatchesCpuOverTwoSteps) {
  SKIP_WITHOUT_GPU();
  Execs x;
  const auto f32 = testing::TrainHybrid(x.cpu, DType::kF32, 2);
  const auto bf16 = testing::TrainHybrid(x.cpu, DType::kBF16, 2);
  const auto got = testing::TrainHybrid(x.gpu, DType::kBF16, 2);
  {
    SCOPED_TRACE("CUDA bf16 vs CPU f32");
    ExpectStepsClose(got, f32, 1e-2, /*bf16=*/true, 1.25);
  }
  {
    SCOPED_TRACE("CUDA bf16 vs CPU bf16");
    ExpectStepsClose(got, bf16, 1e-2, /*bf16=*/true, 1.25);
  }
}

}  // namespace
}  // namespace gtp::layers::mamba
