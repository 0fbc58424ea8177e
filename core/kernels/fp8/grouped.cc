// The FP8 grouped linear (grouped.h): linear.h's functions on each group's
// slices.
#include "core/kernels/fp8/grouped.h"

#include <utility>

#include "core/kernels/fp8/internal.h"
#include "core/status.h"

namespace gtp::kernels::fp8 {

namespace {

// cuBLASLt's FP8 rule (block_gemm.h), applied to the group row counts on
// every device so the CPU refuses what the GPU would.
constexpr int64_t kRowMultiple = 16;

}  // namespace

Fp8GroupedInput::Fp8GroupedInput(const Exec& e, const Tensor& x, std::vector<int64_t> off)
    : e_(e), x_(x), off_(std::move(off)) {
  const char* op = "fp8::Fp8GroupedInput";
  internal::CheckMatrix(e_, x_, op, "x");
  GTP_CHECK(off_.size() >= 2 && off_.front() == 0 && off_.back() == x_.dim(0), op,
            ": off must have G + 1 >= 2 entries from 0 to x's ", x_.dim(0), " rows, got ",
            off_.size(), " entries ending at ", off_.empty() ? -1 : off_.back());
  for (size_t g = 0; g + 1 < off_.size(); ++g) {
    const int64_t r = off_[g + 1] - off_[g];
    GTP_CHECK(r >= 0 && r % kRowMultiple == 0, op, ": group ", g, " has ", r,
              " rows; FP8 GEMMs need a multiple of ", kRowMultiple,
              " (pad each group with zero rows)");
  }
  parts_.assign(off_.size() - 1, Fp8SharedInput(e_));
}

Tensor Fp8GroupedInput::slice(int g) const { return x_.Slice(off_[g], off_[g + 1]); }

const Fp8Matrix& Fp8GroupedInput::Rows(int g) { return parts_[g].Rows(slice(g)); }

const Fp8Matrix& Fp8GroupedInput::Transposed(int g) { return parts_[g].Transposed(slice(g)); }

void Fp8GroupedInput::Both(int g) { parts_[g].Both(slice(g)); }

void Fp8GroupedInput::BothOf(int g, Fp8InputAct act, const Tensor& pre) {
  GTP_CHECK(!pre.defined() || (pre.rank() == 2 && pre.dim(0) == x_.dim(0)),
            "fp8::Fp8GroupedInput::BothOf: pre ", pre.ToString(), " must have x's ", x_.dim(0),
            " rows");
  parts_[g].BothOf(act, slice(g), pre.defined() ? pre.Slice(off_[g], off_[g + 1]) : Tensor());
}

std::vector<Fp8WeightPair> QuantizeGroupedWeight(const Exec& e, const Tensor& w, int groups) {
  const char* op = "fp8::QuantizeGroupedWeight";
  internal::CheckMatrix(e, w, op, "w");
  GTP_CHECK(groups >= 1 && w.dim(0) % groups == 0, op, ": ", groups,
            " groups must divide w's rows, got w ", w.ToString());
  const int64_t n = w.dim(0) / groups;
  std::vector<Fp8WeightPair> out;
  out.reserve(groups);
  for (int g = 0; g < groups; ++g) out.push_back(QuantizeWeightPair(e, w.Slice(g * n, (g + 1) * n)));
  return out;
}

namespace {

// y's (or dx's) rows, grouped like `in`, and one weight per group.
void CheckGroups(const char* op, const Fp8GroupedInput& in, const std::vector<Fp8WeightPair>& w,
                 const Tensor& out) {
  GTP_CHECK(static_cast<int>(w.size()) == in.groups(), op, ": ", w.size(), " weights for ",
            in.groups(), " groups");
  GTP_CHECK(out.defined() && out.rank() == 2 && out.dim(0) == in.offsets().back(), op,
            ": the output must be [", in.offsets().back(), ", ·], got ",
            out.defined() ? out.ToString() : std::string("(undefined)"));
}

}  // namespace

void Fp8GroupedLinear(const Exec& e, Fp8GroupedInput& x, const std::vector<Fp8WeightPair>& w,
                      const Tensor& y) {
  CheckGroups("fp8::Fp8GroupedLinear", x, w, y);
  const std::vector<int64_t>& off = x.offsets();
  for (int g = 0; g < x.groups(); ++g) {
    if (x.rows(g) == 0) continue;
    Fp8Linear(e, x.Rows(g), w[g].w, y.Slice(off[g], off[g + 1]));
  }
}

void Fp8GroupedLinearBackwardData(const Exec& e, Fp8GroupedInput& dy,
                                  const std::vector<Fp8WeightPair>& w, const Tensor& dx) {
  CheckGroups("fp8::Fp8GroupedLinearBackwardData", dy, w, dx);
  const std::vector<int64_t>& off = dy.offsets();
  for (int g = 0; g < dy.groups(); ++g) {
    if (dy.rows(g) == 0) continue;
    Fp8LinearBackwardData(e, dy.Rows(g), w[g].wt, dx.Slice(off[g], off[g + 1]));
  }
}

void Fp8GroupedLinearBackwardWeight(const Exec& e, Fp8GroupedInput& dy, Fp8GroupedInput& x,
                                    float alpha, float beta, const Tensor& dw) {
  const char* op = "fp8::Fp8GroupedLinearBackwardWeight";
  GTP_CHECK(dy.offsets() == x.offsets(), op, ": dy and x must have the same row groups");
  const int G = dy.groups();
  const int64_t N = dy.slice(0).dim(1), K = x.slice(0).dim(1);
  GTP_CHECK(dw.defined() && dw.rank() == 2 && dw.dim(0) == G * N && dw.dim(1) == K &&
                dw.dtype() == DType::kF32,
            op, ": dw must be f32 [", G, "·", N, ", ", K, "], got ",
            dw.defined() ? dw.ToString() : std::string("(undefined)"));
  Tensor scratch;
  for (int g = 0; g < G; ++g) {
    const Tensor dwg = dw.Slice(g * N, (g + 1) * N);
    if (dy.rows(g) == 0) {
      // The product is zero: dw_g = beta·dw_g.
      if (beta == 0.0f) {
        ops::Fill(e, dwg, 0.0f);
      } else if (beta != 1.0f) {
        // dwg = beta·dwg through a copy (Axpby's x and y must not alias on CUDA).
        const Tensor old = e.Empty({N, K}, DType::kF32);
        ops::CopyInto(e, dwg, old);
        ops::Axpby(e, beta, old, 0.0f, dwg);
      }
      continue;
    }
    if (alpha == 1.0f) {
      Fp8LinearBackwardWeight(e, dy.Transposed(g), x.Transposed(g), dwg, beta);
      continue;
    }
    if (!scratch.defined()) scratch = e.Empty({N, K}, DType::kF32);
    Fp8LinearBackwardWeight(e, dy.Transposed(g), x.Transposed(g), scratch, 0.0f);
    ops::Axpby(e, alpha, scratch, beta, dwg);
  }
}

}  // namespace gtp::kernels::fp8
