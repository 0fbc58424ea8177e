// moe::GatherAdd on the CPU (layers/moe/combine.h): the dispatch's backward
// on one rank in one pass. Checked bit for bit against what it replaces — a
// zeroed f32 dx, ops::EmbeddingBackward with the inverse permutation (rows
// added in row order), ops::Axpby(1, add, 1, dx) and ops::Cast — and against
// a double-precision sum, within f32 rounding (each of at most 9 f32 adds
// rounds once: 9·2⁻²⁴·Σ|terms|, and bf16 dx adds half a bf16 step). Slots
// dropped (pos < 0), rows no slot names, k from 1 to 8, f32 and bf16 xe and
// dx, with and without add.
#include "layers/moe/combine.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "core/allocator.h"
#include "core/dtype.h"
#include "core/kernels/ops.h"
#include "core/kernels/testing/harness.h"
#include "gtest/gtest.h"

namespace gtp::layers::moe {
namespace {

using kernels::testing::Rng;

struct Case {
  int64_t n;
  int k;
  int64_t C;
  DType xe, dx;
  bool add;
};

std::vector<uint8_t> Bytes(const Tensor& t) {
  const auto* p = static_cast<const uint8_t*>(t.raw_data());
  return std::vector<uint8_t>(p, p + t.nbytes());
}

double ToDouble(const Tensor& t, int64_t i) {
  return t.dtype() == DType::kBF16 ? ToF32(t.data<bf16>()[i]) : t.data<float>()[i];
}

TEST(MoeGatherAdd, MatchesTheFourPassesItReplacesAndADoubleSum) {
  HeapAllocator alloc;
  const kernels::Exec e = kernels::Exec::Cpu(alloc);
  const Case cases[] = {{5, 1, 6, DType::kF32, DType::kF32, false},
                        {7, 2, 40, DType::kBF16, DType::kBF16, true},
                        {9, 3, 33, DType::kBF16, DType::kF32, true},
                        {4, 8, 16, DType::kF32, DType::kBF16, true},
                        {64, 2, 128, DType::kBF16, DType::kBF16, false},
                        // f32 rows and dx, k > 2: the only cases where the order of the
                        // adds shows in the bits (bf16 rows add exactly in f32 here).
                        {9, 3, 33, DType::kF32, DType::kF32, true},
                        {6, 8, 64, DType::kF32, DType::kF32, false}};
  Rng rng(7);
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message()
                 << "n=" << c.n << " k=" << c.k << " C=" << c.C << " xe=" << DTypeName(c.xe)
                 << " dx=" << DTypeName(c.dx) << " add=" << c.add);
    const int64_t S = c.n * c.k, M = S + 3;  // three rows no slot names
    // Each row named by at most one slot, in a shuffled order; about one slot in five dropped.
    std::vector<int32_t> rows(M);
    std::iota(rows.begin(), rows.end(), 0);
    const std::vector<int32_t> order = rng.Ints(M, 0, 1 << 30);
    std::sort(rows.begin(), rows.end(), [&](int32_t a, int32_t b) { return order[a] < order[b]; });
    const std::vector<int32_t> drop = rng.Ints(S, 0, 4);
    Tensor pos = e.Empty({S}, DType::kI32), perm = e.Empty({M}, DType::kI32);
    std::fill(perm.data<int32_t>(), perm.data<int32_t>() + M, -1);
    for (int64_t s = 0; s < S; ++s) {
      pos.data<int32_t>()[s] = drop[s] == 0 ? -1 : rows[s];
      if (drop[s] != 0) perm.data<int32_t>()[rows[s]] = static_cast<int32_t>(s / c.k);
    }
    Tensor xe = e.Empty({M, c.C}, c.xe);
    const std::vector<float> xv = rng.Normal(M * c.C);
    for (int64_t i = 0; i < M * c.C; ++i) {
      if (c.xe == DType::kBF16) {
        xe.data<bf16>()[i] = ToBF16(xv[i]);
      } else {
        xe.data<float>()[i] = xv[i];
      }
    }
    Tensor add;
    if (c.add) {
      add = e.Empty({c.n, c.C}, DType::kF32);
      const std::vector<float> av = rng.Normal(c.n * c.C);
      std::copy(av.begin(), av.end(), add.data<float>());
    }
    Tensor dx = e.Empty({c.n, c.C}, c.dx);
    GatherAdd(e, xe, pos, add, dx);

    // What it replaces.
    Tensor dx32 = e.Zeros({c.n, c.C}, DType::kF32);
    kernels::ops::EmbeddingBackward(e, perm, xe, dx32, 0);
    if (c.add) kernels::ops::Axpby(e, 1.0f, add, 1.0f, dx32);
    Tensor old = dx32;
    if (c.dx != DType::kF32) {
      old = e.Empty({c.n, c.C}, c.dx);
      kernels::ops::Cast(e, dx32, old);
    }
    EXPECT_EQ(Bytes(dx), Bytes(old)) << "not the bits of the four passes";

    // A double sum.
    for (int64_t t = 0; t < c.n; ++t) {
      for (int64_t col = 0; col < c.C; ++col) {
        double ref = c.add ? add.data<float>()[t * c.C + col] : 0.0, mag = std::abs(ref);
        for (int j = 0; j < c.k; ++j) {
          const int32_t p = pos.data<int32_t>()[t * c.k + j];
          if (p < 0) continue;
          const double v = ToDouble(xe, p * c.C + col);
          ref += v;
          mag += std::abs(v);
        }
        const double got = ToDouble(dx, t * c.C + col);
        ASSERT_TRUE(std::isfinite(got));
        // f32: at most 9 adds, each off by ≤ 2⁻²⁴ of the partial sum ≤ Σ|terms|; a bf16 dx
        // then rounds once more, by ≤ 2⁻⁸ of its value.
        const double f32_err = 9 * std::ldexp(mag, -24);
        const double tol =
            f32_err + (c.dx == DType::kBF16 ? std::ldexp(std::abs(ref) + f32_err, -8) : 0.0);
        ASSERT_NEAR(got, ref, tol + 1e-30) << "t=" << t << " c=" << col;
      }
    }
  }
}

TEST(MoeGatherAdd, RefusesMoreThanEightSlotsAToken) {
  HeapAllocator alloc;
  const kernels::Exec e = kernels::Exec::Cpu(alloc);
  Tensor xe = e.Zeros({9, 4}, DType::kF32), pos = e.Zeros({9}, DType::kI32),
         dx = e.Empty({1, 4}, DType::kF32);
  EXPECT_DEATH(GatherAdd(e, xe, pos, Tensor(), dx), "9 slots a token, at most 8");
}

}  // namespace
}  // namespace gtp::layers::moe
