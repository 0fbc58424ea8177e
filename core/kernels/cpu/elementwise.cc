// Elementwise helpers on f32 or bf16 (math in f32, cpu/elem.h):
//   Axpby:      y ← alpha·x + beta·y   (beta == 0: y is not read, so it may hold NaN)
//   Fill:       x ← value              (bf16: value rounded once)
//   SumSquares: Σ x², accumulated in double in index order (deterministic, and
//               exact enough for a global grad norm over 10⁹ elements)
// x and y of Axpby may be the same buffer.
#include <algorithm>

#include "core/kernels/cpu.h"
#include "core/kernels/cpu/elem.h"
#include "core/status.h"

namespace gtp::kernels::cpu {
namespace {

using internal::Load;
using internal::Store;

template <typename T>
void AxpbyT(float alpha, const T* x, float beta, T* y, int64_t n) {
  GTP_CHECK(n >= 0, "Axpby: negative size");
  if (beta == 0.0f) {
    for (int64_t i = 0; i < n; ++i) y[i] = Store<T>(alpha * Load(x[i]));
  } else {
    for (int64_t i = 0; i < n; ++i) y[i] = Store<T>(alpha * Load(x[i]) + beta * Load(y[i]));
  }
}

template <typename T>
void SumSquaresT(const T* x, int64_t n, double* out) {
  GTP_CHECK(n >= 0, "SumSquares: negative size");
  double acc = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double v = Load(x[i]);
    acc += v * v;
  }
  *out = acc;
}

}  // namespace

void Axpby(float alpha, const float* x, float beta, float* y, int64_t n) {
  AxpbyT(alpha, x, beta, y, n);
}
void Axpby(float alpha, const bf16* x, float beta, bf16* y, int64_t n) {
  AxpbyT(alpha, x, beta, y, n);
}

void Fill(float* x, float value, int64_t n) {
  GTP_CHECK(n >= 0, "Fill: negative size");
  std::fill(x, x + n, value);
}
void Fill(bf16* x, float value, int64_t n) {
  GTP_CHECK(n >= 0, "Fill: negative size");
  std::fill(x, x + n, ToBF16(value));
}

void SumSquares(const float* x, int64_t n, double* out) { SumSquaresT(x, n, out); }
void SumSquares(const bf16* x, int64_t n, double* out) { SumSquaresT(x, n, out); }

}  // namespace gtp::kernels::cpu
