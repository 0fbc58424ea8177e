// GPU tests of cuda::FlashAttentionForward/Backward (bf16, causal and
// bidirectional, GQA)
// against the double references on bf16-rounded inputs, plus run-to-run
// determinism and the argument checks.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/cuda_runtime.h"
#include "core/kernels/cuda.h"
#include "core/kernels/testing/gpu.h"
#include "core/kernels/testing/harness.h"
#include "core/kernels/testing/reference.h"
#include "core/status.h"
#include "gtest/gtest.h"

namespace gtp::kernels {
namespace testing {
namespace {

struct Shape {
  int64_t B, T, NH, NKV, HS;
  size_t q() const { return B * T * NH * HS; }
  size_t kv() const { return B * T * NKV * HS; }
  size_t rows() const { return B * NH * T; }
};

// T = 1, T below / at / just past a 64-row tile, T = 1000 (tail of 40); MHA,
// GQA (4 query heads per kv head), MQA; HS 64 and 128; B·NH > 1.
const Shape kShapes[] = {{1, 1, 1, 1, 64},    {2, 17, 3, 3, 64},  {2, 64, 4, 4, 64},
                         {1, 129, 8, 2, 64},  {1, 1000, 2, 1, 64}, {1, 1, 2, 1, 128},
                         {2, 129, 4, 2, 128}, {1, 200, 8, 2, 128}, {1, 1000, 2, 2, 128}};

std::string Describe(const Shape& s) {
  return absl::StrCat("B=", s.B, " T=", s.T, " NH=", s.NH, " NKV=", s.NKV, " HS=", s.HS);
}

struct Buffers {
  DeviceBuffer<bf16> q, k, v, dout, out, dq, dk, dv;
  DeviceBuffer<float> lse;
  DeviceBuffer<uint8_t> scratch;
  Buffers(const Shape& s, const std::vector<bf16>& qh, const std::vector<bf16>& kh,
          const std::vector<bf16>& vh, const std::vector<bf16>& gh)
      : q(qh), k(kh), v(vh), dout(gh), out(s.q()), dq(s.q()), dk(s.kv()), dv(s.kv()),
        lse(s.rows()),
        scratch(static_cast<size_t>(
            cuda::FlashAttentionBackwardScratchBytes(s.B, s.T, s.NH, s.NKV, s.HS))) {}
  void Run(const Shape& s, cudaStream_t st, bool causal = true) {
    cuda::FlashAttentionForward(q.get(), k.get(), v.get(), out.get(), lse.get(), s.B, s.T, s.NH,
                                s.NKV, s.HS, st, causal);
    cuda::FlashAttentionBackward(dout.get(), q.get(), k.get(), v.get(), out.get(), lse.get(),
                                 dq.get(), dk.get(), dv.get(), scratch.get(), s.B, s.T, s.NH, s.NKV,
                                 s.HS, st, causal);
    GTP_CUDA_CHECK(cudaStreamSynchronize(st));
  }
};

// The shapes above, forward and backward, against the double references.
// Outputs start poisoned (NaN): every element must be written.
void CheckAgainstReference(bool causal, uint64_t seed) {
  Stream stream = TestStream();
  Rng rng(seed);
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(Describe(s));
    const std::vector<float> q = RoundToBF16(rng.Normal(s.q())), k = RoundToBF16(rng.Normal(s.kv())),
                             v = RoundToBF16(rng.Normal(s.kv())),
                             dout = RoundToBF16(rng.Normal(s.q()));
    Buffers d(s, ToBF16(q), ToBF16(k), ToBF16(v), ToBF16(dout));
    for (auto* b : {&d.out, &d.dq, &d.dk, &d.dv}) b->Poison();
    d.lse.Poison();
    d.Run(s, stream.get(), causal);

    const std::vector<double> qd = ToDouble(q), kd = ToDouble(k), vd = ToDouble(v),
                              gd = ToDouble(dout);
    const std::vector<double> out =
        RefAttention(qd, kd, vd, s.B, s.T, s.NH, s.NKV, s.HS, nullptr, causal);
    const std::vector<double> lse = RefAttentionLse(qd, kd, s.B, s.T, s.NH, s.NKV, s.HS, causal);
    std::vector<double> dq, dk, dv;
    RefAttentionBackward(qd, kd, vd, gd, s.B, s.T, s.NH, s.NKV, s.HS, &dq, &dk, &dv, causal);

    const std::vector<float> g_out = ToFloat(d.out.Download()), g_lse = d.lse.Download(),
                             g_dq = ToFloat(d.dq.Download()), g_dk = ToFloat(d.dk.Download()),
                             g_dv = ToFloat(d.dv.Download());
    std::printf("%s %-34s rel err out %.2e lse %.2e dq %.2e dk %.2e dv %.2e\n",
                causal ? "causal" : "bidir ", Describe(s).c_str(),
                RelativeError(g_out.data(), out.data(), out.size()),
                RelativeError(g_lse.data(), lse.data(), lse.size()),
                RelativeError(g_dq.data(), dq.data(), dq.size()),
                RelativeError(g_dk.data(), dk.data(), dk.size()),
                RelativeError(g_dv.data(), dv.data(), dv.size()));
    EXPECT_TRUE(RelClose(g_out, out, 1e-2)) << "out";
    EXPECT_TRUE(RelClose(g_lse, lse, 1e-3)) << "lse";
    EXPECT_TRUE(RelClose(g_dq, dq, 1e-2)) << "dq";
    EXPECT_TRUE(RelClose(g_dk, dk, 1e-2)) << "dk";
    EXPECT_TRUE(RelClose(g_dv, dv, 1e-2)) << "dv";
  }
}

TEST(FlashAttentionGpu, MatchesDoubleReference) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << NoGpuReason();
  CheckAgainstReference(/*causal=*/true, 71);
}

TEST(FlashAttentionGpu, BidirectionalMatchesDoubleReference) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << NoGpuReason();
  CheckAgainstReference(/*causal=*/false, 73);
}

TEST(FlashAttentionGpu, IsDeterministic) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << NoGpuReason();
  Stream stream = TestStream();
  Rng rng(72);
  // {4, 1024, 12, 12, 64}: many rounds of dk/dv and dq blocks in the HS 64
  // merged launch.
  for (const bool causal : {true, false}) {
    for (const Shape& s :
         {Shape{2, 300, 8, 2, 64}, Shape{1, 260, 4, 1, 128}, Shape{4, 1024, 12, 12, 64}}) {
      SCOPED_TRACE(Describe(s) + (causal ? " causal" : " bidirectional"));
      Buffers d(s, ToBF16(rng.Normal(s.q())), ToBF16(rng.Normal(s.kv())),
                ToBF16(rng.Normal(s.kv())), ToBF16(rng.Normal(s.q())));
      d.Run(s, stream.get(), causal);
      const std::vector<bf16> out = d.out.Download(), dq = d.dq.Download(), dk = d.dk.Download(),
                              dv = d.dv.Download();
      const std::vector<float> lse = d.lse.Download();
      for (auto* b : {&d.out, &d.dq, &d.dk, &d.dv}) b->Poison();
      d.lse.Poison();
      d.Run(s, stream.get(), causal);
      EXPECT_TRUE(BitEqual(d.out.Download(), out)) << "out";
      EXPECT_TRUE(BitEqual(d.lse.Download(), lse)) << "lse";
      EXPECT_TRUE(BitEqual(d.dq.Download(), dq)) << "dq";
      EXPECT_TRUE(BitEqual(d.dk.Download(), dk)) << "dk";
      EXPECT_TRUE(BitEqual(d.dv.Download(), dv)) << "dv";
    }
  }
}

TEST(FlashAttentionGpuDeathTest, RejectsUnsupportedHeadSize) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << NoGpuReason();
  // The check fires before anything touches the device.
  EXPECT_DEATH(cuda::FlashAttentionForward(nullptr, nullptr, nullptr, nullptr, nullptr, 1, 8, 2,
                                           2, 96, nullptr),
               "head size 96 is not supported");
}

}  // namespace
}  // namespace testing
}  // namespace gtp::kernels
