// core/kernels/ops/norm.cc — Dispatch of the normalisations (cpu/norm.cc,
// cuda/norm.cu): LayerNorm and RMSNorm, forward and backward (with the fused
// residual-gradient add).
#include "core/kernels/cpu.h"
#include "core/kernels/cuda.h"
#include "core/kernels/ops.h"
#include "core/kernels/ops/internal/dispatch.h"
#include "core/status.h"

namespace gtp::kernels::ops {

using internal::ActDType;
using internal::CheckOn;
using internal::Dispatch;
using internal::F;
using internal::M;
using internal::Rows;

void LayerNormForward(const Exec& e, const Tensor& x, const Tensor& w, const Tensor& b,
                      const Tensor& y, const Tensor& mean, const Tensor& rstd, float eps) {
  CheckOn(e, x, "x");
  const int64_t n = Rows(x), c = x.dim(-1);
  Dispatch(
      e,
      ActDType("LayerNormForward", {{"x", &x}, {"w", &w}, {"b", &b}, {"y", &y}},
               {{"mean", &mean}, {"rstd", &rstd}}),
      [&](auto a) {
        cpu::LayerNormForward(a.In(x), a.In(w), a.InOrNull(b), a.Out(y), M(mean), M(rstd), n, c,
                              eps);
      },
      [&](auto a) {
        cuda::LayerNormForward(a.In(x), a.In(w), a.InOrNull(b), a.Out(y), M(mean), M(rstd), n, c,
                               eps, e.stream);
      });
}

void LayerNormBackward(const Exec& e, const Tensor& dy, const Tensor& x, const Tensor& w,
                       const Tensor& mean, const Tensor& rstd, const Tensor& dx, const Tensor& dw,
                       const Tensor& db, const Tensor& dresidual) {
  CheckOn(e, dy, "dy");
  const int64_t n = Rows(x), c = x.dim(-1);
  float* dbp = db.defined() ? M(db) : nullptr;
  if (dresidual.defined()) {
    CheckOn(e, dresidual, "dresidual");
    GTP_CHECK(dresidual.shape() == dx.shape() && dresidual.dtype() == dx.dtype(),
              "LayerNormBackward: dresidual ", dresidual.ToString(), " for dx ", dx.ToString());
  }
  Dispatch(
      e,
      ActDType("LayerNormBackward", {{"dy", &dy}, {"x", &x}, {"w", &w}, {"dx", &dx}},
               {{"mean", &mean}, {"rstd", &rstd}, {"dw", &dw}, {"db", &db}}),
      [&](auto a) {
        cpu::LayerNormBackward(a.In(dy), a.In(x), a.In(w), F(mean), F(rstd), a.Out(dx), M(dw), dbp,
                               n, c, a.InOrNull(dresidual));
      },
      [&](auto a) {
        Tensor scratch = e.Empty({cuda::LayerNormBackwardScratchFloats(n, c)});
        cuda::LayerNormBackward(a.In(dy), a.In(x), a.In(w), F(mean), F(rstd), a.Out(dx), M(dw), dbp,
                                M(scratch), n, c, e.stream, a.InOrNull(dresidual));
      });
}

void RMSNormForward(const Exec& e, const Tensor& x, const Tensor& w, const Tensor& y,
                    const Tensor& rstd, float eps) {
  CheckOn(e, x, "x");
  const int64_t n = Rows(x), c = x.dim(-1);
  Dispatch(
      e, ActDType("RMSNormForward", {{"x", &x}, {"w", &w}, {"y", &y}}, {{"rstd", &rstd}}),
      [&](auto a) { cpu::RMSNormForward(a.In(x), a.In(w), a.Out(y), M(rstd), n, c, eps); },
      [&](auto a) {
        cuda::RMSNormForward(a.In(x), a.In(w), a.Out(y), M(rstd), n, c, eps, e.stream);
      });
}

void RMSNormBackward(const Exec& e, const Tensor& dy, const Tensor& x, const Tensor& w,
                     const Tensor& rstd, const Tensor& dx, const Tensor& dw,
                     const Tensor& dresidual) {
  CheckOn(e, dy, "dy");
  const int64_t n = Rows(x), c = x.dim(-1);
  if (dresidual.defined()) {
    CheckOn(e, dresidual, "dresidual");
    GTP_CHECK(dresidual.shape() == dx.shape() && dresidual.dtype() == dx.dtype(),
              "RMSNormBackward: dresidual ", dresidual.ToString(), " for dx ", dx.ToString());
  }
  Dispatch(
      e,
      ActDType("RMSNormBackward", {{"dy", &dy}, {"x", &x}, {"w", &w}, {"dx", &dx}},
               {{"rstd", &rstd}, {"dw", &dw}}),
      [&](auto a) {
        cpu::RMSNormBackward(a.In(dy), a.In(x), a.In(w), F(rstd), a.Out(dx), M(dw), n, c,
                             a.InOrNull(dresidual));
      },
      [&](auto a) {
        // f32 has always sized its scratch as LayerNorm's (an upper bound of
        // RMSNorm's, cuda.h).
        const int64_t floats = a.kDType == DType::kBF16
                                   ? cuda::RMSNormBackwardScratchFloats(n, c)
                                   : cuda::LayerNormBackwardScratchFloats(n, c);
        Tensor scratch = e.Empty({floats});
        cuda::RMSNormBackward(a.In(dy), a.In(x), a.In(w), F(rstd), a.Out(dx), M(dw), M(scratch), n,
                              c, e.stream, a.InOrNull(dresidual));
      });
}

}  // namespace gtp::kernels::ops
