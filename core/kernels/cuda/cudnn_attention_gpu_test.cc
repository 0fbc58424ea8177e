// GPU tests of cuda::CudnnAttention (bf16, causal and bidirectional, GQA) against the double
// references on bf16-rounded inputs, plus run-to-run determinism, CUDA-graph
// capture and the argument checks; q, k, v, dq, dk, dv as token-strided views
// of packed QKV matrices (AttentionShape::row_stride, and through
// ops::FlashAttention* with the cuDNN engine and with the flash kernels)
// against the dense layout.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/allocator.h"
#include "core/cuda_runtime.h"
#include "core/kernels/cuda/cudnn_attention.h"
#include "core/kernels/cudnn_engine.h"
#include "core/kernels/ops.h"
#include "core/kernels/testing/gpu.h"
#include "core/kernels/testing/harness.h"
#include "core/kernels/testing/reference.h"
#include "core/status.h"
#include "core/tensor.h"
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

// ---- Token-strided q, k, v (packed QKV matrices) ------------------------------------

// Columns [col, col + width) of each of `rows` rows of a row-major [rows, R]
// matrix, densely.
template <typename T>
std::vector<T> Columns(const std::vector<T>& m, int64_t rows, int64_t R, int64_t col,
                       int64_t width) {
  std::vector<T> d(rows * width);
  if (d.empty()) return d;  // no columns (memcpy's pointers must not be null)
  for (int64_t n = 0; n < rows; ++n) {
    std::memcpy(d.data() + n * width, m.data() + n * R + col, width * sizeof(T));
  }
  return d;
}

// A packed [B·T, R] matrix, R = (NH + 2·NKV + extra)·HS: row n is token n's
// [q heads | k heads | v heads | extra], the layout one QKV GEMM writes.
struct Packing {
  int64_t rows, R, k_col, v_col, extra_col, extra_width;
  Packing(const AttentionShape& s, int64_t extra_heads)
      : rows(s.B * s.T),
        R((s.NH + 2 * s.NKV + extra_heads) * s.HS),
        k_col(s.NH * s.HS),
        v_col((s.NH + s.NKV) * s.HS),
        extra_col((s.NH + 2 * s.NKV) * s.HS),
        extra_width(extra_heads * s.HS) {}
};

// got (packed layout) against want (dense layout, same values). Bit-identical
// when cuDNN runs the same engine config on both, but the heuristics may give
// a strided layout another config (tiling, and so summation order, and the
// bf16 rounding of GQA's per-head dK/dV before their sum), so the check is a
// norm-wise tolerance of a few bf16 ulps (2⁻⁸ ≈ 3.9e-3 is one ulp at worst);
// a layout bug (a wrong stride reads other columns) is an O(1) error. Prints
// which it was.
template <typename T>
::testing::AssertionResult CloseToDense(const char* what, const std::vector<T>& got,
                                        const std::vector<T>& want, double tol) {
  const bool bits = BitEqual(got, want);
  std::vector<float> g;
  if constexpr (std::is_same_v<T, bf16>) {
    g = ToFloat(got);
  } else {
    g = got;
  }
  const std::vector<double> w = ToDouble(want);
  const double err = g.size() == w.size() ? RelativeError(g.data(), w.data(), w.size()) : 1e9;
  std::printf("  %-4s %s, rel err vs dense %.2e\n", what, bits ? "bit-identical" : "differs", err);
  if (bits || err <= tol) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": rel err vs dense " << err << " > " << tol;
}

constexpr double kOutTol = 4e-3, kLseTol = 1e-5, kGradTol = 1e-2;

// cuDNN on packed q, k, v, dq, dk, dv (row_stride = R) against cuDNN on
// dense copies of the same values: out, lse (forward), dq, dk, dv (backward,
// from the dense out and lse, so that only its own layout differs). The
// packed gradient matrix starts poisoned; its extra block must stay so.
TEST(CudnnAttentionGpu, PackedRowStrideMatchesDense) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << NoGpuReason();
  Stream stream = TestStream();
  auto attn = MakeAttention();
  Rng rng(95);
  struct Case {
    AttentionShape s;
    int64_t extra_heads;
  };
  // The GPT-2 124M head (NH = NKV = 12, HS = 64) and GQA at HS = 128.
  const Case cases[] = {{{2, 128, 12, 12, 64}, 0},       {{2, 128, 12, 12, 64, false}, 0},
                        {{1, 1024, 12, 12, 64}, 0},      {{2, 128, 8, 2, 128}, 1},
                        {{2, 128, 8, 2, 128, false}, 1}, {{1, 1024, 8, 2, 128}, 1}};
  for (const Case& c : cases) {
    const AttentionShape& s = c.s;
    const Packing pk(s, c.extra_heads);
    AttentionShape ps = s;
    ps.row_stride = pk.R;
    SCOPED_TRACE(absl::StrCat(Describe(s), " row stride ", pk.R));
    const std::vector<bf16> qkv = ToBF16(rng.Normal(pk.rows * pk.R)),
                            dout = ToBF16(rng.Normal(Nq(s)));
    Buffers d(s, Columns(qkv, pk.rows, pk.R, 0, pk.k_col),
              Columns(qkv, pk.rows, pk.R, pk.k_col, s.NKV * s.HS),
              Columns(qkv, pk.rows, pk.R, pk.v_col, s.NKV * s.HS), dout, Workspace(*attn, s));
    GTP_CHECK_OK(d.Run(*attn, s, stream.get()));

    const int64_t ws = Workspace(*attn, ps);
    DeviceBuffer<uint8_t> workspace(static_cast<size_t>(std::max<int64_t>(ws, 1)));
    DeviceBuffer<bf16> m(qkv), g(pk.rows * pk.R), out(Nq(s));
    DeviceBuffer<float> lse(s.B * s.NH * s.T);
    std::printf("%s row stride %lld: engines fwd %lld / %lld, bwd %lld / %lld (dense / packed)\n",
                Describe(s).c_str(), static_cast<long long>(pk.R),
                static_cast<long long>(attn->ForwardEngine(s)),
                static_cast<long long>(attn->ForwardEngine(ps)),
                static_cast<long long>(attn->BackwardEngine(s)),
                static_cast<long long>(attn->BackwardEngine(ps)));
    GTP_CHECK_OK(attn->Forward(m.get(), m.get() + pk.k_col, m.get() + pk.v_col, out.get(),
                               lse.get(), ps, workspace.get(), ws, stream.get()));
    GTP_CHECK_OK(attn->Backward(d.dout.get(), m.get(), m.get() + pk.k_col, m.get() + pk.v_col,
                                d.out.get(), d.lse.get(), g.get(), g.get() + pk.k_col,
                                g.get() + pk.v_col, ps, workspace.get(), ws, stream.get()));
    GTP_CUDA_CHECK(cudaStreamSynchronize(stream.get()));

    EXPECT_TRUE(CloseToDense("out", out.Download(), d.out.Download(), kOutTol));
    EXPECT_TRUE(CloseToDense("lse", lse.Download(), d.lse.Download(), kLseTol));
    const std::vector<bf16> gh = g.Download();
    EXPECT_TRUE(
        CloseToDense("dq", Columns(gh, pk.rows, pk.R, 0, pk.k_col), d.dq.Download(), kGradTol));
    EXPECT_TRUE(CloseToDense("dk", Columns(gh, pk.rows, pk.R, pk.k_col, s.NKV * s.HS),
                             d.dk.Download(), kGradTol));
    EXPECT_TRUE(CloseToDense("dv", Columns(gh, pk.rows, pk.R, pk.v_col, s.NKV * s.HS),
                             d.dv.Download(), kGradTol));
    const std::vector<bf16> extra = Columns(gh, pk.rows, pk.R, pk.extra_col, pk.extra_width);
    EXPECT_TRUE(std::all_of(extra.begin(), extra.end(), [](bf16 x) { return x.bits == 0xffff; }))
        << "the extra column block was written";
    EXPECT_TRUE(BitEqual(m.Download(), qkv)) << "the packed inputs changed";
  }
}

TEST(CudnnAttentionGpu, RejectsBadRowStrides) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << NoGpuReason();
  auto attn = MakeAttention();
  AttentionShape s{1, 8, 4, 2, 64};
  for (const int64_t rs : {int64_t{4 * 64 - 8}, int64_t{8 * 64 + 4}, int64_t{-512}}) {
    s.row_stride = rs;
    const absl::Status st = attn->ForwardWorkspaceBytes(s).status();
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << rs;
    EXPECT_NE(st.message().find("row stride"), std::string::npos) << st;
  }
}

// ---- The same through ops::FlashAttention* (what layers call) ----------------------

Tensor Upload(const Exec& e, std::vector<bf16> h, const Shape& s) {
  Tensor t = e.Empty(s, DType::kBF16);
  GTP_CHECK_OK(Copy(Tensor::Wrap(h.data(), s, DType::kBF16, Device::Cpu()), t, e.stream, true));
  return t;
}

template <typename T>
std::vector<T> Download(const Exec& e, const Tensor& t) {
  std::vector<T> h(t.numel());
  GTP_CHECK_OK(
      Copy(t, Tensor::Wrap(h.data(), t.shape(), t.dtype(), Device::Cpu()), e.stream, true));
  return h;
}

// Which of q, k, v, dq, dk, dv the strided call takes as views of the packed
// matrices (the others as separate contiguous tensors).
enum PackedMask : unsigned {
  kPq = 1,
  kPk = 2,
  kPv = 4,
  kPdq = 8,
  kPdk = 16,
  kPdv = 32,
  kPall = 63
};

// ops::FlashAttentionForward/Backward on views vs on contiguous copies of the
// same values, both on `e`. exact: the strided call must give the same bits
// (the dense temporaries' path); otherwise CloseToDense's tolerance (cuDNN's
// row_stride plan). Gradient columns outside the views keep the sentinel.
void CheckOpsPacked(const Exec& e, const AttentionShape& s, int64_t extra_heads, unsigned mask,
                    bool exact, Rng& rng) {
  SCOPED_TRACE(absl::StrCat(Describe(s), " extra heads ", extra_heads, " mask ", mask,
                            e.attention != nullptr ? " cudnn" : " flash kernels"));
  std::printf("%s extra heads %lld mask %u on %s\n", Describe(s).c_str(),
              static_cast<long long>(extra_heads), mask,
              e.attention != nullptr ? "cudnn" : "the flash kernels");
  const Packing pk(s, extra_heads);
  const Shape qs{s.B, s.T, s.NH, s.HS}, kvs{s.B, s.T, s.NKV, s.HS}, lses{s.B, s.NH, s.T};
  const std::vector<bf16> qkv = ToBF16(rng.Normal(pk.rows * pk.R)),
                          dout_h = ToBF16(rng.Normal(Nq(s)));
  const std::vector<bf16> qh = Columns(qkv, pk.rows, pk.R, 0, pk.k_col),
                          kh = Columns(qkv, pk.rows, pk.R, pk.k_col, s.NKV * s.HS),
                          vh = Columns(qkv, pk.rows, pk.R, pk.v_col, s.NKV * s.HS);
  const Tensor q = Upload(e, qh, qs), k = Upload(e, kh, kvs), v = Upload(e, vh, kvs),
               dout = Upload(e, dout_h, qs);

  const Tensor out_ref = e.Empty(qs, DType::kBF16), lse_ref = e.Empty(lses),
               dq_ref = e.Empty(qs, DType::kBF16), dk_ref = e.Empty(kvs, DType::kBF16),
               dv_ref = e.Empty(kvs, DType::kBF16);
  ops::FlashAttentionForward(e, q, k, v, out_ref, lse_ref, s.causal);
  ops::FlashAttentionBackward(e, dout, q, k, v, out_ref, lse_ref, dq_ref, dk_ref, dv_ref, s.causal);

  const bf16 sentinel = ToBF16({-96.5f})[0];
  const Tensor P = Upload(e, qkv, {pk.rows, pk.R}),
               G = Upload(e, std::vector<bf16>(pk.rows * pk.R, sentinel), {pk.rows, pk.R});
  auto heads = [&](const Tensor& m, int64_t col, int64_t n) {
    return m.Strided({s.B, s.T, n, s.HS}, {s.T * pk.R, pk.R, s.HS, 1}, col);
  };
  const Tensor qt = (mask & kPq) ? heads(P, 0, s.NH) : Upload(e, qh, qs),
               kt = (mask & kPk) ? heads(P, pk.k_col, s.NKV) : Upload(e, kh, kvs),
               vt = (mask & kPv) ? heads(P, pk.v_col, s.NKV) : Upload(e, vh, kvs),
               dqt = (mask & kPdq) ? heads(G, 0, s.NH) : e.Empty(qs, DType::kBF16),
               dkt = (mask & kPdk) ? heads(G, pk.k_col, s.NKV) : e.Empty(kvs, DType::kBF16),
               dvt = (mask & kPdv) ? heads(G, pk.v_col, s.NKV) : e.Empty(kvs, DType::kBF16);
  const Tensor out = e.Empty(qs, DType::kBF16), lse = e.Empty(lses);
  ops::FlashAttentionForward(e, qt, kt, vt, out, lse, s.causal);
  ops::FlashAttentionBackward(e, dout, qt, kt, vt, out, lse, dqt, dkt, dvt, s.causal);

  const std::vector<bf16> gh = Download<bf16>(e, G);
  auto grad = [&](unsigned bit, const Tensor& t, int64_t col, int64_t width) {
    return (mask & bit) ? Columns(gh, pk.rows, pk.R, col, width) : Download<bf16>(e, t);
  };
  const std::vector<bf16> got_out = Download<bf16>(e, out), want_out = Download<bf16>(e, out_ref),
                          got_dq = grad(kPdq, dqt, 0, pk.k_col),
                          got_dk = grad(kPdk, dkt, pk.k_col, s.NKV * s.HS),
                          got_dv = grad(kPdv, dvt, pk.v_col, s.NKV * s.HS),
                          want_dq = Download<bf16>(e, dq_ref), want_dk = Download<bf16>(e, dk_ref),
                          want_dv = Download<bf16>(e, dv_ref);
  const std::vector<float> got_lse = Download<float>(e, lse),
                           want_lse = Download<float>(e, lse_ref);
  if (exact) {
    EXPECT_TRUE(BitEqual(got_out, want_out)) << "out";
    EXPECT_TRUE(BitEqual(got_lse, want_lse)) << "lse";
    EXPECT_TRUE(BitEqual(got_dq, want_dq)) << "dq";
    EXPECT_TRUE(BitEqual(got_dk, want_dk)) << "dk";
    EXPECT_TRUE(BitEqual(got_dv, want_dv)) << "dv";
  } else {
    // The engine took the packed layout itself (a declined shape would have
    // gone through dense temporaries, bit-identical, and proven nothing).
    const AttentionEngine::Shape es{s.B, s.T, s.NH, s.NKV, s.HS, s.causal, pk.R};
    EXPECT_GE(e.attention->ForwardWorkspace(es), 0);
    EXPECT_GE(e.attention->BackwardWorkspace(es), 0);
    EXPECT_TRUE(CloseToDense("out", got_out, want_out, kOutTol));
    EXPECT_TRUE(CloseToDense("lse", got_lse, want_lse, kLseTol));
    EXPECT_TRUE(CloseToDense("dq", got_dq, want_dq, kGradTol));
    EXPECT_TRUE(CloseToDense("dk", got_dk, want_dk, kGradTol));
    EXPECT_TRUE(CloseToDense("dv", got_dv, want_dv, kGradTol));
  }
  auto untouched = [&](int64_t col, int64_t width) {
    const std::vector<bf16> c = Columns(gh, pk.rows, pk.R, col, width);
    return std::all_of(c.begin(), c.end(), [&](bf16 x) { return x.bits == sentinel.bits; });
  };
  EXPECT_TRUE(untouched(pk.extra_col, pk.extra_width)) << "extra columns";
  EXPECT_TRUE((mask & kPdq) || untouched(0, pk.k_col)) << "dq columns";
  EXPECT_TRUE((mask & kPdk) || untouched(pk.k_col, s.NKV * s.HS)) << "dk columns";
  EXPECT_TRUE((mask & kPdv) || untouched(pk.v_col, s.NKV * s.HS)) << "dv columns";
  EXPECT_TRUE(BitEqual(Download<bf16>(e, P), qkv)) << "the packed inputs changed";
}

// With the cuDNN engine: all six packed → its row_stride plan (tolerance);
// mixed layouts → dense temporaries and its dense plan (exact). Without an
// engine (the flash kernels): dense temporaries, exact either way.
TEST(FlashAttentionOpsGpu, PackedViewsMatchTheDenseCall) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << NoGpuReason();
  CudaCachingAllocator dev(0);
  Stream stream = TestStream();
  absl::StatusOr<std::unique_ptr<CudnnEngine>> engine = CudnnEngine::Create(0);
  ASSERT_TRUE(engine.ok()) << engine.status();
  Exec flash{Device::Cuda(0), &dev, stream.get(), nullptr};
  Exec cudnn = flash;
  cudnn.attention = engine->get();
  Rng rng(96);
  const AttentionShape mha{2, 128, 12, 12, 64}, gqa{2, 128, 8, 2, 128},
      gqa_bidir{2, 128, 8, 2, 128, false};
  for (const Exec* e : {&cudnn, &flash}) {
    const bool exact = e->attention == nullptr;
    CheckOpsPacked(*e, mha, 0, kPall, exact, rng);
    CheckOpsPacked(*e, gqa, 1, kPall, exact, rng);
    CheckOpsPacked(*e, gqa_bidir, 1, kPall, exact, rng);
    CheckOpsPacked(*e, mha, 1, kPk | kPv | kPdq, /*exact=*/true, rng);
    CheckOpsPacked(*e, gqa, 0, kPq | kPdk | kPdv, /*exact=*/true, rng);
  }
}

}  // namespace
}  // namespace testing
}  // namespace gtp::kernels
