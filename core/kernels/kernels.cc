#include "core/kernels/kernels.h"

#include "core/status.h"

namespace gtp::kernels {

void NsCoefficientsAt(NsCoefficients set, int step, float* a, float* b, float* c) {
  static constexpr float kQuintic[5][3] = {{4.0848f, -6.8946f, 2.9270f},
                                           {3.9505f, -6.3029f, 2.6377f},
                                           {3.7418f, -5.5913f, 2.3037f},
                                           {2.8769f, -3.1427f, 1.2046f},
                                           {2.8366f, -3.0525f, 1.2012f}};
  GTP_CHECK(step >= 0, "negative Newton-Schulz step ", step);
  if (set == NsCoefficients::kSimple) {
    *a = 3.4445f;
    *b = -4.7750f;
    *c = 2.0315f;
    return;
  }
  const float* k = kQuintic[step % 5];
  *a = k[0];
  *b = k[1];
  *c = k[2];
}

}  // namespace gtp::kernels
