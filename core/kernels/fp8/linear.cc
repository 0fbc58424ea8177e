// The FP8 linear GEMMs (linear.h): quantise, then BlockScaledGemm.
#include "core/kernels/fp8/linear.h"

#include "core/kernels/fp8/block_gemm.h"
#include "core/kernels/fp8/block_quant.h"
#include "core/kernels/fp8/internal.h"
#include "core/status.h"

namespace gtp::kernels::fp8 {
namespace {

// m [R, C] quantised in layout l into scratch.
Fp8Matrix Quantize(const Exec& e, const Tensor& m, Fp8Layout l) {
  const int64_t R = m.dim(0), C = m.dim(1);
  Fp8Matrix q{e.Empty({R, C}, DType::kF8E4M3), e.Empty(Fp8ScaleShape(R, C, l)), l};
  QuantizeBlocks(e, m, l, q.q, q.scales);
  return q;
}

// mᵀ [C, R] quantised 1×128 along R, read from m [R, C].
Fp8Matrix QuantizeTransposed(const Exec& e, const Tensor& m) {
  const int64_t R = m.dim(0), C = m.dim(1);
  Fp8Matrix q{e.Empty({C, R}, DType::kF8E4M3),
              e.Empty(Fp8ScaleShape(C, R, Fp8Layout::kRow1x128)), Fp8Layout::kRow1x128};
  QuantizeRowsTransposed(e, m, q.q, q.scales);
  return q;
}

void CheckShapes(const Exec& e, const Tensor& a, const Tensor& b, const Tensor& c, const char* op,
                 const char* an, const char* bn, const char* cn) {
  internal::CheckMatrix(e, a, op, an);
  internal::CheckMatrix(e, b, op, bn);
  internal::CheckMatrix(e, c, op, cn);
}

}  // namespace

void Fp8Linear(const Exec& e, const Tensor& x, const Tensor& w, const Tensor& y, float beta) {
  const char* op = "fp8::Fp8Linear";
  CheckShapes(e, x, w, y, op, "x", "w", "y");
  GTP_CHECK(x.dim(1) == w.dim(1) && y.dim(0) == x.dim(0) && y.dim(1) == w.dim(0), op, ": x ",
            x.ToString(), ", w ", w.ToString(), ", y ", y.ToString(), " do not form y = x·wᵀ");
  BlockScaledGemm(e, Quantize(e, x, Fp8Layout::kRow1x128), Quantize(e, w, Fp8Layout::kTile128x128),
                  y, beta);
}

void Fp8LinearBackwardData(const Exec& e, const Tensor& dy, const Tensor& w, const Tensor& dx,
                           float beta) {
  const char* op = "fp8::Fp8LinearBackwardData";
  CheckShapes(e, dy, w, dx, op, "dy", "w", "dx");
  GTP_CHECK(dy.dim(1) == w.dim(0) && dx.dim(0) == dy.dim(0) && dx.dim(1) == w.dim(1), op, ": dy ",
            dy.ToString(), ", w ", w.ToString(), ", dx ", dx.ToString(), " do not form dx = dy·w");
  const int64_t out = w.dim(0), in = w.dim(1);
  const Fp8Matrix wq = Quantize(e, w, Fp8Layout::kTile128x128);
  Fp8Matrix wt{e.Empty({in, out}, DType::kF8E4M3),
               e.Empty(Fp8ScaleShape(in, out, Fp8Layout::kTile128x128)), Fp8Layout::kTile128x128};
  TransposeTiles(e, wq.q, wq.scales, wt.q, wt.scales);
  BlockScaledGemm(e, Quantize(e, dy, Fp8Layout::kRow1x128), wt, dx, beta);
}

void Fp8LinearBackwardWeight(const Exec& e, const Tensor& dy, const Tensor& x, const Tensor& dw,
                             float beta) {
  const char* op = "fp8::Fp8LinearBackwardWeight";
  CheckShapes(e, dy, x, dw, op, "dy", "x", "dw");
  GTP_CHECK(dy.dim(0) == x.dim(0) && dw.dim(0) == dy.dim(1) && dw.dim(1) == x.dim(1), op, ": dy ",
            dy.ToString(), ", x ", x.ToString(), ", dw ", dw.ToString(),
            " do not form dw = dyᵀ·x");
  BlockScaledGemm(e, QuantizeTransposed(e, dy), QuantizeTransposed(e, x), dw, beta);
}

}  // namespace gtp::kernels::fp8
