// GPU tests of cuda::GroupedGemm against a double-precision reference per
// group (RefGemm): every transpose, every supported type combination, beta 0
// (C poisoned with NaN: never read) and 1, groups of different sizes with
// m == 0, n == 0 and k == 0 ones, through both paths — cublasGemmGroupedBatchedEx
// (ab_type == c_type) and the loop over cuda::Gemm (bf16 A/B with f32 C, and
// same-type groups with the grouped call marked refused) — more groups than
// one pointer batch, CUDA-graph capture, and the grouped linear ops; and the
// loop's algorithm buckets (one heuristic query for a bucket of row counts,
// each shape's algorithm and bits independent of the order shapes come in).
#include <cuda_runtime_api.h>

#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/allocator.h"
#include "core/cuda_runtime.h"
#include "core/kernels/cuda.h"
#include "core/kernels/cuda/lt_common.h"
#include "core/kernels/ops.h"
#include "core/kernels/testing/gpu.h"
#include "core/kernels/testing/harness.h"
#include "core/kernels/testing/reference.h"
#include "core/status.h"
#include "core/tensor.h"
#include "gtest/gtest.h"

namespace gtp::kernels::testing {
namespace {

struct Size {
  int64_t m, n, k;
};

// Different sizes, odd ones, every kind of empty group, and some that span
// several tiles.
const Size kSizes[] = {{3, 5, 7}, {0, 4, 6},    {17, 9, 33},    {4, 0, 3},   {5, 6, 0},
                       {1, 1, 1}, {64, 48, 32}, {257, 129, 65}, {2, 257, 5}, {300, 200, 1000}};


// One grouped call's device buffers and the double reference of each C (its
// initial value where the group writes nothing: one sentinel element for an
// m or n == 0 group).
struct Problem {
  std::vector<Size> sizes;
  std::vector<std::unique_ptr<DeviceBuffer<uint8_t>>> a, b, c;
  std::vector<std::vector<double>> ref;
  std::vector<std::vector<uint8_t>> c0;  // initial C bytes (to rerun)
  std::vector<GemmGroup> groups;

  Problem(const GemmDesc& d, std::vector<Size> s, Rng& rng) : sizes(std::move(s)) {
    for (const Size& z : sizes) {
      const std::vector<float> av = RoundToBF16(rng.Uniform(z.m * z.k));
      const std::vector<float> bv = RoundToBF16(rng.Uniform(z.k * z.n));
      std::vector<float> cv = RoundToBF16(rng.Uniform(z.m * z.n));
      if (d.beta == 0.0f) cv = NaNs(cv.size());
      if (z.m == 0 || z.n == 0) cv = {7.0f};
      std::vector<double> r = ToDouble(cv);
      if (z.m > 0 && z.n > 0) {
        RefGemm(d.trans_a, d.trans_b, z.m, z.n, z.k, d.alpha, ToDouble(av), 0, ToDouble(bv), 0,
                d.beta, &r, 0);
      }
      a.push_back(std::make_unique<DeviceBuffer<uint8_t>>(StoreAs(av, d.ab_type)));
      b.push_back(std::make_unique<DeviceBuffer<uint8_t>>(StoreAs(bv, d.ab_type)));
      c0.push_back(StoreAs(cv, d.c_type));
      c.push_back(std::make_unique<DeviceBuffer<uint8_t>>(c0.back()));
      ref.push_back(std::move(r));
      GemmGroup p;
      p.m = z.m, p.n = z.n, p.k = z.k;
      p.a = z.k > 0 ? a.back()->get() : nullptr;  // k == 0: A and B must not be read
      p.b = z.k > 0 ? b.back()->get() : nullptr;
      p.c = c.back()->get();
      groups.push_back(p);
    }
  }
  void ResetC() {
    for (size_t i = 0; i < c.size(); ++i) c[i]->Upload(c0[i]);
  }
  void ExpectMatches(const GemmDesc& d) const {
    for (size_t i = 0; i < sizes.size(); ++i) {
      SCOPED_TRACE(
          absl::StrCat("group ", i, " m=", sizes[i].m, " n=", sizes[i].n, " k=", sizes[i].k));
      const std::vector<uint8_t> bytes = c[i]->Download();
      const std::vector<float> got = LoadAs(bytes, d.c_type);
      if (sizes[i].m == 0 || sizes[i].n == 0) {
        EXPECT_EQ(got, std::vector<float>{7.0f}) << "an empty group wrote C";
      } else if (d.c_type == DType::kF32) {
        EXPECT_TRUE(RelClose(got, ref[i], 1e-5));
      } else {
        EXPECT_TRUE(RelClose(got, ref[i], 1e-2));
        // Rounded once, except where the H200 showed cuBLAS does otherwise
        // (RelClose still holds): with beta ≠ 0 and a bf16 C (Lt and grouped
        // alike) α·A·B is rounded before β·C is added; with both operands
        // transposed cuBLASLt's kernel at k = 1000 lands up to 2 bf16 steps
        // off (a layout the model never uses).
        if (d.beta == 0.0f && !(d.trans_a && d.trans_b)) {
          EXPECT_TRUE(RoundedOnce(BytesAsBF16(bytes), ref[i]));
        }
      }
    }
  }
};

struct Types {
  DType ab, c;
};
const Types kTypes[] = {
    {DType::kF32, DType::kF32}, {DType::kBF16, DType::kF32}, {DType::kBF16, DType::kBF16}};

int TypeSlot(DType t) { return t == DType::kBF16 ? 1 : 0; }

// Runs every transpose × beta for ty through ctx; `loop` marks the grouped
// call refused so that same-type groups take the loop over Gemm.
void CheckAllCases(const Types& ty, bool loop) {
  Stream stream = TestStream();
  cuda::BlasContext ctx(0);
  ctx.set_grouped_batched(true);
  ctx.grouped_stats().refused[TypeSlot(ty.ab)] = loop;
  Rng rng(1);
  const std::vector<Size> sizes(std::begin(kSizes), std::end(kSizes));
  for (int t = 0; t < 4; ++t) {
    for (float beta : {0.0f, 1.0f}) {
      GemmDesc d;
      d.trans_a = t & 1;
      d.trans_b = t & 2;
      d.alpha = 0.75f;
      d.beta = beta;
      d.ab_type = ty.ab;
      d.c_type = ty.c;
      SCOPED_TRACE(absl::StrCat("ta=", d.trans_a, " tb=", d.trans_b, " beta=", beta, " ab=",
                                DTypeName(ty.ab), " c=", DTypeName(ty.c), loop ? " (loop)" : ""));
      Problem p(d, sizes, rng);
      const int64_t calls = ctx.grouped_stats().batched_calls;
      cuda::GroupedGemm(ctx, d, p.groups.data(), static_cast<int>(p.groups.size()), stream.get());
      GTP_CUDA_CHECK(cudaStreamSynchronize(stream.get()));
      p.ExpectMatches(d);
      const bool want_grouped = ty.ab == ty.c && !loop;
      EXPECT_EQ(ctx.grouped_stats().batched_calls - calls, want_grouped ? 1 : 0)
          << (want_grouped ? "cublasGemmGroupedBatchedEx was not used (refused? see stderr)"
                           : "the loop path called cublasGemmGroupedBatchedEx");
    }
  }
}

TEST(GroupedGemmGpu, GroupedBatchedPathMatchesReference) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << NoGpuReason();
  CheckAllCases({DType::kF32, DType::kF32}, /*loop=*/false);
  CheckAllCases({DType::kBF16, DType::kBF16}, /*loop=*/false);
}

TEST(GroupedGemmGpu, LoopPathMatchesReference) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << NoGpuReason();
  CheckAllCases({DType::kBF16, DType::kF32}, /*loop=*/false);  // always the loop
  CheckAllCases({DType::kF32, DType::kF32}, /*loop=*/true);
  CheckAllCases({DType::kBF16, DType::kBF16}, /*loop=*/true);
}

// A mixture of experts' shapes: 24 groups whose varying dimension (m for the
// forward and input-gradient products, k for the weight gradient's) runs
// 1000..1023, one bucket of the loop's 128 rows (grouped_gemm.cc kRowBucket).
struct BucketCase {
  const char* what;
  bool trans_a;
  DType c;
  bool rows_are_k;
};
const BucketCase kBucketCases[] = {{"forward / dgrad (rows = m)", false, DType::kBF16, false},
                                   {"wgrad (rows = k, f32 C)", true, DType::kF32, true}};

std::vector<Size> BucketSizes(bool rows_are_k) {
  std::vector<Size> sizes;
  for (int i = 0; i < 24; ++i) {
    const int64_t rows = 1000 + i;
    sizes.push_back(rows_are_k ? Size{256, 384, rows} : Size{rows, 384, 256});
  }
  return sizes;
}

// The loop asks cuBLASLt's heuristic once for the bucket, not once a row
// count, and every shape still matches the reference. If cuBLASLt refused the
// bucket's algorithm for some shape (cublasLtMatmulAlgoCheck), that shape
// asks for its own and the count below says how many did.
TEST(GroupedGemmGpu, LoopAsksTheHeuristicOnceABucket) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << NoGpuReason();
  Stream stream = TestStream();
  Rng rng(5);
  for (const BucketCase& bc : kBucketCases) {
    SCOPED_TRACE(bc.what);
    cuda::BlasContext ctx(0);
    ctx.set_grouped_batched(false);
    GemmDesc d;
    d.trans_a = bc.trans_a;
    d.ab_type = DType::kBF16;
    d.c_type = bc.c;
    Problem p(d, BucketSizes(bc.rows_are_k), rng);
    cuda::GroupedGemm(ctx, d, p.groups.data(), static_cast<int>(p.groups.size()), stream.get());
    GTP_CUDA_CHECK(cudaStreamSynchronize(stream.get()));
    p.ExpectMatches(d);
    EXPECT_EQ(ctx.algo_cache().queries, 1)
        << "24 row counts in one bucket should cost one heuristic query; more means "
           "cublasLtMatmulAlgoCheck refused the bucket's algorithm for some of them";
    EXPECT_EQ(ctx.algo_cache().buckets.size(), 1u);
    EXPECT_EQ(ctx.algo_cache().calls.size(), 24u);  // each exact shape's descriptors
    EXPECT_EQ(ctx.grouped_stats().batched_calls, 0);
  }
}

// A shape's algorithm is the bucket's (or its own), never the first-met
// shape's: the same inputs in the opposite order, through a fresh context,
// give every group's C bit for bit.
TEST(GroupedGemmGpu, LoopBitsDoNotDependOnShapeOrder) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << NoGpuReason();
  Stream stream = TestStream();
  for (const BucketCase& bc : kBucketCases) {
    SCOPED_TRACE(bc.what);
    GemmDesc d;
    d.trans_a = bc.trans_a;
    d.ab_type = DType::kBF16;
    d.c_type = bc.c;
    Rng rng(6);
    Problem p(d, BucketSizes(bc.rows_are_k), rng);
    std::vector<std::vector<uint8_t>> first;
    {
      cuda::BlasContext ctx(0);
      ctx.set_grouped_batched(false);
      cuda::GroupedGemm(ctx, d, p.groups.data(), static_cast<int>(p.groups.size()), stream.get());
      GTP_CUDA_CHECK(cudaStreamSynchronize(stream.get()));
      for (auto& c : p.c) first.push_back(c->Download());
    }
    p.ResetC();
    std::vector<GemmGroup> reversed(p.groups.rbegin(), p.groups.rend());
    cuda::BlasContext ctx(0);
    ctx.set_grouped_batched(false);
    cuda::GroupedGemm(ctx, d, reversed.data(), static_cast<int>(reversed.size()), stream.get());
    GTP_CUDA_CHECK(cudaStreamSynchronize(stream.get()));
    for (size_t i = 0; i < p.c.size(); ++i) {
      EXPECT_EQ(p.c[i]->Download(), first[i]) << "group " << i << " (" << p.sizes[i].m << "x"
                                              << p.sizes[i].n << "x" << p.sizes[i].k << ")";
    }
    p.ExpectMatches(d);
  }
}

TEST(GroupedGemmGpu, ManyGroupsSpanSeveralPointerBatches) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << NoGpuReason();
  Stream stream = TestStream();
  cuda::BlasContext ctx(0);
  ctx.set_grouped_batched(true);
  Rng rng(2);
  // More groups than one call's pointer arrays hold, and not a multiple of
  // the 64-pointer chunks; a k == 0 and an empty group among them.
  const int count = cuda::BlasContext::kGroupedPtrCapacity + 77;
  std::vector<Size> sizes;
  for (int g = 0; g < count; ++g) sizes.push_back({1 + g % 5, 1 + g % 3, g == 500 ? 0 : 1 + g % 7});
  sizes[900] = {0, 3, 4};
  GemmDesc d;
  d.trans_b = true;
  d.alpha = -1.25f;
  d.beta = 1.0f;
  Problem p(d, sizes, rng);
  cuda::GroupedGemm(ctx, d, p.groups.data(), count, stream.get());
  GTP_CUDA_CHECK(cudaStreamSynchronize(stream.get()));
  p.ExpectMatches(d);
  EXPECT_EQ(ctx.grouped_stats().batched_calls, 2);
}

TEST(GroupedGemmGpu, CapturesIntoACudaGraph) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << NoGpuReason();
  Stream stream = TestStream();
  cuda::BlasContext ctx(0);
  ctx.set_grouped_batched(true);
  Rng rng(3);
  for (const Types& ty : kTypes) {
    SCOPED_TRACE(absl::StrCat("ab=", DTypeName(ty.ab), " c=", DTypeName(ty.c)));
    GemmDesc d;
    d.trans_a = ty.ab != ty.c;  // the weight-gradient layout for the loop case
    d.beta = 0.0f;
    d.ab_type = ty.ab;
    d.c_type = ty.c;
    const std::vector<Size> sizes(std::begin(kSizes), std::end(kSizes));
    Problem p(d, sizes, rng);
    const int n = static_cast<int>(p.groups.size());
    // Once outside capture (cuBLASLt picks its algorithms), then captured in
    // global mode, which fails on any allocation or synchronisation.
    cuda::GroupedGemm(ctx, d, p.groups.data(), n, stream.get());
    GTP_CUDA_CHECK(cudaStreamSynchronize(stream.get()));
    p.ResetC();
    cudaGraph_t graph = nullptr;
    GTP_CUDA_CHECK(cudaStreamBeginCapture(stream.get(), cudaStreamCaptureModeGlobal));
    cuda::GroupedGemm(ctx, d, p.groups.data(), n, stream.get());
    GTP_CUDA_CHECK(cudaStreamEndCapture(stream.get(), &graph));
    cudaGraphExec_t exec = nullptr;
    GTP_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    for (int replay = 0; replay < 2; ++replay) {
      GTP_CUDA_CHECK(cudaGraphLaunch(exec, stream.get()));
      GTP_CUDA_CHECK(cudaStreamSynchronize(stream.get()));
      p.ExpectMatches(d);
      p.ResetC();
    }
    GTP_CUDA_CHECK(cudaGraphExecDestroy(exec));
    GTP_CUDA_CHECK(cudaGraphDestroy(graph));
  }
}

// The grouped linear ops on CUDA against double loops: G = 4 experts over
// M = 300 rows, expert 1 with none.
TEST(GroupedGemmGpu, GroupedLinearOpsMatchReference) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << NoGpuReason();
  Stream stream = TestStream();
  cuda::BlasContext ctx(0);
  ctx.set_grouped_batched(true);
  CudaCachingAllocator alloc(0);
  const Exec e{Device::Cuda(0), &alloc, stream.get(), &ctx};
  Rng rng(4);
  const std::vector<int64_t> off = {0, 120, 120, 290, 300};
  const int64_t G = 4, M = 300, N = 48, K = 40;
  auto expert = [&](int64_t r) {
    int64_t g = 0;
    while (off[g + 1] <= r) ++g;
    return g;
  };
  for (const Types& ty : kTypes) {
    SCOPED_TRACE(absl::StrCat("ab=", DTypeName(ty.ab), " y=", DTypeName(ty.c)));
    const double tol = ty.c == DType::kBF16 ? 1e-2 : 1e-5;
    const std::vector<float> x = RoundToBF16(rng.Normal(M * K)),
                             w = RoundToBF16(rng.Normal(G * N * K)),
                             dy = RoundToBF16(rng.Normal(M * N));
    DeviceBuffer<uint8_t> dx_in(StoreAs(x, ty.ab)), dw_in(StoreAs(w, ty.ab)), ddy(StoreAs(dy, ty.ab));
    DeviceBuffer<uint8_t> dy_out(M * N * SizeOf(ty.c)), dx_out(M * K * SizeOf(ty.c));  // NaN
    const Device dev = Device::Cuda(0);
    const Tensor tx = Tensor::Wrap(dx_in.get(), {M, K}, ty.ab, dev);
    const Tensor tw = Tensor::Wrap(dw_in.get(), {G * N, K}, ty.ab, dev);
    const Tensor tdy = Tensor::Wrap(ddy.get(), {M, N}, ty.ab, dev);

    ops::GroupedLinear(e, tx, tw, off, Tensor::Wrap(dy_out.get(), {M, N}, ty.c, dev));
    std::vector<double> y_ref(M * N, 0.0);
    for (int64_t r = 0; r < M; ++r) {
      for (int64_t n = 0; n < N; ++n) {
        for (int64_t k = 0; k < K; ++k) {
          y_ref[r * N + n] += double{x[r * K + k]} * w[(expert(r) * N + n) * K + k];
        }
      }
    }
    EXPECT_TRUE(RelClose(LoadAs(dy_out.Download(), ty.c), y_ref, tol)) << "GroupedLinear";

    ops::GroupedLinearBackwardData(e, tdy, tw, off, Tensor::Wrap(dx_out.get(), {M, K}, ty.c, dev));
    std::vector<double> dx_ref(M * K, 0.0);
    for (int64_t r = 0; r < M; ++r) {
      for (int64_t k = 0; k < K; ++k) {
        for (int64_t n = 0; n < N; ++n) {
          dx_ref[r * K + k] += double{dy[r * N + n]} * w[(expert(r) * N + n) * K + k];
        }
      }
    }
    EXPECT_TRUE(RelClose(LoadAs(dx_out.Download(), ty.c), dx_ref, tol))
        << "GroupedLinearBackwardData";

    for (float beta : {0.0f, 1.0f}) {
      const float alpha = 0.5f;
      const std::vector<float> dw0 = beta == 0.0f ? NaNs(G * N * K) : rng.Normal(G * N * K);
      DeviceBuffer<float> ddw(dw0);
      ops::GroupedLinearBackwardWeight(e, tdy, tx, off, alpha, beta,
                                       Tensor::Wrap(ddw.get(), {G * N, K}, DType::kF32, dev));
      std::vector<double> dw_ref(G * N * K, 0.0);
      for (int64_t r = 0; r < M; ++r) {
        for (int64_t n = 0; n < N; ++n) {
          for (int64_t k = 0; k < K; ++k) {
            dw_ref[(expert(r) * N + n) * K + k] += double{alpha} * dy[r * N + n] * x[r * K + k];
          }
        }
      }
      if (beta != 0.0f) {
        for (size_t i = 0; i < dw_ref.size(); ++i) dw_ref[i] += double{beta} * dw0[i];
      }
      EXPECT_TRUE(RelClose(ddw.Download(), dw_ref, 1e-5))
          << "GroupedLinearBackwardWeight beta=" << beta;
    }
  }
}

}  // namespace
}  // namespace gtp::kernels::testing
