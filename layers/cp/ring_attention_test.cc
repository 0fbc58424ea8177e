// Ring attention against the single-rank causal attention (ops::Attention*,
// the whole sequence on one rank): every local row's output and the q, k,
// v gradients at its global position, CP 1, 2, 4, with grouped-query heads.
#include "layers/cp/ring_attention.h"

#include <cmath>
#include <vector>

#include "comm/local/local_communicator.h"
#include "core/philox.h"
#include "gtest/gtest.h"

namespace gtp::layers::cp {
namespace {

TEST(CpPositions, LoadBalancedChunks) {
  // T = 8, CP 2: chunks of 2; rank 0 holds chunks 0 and 3, rank 1 chunks 1 and 2.
  EXPECT_EQ(GlobalPositions(8, 2, 0), (std::vector<int32_t>{0, 1, 6, 7}));
  EXPECT_EQ(GlobalPositions(8, 2, 1), (std::vector<int32_t>{2, 3, 4, 5}));
}

TEST(RingAttention, MatchesSingleRankAttention) {
  const int64_t B = 2, T = 16, NH = 4, NKV = 2, HS = 8;
  HeapAllocator host;
  kernels::Exec e = kernels::Exec::Cpu(host);
  auto fill = [&](const char* what, int64_t heads) {
    Tensor t = Tensor::Empty({B, T, heads, HS}, DType::kF32, host);
    for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = PhiloxNormal(KeyFromName(what), i);
    return t;
  };
  Tensor q = fill("q", NH), k = fill("k", NKV), v = fill("v", NKV), dy = fill("dy", NH);
  Tensor y = Tensor::Empty(q.shape(), DType::kF32, host), att = Tensor::Empty({B, NH, T, T}, DType::kF32, host);
  kernels::ops::AttentionForward(e, q, k, v, y, att);
  Tensor dq = Tensor::Empty(q.shape(), DType::kF32, host), dk = Tensor::Empty(k.shape(), DType::kF32, host),
         dv = Tensor::Empty(v.shape(), DType::kF32, host);
  kernels::ops::AttentionBackward(e, dy, q, k, v, att, dq, dk, dv);
  for (int cp : {1, 2, 4}) {
    absl::Status st = comm::RunRanks(cp, [&](comm::Communicator& w) -> absl::Status {
      HeapAllocator a;
      kernels::Exec ex = kernels::Exec::Cpu(a);
      const int64_t Tl = T / cp;
      const std::vector<int32_t> pos = GlobalPositions(T, cp, w.rank());
      // Local rows of a [B, T, heads, HS] tensor.
      auto local = [&](const Tensor& full, int64_t heads) {
        Tensor t = Tensor::Empty({B, Tl, heads, HS}, DType::kF32, a);
        for (int64_t b = 0; b < B; ++b)
          for (int64_t i = 0; i < Tl; ++i)
            for (int64_t x = 0; x < heads * HS; ++x)
              t.data<float>()[(b * Tl + i) * heads * HS + x] =
                  full.data<float>()[(b * T + pos[i]) * heads * HS + x];
        return t;
      };
      RingAttention ring(&w, B, T, NH, NKV, HS, ex);
      Tensor ly = Tensor::Empty({B, Tl, NH, HS}, DType::kF32, a);
      GTP_RETURN_IF_ERROR(ring.Forward(local(q, NH), local(k, NKV), local(v, NKV), ly));
      Tensor ldq = Tensor::Empty({B, Tl, NH, HS}, DType::kF32, a),
             ldk = Tensor::Empty({B, Tl, NKV, HS}, DType::kF32, a),
             ldv = Tensor::Empty({B, Tl, NKV, HS}, DType::kF32, a);
      GTP_RETURN_IF_ERROR(ring.Backward(local(dy, NH), ldq, ldk, ldv));
      auto err = [&](const Tensor& got, const Tensor& want_full, int64_t heads) {
        Tensor want = local(want_full, heads);
        double e = 0, s = 0;
        for (int64_t i = 0; i < got.numel(); ++i) {
          e = std::max(e, std::abs(static_cast<double>(got.data<float>()[i]) - want.data<float>()[i]));
          s = std::max(s, std::abs(static_cast<double>(want.data<float>()[i])));
          if (!std::isfinite(got.data<float>()[i])) return 1e30;
        }
        return e / s;
      };
      EXPECT_LT(err(ly, y, NH), 2e-6) << "cp " << cp << " y";
      EXPECT_LT(err(ldq, dq, NH), 5e-6) << "cp " << cp << " dq";
      EXPECT_LT(err(ldk, dk, NKV), 5e-6) << "cp " << cp << " dk";
      EXPECT_LT(err(ldv, dv, NKV), 5e-6) << "cp " << cp << " dv";
      return absl::OkStatus();
    });
    ASSERT_TRUE(st.ok()) << st;
  }
}

}  // namespace
}  // namespace gtp::layers::cp
