// Global grad-norm bookkeeping kept on the device (CPU versions; CUDA in
// cuda/grad_norm.cu), so the optimizer decides clipping and NaN/Inf skipping
// without reading the norm back mid-step:
//   GradNormWords:    local = Σ_{i<n_count} ss[i] + Σ_{n_count≤i<n} 0·ss[i] (double, in
//                     order: the 0·ss terms carry NaN/Inf of copies another rank counts);
//                     words[0] = f32(local), words[1] = f32(local − words[0]) (0 when
//                     not finite) — a double carried through f32 collectives.
//   GradNormFinalize: total = Σ_b (words[2b] + words[2b+1]) (double); norm = √total;
//                     out = {norm, scale, skip}: skip = 1 when norm is not finite,
//                     scale = max_norm / (norm + 1e-6) when 0 < max_norm < norm and not
//                     skipping, else 1.
#include <cmath>

#include "core/kernels/cpu.h"
#include "core/status.h"

namespace gtp::kernels::cpu {

void GradNormWords(const double* ss, int n_count, int n, float* words) {
  GTP_CHECK(0 <= n_count && n_count <= n, "GradNormWords: n_count=", n_count, " n=", n);
  double local = 0.0;
  for (int i = 0; i < n; ++i) local += i < n_count ? ss[i] : 0.0 * ss[i];
  const float hi = static_cast<float>(local);
  words[0] = hi;
  words[1] = std::isfinite(local) ? static_cast<float>(local - hi) : 0.0f;
}

void GradNormFinalize(const float* words, int num_buffers, double max_norm, float* out) {
  double total = 0.0;
  for (int b = 0; b < num_buffers; ++b) {
    total += static_cast<double>(words[2 * b]) + static_cast<double>(words[2 * b + 1]);
  }
  const double norm = std::sqrt(total);
  const bool skip = !std::isfinite(norm);
  out[0] = static_cast<float>(norm);
  out[1] = !skip && max_norm > 0 && norm > max_norm ? static_cast<float>(max_norm / (norm + 1e-6))
                                                    : 1.0f;
  out[2] = skip ? 1.0f : 0.0f;
}

}  // namespace gtp::kernels::cpu
