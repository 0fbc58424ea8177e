// GPU tests of cuda::AttentionForward/Backward (causal, GQA) against the CPU
// versions, bidirectional (causal = false) against the double reference, plus
// run-to-run determinism.
#include <cuda_runtime_api.h>

#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "core/cuda_runtime.h"
#include "core/kernels/cpu.h"
#include "core/kernels/cuda.h"
#include "core/kernels/testing/gpu.h"
#include "core/kernels/testing/harness.h"
#include "core/kernels/testing/reference.h"
#include "core/status.h"
#include "gtest/gtest.h"

namespace gtp::kernels::testing {
namespace {

struct Shape {
  int64_t B, T, NH, NKV, HS;
};
// MHA, GQA (2 and 4 query heads per kv head), MQA; odd T and HS; T beyond a warp.
const Shape kShapes[] = {{1, 1, 1, 1, 1},   {2, 3, 4, 2, 5},   {1, 33, 3, 1, 16},
                         {2, 64, 4, 4, 64}, {1, 257, 2, 1, 8}, {2, 40, 8, 2, 128}};

// The naive kernels and the GEMM-based ones share one contract.
void Forward(bool gemm, cuda::BlasContext& ctx, const float* q, const float* k, const float* v,
             float* out, float* att, const Shape& s, cudaStream_t st, bool causal = true) {
  if (gemm) {
    cuda::AttentionForwardGemm(ctx, q, k, v, out, att, s.B, s.T, s.NH, s.NKV, s.HS, st, causal);
  } else {
    cuda::AttentionForward(q, k, v, out, att, s.B, s.T, s.NH, s.NKV, s.HS, st, causal);
  }
}
void Backward(bool gemm, cuda::BlasContext& ctx, const float* dout, const float* q, const float* k,
              const float* v, const float* att, float* dq, float* dk, float* dv, float* scratch,
              const Shape& s, cudaStream_t st, bool causal = true) {
  if (gemm) {
    cuda::AttentionBackwardGemm(ctx, dout, q, k, v, att, dq, dk, dv, scratch, s.B, s.T, s.NH, s.NKV,
                                s.HS, st, causal);
  } else {
    cuda::AttentionBackward(dout, q, k, v, att, dq, dk, dv, scratch, s.B, s.T, s.NH, s.NKV, s.HS,
                            st, causal);
  }
}

class AttentionGpu : public ::testing::TestWithParam<bool> {};

std::string Describe(const Shape& s) {
  return absl::StrCat("B=", s.B, " T=", s.T, " NH=", s.NH, " NKV=", s.NKV, " HS=", s.HS);
}

TEST_P(AttentionGpu, ForwardAndBackwardMatchCpu) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << NoGpuReason();
  Stream stream = TestStream();
  cuda::BlasContext ctx(0);
  Rng rng(51);
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(Describe(s));
    const int64_t nq = s.B * s.T * s.NH * s.HS, nkv = s.B * s.T * s.NKV * s.HS;
    const int64_t natt = s.B * s.NH * s.T * s.T;
    const std::vector<float> q = rng.Normal(nq), k = rng.Normal(nkv), v = rng.Normal(nkv);
    const std::vector<float> dout = rng.Normal(nq);
    std::vector<float> out(nq), att(natt), dq(nq), dk(nkv), dv(nkv), scratch(natt);
    cpu::AttentionForward(q.data(), k.data(), v.data(), out.data(), att.data(), s.B, s.T, s.NH,
                          s.NKV, s.HS);
    cpu::AttentionBackward(dout.data(), q.data(), k.data(), v.data(), att.data(), dq.data(),
                           dk.data(), dv.data(), scratch.data(), s.B, s.T, s.NH, s.NKV, s.HS);

    DeviceBuffer<float> d_q(q), d_k(k), d_v(v), d_out(nq), d_att(natt), d_dout(dout),
        d_att_cpu(att), d_dq(nq), d_dk(nkv), d_dv(nkv), d_scratch(natt);
    Forward(GetParam(), ctx, d_q.get(), d_k.get(), d_v.get(), d_out.get(), d_att.get(), s,
            stream.get());
    // The backward gets the CPU's probabilities, so it is tested on its own.
    Backward(GetParam(), ctx, d_dout.get(), d_q.get(), d_k.get(), d_v.get(), d_att_cpu.get(),
             d_dq.get(), d_dk.get(), d_dv.get(), d_scratch.get(), s, stream.get());
    EXPECT_TRUE(RelClose(d_out.Download(), ToDouble(out), 1e-5));
    EXPECT_TRUE(RelClose(d_att.Download(), ToDouble(att), 1e-5));
    EXPECT_TRUE(RelClose(d_dq.Download(), ToDouble(dq), 1e-5));
    EXPECT_TRUE(RelClose(d_dk.Download(), ToDouble(dk), 1e-5));
    EXPECT_TRUE(RelClose(d_dv.Download(), ToDouble(dv), 1e-5));
  }
}

TEST_P(AttentionGpu, IsDeterministic) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << NoGpuReason();
  Stream stream = TestStream();
  cuda::BlasContext ctx(0);
  Rng rng(52);
  const Shape s{2, 128, 8, 2, 64};
  const int64_t nq = s.B * s.T * s.NH * s.HS, nkv = s.B * s.T * s.NKV * s.HS;
  const int64_t natt = s.B * s.NH * s.T * s.T;
  DeviceBuffer<float> q(rng.Normal(nq)), k(rng.Normal(nkv)), v(rng.Normal(nkv)), out(nq), att(natt),
      dout(rng.Normal(nq)), dq(nq), dk(nkv), dv(nkv), scratch(natt);
  std::vector<float> first[4];
  for (int i = 0; i < 3; ++i) {
    Forward(GetParam(), ctx, q.get(), k.get(), v.get(), out.get(), att.get(), s, stream.get());
    Backward(GetParam(), ctx, dout.get(), q.get(), k.get(), v.get(), att.get(), dq.get(), dk.get(),
             dv.get(), scratch.get(), s, stream.get());
    std::vector<float> now[4] = {out.Download(), dq.Download(), dk.Download(), dv.Download()};
    for (int j = 0; j < 4; ++j) {
      if (i == 0) {
        first[j] = now[j];
      } else {
        EXPECT_TRUE(BitEqual(now[j], first[j])) << "output " << j;
      }
    }
  }
}

// Bidirectional: the GPU forward (probabilities included) and its backward,
// fed the GPU's own probabilities, against the double reference. Outputs are
// NaN-poisoned first: every element must be written.
TEST_P(AttentionGpu, BidirectionalMatchesDoubleReference) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << NoGpuReason();
  Stream stream = TestStream();
  cuda::BlasContext ctx(0);
  Rng rng(53);
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(Describe(s));
    const int64_t nq = s.B * s.T * s.NH * s.HS, nkv = s.B * s.T * s.NKV * s.HS;
    const int64_t natt = s.B * s.NH * s.T * s.T;
    const std::vector<float> q = rng.Normal(nq), k = rng.Normal(nkv), v = rng.Normal(nkv);
    const std::vector<float> dout = rng.Normal(nq);
    DeviceBuffer<float> d_q(q), d_k(k), d_v(v), d_out(NaNs(nq)), d_att(NaNs(natt)), d_dout(dout),
        d_dq(NaNs(nq)), d_dk(NaNs(nkv)), d_dv(NaNs(nkv)), d_scratch(natt);
    Forward(GetParam(), ctx, d_q.get(), d_k.get(), d_v.get(), d_out.get(), d_att.get(), s,
            stream.get(), /*causal=*/false);
    Backward(GetParam(), ctx, d_dout.get(), d_q.get(), d_k.get(), d_v.get(), d_att.get(),
             d_dq.get(), d_dk.get(), d_dv.get(), d_scratch.get(), s, stream.get(),
             /*causal=*/false);
    const std::vector<double> qd = ToDouble(q), kd = ToDouble(k), vd = ToDouble(v);
    std::vector<double> att, dq, dk, dv;
    const std::vector<double> out =
        RefAttention(qd, kd, vd, s.B, s.T, s.NH, s.NKV, s.HS, &att, /*causal=*/false);
    RefAttentionBackward(qd, kd, vd, ToDouble(dout), s.B, s.T, s.NH, s.NKV, s.HS, &dq, &dk, &dv,
                         /*causal=*/false);
    EXPECT_TRUE(RelClose(d_out.Download(), out, 1e-5)) << "out";
    EXPECT_TRUE(RelClose(d_att.Download(), att, 1e-5)) << "att";
    EXPECT_TRUE(RelClose(d_dq.Download(), dq, 1e-4)) << "dq";
    EXPECT_TRUE(RelClose(d_dk.Download(), dk, 1e-4)) << "dk";
    EXPECT_TRUE(RelClose(d_dv.Download(), dv, 1e-4)) << "dv";
  }
}

INSTANTIATE_TEST_SUITE_P(Impl, AttentionGpu, ::testing::Bool(),
                         [](const auto& i) { return i.param ? "gemm" : "naive"; });

}  // namespace
}  // namespace gtp::kernels::testing
