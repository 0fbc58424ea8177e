// core/kernels/ops/gemm.cc — Dispatch of the dense GEMMs (cpu/gemm.cc,
// cuda/gemm.cc): Gemm, Linear and its backward passes, and the MLP's fused
// GELU and bias-gradient epilogues.
#include "core/kernels/cpu.h"
#include "core/kernels/cuda.h"
#include "core/kernels/ops.h"
#include "core/kernels/ops/internal/dispatch.h"
#include "core/status.h"

namespace gtp::kernels::ops {

using internal::Blas;
using internal::CheckOn;
using internal::M;
using internal::OnDevice;
using internal::Rows;

namespace {

void RunGemm(const Exec& e, const GemmDesc& d, const void* a, const void* b, void* c) {
  OnDevice(
      e, [&] { cpu::Gemm(d, a, b, c); }, [&] { cuda::Gemm(Blas(e), d, a, b, c, e.stream); });
}

}  // namespace

void Gemm(const Exec& e, const GemmDesc& d, const Tensor& a, const Tensor& b, const Tensor& c) {
  CheckOn(e, a, "a");
  CheckOn(e, b, "b");
  CheckOn(e, c, "c");
  RunGemm(e, d, a.raw_data(), b.raw_data(), c.raw_data());
}

namespace {

GemmDesc LinearDesc(const Exec& e, const Tensor& x, const Tensor& w, const Tensor& y, float beta,
                    const Tensor& bias) {
  CheckOn(e, x, "x");
  CheckOn(e, w, "w");
  CheckOn(e, y, "y");
  const int64_t n = Rows(x), in = x.dim(-1), out = w.dim(0);
  GTP_CHECK(w.dim(1) == in && Rows(y) == n && y.dim(-1) == out, "Linear: x ", x.ToString(), " w ",
            w.ToString(), " y ", y.ToString());
  GTP_CHECK(x.dtype() == w.dtype(), "Linear: x and w dtypes differ");
  GemmDesc d;
  d.trans_b = true;
  d.m = n, d.n = out, d.k = in, d.beta = beta;
  d.ab_type = x.dtype();
  d.c_type = y.dtype();
  if (bias.defined()) {
    CheckOn(e, bias, "bias");
    GTP_CHECK(bias.numel() == out && bias.dtype() == y.dtype(), "Linear: bias ", bias.ToString(),
              " for y ", y.ToString());
    d.bias = bias.raw_data();
  }
  return d;
}

}  // namespace

void Linear(const Exec& e, const Tensor& x, const Tensor& w, const Tensor& y, float beta,
            const Tensor& bias) {
  RunGemm(e, LinearDesc(e, x, w, y, beta, bias), x.raw_data(), w.raw_data(), y.raw_data());
}

void LinearResidual(const Exec& e, const Tensor& x, const Tensor& w, const Tensor& y,
                    const Tensor& bias, const Tensor& residual) {
  CheckOn(e, residual, "residual");
  GTP_CHECK(residual.numel() == y.numel() && residual.dim(-1) == y.dim(-1) &&
                residual.dtype() == y.dtype(),
            "LinearResidual: residual ", residual.ToString(), " for y ", y.ToString());
  GemmDesc d = LinearDesc(e, x, w, y, 1.0f, bias);
  d.c_in = residual.raw_data();
  RunGemm(e, d, x.raw_data(), w.raw_data(), y.raw_data());
}

void LinearBackwardData(const Exec& e, const Tensor& dy, const Tensor& w, const Tensor& dx,
                        float beta) {
  CheckOn(e, dy, "dy");
  CheckOn(e, w, "w");
  CheckOn(e, dx, "dx");
  const int64_t n = Rows(dy), out = dy.dim(-1), in = w.dim(1);
  GTP_CHECK(w.dim(0) == out && Rows(dx) == n && dx.dim(-1) == in, "LinearBackwardData: dy ",
            dy.ToString(), " w ", w.ToString(), " dx ", dx.ToString());
  GemmDesc d;
  d.m = n, d.n = in, d.k = out, d.beta = beta;
  d.ab_type = dy.dtype();
  d.c_type = dx.dtype();
  GTP_CHECK(dy.dtype() == w.dtype(), "LinearBackwardData: dy and w dtypes differ");
  RunGemm(e, d, dy.raw_data(), w.raw_data(), dx.raw_data());
}

void LinearBackwardWeight(const Exec& e, const Tensor& dy, const Tensor& x, const Tensor& dw,
                          float beta) {
  CheckOn(e, dy, "dy");
  CheckOn(e, x, "x");
  CheckOn(e, dw, "dw");
  const int64_t n = Rows(dy), out = dy.dim(-1), in = x.dim(-1);
  GTP_CHECK(Rows(x) == n && dw.dim(0) >= out && dw.dim(1) == in, "LinearBackwardWeight: dy ",
            dy.ToString(), " x ", x.ToString(), " dw ", dw.ToString());
  GTP_CHECK(dy.dtype() == x.dtype(), "LinearBackwardWeight: dy and x dtypes differ");
  GemmDesc d;
  d.trans_a = true;
  d.m = out, d.n = in, d.k = n, d.beta = beta;
  d.ab_type = dy.dtype();
  d.c_type = dw.dtype();
  RunGemm(e, d, dy.raw_data(), x.raw_data(), dw.raw_data());
}

void LinearGelu(const Exec& e, const Tensor& x, const Tensor& w, const Tensor& bias,
                const Tensor& y, const Tensor& pre) {
  CheckOn(e, x, "x");
  CheckOn(e, w, "w");
  CheckOn(e, y, "y");
  CheckOn(e, pre, "pre");
  const int64_t n = Rows(x), in = x.dim(-1), out = w.dim(0);
  GTP_CHECK(w.rank() == 2 && w.dim(1) == in && Rows(y) == n && y.dim(-1) == out &&
                pre.numel() == y.numel() && pre.dim(-1) == out,
            "LinearGelu: x ", x.ToString(), " w ", w.ToString(), " y ", y.ToString(), " pre ",
            pre.ToString());
  GTP_CHECK(x.dtype() == w.dtype() && pre.dtype() == y.dtype(), "LinearGelu: x/w (",
            DTypeName(x.dtype()), "/", DTypeName(w.dtype()), ") and y/pre (", DTypeName(y.dtype()),
            "/", DTypeName(pre.dtype()), ") must share a dtype each");
  GemmDesc d;
  d.trans_b = true;
  d.m = n, d.n = out, d.k = in;
  d.ab_type = x.dtype();
  d.c_type = y.dtype();
  d.epilogue = GemmEpilogue::kGeluAux;
  d.aux = pre.raw_data();
  if (bias.defined()) {
    CheckOn(e, bias, "bias");
    GTP_CHECK(bias.numel() == out && bias.dtype() == y.dtype(), "LinearGelu: bias ",
              bias.ToString(), " for y ", y.ToString());
    d.bias = bias.raw_data();
  }
  RunGemm(e, d, x.raw_data(), w.raw_data(), y.raw_data());
}

void LinearBackwardDataDGelu(const Exec& e, const Tensor& dy, const Tensor& w, const Tensor& pre,
                             const Tensor& dx, const Tensor& dbias) {
  CheckOn(e, dy, "dy");
  CheckOn(e, w, "w");
  CheckOn(e, pre, "pre");
  CheckOn(e, dx, "dx");
  const int64_t n = Rows(dy), out = dy.dim(-1), in = w.dim(1);
  GTP_CHECK(w.rank() == 2 && w.dim(0) == out && Rows(dx) == n && dx.dim(-1) == in &&
                pre.numel() == dx.numel() && pre.dim(-1) == in,
            "LinearBackwardDataDGelu: dy ", dy.ToString(), " w ", w.ToString(), " pre ",
            pre.ToString(), " dx ", dx.ToString());
  GTP_CHECK(dy.dtype() == w.dtype() && pre.dtype() == dx.dtype(), "LinearBackwardDataDGelu: dy/w (",
            DTypeName(dy.dtype()), "/", DTypeName(w.dtype()), ") and dx/pre (",
            DTypeName(dx.dtype()), "/", DTypeName(pre.dtype()), ") must share a dtype each");
  GemmDesc d;
  d.m = n, d.n = in, d.k = out;
  d.ab_type = dy.dtype();
  d.c_type = dx.dtype();
  d.epilogue = GemmEpilogue::kDGeluBGrad;
  d.aux = pre.raw_data();
  if (dbias.defined()) {
    CheckOn(e, dbias, "dbias");
    GTP_CHECK(dbias.numel() == in && dbias.dtype() == DType::kF32,
              "LinearBackwardDataDGelu: dbias ", dbias.ToString(), " must be f32 [", in, "]");
    d.bias_grad = M(dbias);
  }
  RunGemm(e, d, dy.raw_data(), w.raw_data(), dx.raw_data());
}

void LinearBackwardWeightBGrad(const Exec& e, const Tensor& dy, const Tensor& x, const Tensor& dw,
                               float beta, const Tensor& db) {
  CheckOn(e, dy, "dy");
  CheckOn(e, x, "x");
  CheckOn(e, dw, "dw");
  CheckOn(e, db, "db");
  const int64_t n = Rows(dy), out = dy.dim(-1), in = x.dim(-1);
  GTP_CHECK(Rows(x) == n && dw.rank() == 2 && dw.dim(0) >= out && dw.dim(1) == in,
            "LinearBackwardWeightBGrad: dy ", dy.ToString(), " x ", x.ToString(), " dw ",
            dw.ToString());
  GTP_CHECK(dy.dtype() == x.dtype(), "LinearBackwardWeightBGrad: dy and x dtypes differ (",
            DTypeName(dy.dtype()), " vs ", DTypeName(x.dtype()), ")");
  GTP_CHECK(db.numel() == out && db.dtype() == DType::kF32, "LinearBackwardWeightBGrad: db ",
            db.ToString(), " must be f32 [", out, "]");
  GemmDesc d;
  d.trans_a = true;
  d.m = out, d.n = in, d.k = n, d.beta = beta;
  d.ab_type = dy.dtype();
  d.c_type = dw.dtype();
  d.epilogue = GemmEpilogue::kBGrad;
  d.bias_grad = M(db);
  RunGemm(e, d, dy.raw_data(), x.raw_data(), dw.raw_data());
}

}  // namespace gtp::kernels::ops
