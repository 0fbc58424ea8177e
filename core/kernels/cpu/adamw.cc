// AdamW with decoupled weight decay, elementwise over n parameters:
//   m ← β1·m + (1 − β1)·g
//   v ← β2·v + (1 − β2)·g²
//   p ← p − lr·(m̂/(√v̂ + eps) + wd·p),  m̂ = m/(1 − β1^t), v̂ = v/(1 − β2^t)
// t = hp.step (1-based). The bias corrections are computed once, in double,
// because β2^t for small t sits close to 1 and loses bits in f32.
#include <algorithm>
#include <cmath>

#include "core/kernels/cpu.h"
#include "core/status.h"

namespace gtp::kernels::cpu {

void AdamW(float* p, const float* g, float* m, float* v, int64_t n, const AdamWParams& hp_in) {
  GTP_CHECK(n >= 0, "AdamW: negative size");
  AdamWParams hp = hp_in;
  if (hp.device_scalars != nullptr) {
    if (hp.device_scalars[2] != 0.0f) return;  // skipped step
    hp.grad_scale = hp.device_scalars[1];
  }
  GTP_CHECK(hp.step >= 1, "AdamW: step is 1-based, got ", hp.step);
  float step_scalars[3];  // {lr, bc1, bc2}: the bias corrections in double
  AdamWStepScalars(hp, step_scalars);
  if (hp.device_step != nullptr) std::copy(hp.device_step, hp.device_step + 3, step_scalars);
  const float lr = step_scalars[0], bc1 = step_scalars[1], bc2 = step_scalars[2];
  const float b1 = hp.beta1, b2 = hp.beta2;
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i] * hp.grad_scale;
    const float mi = b1 * m[i] + (1.0f - b1) * gi;
    const float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    p[i] -= lr * ((mi / bc1) / (std::sqrt(vi / bc2) + hp.eps) + hp.weight_decay * p[i]);
  }
}

void AdamWMulti(const AdamWSegment* segments, int num_segments, const AdamWParams& hp) {
  for (int i = 0; i < num_segments; ++i) {
    const AdamWSegment& s = segments[i];
    AdamWParams h = hp;
    h.weight_decay = s.weight_decay;
    AdamW(s.p, s.g, s.m, s.v, s.n, h);
    if (hp.device_scalars != nullptr && hp.device_scalars[2] != 0.0f) continue;  // skipped
    if (s.p_bf16 != nullptr) {
      for (int64_t j = 0; j < s.n; ++j) s.p_bf16[j] = ToBF16(s.p[j]);
    }
  }
}

}  // namespace gtp::kernels::cpu
