// core/kernels/decode_attention_reference.h — the decode-attention math of
// decode_attention_kernels.h in double, the reference its CPU and CUDA tests
// compare with (testonly).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace gtp::kernels::testing {

// out[n, NH, HS] of the math in decode_attention_kernels.h, in double.
inline std::vector<double> RefDecodeAttention(const std::vector<float>& q,
                                              const std::vector<float>& k,
                                              const std::vector<float>& v, int64_t n,
                                              int64_t pos0, int64_t NH, int64_t NKV, int64_t HS) {
  std::vector<double> out(n * NH * HS, 0.0);
  const int64_t group = NH / NKV;
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t h = 0; h < NH; ++h) {
      const int64_t g = h / group, end = pos0 + i + 1;
      std::vector<double> p(end);
      double mx = -INFINITY, sum = 0;
      for (int64_t s = 0; s < end; ++s) {
        double dot = 0;
        for (int64_t d = 0; d < HS; ++d)
          dot += double(q[(i * NH + h) * HS + d]) * k[(s * NKV + g) * HS + d];
        p[s] = dot / std::sqrt(double(HS));
        mx = std::max(mx, p[s]);
      }
      for (int64_t s = 0; s < end; ++s) sum += (p[s] = std::exp(p[s] - mx));
      for (int64_t s = 0; s < end; ++s)
        for (int64_t d = 0; d < HS; ++d)
          out[(i * NH + h) * HS + d] += p[s] / sum * v[(s * NKV + g) * HS + d];
    }
  }
  return out;
}

}  // namespace gtp::kernels::testing
