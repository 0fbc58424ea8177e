#include "layers/moe/internal/dispatch_math.h"

namespace gtp::layers::moe::dispatch_internal {

namespace ops = kernels::ops;

std::vector<int64_t> Offsets(const std::vector<int64_t>& counts) {
  std::vector<int64_t> off(counts.size() + 1, 0);
  for (size_t i = 0; i < counts.size(); ++i) off[i + 1] = off[i] + counts[i];
  return off;
}

Tensor SumInRankOrder(const kernels::Exec& e, const Tensor& parts, int R) {
  const int64_t m = parts.dim(0) / R, C = parts.dim(1);
  Tensor acc = e.Zeros({m, C}, DType::kF32);
  if (m == 0) return acc;
  Tensor part32 = parts.dtype() == DType::kF32 ? Tensor() : e.Empty({m, C}, DType::kF32);
  for (int r = 0; r < R; ++r) {
    Tensor p = parts.Slice(r * m, (r + 1) * m);
    if (part32.defined()) {
      ops::Cast(e, p, part32);
      p = part32;
    }
    ops::Axpby(e, 1.0f, p, 1.0f, acc);
  }
  return acc;
}

Tensor AddThenCast(const kernels::Exec& e, const Tensor& dx32, const Tensor& add, DType dt) {
  if (add.defined()) kernels::ops::Axpby(e, 1.0f, add, 1.0f, dx32);
  if (dt == DType::kF32) return dx32;
  Tensor dx = e.Empty(dx32.shape(), dt);
  kernels::ops::Cast(e, dx32, dx);
  return dx;
}

}  // namespace gtp::layers::moe::dispatch_internal
