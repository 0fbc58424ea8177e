// core/kernels/ops/rope.cc — Dispatch of the rotary position embedding
// (cpu/rope.cc, cuda/rope.cu), forward and backward, at rows' own or given
// positions, on contiguous or token-strided heads (in place in a packed QKV
// matrix: the kernels' row stride).
#include "core/kernels/cpu.h"
#include "core/kernels/cuda.h"
#include "core/kernels/ops.h"
#include "core/kernels/ops/internal/dispatch.h"
#include "core/status.h"

namespace gtp::kernels::ops {

using internal::ActDType;
using internal::CheckHeadsOn;
using internal::CheckOn;
using internal::Dispatch;
using internal::TokenStride;

namespace {

const int32_t* Positions(const Exec& e, const Tensor& positions, int64_t T) {
  if (!positions.defined()) return nullptr;
  CheckOn(e, positions, "positions");
  GTP_CHECK(positions.dtype() == DType::kI32 && positions.numel() == T, "RoPE: positions ",
            positions.ToString(), " for ", T, " rows");
  return positions.data<int32_t>();
}

// The row stride the kernels get for in [B, T, NH, HS] and out (same
// shape): both contiguous or both token-strided with one stride (in place,
// or two column blocks of like matrices); aborts naming them otherwise.
int64_t RowStride(const Exec& e, const char* op, const Tensor& in, const Tensor& out,
                  const char* in_name, const char* out_name) {
  CheckHeadsOn(e, in, in_name);
  CheckHeadsOn(e, out, out_name);
  GTP_CHECK(in.rank() == 4 && in.shape() == out.shape(), op, ": ", in.ToString(), " -> ",
            out.ToString());
  const int64_t rs = TokenStride(op, in_name, in);
  GTP_CHECK(TokenStride(op, out_name, out) == rs, op, ": ", in_name, " and ", out_name,
            " must have one row stride (", in.ToString(), " strides ", in.strides().ToString(),
            ", ", out.ToString(), " strides ", out.strides().ToString(), ")");
  return rs;
}

}  // namespace

void RopeForward(const Exec& e, const Tensor& x, const Tensor& y, float theta,
                 const Tensor& positions) {
  const int64_t rs = RowStride(e, "RopeForward", x, y, "x", "y");
  const int32_t* pos = Positions(e, positions, x.dim(1));
  Dispatch(
      e, ActDType("RopeForward", {{"x", &x}, {"y", &y}}),
      [&](auto a) {
        cpu::RopeForward(a.In(x), a.Out(y), x.dim(0), x.dim(1), x.dim(2), x.dim(3), theta, pos, rs);
      },
      [&](auto a) {
        cuda::RopeForward(a.In(x), a.Out(y), x.dim(0), x.dim(1), x.dim(2), x.dim(3), theta,
                          e.stream, pos, rs);
      });
}

void RopeBackward(const Exec& e, const Tensor& dy, const Tensor& dx, float theta,
                  const Tensor& positions) {
  const int64_t rs = RowStride(e, "RopeBackward", dy, dx, "dy", "dx");
  const int32_t* pos = Positions(e, positions, dy.dim(1));
  Dispatch(
      e, ActDType("RopeBackward", {{"dy", &dy}, {"dx", &dx}}),
      [&](auto a) {
        cpu::RopeBackward(a.In(dy), a.Out(dx), dy.dim(0), dy.dim(1), dy.dim(2), dy.dim(3), theta,
                          pos, rs);
      },
      [&](auto a) {
        cuda::RopeBackward(a.In(dy), a.Out(dx), dy.dim(0), dy.dim(1), dy.dim(2), dy.dim(3), theta,
                           e.stream, pos, rs);
      });
}

}  // namespace gtp::kernels::ops
