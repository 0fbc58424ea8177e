// GPU tests of cuda::CudnnAttention (bf16, causal and bidirectional, GQA) against the double
// references on bf16-rounded inputs, plus run-to-run determinism, CUDA-graph
// capture and the argument checks.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/cuda_runtime.h"
#include "core/kernels/cuda/cudnn_attention.h"
#include "core/kernels/testing/gpu.h"
#include "core/kernels/testing/harness.h"
#include "core/kernels/testing/reference.h"
#include "core/status.h"
#include "gtest/gtest.h"

namespace gtp::kernels {
namespace testing {
namespace {

using cuda::AttentionShape;

size_t Nq(const AttentionShape& s) { return s.B * s.T * s.NH * s.HS; }
size_t Nkv(const AttentionShape& s) { return s.B * s.T * s.NKV * s.HS; }

std::string Describe(const AttentionShape& s) {
  return absl::StrCat("B=", s.B, " T=", s.T, " NH=", s.NH, " NKV=", s.NKV, " HS=", s.HS,
                      s.causal ? "" : " bidirectional");
}

std::unique_ptr<cuda::CudnnAttention> MakeAttention() {
  absl::StatusOr<std::unique_ptr<cuda::CudnnAttention>> a = cuda::CudnnAttention::Create(0);
  GTP_CHECK_OK(a.status());
  return std::move(*a);
}

// Builds both plans (before any capture) and returns the larger workspace.
int64_t Workspace(cuda::CudnnAttention& a, const AttentionShape& s) {
  absl::StatusOr<int64_t> f = a.ForwardWorkspaceBytes(s);
  GTP_CHECK_OK(f.status());
  absl::StatusOr<int64_t> b = a.BackwardWorkspaceBytes(s);
  GTP_CHECK_OK(b.status());
  return std::max(*f, *b);
}

struct Buffers {
  DeviceBuffer<bf16> q, k, v, dout, out, dq, dk, dv;
  DeviceBuffer<float> lse;
  DeviceBuffer<uint8_t> workspace;
  int64_t ws_bytes;
  Buffers(const AttentionShape& s, const std::vector<bf16>& qh, const std::vector<bf16>& kh,
          const std::vector<bf16>& vh, const std::vector<bf16>& gh, int64_t ws)
      : q(qh),
        k(kh),
        v(vh),
        dout(gh),
        out(Nq(s)),
        dq(Nq(s)),
        dk(Nkv(s)),
        dv(Nkv(s)),
        lse(s.B * s.NH * s.T),
        workspace(static_cast<size_t>(std::max<int64_t>(ws, 1))),
        ws_bytes(ws) {}
  void Poison() {
    for (auto* b : {&out, &dq, &dk, &dv}) b->Poison();
    lse.Poison();
  }
  absl::Status Run(cuda::CudnnAttention& a, const AttentionShape& s, cudaStream_t st) {
    GTP_RETURN_IF_ERROR(a.Forward(q.get(), k.get(), v.get(), out.get(), lse.get(), s,
                                  workspace.get(), ws_bytes, st));
    return a.Backward(dout.get(), q.get(), k.get(), v.get(), out.get(), lse.get(), dq.get(),
                      dk.get(), dv.get(), s, workspace.get(), ws_bytes, st);
  }
};

TEST(CudnnAttentionGpu, MatchesDoubleReference) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << NoGpuReason();
  Stream stream = TestStream();
  auto attn = MakeAttention();
  std::printf("cuDNN version %lld\n", static_cast<long long>(cuda::CudnnVersion()));
  Rng rng(91);
  // The FlashAttention test's shapes: T = 1, T around a 64-row tile, T = 1000;
  // MHA, GQA, MQA; HS 64 and 128.
  const AttentionShape shapes[] = {{1, 1, 1, 1, 64},    {2, 17, 3, 3, 64},   {2, 64, 4, 4, 64},
                                   {1, 129, 8, 2, 64},  {1, 1000, 2, 1, 64}, {1, 1, 2, 1, 128},
                                   {2, 129, 4, 2, 128}, {1, 200, 8, 2, 128}, {1, 1000, 2, 2, 128}};
  for (const AttentionShape& s : shapes) {
    SCOPED_TRACE(Describe(s));
    const std::vector<float> q = RoundToBF16(rng.Normal(Nq(s))),
                             k = RoundToBF16(rng.Normal(Nkv(s))),
                             v = RoundToBF16(rng.Normal(Nkv(s))),
                             dout = RoundToBF16(rng.Normal(Nq(s)));
    Buffers d(s, ToBF16(q), ToBF16(k), ToBF16(v), ToBF16(dout), Workspace(*attn, s));
    GTP_CHECK_OK(d.Run(*attn, s, stream.get()));
    GTP_CUDA_CHECK(cudaStreamSynchronize(stream.get()));

    const std::vector<double> qd = ToDouble(q), kd = ToDouble(k), vd = ToDouble(v),
                              gd = ToDouble(dout);
    const std::vector<double> out = RefAttention(qd, kd, vd, s.B, s.T, s.NH, s.NKV, s.HS);
    const std::vector<double> lse = RefAttentionLse(qd, kd, s.B, s.T, s.NH, s.NKV, s.HS);
    std::vector<double> dq, dk, dv;
    RefAttentionBackward(qd, kd, vd, gd, s.B, s.T, s.NH, s.NKV, s.HS, &dq, &dk, &dv);

    const std::vector<float> g_out = ToFloat(d.out.Download()), g_lse = d.lse.Download(),
                             g_dq = ToFloat(d.dq.Download()), g_dk = ToFloat(d.dk.Download()),
                             g_dv = ToFloat(d.dv.Download());
    std::printf("%-34s rel err out %.2e lse %.2e dq %.2e dk %.2e dv %.2e\n", Describe(s).c_str(),
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

// Causal and bidirectional plans for the same sizes on one object: each call
// must get its own plan (the cache key includes the mask), checked by
// alternating them and comparing each against its own reference.
TEST(CudnnAttentionGpu, BidirectionalMatchesDoubleReference) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << NoGpuReason();
  Stream stream = TestStream();
  auto attn = MakeAttention();
  Rng rng(94);
  const AttentionShape sizes[] = {{1, 1, 1, 1, 64},   {2, 17, 3, 3, 64},   {2, 64, 4, 4, 64},
                                  {1, 129, 8, 2, 64}, {1, 1000, 2, 1, 64}, {2, 129, 4, 2, 128},
                                  {1, 200, 8, 2, 128}};
  for (AttentionShape s : sizes) {
    for (const bool causal : {true, false, true}) {
      s.causal = causal;
      SCOPED_TRACE(Describe(s));
      const std::vector<float> q = RoundToBF16(rng.Normal(Nq(s))),
                               k = RoundToBF16(rng.Normal(Nkv(s))),
                               v = RoundToBF16(rng.Normal(Nkv(s))),
                               dout = RoundToBF16(rng.Normal(Nq(s)));
      Buffers d(s, ToBF16(q), ToBF16(k), ToBF16(v), ToBF16(dout), Workspace(*attn, s));
      d.Poison();
      GTP_CHECK_OK(d.Run(*attn, s, stream.get()));
      GTP_CUDA_CHECK(cudaStreamSynchronize(stream.get()));
      const std::vector<double> qd = ToDouble(q), kd = ToDouble(k), vd = ToDouble(v);
      const std::vector<double> out =
          RefAttention(qd, kd, vd, s.B, s.T, s.NH, s.NKV, s.HS, nullptr, causal);
      const std::vector<double> lse = RefAttentionLse(qd, kd, s.B, s.T, s.NH, s.NKV, s.HS, causal);
      std::vector<double> dq, dk, dv;
      RefAttentionBackward(qd, kd, vd, ToDouble(dout), s.B, s.T, s.NH, s.NKV, s.HS, &dq, &dk, &dv,
                           causal);
      EXPECT_TRUE(RelClose(ToFloat(d.out.Download()), out, 1e-2)) << "out";
      EXPECT_TRUE(RelClose(d.lse.Download(), lse, 1e-3)) << "lse";
      EXPECT_TRUE(RelClose(ToFloat(d.dq.Download()), dq, 1e-2)) << "dq";
      EXPECT_TRUE(RelClose(ToFloat(d.dk.Download()), dk, 1e-2)) << "dk";
      EXPECT_TRUE(RelClose(ToFloat(d.dv.Download()), dv, 1e-2)) << "dv";
    }
  }
}

TEST(CudnnAttentionGpu, IsDeterministic) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << NoGpuReason();
  Stream stream = TestStream();
  auto attn = MakeAttention();
  Rng rng(92);
  for (const AttentionShape& s :
       {AttentionShape{2, 300, 8, 2, 64}, AttentionShape{1, 260, 4, 1, 128},
        AttentionShape{8, 1024, 12, 12, 64}}) {
    SCOPED_TRACE(Describe(s));
    Buffers d(s, ToBF16(rng.Normal(Nq(s))), ToBF16(rng.Normal(Nkv(s))), ToBF16(rng.Normal(Nkv(s))),
              ToBF16(rng.Normal(Nq(s))), Workspace(*attn, s));
    GTP_CHECK_OK(d.Run(*attn, s, stream.get()));
    const std::vector<bf16> out = d.out.Download(), dq = d.dq.Download(), dk = d.dk.Download(),
                            dv = d.dv.Download();
    const std::vector<float> lse = d.lse.Download();
    d.Poison();
    GTP_CHECK_OK(d.Run(*attn, s, stream.get()));
    EXPECT_TRUE(BitEqual(d.out.Download(), out)) << "out";
    EXPECT_TRUE(BitEqual(d.lse.Download(), lse)) << "lse";
    EXPECT_TRUE(BitEqual(d.dq.Download(), dq)) << "dq";
    EXPECT_TRUE(BitEqual(d.dk.Download(), dk)) << "dk";
    EXPECT_TRUE(BitEqual(d.dv.Download(), dv)) << "dv";
  }
}

TEST(CudnnAttentionGpu, CapturesInCudaGraph) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << NoGpuReason();
  Stream stream = TestStream();
  auto attn = MakeAttention();
  Rng rng(93);
  const AttentionShape s{2, 256, 8, 4, 64};
  Buffers d(s, ToBF16(rng.Normal(Nq(s))), ToBF16(rng.Normal(Nkv(s))), ToBF16(rng.Normal(Nkv(s))),
            ToBF16(rng.Normal(Nq(s))), Workspace(*attn, s));
  GTP_CHECK_OK(d.Run(*attn, s, stream.get()));
  const std::vector<bf16> out = d.out.Download(), dq = d.dq.Download(), dk = d.dk.Download(),
                          dv = d.dv.Download();
  d.Poison();
  cudaGraph_t graph = nullptr;
  GTP_CUDA_CHECK(cudaStreamBeginCapture(stream.get(), cudaStreamCaptureModeGlobal));
  const absl::Status st = d.Run(*attn, s, stream.get());
  const cudaError_t end = cudaStreamEndCapture(stream.get(), &graph);
  ASSERT_TRUE(st.ok()) << st;
  ASSERT_EQ(end, cudaSuccess) << cudaGetErrorString(end);
  cudaGraphExec_t exec = nullptr;
  GTP_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  GTP_CUDA_CHECK(cudaGraphLaunch(exec, stream.get()));
  GTP_CUDA_CHECK(cudaStreamSynchronize(stream.get()));
  EXPECT_TRUE(BitEqual(d.out.Download(), out)) << "out";
  EXPECT_TRUE(BitEqual(d.dq.Download(), dq)) << "dq";
  EXPECT_TRUE(BitEqual(d.dk.Download(), dk)) << "dk";
  EXPECT_TRUE(BitEqual(d.dv.Download(), dv)) << "dv";
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

TEST(CudnnAttentionGpu, RejectsBadArguments) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << NoGpuReason();
  auto attn = MakeAttention();
  const absl::Status hs = attn->ForwardWorkspaceBytes({1, 8, 2, 2, 96}).status();
  EXPECT_EQ(hs.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(hs.message().find("head size 96"), std::string::npos) << hs;
  EXPECT_EQ(attn->BackwardWorkspaceBytes({1, 8, 6, 4, 64}).status().code(),
            absl::StatusCode::kInvalidArgument);
  // Too small a workspace is refused before anything is enqueued.
  const AttentionShape s{1, 128, 2, 2, 64};
  absl::StatusOr<int64_t> ws = attn->BackwardWorkspaceBytes(s);
  GTP_CHECK_OK(ws.status());
  ASSERT_GT(*ws, 0);
  DeviceBuffer<uint8_t> small(1);
  EXPECT_EQ(attn->Backward(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                           nullptr, s, small.get(), 1, nullptr)
                .code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace testing
}  // namespace gtp::kernels
