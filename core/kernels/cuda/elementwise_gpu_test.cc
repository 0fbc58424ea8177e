#include <cuda_runtime.h>  // the typed cudaMalloc(T**, size_t) overload

#include <vector>

#include "core/cuda_runtime.h"
#include "core/kernels/cpu.h"
#include "core/kernels/cuda.h"
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

}  // namespace
}  // namespace gtp::kernels
