// GPU tests of cuda::EmbeddingForward/Backward against the CPU versions.
// Both backward passes add repeated ids in token order, so they must agree
// bit for bit.
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

struct Case {
  int64_t N, V, C, vocab_start;
  int32_t global_vocab;  // ids are drawn from [0, global_vocab)
};

// Unsharded, shards that hold part of the ids, and sizes that span several
// backward blocks (V > 512) with heavily repeated ids (N ≫ V), down to a
// single id for every token (like padding).
const Case kCases[] = {{1, 1, 1, 0, 1},           {3, 5, 3, 0, 5},
                       {257, 11, 7, 0, 11},       {33, 7, 5, 5, 20},
                       {257, 4, 64, 16, 20},      {8, 3, 257, 0, 6},
                       {4096, 1000, 33, 0, 1000}, {3000, 2049, 96, 1024, 4096},
                       {20000, 3, 17, 0, 3},      {64, 10, 4096, 0, 10},
                       {5000, 5, 33, 0, 1}};  // last: one id only

std::string Describe(const Case& c) {
  return absl::StrCat("N=", c.N, " V=", c.V, " C=", c.C, " vocab_start=", c.vocab_start);
}

TEST(EmbeddingGpu, ForwardMatchesCpu) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << NoGpuReason();
  Stream stream = TestStream();
  Rng rng(11);
  for (const Case& c : kCases) {
    SCOPED_TRACE(Describe(c));
    const std::vector<int32_t> idx = rng.Ints(c.N, 0, c.global_vocab - 1);
    const std::vector<float> table = rng.Uniform(c.V * c.C);
    std::vector<float> out_cpu(c.N * c.C);
    cpu::EmbeddingForward(idx.data(), table.data(), out_cpu.data(), c.N, c.V, c.C, c.vocab_start);
    DeviceBuffer<int32_t> d_idx(idx);
    DeviceBuffer<float> d_table(table), d_out(c.N * c.C);
    cuda::EmbeddingForward(d_idx.get(), d_table.get(), d_out.get(), c.N, c.V, c.C, c.vocab_start,
                           stream.get());
    EXPECT_TRUE(BitEqual(d_out.Download(), out_cpu));
  }
}

TEST(EmbeddingGpu, BackwardAccumulatesLikeCpuBitForBit) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << NoGpuReason();
  Stream stream = TestStream();
  Rng rng(12);
  for (const Case& c : kCases) {
    SCOPED_TRACE(Describe(c));
    const std::vector<int32_t> idx = rng.Ints(c.N, 0, c.global_vocab - 1);
    std::vector<float> dout = rng.Uniform(c.N * c.C);
    for (size_t i = 0; i < dout.size(); i += 7) dout[i] *= 1e4f;  // order-sensitive sums
    const std::vector<float> dtable0 = rng.Uniform(c.V * c.C);    // += semantics
    std::vector<float> dtable_cpu = dtable0;
    cpu::EmbeddingBackward(idx.data(), dout.data(), dtable_cpu.data(), c.N, c.V, c.C,
                           c.vocab_start);
    DeviceBuffer<int32_t> d_idx(idx);
    DeviceBuffer<float> d_dout(dout), d_dtable(dtable0);
    cuda::EmbeddingBackward(d_idx.get(), d_dout.get(), d_dtable.get(), c.N, c.V, c.C, c.vocab_start,
                            stream.get());
    EXPECT_TRUE(BitEqual(d_dtable.Download(), dtable_cpu));
  }
}

// Byte-level text in a GPT-2 vocabulary: every id in a few rows, one row hit
// thousands of times (~2760: the case the sort exists for, and longer than
// the kernel's 2048 staged positions, so its sums cross a chunk boundary).
// dout of type T (f32 at C = 96; bf16 at C = 768, 1544 and 4104: 2, 4 and 8
// columns a thread, the last with more 8-column chunks than threads).
template <typename T>
void ExpectSkewedBackwardLikeCpu(int64_t C, uint64_t seed, int64_t V = 50304) {
  SCOPED_TRACE(::testing::Message() << "C=" << C << " V=" << V);
  Stream stream = TestStream();
  Rng rng(seed);
  const int64_t N = 8192;
  std::vector<int32_t> idx = rng.Ints(N, 0, 255);
  for (int64_t i = 0; i < N; i += 3) idx[i] = 32;  // one very frequent id
  std::vector<T> dout;
  if constexpr (std::is_same_v<T, bf16>) {
    dout = ToBF16(rng.Uniform(N * C));
  } else {
    dout = rng.Uniform(N * C);
  }
  const std::vector<float> dtable0 = rng.Uniform(V * C);
  std::vector<float> want = dtable0;
  cpu::EmbeddingBackward(idx.data(), dout.data(), want.data(), N, V, C, 0);
  DeviceBuffer<int32_t> d_idx(idx);
  DeviceBuffer<T> d_dout(dout);
  DeviceBuffer<float> d_dtable(dtable0);
  DeviceBuffer<uint8_t> scratch(cuda::EmbeddingBackwardScratchBytes(N, V));
  cuda::EmbeddingBackward(d_idx.get(), d_dout.get(), d_dtable.get(), N, V, C, 0, stream.get(),
                          scratch.get());
  EXPECT_TRUE(BitEqual(d_dtable.Download(), want));
}

TEST(EmbeddingGpu, BackwardSkewedIdsBitForBit) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << NoGpuReason();
  ExpectSkewedBackwardLikeCpu<float>(96, 13);
}

TEST(EmbeddingGpu, Bf16BackwardSkewedIdsBitForBit) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << NoGpuReason();
  ExpectSkewedBackwardLikeCpu<bf16>(768, 16);
  ExpectSkewedBackwardLikeCpu<bf16>(1544, 17, /*V=*/300);
  ExpectSkewedBackwardLikeCpu<bf16>(4104, 18, /*V=*/300);
}

TEST(EmbeddingGpu, EmptyInputsAreNoOps) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << NoGpuReason();
  Stream stream = TestStream();
  const float* none = nullptr;  // picks the f32 overloads
  cuda::EmbeddingForward(nullptr, none, nullptr, 0, 5, 3, 0, stream.get());
  cuda::EmbeddingBackward(nullptr, none, nullptr, 0, 5, 3, 0, stream.get());
  const bf16* none_bf16 = nullptr;
  cuda::EmbeddingForward(nullptr, none_bf16, nullptr, 0, 5, 3, 0, stream.get());
  cuda::EmbeddingBackward(nullptr, none_bf16, nullptr, 0, 5, 3, 0, stream.get());
  EXPECT_EQ(cudaStreamSynchronize(stream.get()), cudaSuccess);
}

// ---- bf16 -----------------------------------------------------------------
// Forward: an exact copy (16-byte chunks when C % 8 == 0). Backward: bf16 dout
// widened exactly, added into the f32 dtable in token order, so it equals the
// CPU bit for bit and the double sum up to f32 accumulation.
TEST(EmbeddingGpu, Bf16ForwardCopiesRowsExactly) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << NoGpuReason();
  Stream stream = TestStream();
  Rng rng(14);
  for (const Case& c : kCases) {
    SCOPED_TRACE(Describe(c));
    const std::vector<int32_t> idx = rng.Ints(c.N, 0, c.global_vocab - 1);
    const std::vector<bf16> table = ToBF16(rng.Uniform(c.V * c.C));
    DeviceBuffer<int32_t> d_idx(idx);
    DeviceBuffer<bf16> d_table(table), d_out(c.N * c.C);
    cuda::EmbeddingForward(d_idx.get(), d_table.get(), d_out.get(), c.N, c.V, c.C, c.vocab_start,
                           stream.get());
    EXPECT_TRUE(RelClose(d_out.Download(),
                         RefEmbedding(idx, ToDouble(table), c.V, c.C, c.vocab_start), 0.0));
  }
}

TEST(EmbeddingGpu, Bf16BackwardAccumulatesIntoF32LikeCpu) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << NoGpuReason();
  Stream stream = TestStream();
  Rng rng(15);
  for (const Case& c : kCases) {
    SCOPED_TRACE(Describe(c));
    const std::vector<int32_t> idx = rng.Ints(c.N, 0, c.global_vocab - 1);
    const std::vector<bf16> dout = ToBF16(rng.Uniform(c.N * c.C));
    const std::vector<float> dtable0 = rng.Uniform(c.V * c.C);
    std::vector<double> ref(dtable0.begin(), dtable0.end());
    for (int64_t n = 0; n < c.N; ++n) {
      const int64_t row = idx[n] - c.vocab_start;
      if (row < 0 || row >= c.V) continue;
      for (int64_t k = 0; k < c.C; ++k) ref[row * c.C + k] += ToF32(dout[n * c.C + k]);
    }
    std::vector<float> dtable_cpu = dtable0;
    cpu::EmbeddingBackward(idx.data(), dout.data(), dtable_cpu.data(), c.N, c.V, c.C,
                           c.vocab_start);
    DeviceBuffer<int32_t> d_idx(idx);
    DeviceBuffer<bf16> d_dout(dout);
    DeviceBuffer<float> d_dtable(dtable0);
    cuda::EmbeddingBackward(d_idx.get(), d_dout.get(), d_dtable.get(), c.N, c.V, c.C, c.vocab_start,
                            stream.get());
    const std::vector<float> got = d_dtable.Download();
    // Up to 20000 f32 adds into one element: relative 1e-4 against the double sum.
    EXPECT_TRUE(RelClose(got, ref, 1e-4));
    EXPECT_TRUE(BitEqual(got, dtable_cpu));
  }
}

}  // namespace
}  // namespace gtp::kernels::testing
