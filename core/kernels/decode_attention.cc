// Decode attention on the CPU (math in decode_attention_kernels.h) and the
// Tensor-level dispatch. Two passes over the keys per (query, head): scores
// and their max, then exp, sum and the weighted sum of values.
#include "core/kernels/decode_attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/kernels/decode_attention_kernels.h"
#include "core/status.h"

namespace gtp::kernels {

namespace cpu {

void DecodeAttention(const float* q, const float* k, const float* v, float* out, int64_t n,
                     int64_t pos0, int64_t NH, int64_t NKV, int64_t HS) {
  GTP_CHECK(n >= 0 && pos0 >= 0 && NH > 0 && NKV > 0 && HS > 0 && NH % NKV == 0,
            "DecodeAttention: n ", n, ", pos0 ", pos0, ", NH ", NH, ", NKV ", NKV, ", HS ", HS);
  if (n == 0) return;
  const int64_t group = NH / NKV;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  std::vector<float> p(static_cast<size_t>(pos0 + n));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t end = pos0 + i + 1;  // causal: keys 0 .. pos0 + i
    for (int64_t h = 0; h < NH; ++h) {
      const int64_t g = h / group;
      const float* qi = q + (i * NH + h) * HS;
      float mx = -INFINITY;
      for (int64_t s = 0; s < end; ++s) {
        const float* ks = k + (s * NKV + g) * HS;
        float dot = 0;
        for (int64_t d = 0; d < HS; ++d) dot += qi[d] * ks[d];
        p[s] = scale * dot;
        mx = std::max(mx, p[s]);
      }
      float sum = 0;
      for (int64_t s = 0; s < end; ++s) sum += (p[s] = std::exp(p[s] - mx));
      const float inv = 1.0f / sum;
      float* yi = out + (i * NH + h) * HS;
      std::fill(yi, yi + HS, 0.0f);
      for (int64_t s = 0; s < end; ++s) {
        const float* vs = v + (s * NKV + g) * HS;
        const float w = p[s] * inv;
        for (int64_t d = 0; d < HS; ++d) yi[d] += w * vs[d];
      }
    }
  }
}

}  // namespace cpu

namespace ops {

namespace {

void CheckArg(const Exec& e, const Tensor& t, const char* what) {
  GTP_CHECK(t.defined(), "DecodeAttention: ", what, " is undefined");
  GTP_CHECK(t.device() == e.device, "DecodeAttention: ", what, " is on ", t.device().ToString(),
            ", exec on ", e.device.ToString());
  GTP_CHECK(t.is_contiguous(), "DecodeAttention: ", what, " must be contiguous: ", t.ToString());
  GTP_CHECK(t.dtype() == DType::kF32, "DecodeAttention: ", what, " must be f32: ", t.ToString());
  GTP_CHECK(t.rank() == 3, "DecodeAttention: ", what, " must be rank 3: ", t.ToString());
}

}  // namespace

void DecodeAttention(const Exec& e, const Tensor& q, const Tensor& k, const Tensor& v, int64_t pos0,
                     const Tensor& out) {
  CheckArg(e, q, "q");
  CheckArg(e, k, "k");
  CheckArg(e, v, "v");
  CheckArg(e, out, "out");
  const int64_t n = q.dim(0), NH = q.dim(1), HS = q.dim(2);
  const int64_t L = k.dim(0), NKV = k.dim(1);
  GTP_CHECK(k.shape() == v.shape() && k.dim(2) == HS && out.shape() == q.shape(),
            "DecodeAttention: want q/out [n, NH, HS], k/v [L, NKV, HS]; got q ", q.ToString(),
            ", k ", k.ToString(), ", v ", v.ToString(), ", out ", out.ToString());
  GTP_CHECK(NKV > 0 && NH % NKV == 0, "DecodeAttention: NH ", NH, " is not a multiple of NKV ",
            NKV);
  GTP_CHECK(pos0 >= 0 && pos0 + n <= L, "DecodeAttention: positions [", pos0, ", ", pos0 + n,
            ") outside the cache's ", L, " rows");
  if (n == 0) return;
  if (e.is_cuda()) {
    cuda::DecodeAttention(q.data<float>(), k.data<float>(), v.data<float>(), out.data<float>(), n,
                          pos0, NH, NKV, HS, e.stream);
  } else {
    cpu::DecodeAttention(q.data<float>(), k.data<float>(), v.data<float>(), out.data<float>(), n,
                         pos0, NH, NKV, HS);
  }
}

}  // namespace ops
}  // namespace gtp::kernels
