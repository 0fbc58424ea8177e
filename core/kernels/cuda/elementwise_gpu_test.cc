#include <cuda_runtime.h>  // the typed cudaMalloc(T**, size_t) overload

#include <cmath>
#include <vector>

#include "core/cuda_runtime.h"
#include "core/kernels/cpu.h"
#include "core/kernels/cuda.h"
#include "core/kernels/testing/gpu.h"
#include "core/kernels/testing/harness.h"
#include "gtest/gtest.h"

namespace gtp::kernels {
namespace {

TEST(CudaElementwise, MatchesCpu) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << NoGpuReason();
  testing::Rng rng(9);
  for (int64_t n : {1, 3, 257, 1 << 20}) {
    auto x = rng.Normal(n), y = rng.Normal(n);
    float *dx, *dy;
    double* dss;
    GTP_CUDA_CHECK(cudaMalloc(&dx, n * 4));
    GTP_CUDA_CHECK(cudaMalloc(&dy, n * 4));
    GTP_CUDA_CHECK(cudaMalloc(&dss, 8));
    GTP_CUDA_CHECK(cudaMemcpy(dx, x.data(), n * 4, cudaMemcpyHostToDevice));
    GTP_CUDA_CHECK(cudaMemcpy(dy, y.data(), n * 4, cudaMemcpyHostToDevice));
    cuda::Axpby(0.5f, dx, -2.0f, dy, n, nullptr);
    cpu::Axpby(0.5f, x.data(), -2.0f, y.data(), n);
    std::vector<float> got(n);
    GTP_CUDA_CHECK(cudaMemcpy(got.data(), dy, n * 4, cudaMemcpyDeviceToHost));
    EXPECT_TRUE(testing::RelClose(got, testing::ToDouble(y), 1e-6));
    cuda::SumSquares(dx, n, dss, nullptr);
    double gpu_ss = 0, cpu_ss = 0, again = 0;
    GTP_CUDA_CHECK(cudaMemcpy(&gpu_ss, dss, 8, cudaMemcpyDeviceToHost));
    cpu::SumSquares(x.data(), n, &cpu_ss);
    EXPECT_NEAR(gpu_ss, cpu_ss, 1e-12 * cpu_ss);
    cuda::SumSquares(dx, n, dss, nullptr);  // deterministic: bit-identical rerun
    GTP_CUDA_CHECK(cudaMemcpy(&again, dss, 8, cudaMemcpyDeviceToHost));
    EXPECT_EQ(again, gpu_ss);
    cuda::Fill(dy, -3.5f, n, nullptr);
    GTP_CUDA_CHECK(cudaMemcpy(got.data(), dy, n * 4, cudaMemcpyDeviceToHost));
    for (float v : got) ASSERT_EQ(v, -3.5f);
    cudaFree(dx);
    cudaFree(dy);
    cudaFree(dss);
  }
}

// bf16 against the double reference on the rounded inputs: Axpby rounds once
// (≤ 2⁻⁸ relative per element); offset 1 misaligns both buffers (scalar path).
TEST(CudaElementwise, Bf16MatchesReference) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << NoGpuReason();
  Stream stream = testing::TestStream();
  testing::Rng rng(10);
  for (int64_t n : {1, 3, 257, 1 << 20}) {
    for (int offset : {0, 1}) {
      for (float beta : {0.0f, -2.0f}) {
        SCOPED_TRACE(::testing::Message() << "n=" << n << " offset=" << offset << " beta=" << beta);
        std::vector<bf16> x = testing::ToBF16(rng.Normal(n + offset)),
                          y = testing::ToBF16(rng.Normal(n + offset));
        if (beta == 0.0f) y = testing::ToBF16(testing::NaNs(n + offset));  // must not be read
        std::vector<double> ref(n);
        for (int64_t i = 0; i < n; ++i) {
          ref[i] = 0.5 * ToF32(x[offset + i]) + (beta == 0.0f ? 0.0 : beta * ToF32(y[offset + i]));
        }
        testing::DeviceBuffer<bf16> d_x(x), d_y(y);
        cuda::Axpby(0.5f, d_x.get() + offset, beta, d_y.get() + offset, n, stream.get());
        std::vector<bf16> got = d_y.Download();
        got.erase(got.begin(), got.begin() + offset);
        EXPECT_TRUE(testing::RelClose(got, ref, 5e-3));
        EXPECT_TRUE(testing::RoundedOnce(got, ref));
      }
    }
    const std::vector<bf16> x = testing::ToBF16(rng.Normal(n));
    double ref = 0;
    for (bf16 v : x) ref += static_cast<double>(ToF32(v)) * ToF32(v);
    testing::DeviceBuffer<bf16> d_x(x);
    testing::DeviceBuffer<double> d_ss(1);
    cuda::SumSquares(d_x.get(), n, d_ss.get(), stream.get());
    const double ss = d_ss.Download()[0];
    EXPECT_NEAR(ss, ref, 1e-12 * ref);
    cuda::SumSquares(d_x.get(), n, d_ss.get(), stream.get());  // deterministic
    EXPECT_EQ(d_ss.Download()[0], ss);
    testing::DeviceBuffer<bf16> d_f(n + 1);  // poisoned: the last element must stay NaN
    cuda::Fill(d_f.get(), 0.1f, n, stream.get());
    const std::vector<bf16> f = d_f.Download();
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(f[i].bits, ToBF16(0.1f).bits) << i;
    EXPECT_TRUE(std::isnan(ToF32(f[n])));
  }
}

}  // namespace
}  // namespace gtp::kernels
