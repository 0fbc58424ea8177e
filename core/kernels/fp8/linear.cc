// The FP8 linear GEMMs (linear.h): quantise, then BlockScaledGemm.
#include "core/kernels/fp8/linear.h"

#include <utility>

#include "core/kernels/fp8/block_quant.h"
#include "core/kernels/fp8/internal.h"
#include "core/kernels/fp8/lt_scale_layout.h"
#include "core/status.h"

namespace gtp::kernels::fp8 {
namespace {

// Scratch for an operand [rows, K] in layout l; on CUDA with the scales'
// cuBLASLt copy, which the quantiser writes and the GEMM reads as is.
Fp8Matrix Scratch(const Exec& e, int64_t rows, int64_t K, Fp8Layout l) {
  Fp8Matrix m{e.Empty({rows, K}, DType::kF8E4M3), e.Empty(Fp8ScaleShape(rows, K, l)), l};
  if (e.is_cuda()) {
    m.lt_scales = e.Empty({LtScaleCount(l == Fp8Layout::kTile128x128, rows, K)}, DType::kF32);
  }
  return m;
}

// m [R, C] quantised in layout l into scratch.
Fp8Matrix Quantize(const Exec& e, const Tensor& m, Fp8Layout l) {
  Fp8Matrix q = Scratch(e, m.dim(0), m.dim(1), l);
  QuantizeBlocks(e, m, l, q.q, q.scales, q.lt_scales);
  return q;
}

// mᵀ [C, R] quantised 1×128 along R, read from m [R, C].
Fp8Matrix QuantizeTransposed(const Exec& e, const Tensor& m) {
  Fp8Matrix q = Scratch(e, m.dim(1), m.dim(0), Fp8Layout::kRow1x128);
  QuantizeRowsTransposed(e, m, q.q, q.scales, q.lt_scales);
  return q;
}

void CheckShapes(const Exec& e, const Tensor& a, const Tensor& b, const Tensor& c, const char* op,
                 const char* an, const char* bn, const char* cn) {
  internal::CheckMatrix(e, a, op, an);
  internal::CheckMatrix(e, b, op, bn);
  internal::CheckMatrix(e, c, op, cn);
}

// A quantised operand in the layout the GEMM's role needs.
void CheckQuantized(const Fp8Matrix& m, Fp8Layout l, const char* op, const char* what) {
  GTP_CHECK(m.q.defined() && m.q.rank() == 2 && m.layout == l, op, ": ", what, " must be ",
            Fp8LayoutName(l), " codes, got ", Fp8LayoutName(m.layout), " ",
            m.q.defined() ? m.q.ToString() : std::string("(undefined)"));
}

}  // namespace

// ---- Fp8SharedInput ------------------------------------------------------------------

void Fp8SharedInput::Bind(const Tensor& x) {
  const char* op = "fp8::Fp8SharedInput";
  internal::CheckMatrix(e_, x, op, "x");
  if (!x_.defined()) {
    x_ = x;  // keeps the storage alive: its address cannot be reused meanwhile
    return;
  }
  GTP_CHECK(x.storage() == x_.storage() && x.raw_data() == x_.raw_data() &&
                x.shape() == x_.shape() && x.dtype() == x_.dtype(),
            op, ": bound to ", x_.ToString(), ", asked for another tensor ", x.ToString(),
            " (a quantisation of the first would be stale for it)");
}

const Fp8Matrix& Fp8SharedInput::Rows(const Tensor& x) {
  Bind(x);
  if (!rows_) rows_ = Quantize(e_, x_, Fp8Layout::kRow1x128);
  return *rows_;
}

const Fp8Matrix& Fp8SharedInput::Transposed(const Tensor& x) {
  Bind(x);
  if (!transposed_) transposed_ = QuantizeTransposed(e_, x_);
  return *transposed_;
}

void Fp8SharedInput::Both(const Tensor& x, const Tensor& column_sums) {
  Bind(x);
  GTP_CHECK(!column_sums.defined() || (!rows_ && !transposed_),
            "fp8::Fp8SharedInput::Both: column sums of ", x_.ToString(),
            " asked after it was quantised already (they come from the quantisation's read)");
  if (rows_ || transposed_) {  // one exists: make the other alone
    Rows(x);
    Transposed(x);
    return;
  }
  const int64_t R = x_.dim(0), C = x_.dim(1);
  Fp8Matrix rows = Scratch(e_, R, C, Fp8Layout::kRow1x128);
  Fp8Matrix transposed = Scratch(e_, C, R, Fp8Layout::kRow1x128);
  QuantizeRowsAndTransposed(e_, x_, rows.q, rows.scales, transposed.q, transposed.scales,
                            rows.lt_scales, transposed.lt_scales, column_sums);
  rows_ = std::move(rows);
  transposed_ = std::move(transposed);
}

void Fp8SharedInput::BothOf(Fp8InputAct act, const Tensor& x, const Tensor& pre,
                            const Tensor& column_sums) {
  Bind(x);
  GTP_CHECK(!rows_ && !transposed_, "fp8::Fp8SharedInput::BothOf: ", x_.ToString(),
            " was quantised already (as itself, not as its activation)");
  const int64_t R = x_.dim(0), C = x_.dim(1);
  Fp8Matrix rows = Scratch(e_, R, C, Fp8Layout::kRow1x128);
  Fp8Matrix transposed = Scratch(e_, C, R, Fp8Layout::kRow1x128);
  QuantizeActRowsAndTransposed(e_, act, x_, pre, rows.q, rows.scales, transposed.q,
                               transposed.scales, rows.lt_scales, transposed.lt_scales,
                               column_sums);
  rows_ = std::move(rows);
  transposed_ = std::move(transposed);
}

// ---- weights -------------------------------------------------------------------------

Fp8Matrix QuantizeWeight(const Exec& e, const Tensor& w) {
  internal::CheckMatrix(e, w, "fp8::QuantizeWeight", "w");
  return Quantize(e, w, Fp8Layout::kTile128x128);
}

Fp8Matrix TransposeWeight(const Exec& e, const Fp8Matrix& wq) {
  CheckQuantized(wq, Fp8Layout::kTile128x128, "fp8::TransposeWeight", "wq");
  Fp8Matrix wt = Scratch(e, wq.q.dim(1), wq.q.dim(0), Fp8Layout::kTile128x128);
  TransposeTiles(e, wq.q, wq.scales, wt.q, wt.scales, wt.lt_scales);
  return wt;
}

Fp8WeightPair QuantizeWeightPair(const Exec& e, const Tensor& w) {
  internal::CheckMatrix(e, w, "fp8::QuantizeWeightPair", "w");
  const int64_t out = w.dim(0), in = w.dim(1);
  Fp8WeightPair p{Scratch(e, out, in, Fp8Layout::kTile128x128),
                  Scratch(e, in, out, Fp8Layout::kTile128x128)};
  QuantizeTilesAndTransposed(e, w, p.w.q, p.w.scales, p.wt.q, p.wt.scales, p.w.lt_scales,
                             p.wt.lt_scales);
  return p;
}

// ---- the three GEMMs -----------------------------------------------------------------

void Fp8Linear(const Exec& e, const Tensor& x, const Tensor& w, const Tensor& y, float beta) {
  const char* op = "fp8::Fp8Linear";
  CheckShapes(e, x, w, y, op, "x", "w", "y");
  GTP_CHECK(x.dim(1) == w.dim(1) && y.dim(0) == x.dim(0) && y.dim(1) == w.dim(0), op, ": x ",
            x.ToString(), ", w ", w.ToString(), ", y ", y.ToString(), " do not form y = x·wᵀ");
  Fp8Linear(e, Quantize(e, x, Fp8Layout::kRow1x128), QuantizeWeight(e, w), y, beta);
}

void Fp8Linear(const Exec& e, const Fp8Matrix& xq, const Fp8Matrix& wq, const Tensor& y,
               float beta, const Tensor& bias) {
  const char* op = "fp8::Fp8Linear";
  CheckQuantized(xq, Fp8Layout::kRow1x128, op, "xq");
  CheckQuantized(wq, Fp8Layout::kTile128x128, op, "wq");
  BlockScaledGemm(e, xq, wq, y, beta, bias);  // checks the shapes, naming them
}

void Fp8LinearBackwardData(const Exec& e, const Tensor& dy, const Tensor& w, const Tensor& dx,
                           float beta) {
  const char* op = "fp8::Fp8LinearBackwardData";
  CheckShapes(e, dy, w, dx, op, "dy", "w", "dx");
  GTP_CHECK(dy.dim(1) == w.dim(0) && dx.dim(0) == dy.dim(0) && dx.dim(1) == w.dim(1), op, ": dy ",
            dy.ToString(), ", w ", w.ToString(), ", dx ", dx.ToString(), " do not form dx = dy·w");
  Fp8LinearBackwardData(e, dy, TransposeWeight(e, QuantizeWeight(e, w)), dx, beta);
}

void Fp8LinearBackwardData(const Exec& e, const Tensor& dy, const Fp8Matrix& wtq,
                           const Tensor& dx, float beta) {
  internal::CheckMatrix(e, dy, "fp8::Fp8LinearBackwardData", "dy");
  Fp8LinearBackwardData(e, Quantize(e, dy, Fp8Layout::kRow1x128), wtq, dx, beta);
}

void Fp8LinearBackwardData(const Exec& e, const Fp8Matrix& dyq, const Fp8Matrix& wtq,
                           const Tensor& dx, float beta) {
  const char* op = "fp8::Fp8LinearBackwardData";
  CheckQuantized(dyq, Fp8Layout::kRow1x128, op, "dyq");
  CheckQuantized(wtq, Fp8Layout::kTile128x128, op, "wtq");
  BlockScaledGemm(e, dyq, wtq, dx, beta);  // checks the shapes, naming them
}

void Fp8LinearBackwardWeight(const Exec& e, const Tensor& dy, const Tensor& x, const Tensor& dw,
                             float beta) {
  const char* op = "fp8::Fp8LinearBackwardWeight";
  CheckShapes(e, dy, x, dw, op, "dy", "x", "dw");
  GTP_CHECK(dy.dim(0) == x.dim(0) && dw.dim(0) == dy.dim(1) && dw.dim(1) == x.dim(1), op, ": dy ",
            dy.ToString(), ", x ", x.ToString(), ", dw ", dw.ToString(),
            " do not form dw = dyᵀ·x");
  Fp8LinearBackwardWeight(e, dy, QuantizeTransposed(e, x), dw, beta);
}

void Fp8LinearBackwardWeight(const Exec& e, const Tensor& dy, const Fp8Matrix& xtq,
                             const Tensor& dw, float beta) {
  internal::CheckMatrix(e, dy, "fp8::Fp8LinearBackwardWeight", "dy");
  Fp8LinearBackwardWeight(e, QuantizeTransposed(e, dy), xtq, dw, beta);
}

void Fp8LinearBackwardWeight(const Exec& e, const Fp8Matrix& dytq, const Fp8Matrix& xtq,
                             const Tensor& dw, float beta) {
  const char* op = "fp8::Fp8LinearBackwardWeight";
  CheckQuantized(dytq, Fp8Layout::kRow1x128, op, "dytq");
  CheckQuantized(xtq, Fp8Layout::kRow1x128, op, "xtq");
  GTP_CHECK(xtq.q.dim(1) == dytq.q.dim(1), op, ": xᵀ's codes ", xtq.q.ToString(), " and dyᵀ's ",
            dytq.q.ToString(), " differ in N");
  BlockScaledGemm(e, dytq, xtq, dw, beta);
}

}  // namespace gtp::kernels::fp8
