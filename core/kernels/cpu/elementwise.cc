// Elementwise f32 helpers:
//   Axpby:      y ← alpha·x + beta·y   (beta == 0: y is not read, so it may hold NaN)
//   Fill:       x ← value
//   SumSquares: Σ x², accumulated in double in index order (deterministic, and
//               exact enough for a global grad norm over 10⁹ elements)
// x and y of Axpby may be the same buffer.
#include <algorithm>

#include "core/kernels/cpu.h"
#include "core/status.h"

namespace gtp::kernels::cpu {

void Axpby(float alpha, const float* x, float beta, float* y, int64_t n) {
  GTP_CHECK(n >= 0, "Axpby: negative size");
  if (beta == 0.0f) {
    for (int64_t i = 0; i < n; ++i) y[i] = alpha * x[i];
  } else {
    for (int64_t i = 0; i < n; ++i) y[i] = alpha * x[i] + beta * y[i];
  }
}

void Fill(float* x, float value, int64_t n) {
  GTP_CHECK(n >= 0, "Fill: negative size");
  std::fill(x, x + n, value);
}

void SumSquares(const float* x, int64_t n, double* out) {
  GTP_CHECK(n >= 0, "SumSquares: negative size");
  double acc = 0;
  for (int64_t i = 0; i < n; ++i) acc += static_cast<double>(x[i]) * x[i];
  *out = acc;
}

}  // namespace gtp::kernels::cpu
