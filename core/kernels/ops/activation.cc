// core/kernels/ops/activation.cc — Dispatch of the MLP activations
// (cpu/activation.cc, cuda/activation.cu): GELU and SwiGLU, forward and
// backward.
#include "core/kernels/cpu.h"
#include "core/kernels/cuda.h"
#include "core/kernels/ops.h"
#include "core/kernels/ops/internal/dispatch.h"
#include "core/status.h"

namespace gtp::kernels::ops {

using internal::ActDType;
using internal::CheckOn;
using internal::Dispatch;
using internal::Rows;

void GeluForward(const Exec& e, const Tensor& x, const Tensor& y) {
  CheckOn(e, x, "x");
  Dispatch(
      e, ActDType("GeluForward", {{"x", &x}, {"y", &y}}),
      [&](auto a) { cpu::GeluForward(a.In(x), a.Out(y), x.numel()); },
      [&](auto a) { cuda::GeluForward(a.In(x), a.Out(y), x.numel(), e.stream); });
}

void GeluBackward(const Exec& e, const Tensor& dy, const Tensor& x, const Tensor& dx) {
  CheckOn(e, dy, "dy");
  Dispatch(
      e, ActDType("GeluBackward", {{"dy", &dy}, {"x", &x}, {"dx", &dx}}),
      [&](auto a) { cpu::GeluBackward(a.In(dy), a.In(x), a.Out(dx), x.numel()); },
      [&](auto a) { cuda::GeluBackward(a.In(dy), a.In(x), a.Out(dx), x.numel(), e.stream); });
}

void SwiGluForward(const Exec& e, const Tensor& x, const Tensor& y) {
  CheckOn(e, x, "x");
  const int64_t n = Rows(x), h = x.dim(-1) / 2;
  GTP_CHECK(y.numel() == n * h, "SwiGluForward: y ", y.ToString());
  Dispatch(
      e, ActDType("SwiGluForward", {{"x", &x}, {"y", &y}}),
      [&](auto a) { cpu::SwiGluForward(a.In(x), a.Out(y), n, h); },
      [&](auto a) { cuda::SwiGluForward(a.In(x), a.Out(y), n, h, e.stream); });
}

void SwiGluBackward(const Exec& e, const Tensor& dy, const Tensor& x, const Tensor& dx) {
  CheckOn(e, dy, "dy");
  const int64_t n = Rows(x), h = x.dim(-1) / 2;
  Dispatch(
      e, ActDType("SwiGluBackward", {{"dy", &dy}, {"x", &x}, {"dx", &dx}}),
      [&](auto a) { cpu::SwiGluBackward(a.In(dy), a.In(x), a.Out(dx), n, h); },
      [&](auto a) { cuda::SwiGluBackward(a.In(dy), a.In(x), a.Out(dx), n, h, e.stream); });
}

}  // namespace gtp::kernels::ops
