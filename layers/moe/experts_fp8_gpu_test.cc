// The FP8 grouped experts (experts.h, ExpertsConfig::fp8) on a CUDA exec
// compute what they compute on the CPU: the same weights (their
// initialisation is device-independent: checked bit for bit), the same bf16
// rows and output gradients, experts with 5, 0, 37 and 130 rows (padded to
// 128 and 256 inside), GELU and SwiGLU, fp8 and bf16 wgrads.
//
// Tolerance. The CPU's FP8 GEMM and cuBLASLt's differ by f32 summation order
// only (block_gemm_gpu_test.cc bounds it at ~1e-5 of Σ|a·b|); a bf16 output
// then rounds to the same value or a neighbour (2⁻⁸ relative), and an
// activation that moved by a bf16 ulp can take the neighbouring e4m3 code
// (2⁻³ relative) when it sat next to a rounding boundary (about one in 16 of
// the moved ones). Summed over a tensor that is well under 1 % relative
// Frobenius error; a structural error (a wrong weight slice, a pad row that
// is not zero, a scale in the wrong place) is of the order of the tensor
// itself. So: relative Frobenius error ≤ 1e-2, every element finite.
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "comm/local/local_communicator.h"
#include "core/allocator.h"
#include "core/cuda_runtime.h"
#include "core/kernels/cuda.h"
#include "core/kernels/ops.h"
#include "core/kernels/testing/harness.h"
#include "core/philox.h"
#include "gtest/gtest.h"
#include "layers/moe/experts.h"

namespace gtp::layers::moe {
namespace {

namespace ops = kernels::ops;

const std::vector<int64_t> kRows = {5, 0, 37, 130};
constexpr int64_t kC = 64, kH = 96, kM = 172;  // kM = Σ kRows

// The values of an f32 or bf16 tensor on exec's device, as floats.
std::vector<float> Host(const kernels::Exec& e, const Tensor& t) {
  Tensor f = t;
  if (t.dtype() != DType::kF32) {
    f = e.Empty(t.shape(), DType::kF32);
    ops::Cast(e, t, f);
  }
  std::vector<float> v(f.numel());
  EXPECT_TRUE(Copy(f, Tensor::Wrap(v.data(), f.shape(), DType::kF32, Device::Cpu()), e.stream,
                   /*sync=*/true)
                  .ok());
  return v;
}

// [rows, cols] bf16 on exec's device from seeded normal values.
Tensor Bf16Rows(const kernels::Exec& e, uint64_t seed) {
  std::vector<float> v(kM * kC);
  for (size_t i = 0; i < v.size(); ++i) v[i] = PhiloxNormal(seed, i);
  Tensor f = e.Empty({kM, kC});
  EXPECT_TRUE(
      Copy(Tensor::Wrap(v.data(), {kM, kC}, DType::kF32, Device::Cpu()), f, e.stream).ok());
  Tensor b = e.Empty({kM, kC}, DType::kBF16);
  ops::Cast(e, f, b);
  return b;
}

struct Result {
  std::vector<float> w1, w2, y, dx, g1, g2;
};

Result RunExperts(const kernels::Exec& exec, bool swiglu, bool fp8_wgrad) {
  Result r;
  absl::Status st = comm::RunRanks(1, [&](comm::Communicator& world) -> absl::Status {
    GtpChain chain(exec, GtpOptions{});
    ExpertsConfig c;
    c.C = kC;
    c.H = kH;
    c.swiglu = swiglu;
    c.dtype = DType::kBF16;
    c.init_std = 0.3f;
    c.out_std = 0.2f;
    c.seed = 11;
    c.num_experts = static_cast<int>(kRows.size());
    c.wgrad_scale = 0.5f;
    c.fp8 = true;
    c.fp8_wgrad = fp8_wgrad;
    GroupedExperts ex("m.experts", c, &world, &chain);
    const Tensor x = Bf16Rows(exec, 201), dy = Bf16Rows(exec, 202);
    GTP_ASSIGN_OR_RETURN(Tensor y, ex.Forward(x, kRows, Direction::kForward));
    r.y = Host(exec, y);
    GTP_ASSIGN_OR_RETURN(Tensor dx, ex.Backward(dy));
    GTP_RETURN_IF_ERROR(chain.FinishBackward());
    r.dx = Host(exec, dx);
    r.w1 = Host(exec, ex.fc1().shard());
    r.w2 = Host(exec, ex.fc2().shard());
    r.g1 = Host(exec, ex.fc1().main_grad());
    r.g2 = Host(exec, ex.fc2().main_grad());
    return absl::OkStatus();
  });
  EXPECT_TRUE(st.ok()) << st;
  return r;
}

void ExpectClose(const std::vector<float>& got, const std::vector<float>& want,
                 const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_TRUE(std::isfinite(got[i])) << what << " element " << i;
    num += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    den += double(want[i]) * want[i];
  }
  ASSERT_GT(den, 0.0) << what;
  const double rel = std::sqrt(num / den);
  EXPECT_TRUE(rel <= 1e-2) << what << ": relative Frobenius error " << rel;
  std::printf("%s: relative Frobenius error GPU vs CPU %.2e\n", what.c_str(), rel);
}

TEST(CudaFp8Experts, MatchCpu) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << NoGpuReason();
  HeapAllocator host;
  CudaCachingAllocator dev(0);
  auto stream = Stream::Create(0);
  ASSERT_TRUE(stream.ok());
  kernels::cuda::BlasContext blas(0);
  const kernels::Exec gpu{Device::Cuda(0), &dev, stream->get(), &blas};
  const kernels::Exec cpu = kernels::Exec::Cpu(host);
  for (bool swiglu : {false, true}) {
    for (bool fp8_wgrad : {true, false}) {
      const std::string what = std::string(swiglu ? "swiglu" : "gelu") +
                               (fp8_wgrad ? ", fp8 wgrad" : ", bf16 wgrad");
      const Result c = RunExperts(cpu, swiglu, fp8_wgrad), g = RunExperts(gpu, swiglu, fp8_wgrad);
      ASSERT_EQ(g.w1, c.w1) << what << ": fc1's initial weights differ between devices";
      ASSERT_EQ(g.w2, c.w2) << what << ": fc2's initial weights differ between devices";
      ExpectClose(g.y, c.y, what + " y");
      ExpectClose(g.dx, c.dx, what + " dx");
      ExpectClose(g.g1, c.g1, what + " fc1 grad");
      ExpectClose(g.g2, c.g2, what + " fc2 grad");
    }
  }
}

}  // namespace
}  // namespace gtp::layers::moe
