// core/kernels/ops/grouped_gemm.cc — Dispatch of the grouped GEMMs of mixture
// of experts (cpu/grouped_gemm.cc, cuda/grouped_gemm.cc): GroupedGemm and
// GroupedLinear with its backward passes over expert row offsets.
#include <climits>
#include <cstddef>
#include <vector>

#include "core/kernels/cpu.h"
#include "core/kernels/cuda.h"
#include "core/kernels/ops.h"
#include "core/kernels/ops/internal/dispatch.h"
#include "core/status.h"

namespace gtp::kernels::ops {

using internal::Blas;
using internal::CheckOn;
using internal::OnDevice;
using internal::Rows;

namespace {

void RunGroupedGemm(const Exec& e, const GemmDesc& d, const std::vector<GemmGroup>& groups) {
  GTP_CHECK(groups.size() <= static_cast<size_t>(INT_MAX), "GroupedGemm: ", groups.size(),
            " groups exceed int");
  const int count = static_cast<int>(groups.size());
  OnDevice(
      e, [&] { cpu::GroupedGemm(d, groups.data(), count); },
      [&] { cuda::GroupedGemm(Blas(e), d, groups.data(), count, e.stream); });
}

// Checks the expert row offsets of a grouped linear op over M rows: G + 1
// entries, off[0] = 0, nondecreasing, off[G] = M. Returns G.
int64_t CheckOffsets(const char* op, const std::vector<int64_t>& off, int64_t M) {
  GTP_CHECK(off.size() >= 2, op, ": off needs G + 1 >= 2 entries, got ", off.size());
  GTP_CHECK(off.front() == 0 && off.back() == M, op, ": off must run from 0 to the ", M,
            " rows, got off[0]=", off.front(), " off[G]=", off.back());
  for (size_t g = 0; g + 1 < off.size(); ++g) {
    GTP_CHECK(off[g] <= off[g + 1], op, ": off must be nondecreasing, got off[", g, "]=", off[g],
              " > off[", g + 1, "]=", off[g + 1]);
  }
  return static_cast<int64_t>(off.size()) - 1;
}

// Element `i` of a contiguous tensor's buffer.
char* At(const Tensor& t, int64_t i) {
  return static_cast<char*>(t.raw_data()) + static_cast<size_t>(i) * SizeOf(t.dtype());
}

}  // namespace

void GroupedGemm(const Exec& e, const GemmDesc& d, const std::vector<GemmGroup>& groups) {
  RunGroupedGemm(e, d, groups);
}

void GroupedLinear(const Exec& e, const Tensor& x, const Tensor& w, const std::vector<int64_t>& off,
                   const Tensor& y) {
  CheckOn(e, x, "x");
  CheckOn(e, w, "w");
  CheckOn(e, y, "y");
  GTP_CHECK(w.rank() == 2, "GroupedLinear: w must be [G·N, K], got ", w.ToString());
  const int64_t M = Rows(x), K = x.dim(-1), N = y.dim(-1);
  const int64_t G = CheckOffsets("GroupedLinear", off, M);
  GTP_CHECK(w.dim(0) == G * N && w.dim(1) == K && Rows(y) == M, "GroupedLinear: want x [M, K], w [",
            G, "·N, K], y [M, N] for G=", G, " experts; got x ", x.ToString(), " w ", w.ToString(),
            " y ", y.ToString());
  GTP_CHECK(x.dtype() == w.dtype(), "GroupedLinear: x and w dtypes differ (x ",
            DTypeName(x.dtype()), ", w ", DTypeName(w.dtype()), ")");
  GemmDesc d;
  d.trans_b = true;
  d.ab_type = x.dtype();
  d.c_type = y.dtype();
  std::vector<GemmGroup> groups(G);
  for (int64_t g = 0; g < G; ++g) {
    GemmGroup& p = groups[g];
    p.m = off[g + 1] - off[g], p.n = N, p.k = K;
    p.a = At(x, off[g] * K);
    p.b = At(w, g * N * K);
    p.c = At(y, off[g] * N);
  }
  RunGroupedGemm(e, d, groups);
}

void GroupedLinearBackwardData(const Exec& e, const Tensor& dy, const Tensor& w,
                               const std::vector<int64_t>& off, const Tensor& dx) {
  CheckOn(e, dy, "dy");
  CheckOn(e, w, "w");
  CheckOn(e, dx, "dx");
  GTP_CHECK(w.rank() == 2, "GroupedLinearBackwardData: w must be [G·N, K], got ", w.ToString());
  const int64_t M = Rows(dy), N = dy.dim(-1), K = dx.dim(-1);
  const int64_t G = CheckOffsets("GroupedLinearBackwardData", off, M);
  GTP_CHECK(w.dim(0) == G * N && w.dim(1) == K && Rows(dx) == M,
            "GroupedLinearBackwardData: want dy [M, N], w [", G, "·N, K], dx [M, K] for G=", G,
            " experts; got dy ", dy.ToString(), " w ", w.ToString(), " dx ", dx.ToString());
  GTP_CHECK(dy.dtype() == w.dtype(), "GroupedLinearBackwardData: dy and w dtypes differ (dy ",
            DTypeName(dy.dtype()), ", w ", DTypeName(w.dtype()), ")");
  GemmDesc d;
  d.ab_type = dy.dtype();
  d.c_type = dx.dtype();
  std::vector<GemmGroup> groups(G);
  for (int64_t g = 0; g < G; ++g) {
    GemmGroup& p = groups[g];
    p.m = off[g + 1] - off[g], p.n = K, p.k = N;
    p.a = At(dy, off[g] * N);
    p.b = At(w, g * N * K);
    p.c = At(dx, off[g] * K);
  }
  RunGroupedGemm(e, d, groups);
}

void GroupedLinearBackwardWeight(const Exec& e, const Tensor& dy, const Tensor& x,
                                 const std::vector<int64_t>& off, float alpha, float beta,
                                 const Tensor& dw) {
  CheckOn(e, dy, "dy");
  CheckOn(e, x, "x");
  CheckOn(e, dw, "dw");
  GTP_CHECK(dw.rank() == 2, "GroupedLinearBackwardWeight: dw must be [G·N, K], got ",
            dw.ToString());
  const int64_t M = Rows(dy), N = dy.dim(-1), K = x.dim(-1);
  const int64_t G = CheckOffsets("GroupedLinearBackwardWeight", off, M);
  GTP_CHECK(Rows(x) == M && dw.dim(0) == G * N && dw.dim(1) == K,
            "GroupedLinearBackwardWeight: want dy [M, N], x [M, K], dw [", G, "·N, K] for G=", G,
            " experts; got dy ", dy.ToString(), " x ", x.ToString(), " dw ", dw.ToString());
  GTP_CHECK(dy.dtype() == x.dtype(), "GroupedLinearBackwardWeight: dy and x dtypes differ (dy ",
            DTypeName(dy.dtype()), ", x ", DTypeName(x.dtype()), ")");
  GTP_CHECK(dw.dtype() == DType::kF32, "GroupedLinearBackwardWeight: dw must be f32, got ",
            dw.ToString());
  GemmDesc d;
  d.trans_a = true;
  d.alpha = alpha;
  d.beta = beta;
  d.ab_type = dy.dtype();
  d.c_type = DType::kF32;
  std::vector<GemmGroup> groups(G);
  for (int64_t g = 0; g < G; ++g) {
    GemmGroup& p = groups[g];
    p.m = N, p.n = K, p.k = off[g + 1] - off[g];
    p.a = At(dy, off[g] * N);
    p.b = At(x, off[g] * K);
    p.c = At(dw, g * N * K);
  }
  RunGroupedGemm(e, d, groups);
}

}  // namespace gtp::kernels::ops
