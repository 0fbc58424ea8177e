// core/kernels/ops/rope.cc — Dispatch of the rotary position embedding
// (cpu/rope.cc, cuda/rope.cu), forward and backward, at rows' own or given
// positions.
#include "core/kernels/cpu.h"
#include "core/kernels/cuda.h"
#include "core/kernels/ops.h"
#include "core/kernels/ops/internal/dispatch.h"
#include "core/status.h"

namespace gtp::kernels::ops {

using internal::ActDType;
using internal::CheckOn;
using internal::Dispatch;

namespace {

const int32_t* Positions(const Exec& e, const Tensor& positions, int64_t T) {
  if (!positions.defined()) return nullptr;
  CheckOn(e, positions, "positions");
  GTP_CHECK(positions.dtype() == DType::kI32 && positions.numel() == T, "RoPE: positions ",
            positions.ToString(), " for ", T, " rows");
  return positions.data<int32_t>();
}

}  // namespace

void RopeForward(const Exec& e, const Tensor& x, const Tensor& y, float theta,
                 const Tensor& positions) {
  CheckOn(e, x, "x");
  CheckOn(e, y, "y");
  GTP_CHECK(x.rank() == 4 && x.shape() == y.shape(), "RoPE: ", x.ToString(), " -> ", y.ToString());
  const int32_t* pos = Positions(e, positions, x.dim(1));
  Dispatch(
      e, ActDType("RopeForward", {{"x", &x}, {"y", &y}}),
      [&](auto a) {
        cpu::RopeForward(a.In(x), a.Out(y), x.dim(0), x.dim(1), x.dim(2), x.dim(3), theta, pos);
      },
      [&](auto a) {
        cuda::RopeForward(a.In(x), a.Out(y), x.dim(0), x.dim(1), x.dim(2), x.dim(3), theta,
                          e.stream, pos);
      });
}

void RopeBackward(const Exec& e, const Tensor& dy, const Tensor& dx, float theta,
                  const Tensor& positions) {
  CheckOn(e, dy, "dy");
  CheckOn(e, dx, "dx");
  GTP_CHECK(dy.rank() == 4 && dy.shape() == dx.shape(), "RoPE: ", dy.ToString());
  const int32_t* pos = Positions(e, positions, dy.dim(1));
  Dispatch(
      e, ActDType("RopeBackward", {{"dy", &dy}, {"dx", &dx}}),
      [&](auto a) {
        cpu::RopeBackward(a.In(dy), a.Out(dx), dy.dim(0), dy.dim(1), dy.dim(2), dy.dim(3), theta,
                          pos);
      },
      [&](auto a) {
        cuda::RopeBackward(a.In(dy), a.Out(dx), dy.dim(0), dy.dim(1), dy.dim(2), dy.dim(3), theta,
                           e.stream, pos);
      });
}

}  // namespace gtp::kernels::ops
