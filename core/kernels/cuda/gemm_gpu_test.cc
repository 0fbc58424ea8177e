// GPU tests of cuda::Gemm against cpu::Gemm: every transpose, padded leading
// dimensions, alpha/beta, k == 0, every supported type combination.
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
  int64_t m, n, k;
};

// Odd and degenerate shapes plus one that spans several cuBLASLt tiles.
const Shape kShapes[] = {{1, 1, 1},   {3, 5, 7},    {257, 3, 33},   {2, 257, 1},
                         {1, 1, 257}, {64, 48, 32}, {257, 129, 65}, {300, 200, 1000}};

std::string Describe(const GemmDesc& d) {
  return absl::StrCat("m=", d.m, " n=", d.n, " k=", d.k, " ta=", d.trans_a, " tb=", d.trans_b,
                      " lda=", d.lda, " ldb=", d.ldb, " ldc=", d.ldc, " alpha=", d.alpha,
                      " beta=", d.beta, " ab=", DTypeName(d.ab_type), " c=", DTypeName(d.c_type));
}

int64_t RowsA(const GemmDesc& d) { return d.trans_a ? d.k : d.m; }
int64_t ColsA(const GemmDesc& d) { return d.trans_a ? d.m : d.k; }
int64_t RowsB(const GemmDesc& d) { return d.trans_b ? d.n : d.k; }
int64_t ColsB(const GemmDesc& d) { return d.trans_b ? d.k : d.n; }
int64_t LdA(const GemmDesc& d) { return d.lda ? d.lda : ColsA(d); }
int64_t LdB(const GemmDesc& d) { return d.ldb ? d.ldb : ColsB(d); }
int64_t LdC(const GemmDesc& d) { return d.ldc ? d.ldc : d.n; }

// f32 values stored as `t` (f32 or bf16) bytes, and back.
std::vector<uint8_t> Store(const std::vector<float>& v, DType t) {
  std::vector<uint8_t> out(v.size() * SizeOf(t));
  if (t == DType::kF32) {
    std::memcpy(out.data(), v.data(), out.size());
  } else {
    std::vector<bf16> b = ToBF16(v);
    std::memcpy(out.data(), b.data(), out.size());
  }
  return out;
}
std::vector<float> Load(const std::vector<uint8_t>& bytes, DType t) {
  std::vector<float> out(bytes.size() / SizeOf(t));
  if (t == DType::kF32) {
    std::memcpy(out.data(), bytes.data(), bytes.size());
  } else {
    for (size_t i = 0; i < out.size(); ++i) {
      uint16_t bits;
      std::memcpy(&bits, bytes.data() + 2 * i, 2);
      out[i] = BF16BitsToF32(bits);
    }
  }
  return out;
}

// Runs d on the CPU and the GPU from the same inputs and compares all of C
// (its padding columns included, which neither may touch). With beta == 0 the
// logical part of C starts as NaN: it must not be read.
void CheckGemm(cuda::BlasContext& ctx, cudaStream_t stream, const GemmDesc& d, Rng& rng,
               double tol) {
  SCOPED_TRACE(Describe(d));
  const std::vector<uint8_t> A = Store(rng.Uniform(RowsA(d) * LdA(d)), d.ab_type);
  const std::vector<uint8_t> B = Store(rng.Uniform(RowsB(d) * LdB(d)), d.ab_type);
  std::vector<float> c0 = rng.Uniform(d.m * LdC(d));
  for (int64_t r = 0; r < d.m; ++r) {
    for (int64_t c = 0; c < LdC(d); ++c) {
      if (c >= d.n) {
        c0[r * LdC(d) + c] = 7.0f;  // padding sentinel
      } else if (d.beta == 0.0f) {
        c0[r * LdC(d) + c] = NAN;
      }
    }
  }
  std::vector<uint8_t> c_cpu = Store(c0, d.c_type);
  cpu::Gemm(d, A.data(), B.data(), c_cpu.data());

  DeviceBuffer<uint8_t> dA(A), dB(B), dC(Store(c0, d.c_type));
  cuda::Gemm(ctx, d, dA.get(), dB.get(), dC.get(), stream);
  const std::vector<uint8_t> c_gpu = dC.Download();
  EXPECT_TRUE(RelClose(Load(c_gpu, d.c_type), ToDouble(Load(c_cpu, d.c_type)), tol));
}

struct Types {
  DType ab, c;
  double tol;
};
const Types kTypes[] = {{DType::kF32, DType::kF32, 1e-5},
                        {DType::kBF16, DType::kF32, 1e-5},
                        {DType::kBF16, DType::kBF16, 1e-2},
                        {DType::kF32, DType::kBF16, 1e-2}};

TEST(GemmGpu, MatchesCpuForAllTransposesAndTypes) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << NoGpuReason();
  Stream stream = TestStream();
  cuda::BlasContext ctx(0);
  Rng rng(1);
  for (const Types& ty : kTypes) {
    for (const Shape& s : kShapes) {
      for (int t = 0; t < 4; ++t) {
        GemmDesc d;
        d.trans_a = t & 1;
        d.trans_b = t & 2;
        d.m = s.m, d.n = s.n, d.k = s.k;
        d.ab_type = ty.ab;
        d.c_type = ty.c;
        CheckGemm(ctx, stream.get(), d, rng, ty.tol);  // alpha 1, beta 0: C never read
        d.alpha = 0.75f;
        d.beta = -0.5f;
        CheckGemm(ctx, stream.get(), d, rng, ty.tol);
      }
    }
  }
}

TEST(GemmGpu, HonoursLeadingDimensions) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << NoGpuReason();
  Stream stream = TestStream();
  cuda::BlasContext ctx(0);
  Rng rng(2);
  for (const Types& ty : kTypes) {
    for (const Shape& s : {Shape{5, 7, 3}, Shape{33, 17, 65}, Shape{128, 64, 256}}) {
      for (int t = 0; t < 4; ++t) {
        for (int pad : {1, 3, 8}) {
          GemmDesc d;
          d.trans_a = t & 1;
          d.trans_b = t & 2;
          d.m = s.m, d.n = s.n, d.k = s.k;
          d.lda = ColsA(d) + pad;
          d.ldb = ColsB(d) + 2 * pad;
          d.ldc = d.n + pad;
          d.alpha = 1.5f;
          d.beta = 1.0f;
          d.ab_type = ty.ab;
          d.c_type = ty.c;
          CheckGemm(ctx, stream.get(), d, rng, ty.tol);
          d.beta = 0.0f;
          CheckGemm(ctx, stream.get(), d, rng, ty.tol);
        }
      }
    }
  }
}

TEST(GemmGpu, EmptyInnerDimensionScalesC) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << NoGpuReason();
  Stream stream = TestStream();
  cuda::BlasContext ctx(0);
  Rng rng(3);
  for (const Types& ty : kTypes) {
    for (float beta : {0.0f, 1.0f, -2.0f}) {
      GemmDesc d;
      d.m = 7, d.n = 9, d.k = 0;
      d.ldc = 11;
      d.beta = beta;
      d.ab_type = ty.ab;
      d.c_type = ty.c;
      CheckGemm(ctx, stream.get(), d, rng, 0.0);
    }
  }
}

TEST(GemmGpu, EmptyOutputIsANoOp) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << NoGpuReason();
  Stream stream = TestStream();
  cuda::BlasContext ctx(0);
  GemmDesc d;
  d.m = 0, d.n = 5, d.k = 3;
  cuda::Gemm(ctx, d, nullptr, nullptr, nullptr, stream.get());
  d.m = 5, d.n = 0;
  cuda::Gemm(ctx, d, nullptr, nullptr, nullptr, stream.get());
  EXPECT_EQ(cudaStreamSynchronize(stream.get()), cudaSuccess);
}

// GemmDesc::c_in: beta·C read from another matrix and C written without
// being read (its logical part starts as NaN), against the double
// reference alpha·op(A)·op(B) + beta·c_in (+ bias) of the stored (rounded)
// inputs; c_in and C's padding left as they were. Every route: cuBLASLt with
// C ≠ D, and the two that copy c_in into C first (f32 operands with a bf16
// output; k == 0). Tolerances: kTypes' (a bf16 output is one rounding,
// ≤ 2⁻⁹ relative, of the f32 sum).
TEST(GemmGpu, ReadsBetaCFromCIn) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << NoGpuReason();
  Stream stream = TestStream();
  cuda::BlasContext ctx(0);
  Rng rng(5);
  for (const Types& ty : kTypes) {
    for (const Shape& s : {Shape{5, 7, 3}, Shape{257, 129, 65}, Shape{7, 9, 0}}) {
      for (bool with_bias : {false, true}) {
        if (with_bias && (s.k == 0 || (ty.ab == DType::kF32 && ty.c == DType::kBF16))) continue;
        for (float beta : {1.0f, -0.5f}) {
          GemmDesc d;
          d.trans_b = true;
          d.m = s.m, d.n = s.n, d.k = s.k;
          d.ldc = d.n + 3;
          d.alpha = 0.75f;
          d.beta = beta;
          d.ab_type = ty.ab;
          d.c_type = ty.c;
          SCOPED_TRACE(absl::StrCat(Describe(d), " bias=", with_bias));
          const std::vector<uint8_t> A = Store(rng.Uniform(RowsA(d) * LdA(d)), d.ab_type);
          const std::vector<uint8_t> B = Store(rng.Uniform(RowsB(d) * LdB(d)), d.ab_type);
          const std::vector<uint8_t> cin = Store(rng.Uniform(d.m * LdC(d)), d.c_type);
          const std::vector<uint8_t> bias = Store(rng.Uniform(d.n), d.c_type);
          std::vector<float> c0(d.m * LdC(d), NAN);
          for (int64_t r = 0; r < d.m; ++r) {
            for (int64_t c = d.n; c < LdC(d); ++c) c0[r * LdC(d) + c] = 7.0f;  // padding
          }
          std::vector<double> ref = ToDouble(Load(cin, d.c_type));
          RefGemm(d.trans_a, d.trans_b, d.m, d.n, d.k, d.alpha, ToDouble(Load(A, d.ab_type)),
                  LdA(d), ToDouble(Load(B, d.ab_type)), LdB(d), d.beta, &ref, LdC(d));
          const std::vector<float> b32 = Load(bias, d.c_type);
          for (int64_t r = 0; r < d.m; ++r) {
            for (int64_t c = 0; c < LdC(d); ++c) {
              double& v = ref[r * LdC(d) + c];
              v = c >= d.n ? 7.0 : v + (with_bias ? b32[c] : 0.0);
            }
          }
          DeviceBuffer<uint8_t> dA(A), dB(B), dC(Store(c0, d.c_type)), dCin(cin), dBias(bias);
          d.c_in = dCin.get();
          if (with_bias) d.bias = dBias.get();
          cuda::Gemm(ctx, d, dA.get(), dB.get(), dC.get(), stream.get());
          EXPECT_TRUE(RelClose(Load(dC.Download(), d.c_type), ref, ty.tol));
          EXPECT_EQ(dCin.Download(), cin) << "c_in was written";
        }
      }
    }
  }
}

TEST(GemmGpu, IsDeterministic) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << NoGpuReason();
  Stream stream = TestStream();
  cuda::BlasContext ctx(0);
  Rng rng(4);
  GemmDesc d;
  d.m = 512, d.n = 384, d.k = 4096;
  d.trans_b = true;
  DeviceBuffer<float> A(rng.Uniform(d.m * d.k)), B(rng.Uniform(d.n * d.k)), C(d.m * d.n);
  cuda::Gemm(ctx, d, A.get(), B.get(), C.get(), stream.get());
  const std::vector<float> first = C.Download();
  for (int i = 0; i < 3; ++i) {
    C.Poison();
    cuda::Gemm(ctx, d, A.get(), B.get(), C.get(), stream.get());
    EXPECT_TRUE(BitEqual(C.Download(), first));
  }
}

}  // namespace
}  // namespace gtp::kernels::testing
