// Naive self-attention with grouped-query heads, causal or bidirectional.
//   q[B, T, NH, HS], k/v[B, T, NKV, HS]; query head h reads kv head
//   h / (NH/NKV); scale = 1/√HS. Row t sees keys s < end(t): t + 1 when
//   causal, T otherwise.
//   forward:  P[t, s] = softmax_{s < end}(scale·q_t·k_s)   (P[t, s] = 0 for s ≥ end)
//             out_t   = Σ_{s < end} P[t, s]·v_s
//   backward: dP[t, s] = dout_t·v_s
//             dS[t, s] = P[t, s]·(dP[t, s] − Σ_j P[t, j]·dP[t, j])
//             dq_t = scale·Σ_s dS[t, s]·k_s,  dk_s = scale·Σ_t dS[t, s]·q_t,
//             dv_s = Σ_t P[t, s]·dout_t      (all =; kv heads sum over their group)
// P is saved in att[B, NH, T, T]; the backward keeps dP/dS in scratch
// [B, NH, T, T]. Loops run in a fixed order, so results are reproducible.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/kernels/cpu.h"
#include "core/status.h"

namespace gtp::kernels::cpu {
namespace {

inline float Dot(const float* __restrict__ a, const float* __restrict__ b, int64_t n) {
  float acc = 0;
  for (int64_t i = 0; i < n; ++i) acc += a[i] * b[i];
  return acc;
}

// y += alpha·x over n elements.
inline void Axpy(float alpha, const float* __restrict__ x, float* __restrict__ y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

void CheckShapes(int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS) {
  GTP_CHECK(B >= 0 && T >= 0 && HS > 0 && NH > 0 && NKV > 0, "Attention: bad size B=", B, " T=", T,
            " NH=", NH, " NKV=", NKV, " HS=", HS);
  GTP_CHECK(NH % NKV == 0, "Attention: NH=", NH, " is not a multiple of NKV=", NKV);
}

}  // namespace

void AttentionForward(const float* q, const float* k, const float* v, float* out, float* att,
                      int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS, bool causal) {
  CheckShapes(B, T, NH, NKV, HS);
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  const int64_t group = NH / NKV;
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < NH; ++h) {
      const int64_t kvh = h / group;
      for (int64_t t = 0; t < T; ++t) {
        const int64_t end = causal ? t + 1 : T;
        const float* qt = q + ((b * T + t) * NH + h) * HS;
        float* p = att + ((b * NH + h) * T + t) * T;
        float mx = -INFINITY;
        for (int64_t s = 0; s < end; ++s) {
          p[s] = scale * Dot(qt, k + ((b * T + s) * NKV + kvh) * HS, HS);
          mx = std::max(mx, p[s]);
        }
        float sum = 0;
        for (int64_t s = 0; s < end; ++s) sum += (p[s] = std::exp(p[s] - mx));
        const float inv = 1.0f / sum;
        for (int64_t s = 0; s < end; ++s) p[s] *= inv;
        std::fill(p + end, p + T, 0.0f);

        float* ot = out + ((b * T + t) * NH + h) * HS;
        std::fill(ot, ot + HS, 0.0f);
        for (int64_t s = 0; s < end; ++s) Axpy(p[s], v + ((b * T + s) * NKV + kvh) * HS, ot, HS);
      }
    }
  }
}

void AttentionBackward(const float* dout, const float* q, const float* k, const float* v,
                       const float* att, float* dq, float* dk, float* dv, float* scratch, int64_t B,
                       int64_t T, int64_t NH, int64_t NKV, int64_t HS, bool causal) {
  CheckShapes(B, T, NH, NKV, HS);
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  const int64_t group = NH / NKV;
  // Gradients are written (=) but accumulate over t and over a kv head's group.
  std::memset(dq, 0, sizeof(float) * B * T * NH * HS);
  std::memset(dk, 0, sizeof(float) * B * T * NKV * HS);
  std::memset(dv, 0, sizeof(float) * B * T * NKV * HS);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < NH; ++h) {
      const int64_t kvh = h / group;
      for (int64_t t = 0; t < T; ++t) {
        const int64_t end = causal ? t + 1 : T;
        const size_t row = ((b * NH + h) * T + t) * T;
        const float* p = att + row;
        float* ds = scratch + row;  // dP, then dS in place
        const float* dout_t = dout + ((b * T + t) * NH + h) * HS;
        float pdp = 0;
        for (int64_t s = 0; s < end; ++s) {
          const size_t kv = ((b * T + s) * NKV + kvh) * HS;
          ds[s] = Dot(dout_t, v + kv, HS);
          pdp += p[s] * ds[s];
          Axpy(p[s], dout_t, dv + kv, HS);
        }
        for (int64_t s = 0; s < end; ++s) ds[s] = p[s] * (ds[s] - pdp);
        std::fill(ds + end, ds + T, 0.0f);

        const float* qt = q + ((b * T + t) * NH + h) * HS;
        float* dqt = dq + ((b * T + t) * NH + h) * HS;
        for (int64_t s = 0; s < end; ++s) {
          const size_t kv = ((b * T + s) * NKV + kvh) * HS;
          Axpy(scale * ds[s], k + kv, dqt, HS);
          Axpy(scale * ds[s], qt, dk + kv, HS);
        }
      }
    }
  }
}

}  // namespace gtp::kernels::cpu
