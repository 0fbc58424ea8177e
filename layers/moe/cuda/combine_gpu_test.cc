// The CUDA combine op against the CPU one (layers/moe/combine.h): forward and
// dye bit for bit (f32 and bf16); dw (a column sum: sequential on the CPU, a
// tree on the GPU) against a double-precision sum, both within f32 rounding
// of Σ|terms|.
#include <algorithm>
#include <numeric>
#include <vector>

#include "core/cuda_runtime.h"
#include "core/kernels/testing/gpu.h"
#include "core/kernels/testing/harness.h"
#include "gtest/gtest.h"
#include "layers/moe/combine.h"

namespace gtp::layers::moe {
namespace {

using kernels::testing::BitEqual;
using kernels::testing::DeviceBuffer;
using kernels::testing::Rng;

template <typename T>
std::vector<T> Round(const std::vector<float>& v) {
  std::vector<T> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    if constexpr (std::is_same_v<T, float>) {
      out[i] = v[i];
    } else {
      out[i] = ToBF16(v[i]);
    }
  }
  return out;
}

template <typename T>
void Check(int64_t n, int k, int64_t C, uint64_t seed) {
  Rng rng(seed);
  const int64_t M = n * k + 3;  // a few rows no slot names
  // Each row named at most once; about one slot in five dropped.
  std::vector<int32_t> rows(M);
  std::iota(rows.begin(), rows.end(), 0);
  std::vector<int32_t> order = rng.Ints(M, 0, 1 << 30);
  std::sort(rows.begin(), rows.end(), [&](int32_t a, int32_t b) { return order[a] < order[b]; });
  std::vector<int32_t> drop = rng.Ints(n * k, 0, 4), pos(n * k);
  for (int64_t s = 0; s < n * k; ++s) pos[s] = drop[s] == 0 ? -1 : rows[s];
  std::vector<float> w = rng.Uniform(n * k, 0.0f, 1.0f);
  std::vector<T> ye = Round<T>(rng.Normal(M * C)), dy = Round<T>(rng.Normal(n * C));
  const bool bf16 = std::is_same_v<T, gtp::bf16>;
  const DType dt = bf16 ? DType::kBF16 : DType::kF32;
  // CPU.
  HeapAllocator a;
  kernels::Exec cpu = kernels::Exec::Cpu(a);
  auto wrap = [](auto& v, Shape s, DType d) { return Tensor::Wrap(v.data(), s, d, Device::Cpu()); };
  std::vector<T> y(n * C), dye(M * C);
  std::vector<float> dw(n * k);
  CombineForward(cpu, wrap(ye, {M, C}, dt), wrap(pos, {n * k}, DType::kI32),
                 wrap(w, {n * k}, DType::kF32), wrap(y, {n, C}, dt));
  CombineBackward(cpu, wrap(dy, {n, C}, dt), wrap(ye, {M, C}, dt), wrap(pos, {n * k}, DType::kI32),
                  wrap(w, {n * k}, DType::kF32), wrap(dye, {M, C}, dt), wrap(dw, {n * k}, DType::kF32));
  // CUDA.
  auto stream = kernels::testing::TestStream();
  DeviceBuffer<T> d_ye(ye), d_dy(dy), d_y(n * C), d_dye(M * C);
  DeviceBuffer<int32_t> d_pos(pos);
  DeviceBuffer<float> d_w(w), d_dw(n * k);
  cuda::CombineForward(d_ye.get(), d_pos.get(), d_w.get(), d_y.get(), n, k, C, bf16, stream.get());
  cuda::CombineBackward(d_dy.get(), d_ye.get(), d_pos.get(), d_w.get(), d_dye.get(), d_dw.get(), n,
                        k, M, C, bf16, stream.get());
  EXPECT_TRUE(BitEqual(d_y.Download(), y)) << "y n=" << n << " C=" << C;
  EXPECT_TRUE(BitEqual(d_dye.Download(), dye)) << "dye n=" << n << " C=" << C;
  std::vector<float> got = d_dw.Download();
  auto f32 = [](T v) {
    if constexpr (std::is_same_v<T, float>) {
      return v;
    } else {
      return ToF32(v);
    }
  };
  for (int64_t s = 0; s < n * k; ++s) {
    ASSERT_TRUE(std::isfinite(got[s]));
    double ref = 0, mag = 0;
    if (pos[s] >= 0) {
      for (int64_t c = 0; c < C; ++c) {
        const double t = static_cast<double>(f32(ye[pos[s] * C + c])) * f32(dy[(s / k) * C + c]);
        ref += t;
        mag += std::abs(t);
      }
    }
    // Sequential f32 sums stay within C·eps·Σ|t| (typically far less); 1e-5·Σ|t| allows
    // the CPU's, and the tree's error bound log2(C)·eps·Σ|t| is below 1e-6·Σ|t|.
    EXPECT_NEAR(dw[s], ref, 1e-5 * mag + 1e-30) << "cpu dw slot " << s;
    EXPECT_NEAR(got[s], ref, 1e-6 * mag + 1e-30) << "cuda dw slot " << s;
  }
}

// GatherAdd (the dispatch's backward on one rank) on CUDA against the CPU,
// bit for bit: both add a token's rows in increasing row order, then add.
template <typename T, typename O>
void CheckGatherAdd(int64_t n, int k, int64_t C, bool with_add, uint64_t seed) {
  Rng rng(seed);
  const int64_t S = n * k, M = S + 3;
  std::vector<int32_t> rows(M);
  std::iota(rows.begin(), rows.end(), 0);
  std::vector<int32_t> order = rng.Ints(M, 0, 1 << 30);
  std::sort(rows.begin(), rows.end(), [&](int32_t a, int32_t b) { return order[a] < order[b]; });
  std::vector<int32_t> drop = rng.Ints(S, 0, 4), pos(S);
  for (int64_t s = 0; s < S; ++s) pos[s] = drop[s] == 0 ? -1 : rows[s];
  std::vector<T> xe = Round<T>(rng.Normal(M * C));
  std::vector<float> add = rng.Normal(n * C);
  const DType xt = std::is_same_v<T, float> ? DType::kF32 : DType::kBF16;
  const DType ot = std::is_same_v<O, float> ? DType::kF32 : DType::kBF16;
  HeapAllocator a;
  kernels::Exec cpu = kernels::Exec::Cpu(a);
  auto wrap = [](auto& v, Shape s, DType d) { return Tensor::Wrap(v.data(), s, d, Device::Cpu()); };
  std::vector<O> want(n * C);
  GatherAdd(cpu, wrap(xe, {M, C}, xt), wrap(pos, {S}, DType::kI32),
            with_add ? wrap(add, {n, C}, DType::kF32) : Tensor(), wrap(want, {n, C}, ot));
  auto stream = kernels::testing::TestStream();
  DeviceBuffer<T> d_xe(xe);
  DeviceBuffer<int32_t> d_pos(pos);
  DeviceBuffer<float> d_add(add);
  DeviceBuffer<O> d_dx(n * C);
  cuda::GatherAdd(d_xe.get(), d_pos.get(), with_add ? d_add.get() : nullptr, d_dx.get(), n, k, C,
                  xt == DType::kBF16, ot == DType::kBF16, stream.get());
  EXPECT_TRUE(BitEqual(d_dx.Download(), want)) << "n=" << n << " k=" << k << " C=" << C;
}

TEST(CudaMoeCombine, GatherAddMatchesCpu) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << NoGpuReason();
  CheckGatherAdd<float, float>(9, 3, 33, true, 5);
  CheckGatherAdd<float, float>(6, 8, 300, false, 6);
  CheckGatherAdd<gtp::bf16, gtp::bf16>(257, 2, 768, true, 7);
  CheckGatherAdd<gtp::bf16, float>(31, 1, 40, false, 8);
}

TEST(CudaMoeCombine, MatchesCpu) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << NoGpuReason();
  Check<float>(5, 2, 6, 1);
  Check<float>(300, 4, 768, 2);
  Check<gtp::bf16>(7, 1, 40, 3);
  Check<gtp::bf16>(257, 2, 1024, 4);
}

}  // namespace
}  // namespace gtp::layers::moe
