#include <cstring>
#include <vector>

#include "core/cuda_runtime.h"
#include "core/philox.h"
#include "core/philox_testing.h"
#include "gtest/gtest.h"

namespace gtp {
namespace {

TEST(PhiloxGpu, BitIdenticalToCpu) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << NoGpuReason();
  const int n = 1 << 16;
  for (uint64_t key : {uint64_t{0}, uint64_t{42}, KeyFromName("layers.0.mlp.fc1.weight", 1234)}) {
    const uint64_t first = key == 42 ? (1ull << 33) : 0;  // 64-bit indices too
    std::vector<uint32_t> raw(4 * n);
    std::vector<float> uni(n), nrm(n);
    ASSERT_TRUE(testing_internal::PhiloxOnDevice(key, first, n, raw.data(), uni.data(), nrm.data()).ok());
    for (int i = 0; i < n; ++i) {
      Philox4 r = PhiloxRaw(key, first + i, 0);
      for (int k = 0; k < 4; ++k) ASSERT_EQ(raw[4 * i + k], r.v[k]) << i;
      float u = PhiloxUniform(key, first + i), z = PhiloxNormal(key, first + i);
      ASSERT_EQ(std::memcmp(&uni[i], &u, 4), 0) << i;
      ASSERT_EQ(std::memcmp(&nrm[i], &z, 4), 0) << "normal differs at " << i << ": gpu " << nrm[i]
                                                << " cpu " << z;
    }
  }
}

}  // namespace
}  // namespace gtp
