// GPU tests of cuda::AdamW: same bits as cpu::AdamW over several steps.
#include <cuda_runtime_api.h>

#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "core/cuda_runtime.h"
#include "core/kernels/cpu.h"
#include "core/kernels/cuda.h"
#include "core/kernels/testing/gpu.h"
#include "core/kernels/testing/harness.h"
#include "core/status.h"
#include "gtest/gtest.h"

namespace gtp::kernels::testing {
namespace {

TEST(AdamWGpu, BitIdenticalToCpuOverSteps) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << NoGpuReason();
  Stream stream = TestStream();
  Rng rng(81);
  for (int64_t n : {1, 3, 257, 100003}) {
    for (float wd : {0.0f, 0.1f}) {
      SCOPED_TRACE(absl::StrCat("n=", n, " wd=", wd));
      std::vector<float> p = rng.Normal(n), m(n, 0.0f), v(n, 0.0f);
      DeviceBuffer<float> d_p(p), d_m(m), d_v(v), d_g(n);
      AdamWParams hp;
      hp.lr = 3e-3f;
      hp.beta1 = 0.9f;
      hp.beta2 = 0.95f;
      hp.eps = 1e-8f;
      hp.weight_decay = wd;
      for (int64_t step = 1; step <= 5; ++step) {
        hp.step = step;
        const std::vector<float> g = rng.Normal(n, 0.0f, 0.1f);
        cpu::AdamW(p.data(), g.data(), m.data(), v.data(), n, hp);
        d_g.Upload(g);
        cuda::AdamW(d_p.get(), d_g.get(), d_m.get(), d_v.get(), n, hp, stream.get());
      }
      EXPECT_TRUE(BitEqual(d_p.Download(), p));
      EXPECT_TRUE(BitEqual(d_m.Download(), m));
      EXPECT_TRUE(BitEqual(d_v.Download(), v));
    }
  }
}

// The multi-tensor kernel gives the per-tensor CPU AdamW's bits on several
// tensors of odd sizes (chunk boundaries inside and between them), with
// per-tensor weight decay and the bf16 copy of the update. Tensor 4 sits one
// element into its buffers, so the kernel takes the one-at-a-time path there
// (the others run 4 elements per access).
TEST(CudaAdamWMulti, MatchesCpuPerTensorBitwise) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << NoGpuReason();
  Stream stream = TestStream();
  Rng rng(82);
  const std::vector<int64_t> sizes = {1, 65535, 65536, 65537, 200003, 7};
  std::vector<std::vector<float>> p, m, v;
  std::vector<std::unique_ptr<DeviceBuffer<float>>> dp, dm, dv, dg;
  std::vector<std::unique_ptr<DeviceBuffer<bf16>>> db;
  std::vector<AdamWSegment> segs;
  auto off = [](size_t i) -> int64_t { return i == 4 ? 1 : 0; };
  auto shifted = [](const std::vector<float>& x, int64_t k) {
    std::vector<float> y(k, 0.0f);
    y.insert(y.end(), x.begin(), x.end());
    return y;
  };
  for (size_t i = 0; i < sizes.size(); ++i) {
    const int64_t n = sizes[i], k = off(i);
    p.push_back(rng.Normal(n));
    m.push_back(std::vector<float>(n, 0.0f));
    v.push_back(std::vector<float>(n, 0.0f));
    dp.push_back(std::make_unique<DeviceBuffer<float>>(shifted(p[i], k)));
    dm.push_back(std::make_unique<DeviceBuffer<float>>(shifted(m[i], k)));
    dv.push_back(std::make_unique<DeviceBuffer<float>>(shifted(v[i], k)));
    dg.push_back(std::make_unique<DeviceBuffer<float>>(n + k));
    db.push_back(std::make_unique<DeviceBuffer<bf16>>(n + k));
    AdamWSegment s;
    s.p = dp[i]->get() + k;
    s.p_bf16 = i % 2 == 0 ? db[i]->get() + k : nullptr;
    s.g = dg[i]->get() + k;
    s.m = dm[i]->get() + k;
    s.v = dv[i]->get() + k;
    s.n = n;
    s.weight_decay = i % 3 == 0 ? 0.1f : 0.0f;
    segs.push_back(s);
  }
  const std::vector<cuda::AdamWChunk> chunks = cuda::AdamWChunks(segs.data(), static_cast<int>(segs.size()));
  std::vector<uint8_t> seg_bytes(segs.size() * sizeof(AdamWSegment)), chunk_bytes(chunks.size() * sizeof(cuda::AdamWChunk));
  std::memcpy(seg_bytes.data(), segs.data(), seg_bytes.size());
  std::memcpy(chunk_bytes.data(), chunks.data(), chunk_bytes.size());
  DeviceBuffer<uint8_t> d_segs(seg_bytes), d_chunks(chunk_bytes);
  AdamWParams hp;
  hp.lr = 1e-3f;
  hp.beta1 = 0.9f;
  hp.beta2 = 0.95f;
  for (int64_t step = 1; step <= 3; ++step) {
    hp.step = step;
    for (size_t i = 0; i < sizes.size(); ++i) {
      const std::vector<float> g = rng.Normal(sizes[i], 0.0f, 0.1f);
      AdamWParams h = hp;
      h.weight_decay = segs[i].weight_decay;
      cpu::AdamW(p[i].data(), g.data(), m[i].data(), v[i].data(), sizes[i], h);
      dg[i]->Upload(shifted(g, off(i)));
    }
    cuda::AdamWMulti(reinterpret_cast<const AdamWSegment*>(d_segs.get()),
                     reinterpret_cast<const cuda::AdamWChunk*>(d_chunks.get()),
                     static_cast<int>(chunks.size()), hp, stream.get());
  }
  for (size_t i = 0; i < sizes.size(); ++i) {
    SCOPED_TRACE(sizes[i]);
    auto tail = [&](auto x) {
      x.erase(x.begin(), x.begin() + off(i));
      return x;
    };
    EXPECT_TRUE(BitEqual(tail(dp[i]->Download()), p[i]));
    EXPECT_TRUE(BitEqual(tail(dm[i]->Download()), m[i]));
    EXPECT_TRUE(BitEqual(tail(dv[i]->Download()), v[i]));
    if (i % 2 == 0) {
      std::vector<bf16> want(sizes[i]);
      for (int64_t j = 0; j < sizes[i]; ++j) want[j] = gtp::ToBF16(p[i][j]);
      EXPECT_TRUE(BitEqual(tail(db[i]->Download()), want));
    }
  }
}

}  // namespace
}  // namespace gtp::kernels::testing
