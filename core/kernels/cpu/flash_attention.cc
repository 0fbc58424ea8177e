// core/kernels/cpu/flash_attention.cc — the fused attention contract of
// cuda::FlashAttentionForward/Backward on the host (no T×T buffer is kept):
//   s_ij = scale·q_i·k_j (j ≤ i when causal, every j < T when not),
//   lse_i = log Σ_j exp(s_ij), p_ij = exp(s_ij − lse_i),
//   out_i = Σ_j p_ij·v_j;  backward with D_i = Σ dout_i·out_i, ds_ij = p_ij·(dout_i·v_j − D_i):
//   dq_i = scale·Σ_j ds_ij·k_j, dk_j = scale·Σ_{h,i} ds_ij·q_i, dv_j = Σ_{h,i} p_ij·dout_i.
// Everything is computed in double, one row at a time; the CPU fallback and a
// shape-for-shape reference, written for correctness, not speed.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/kernels/cpu.h"
#include "core/status.h"

namespace gtp::kernels::cpu {
namespace {

inline double Load(const float* p, int64_t i) { return p[i]; }
inline double Load(const bf16* p, int64_t i) { return ToF32(p[i]); }
inline void Store(float* p, int64_t i, double x) { p[i] = static_cast<float>(x); }
inline void Store(bf16* p, int64_t i, double x) { p[i] = ToBF16(static_cast<float>(x)); }

void CheckShape(const char* what, int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS) {
  GTP_CHECK(B >= 0 && T >= 0 && HS >= 1 && NKV >= 1 && NH % NKV == 0, what, ": bad shape B=", B,
            " T=", T, " NH=", NH, " NKV=", NKV, " HS=", HS);
}

// Row i of (b, h): raw scaled scores s[0, end).
template <typename T>
void Scores(const T* q, const T* k, int64_t b, int64_t h, int64_t i, int64_t end, int64_t Tn,
            int64_t NH, int64_t NKV, int64_t HS, double scale, std::vector<double>& s) {
  const int64_t hk = h / (NH / NKV);
  const int64_t qo = ((b * Tn + i) * NH + h) * HS;
  for (int64_t j = 0; j < end; ++j) {
    const int64_t ko = ((b * Tn + j) * NKV + hk) * HS;
    double dot = 0;
    for (int64_t d = 0; d < HS; ++d) dot += Load(q, qo + d) * Load(k, ko + d);
    s[j] = dot * scale;
  }
}

template <typename T>
void Forward(const T* q, const T* k, const T* v, T* out, float* lse, int64_t B, int64_t Tn,
             int64_t NH, int64_t NKV, int64_t HS, bool causal) {
  CheckShape("FlashAttentionForward", B, Tn, NH, NKV, HS);
  const double scale = 1.0 / std::sqrt(static_cast<double>(HS));
  std::vector<double> s(Tn), acc(HS);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < NH; ++h) {
      const int64_t hk = h / (NH / NKV);
      for (int64_t i = 0; i < Tn; ++i) {
        const int64_t end = causal ? i + 1 : Tn;
        Scores(q, k, b, h, i, end, Tn, NH, NKV, HS, scale, s);
        double mx = -INFINITY;
        for (int64_t j = 0; j < end; ++j) mx = std::max(mx, s[j]);
        double sum = 0;
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int64_t j = 0; j < end; ++j) {
          const double p = std::exp(s[j] - mx);
          sum += p;
          const int64_t vo = ((b * Tn + j) * NKV + hk) * HS;
          for (int64_t d = 0; d < HS; ++d) acc[d] += p * Load(v, vo + d);
        }
        const int64_t oo = ((b * Tn + i) * NH + h) * HS;
        for (int64_t d = 0; d < HS; ++d) Store(out, oo + d, acc[d] / sum);
        lse[(b * NH + h) * Tn + i] = static_cast<float>(mx + std::log(sum));
      }
    }
  }
}

template <typename T>
void Backward(const T* dout, const T* q, const T* k, const T* v, const T* out, const float* lse,
              T* dq, T* dk, T* dv, int64_t B, int64_t Tn, int64_t NH, int64_t NKV, int64_t HS,
              bool causal) {
  CheckShape("FlashAttentionBackward", B, Tn, NH, NKV, HS);
  const double scale = 1.0 / std::sqrt(static_cast<double>(HS));
  std::vector<double> dka(B * Tn * NKV * HS, 0.0), dva(dka.size(), 0.0), dqa(HS);
  std::vector<double> s(Tn);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < NH; ++h) {
      const int64_t hk = h / (NH / NKV);
      for (int64_t i = 0; i < Tn; ++i) {
        const int64_t end = causal ? i + 1 : Tn;
        const int64_t qo = ((b * Tn + i) * NH + h) * HS;
        double D = 0;
        for (int64_t d = 0; d < HS; ++d) D += Load(dout, qo + d) * Load(out, qo + d);
        const double l = lse[(b * NH + h) * Tn + i];
        Scores(q, k, b, h, i, end, Tn, NH, NKV, HS, scale, s);
        std::fill(dqa.begin(), dqa.end(), 0.0);
        for (int64_t j = 0; j < end; ++j) {
          const int64_t ko = ((b * Tn + j) * NKV + hk) * HS;
          const double p = std::exp(s[j] - l);
          double dp = 0;
          for (int64_t d = 0; d < HS; ++d) dp += Load(dout, qo + d) * Load(v, ko + d);
          const double ds = p * (dp - D) * scale;
          for (int64_t d = 0; d < HS; ++d) {
            dqa[d] += ds * Load(k, ko + d);
            dka[ko + d] += ds * Load(q, qo + d);
            dva[ko + d] += p * Load(dout, qo + d);
          }
        }
        for (int64_t d = 0; d < HS; ++d) Store(dq, qo + d, dqa[d]);
      }
    }
  }
  for (size_t i = 0; i < dka.size(); ++i) {
    Store(dk, static_cast<int64_t>(i), dka[i]);
    Store(dv, static_cast<int64_t>(i), dva[i]);
  }
}

}  // namespace

void FlashAttentionForward(const float* q, const float* k, const float* v, float* out, float* lse,
                           int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS, bool causal) {
  Forward(q, k, v, out, lse, B, T, NH, NKV, HS, causal);
}
void FlashAttentionForward(const bf16* q, const bf16* k, const bf16* v, bf16* out, float* lse,
                           int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS, bool causal) {
  Forward(q, k, v, out, lse, B, T, NH, NKV, HS, causal);
}
void FlashAttentionBackward(const float* dout, const float* q, const float* k, const float* v,
                            const float* out, const float* lse, float* dq, float* dk, float* dv,
                            int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS,
                            bool causal) {
  Backward(dout, q, k, v, out, lse, dq, dk, dv, B, T, NH, NKV, HS, causal);
}
void FlashAttentionBackward(const bf16* dout, const bf16* q, const bf16* k, const bf16* v,
                            const bf16* out, const float* lse, bf16* dq, bf16* dk, bf16* dv,
                            int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS,
                            bool causal) {
  Backward(dout, q, k, v, out, lse, dq, dk, dv, B, T, NH, NKV, HS, causal);
}

}  // namespace gtp::kernels::cpu
