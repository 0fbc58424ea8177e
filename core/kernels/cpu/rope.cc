// Rotary position embedding, "rotate half" convention (see cpu.h):
//   y[d]       = x[d]·cos(t·f_d) − x[d+h]·sin(t·f_d)
//   y[d+h]     = x[d+h]·cos(t·f_d) + x[d]·sin(t·f_d),   h = HS/2, f_d = θ^(−2d/HS)
// Backward is the rotation by −t·f_d. t is the row's index in the sequence,
// or pos[row] when positions are given (context parallelism: a rank's rows
// are two chunks of the sequence). Angles are computed in double so the
// CPU and CUDA versions agree to f32 rounding. bf16 data is rotated in f32
// and rounded once (cpu/elem.h).
#include <cmath>

#include "core/kernels/cpu.h"
#include "core/kernels/cpu/elem.h"
#include "core/status.h"

namespace gtp::kernels::cpu {
namespace {
using internal::Load;
using internal::Store;

template <typename E>  // element type (T is the sequence length here)
void Rotate(const E* x, E* y, int64_t B, int64_t T, int64_t NH, int64_t HS, float theta, float sign,
            const int32_t* pos, int64_t row_stride) {
  GTP_CHECK(HS % 2 == 0, "RoPE needs an even head size, got ", HS);
  const int64_t h = HS / 2;
  const int64_t rs = row_stride > 0 ? row_stride : NH * HS;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t d = 0; d < h; ++d) {
        const double a = (pos ? pos[t] : t) * std::pow(static_cast<double>(theta), -2.0 * d / HS);
        const float c = static_cast<float>(std::cos(a)), s = sign * static_cast<float>(std::sin(a));
        for (int64_t n = 0; n < NH; ++n) {
          const int64_t base = (b * T + t) * rs + n * HS;
          const float x0 = Load(x[base + d]), x1 = Load(x[base + d + h]);
          y[base + d] = Store<E>(x0 * c - x1 * s);
          y[base + d + h] = Store<E>(x1 * c + x0 * s);
        }
      }
}
}  // namespace

void RopeForward(const float* x, float* y, int64_t B, int64_t T, int64_t NH, int64_t HS,
                 float theta, const int32_t* pos, int64_t row_stride) {
  Rotate(x, y, B, T, NH, HS, theta, 1.0f, pos, row_stride);
}

void RopeBackward(const float* dy, float* dx, int64_t B, int64_t T, int64_t NH, int64_t HS,
                  float theta, const int32_t* pos, int64_t row_stride) {
  Rotate(dy, dx, B, T, NH, HS, theta, -1.0f, pos, row_stride);
}

void RopeForward(const bf16* x, bf16* y, int64_t B, int64_t T, int64_t NH, int64_t HS, float theta,
                 const int32_t* pos, int64_t row_stride) {
  Rotate(x, y, B, T, NH, HS, theta, 1.0f, pos, row_stride);
}

void RopeBackward(const bf16* dy, bf16* dx, int64_t B, int64_t T, int64_t NH, int64_t HS,
                  float theta, const int32_t* pos, int64_t row_stride) {
  Rotate(dy, dx, B, T, NH, HS, theta, -1.0f, pos, row_stride);
}

}  // namespace gtp::kernels::cpu
