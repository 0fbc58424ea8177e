// core/kernels/fp8/grouped.h — the FP8 form of mixture of experts' grouped
// linear (ops::GroupedLinear and its two backward passes): G independent
// linears over consecutive row groups, each through linear.h's block-scaled
// GEMMs.
//
//   group g: rows [off[g], off[g+1]) of x, weight w_g = rows [g·N, (g+1)·N)
//            of the stacked w [G·N, K]
//   forward  y_g  = x_g·w_gᵀ          x_g 1×128 along K, w_g 128×128
//   dgrad    dx_g = dy_g·w_g          dy_g 1×128 along N, w_gᵀ w_g's tiles transposed
//   wgrad    dw_g = alpha·dy_gᵀ·x_g + beta·dw_g   dy_gᵀ, x_gᵀ 1×128 along the group's rows
//
// Each group is quantised on its own: a weight's tiles never straddle two
// experts, and the wgrad's 1×128 blocks along the rows start at the group's
// first row, so the results are those of linear.h's functions called on each
// group's slices (grouped_test.cc checks it bit for bit). cuBLASLt's FP8
// GEMMs need every dimension a multiple of 16 (block_gemm.h): every group's
// row count must be one here, on every device (the caller pads its groups
// with zero rows: layers/moe/experts.cc); N and K are checked by the GEMM.
//
//   auto w = fp8::QuantizeGroupedWeight(e, w_stacked, G);
//   fp8::Fp8GroupedInput xq(e, x, off);
//   fp8::Fp8GroupedLinear(e, xq, w, y);
#pragma once

#include <cstdint>
#include <vector>

#include "core/kernels/fp8/linear.h"
#include "core/kernels/ops.h"
#include "core/tensor.h"

namespace gtp::kernels::fp8 {

// One operand's per-group quantisations (linear.h's Fp8SharedInput for each
// group's row slice), made on first use and kept with this object.
class Fp8GroupedInput {
 public:
  // x [M, K] (f32 or bf16) in groups by off (G + 1 entries from 0 to M,
  // nondecreasing, each difference a multiple of 16: aborts naming the
  // first that is not).
  Fp8GroupedInput(const Exec& e, const Tensor& x, std::vector<int64_t> off);

  int groups() const { return static_cast<int>(off_.size()) - 1; }
  int64_t rows(int g) const { return off_[g + 1] - off_[g]; }
  const std::vector<int64_t>& offsets() const { return off_; }
  // Group g's rows of x, [rows(g), K].
  Tensor slice(int g) const;

  // Group g's rows quantised 1×128 along K (a forward's x, a dgrad's dy).
  const Fp8Matrix& Rows(int g);
  // Their transpose quantised 1×128 along the group's rows (a wgrad's operand).
  const Fp8Matrix& Transposed(int g);
  // Both from one read (Fp8SharedInput::Both).
  void Both(int g);
  // Both quantisations of group g's a = act(x) from one read, a never written
  // (Fp8SharedInput::BothOf; pre [M, K] like x for kGeluGrad, undefined for
  // kGelu); then Rows(g) and Transposed(g) give a's codes. Must be group g's
  // first quantisation.
  void BothOf(int g, Fp8InputAct act, const Tensor& pre);

 private:
  Exec e_;
  Tensor x_;
  std::vector<int64_t> off_;
  std::vector<Fp8SharedInput> parts_;
};

// The G weights of a stacked w [G·N, K], each quantised 128×128 with its
// transpose's codes (QuantizeWeightPair of each row slice). G ≥ 1 must
// divide w's rows.
std::vector<Fp8WeightPair> QuantizeGroupedWeight(const Exec& e, const Tensor& w, int groups);

// y [M, N]: group g's rows = x_g·w_gᵀ (w[g].w: QuantizeGroupedWeight's). y's
// rows of an empty group: none. w.size() must be x.groups().
void Fp8GroupedLinear(const Exec& e, Fp8GroupedInput& x, const std::vector<Fp8WeightPair>& w,
                      const Tensor& y);

// dx [M, K]: group g's rows = dy_g·w_g, from w_gᵀ's codes (w[g].wt).
void Fp8GroupedLinearBackwardData(const Exec& e, Fp8GroupedInput& dy,
                                  const std::vector<Fp8WeightPair>& w, const Tensor& dx);

// dw [G·N, K] f32: rows [g·N, (g+1)·N) = alpha·dy_gᵀ·x_g + beta·(those rows)
// (ops::GroupedLinearBackwardWeight's contract: an empty group scales its
// rows by beta). dy and x must have the same groups. With alpha ≠ 1 each
// group's product goes through f32 scratch and one Axpby.
void Fp8GroupedLinearBackwardWeight(const Exec& e, Fp8GroupedInput& dy, Fp8GroupedInput& x,
                                    float alpha, float beta, const Tensor& dw);

}  // namespace gtp::kernels::fp8
