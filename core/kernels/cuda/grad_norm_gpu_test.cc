// cuda::GradNormWords / GradNormFinalize give the CPU versions' bits.
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/cuda_runtime.h"
#include "core/kernels/cpu.h"
#include "core/kernels/cuda.h"
#include "core/kernels/testing/gpu.h"
#include "gtest/gtest.h"

namespace gtp::kernels::testing {
namespace {

TEST(CudaGradNorm, MatchesCpuBits) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << NoGpuReason();
  for (double poison : {0.0, std::numeric_limits<double>::quiet_NaN()}) {
    std::vector<double> ss = {3.25, 1e-7, 123456.789, 2.0, 5.0};
    ss[4] += poison;
    std::vector<int64_t> bits(ss.size());
    std::memcpy(bits.data(), ss.data(), ss.size() * sizeof(double));
    DeviceBuffer<int64_t> d_ss(bits);
    DeviceBuffer<float> words(4), out(3);
    cuda::GradNormWords(reinterpret_cast<const double*>(d_ss.get()), 4, 5, words.get(), nullptr);
    cuda::GradNormWords(reinterpret_cast<const double*>(d_ss.get()), 2, 3, words.get() + 2, nullptr);
    cuda::GradNormFinalize(words.get(), 2, 1.5, out.get(), nullptr);
    float w_cpu[4], o_cpu[3];
    cpu::GradNormWords(ss.data(), 4, 5, w_cpu);
    cpu::GradNormWords(ss.data(), 2, 3, w_cpu + 2);
    cpu::GradNormFinalize(w_cpu, 2, 1.5, o_cpu);
    EXPECT_TRUE(BitEqualNaNsMatch(words.Download(), std::vector<float>(w_cpu, w_cpu + 4)));
    EXPECT_TRUE(BitEqualNaNsMatch(out.Download(), std::vector<float>(o_cpu, o_cpu + 3)));
    EXPECT_EQ(o_cpu[2], std::isnan(poison) ? 1.0f : 0.0f);
  }
}

}  // namespace
}  // namespace gtp::kernels::testing
