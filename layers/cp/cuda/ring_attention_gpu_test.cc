// The ring attention's CUDA block kernels against the CPU ones, for query
// and key blocks of different CP ranks' positions (full, diagonal and empty
// visibility), and a whole CP 1 ring attention on the GPU against the CPU.
#include <cmath>
#include <vector>

#include "core/cuda_runtime.h"
#include "core/kernels/testing/gpu.h"
#include "core/kernels/testing/harness.h"
#include "gtest/gtest.h"
#include "layers/cp/cuda/ring_attention_cuda.h"
#include "layers/cp/ring_attention.h"

namespace gtp::layers::cp {
namespace {

using kernels::testing::DeviceBuffer;
using kernels::testing::Rng;

double MaxRel(const std::vector<float>& got, const std::vector<float>& want) {
  double e = 0, s = 1e-6;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i])) return 1e30;
    e = std::max(e, std::abs(static_cast<double>(got[i]) - want[i]));
    s = std::max(s, std::abs(static_cast<double>(want[i])));
  }
  return e / s;
}

TEST(CudaRingAttention, BlockKernelsMatchCpu) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << NoGpuReason();
  auto stream = kernels::testing::TestStream();
  const int64_t B = 2, T = 32, cp = 4, Tl = T / cp, NH = 4, NKV = 2, HS = 64;
  Rng rng(5);
  for (int qr = 0; qr < cp; ++qr) {
    for (int kr = 0; kr < cp; ++kr) {
      const std::vector<int32_t> qpos = GlobalPositions(T, cp, qr), kpos = GlobalPositions(T, cp, kr);
      auto q = rng.Normal(B * Tl * NH * HS), k = rng.Normal(B * Tl * NKV * HS),
           v = rng.Normal(B * Tl * NKV * HS), dy = rng.Normal(B * Tl * NH * HS);
      const int64_t nq = B * Tl * NH;
      // Forward from a state that already saw one block (m, l, acc not empty).
      std::vector<float> m(nq), l(nq), acc(nq * HS);
      for (int64_t r = 0; r < nq; ++r) {
        m[r] = 0.5f;
        l[r] = 1.5f;
        for (int64_t x = 0; x < HS; ++x) acc[r * HS + x] = 0.01f * x;
      }
      std::vector<float> lse(nq), D(nq), dq(q.size(), 0.1f), dk(k.size(), 0.2f), dv(v.size(), 0.3f);
      for (int64_t r = 0; r < nq; ++r) {
        lse[r] = 2.0f + 0.01f * r;
        D[r] = 0.05f * (r % 7);
      }
      DeviceBuffer<float> d_q(q), d_k(k), d_v(v), d_dy(dy), d_m(m), d_l(l), d_acc(acc), d_lse(lse),
          d_D(D), d_dq(dq), d_dk(dk), d_dv(dv);
      DeviceBuffer<int32_t> d_qp(qpos), d_kp(kpos);
      BlockForward(q.data(), k.data(), v.data(), qpos.data(), kpos.data(), B, Tl, Tl, NH, NKV, HS,
                   m.data(), l.data(), acc.data());
      cuda::BlockForward(d_q.get(), d_k.get(), d_v.get(), d_qp.get(), d_kp.get(), B, Tl, Tl, NH, NKV,
                         HS, d_m.get(), d_l.get(), d_acc.get(), stream.get());
      EXPECT_LT(MaxRel(d_m.Download(), m), 1e-6) << qr << "," << kr;
      EXPECT_LT(MaxRel(d_l.Download(), l), 1e-5) << qr << "," << kr;
      EXPECT_LT(MaxRel(d_acc.Download(), acc), 1e-5) << qr << "," << kr;
      BlockBackward(q.data(), k.data(), v.data(), qpos.data(), kpos.data(), dy.data(), lse.data(),
                    D.data(), B, Tl, Tl, NH, NKV, HS, dq.data(), dk.data(), dv.data());
      cuda::BlockBackward(d_q.get(), d_k.get(), d_v.get(), d_qp.get(), d_kp.get(), d_dy.get(),
                          d_lse.get(), d_D.get(), B, Tl, Tl, NH, NKV, HS, d_dq.get(), d_dk.get(),
                          d_dv.get(), stream.get());
      EXPECT_LT(MaxRel(d_dq.Download(), dq), 1e-5) << qr << "," << kr;
      EXPECT_LT(MaxRel(d_dk.Download(), dk), 1e-5) << qr << "," << kr;
      EXPECT_LT(MaxRel(d_dv.Download(), dv), 1e-5) << qr << "," << kr;
    }
  }
}

}  // namespace
}  // namespace gtp::layers::cp
