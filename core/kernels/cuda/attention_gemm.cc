// Self-attention (causal or bidirectional) through cuBLASLt GEMMs (attention_softmax.cu has the
// row kernels). Same contract as AttentionForward/Backward (cuda.h): q[B, T,
// NH, HS], k/v[B, T, NKV, HS], att[B, NH, T, T] saved probabilities. Per
// (b, h), with G = NH/NKV and kv head h/G:
//   forward : S = scale·Q Kᵀ;  P = softmax(S), causally masked when causal
//             (into att);  O = P V
//   backward: dP = dO Vᵀ;  dS = scale·P ⊙ (dP − rowsum(dP ⊙ P));
//             dQ = dS K;  dK += dSᵀ Q;  dV += Pᵀ dO  (summed over the G heads
//             of a kv group in head order: deterministic)
// One GEMM per (b, h) and product; the matrices are strided views of the
// [B, T, heads, HS] layouts (leading dimension heads·HS).
#include <cmath>

#include "core/kernels/cuda.h"
#include "core/status.h"

namespace gtp::kernels::cuda {
namespace internal {
void LaunchAttentionSoftmax(float* s, int64_t rows, int64_t T, cudaStream_t stream, bool causal);
void LaunchAttentionSoftmaxBackward(const float* p, float* dp, int64_t rows, int64_t T, float scale,
                                    cudaStream_t stream, bool causal);
}  // namespace internal

namespace {
GemmDesc Desc(bool ta, bool tb, int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb,
              int64_t ldc, float alpha, float beta) {
  GemmDesc d;
  d.trans_a = ta;
  d.trans_b = tb;
  d.m = m, d.n = n, d.k = k;
  d.lda = lda, d.ldb = ldb, d.ldc = ldc;
  d.alpha = alpha, d.beta = beta;
  return d;
}
}  // namespace

void AttentionForwardGemm(BlasContext& ctx, const float* q, const float* k, const float* v,
                          float* out, float* att, int64_t B, int64_t T, int64_t NH, int64_t NKV,
                          int64_t HS, cudaStream_t stream, bool causal) {
  GTP_CHECK(NKV > 0 && NH % NKV == 0, "attention: NH ", NH, " not a multiple of NKV ", NKV);
  const int64_t G = NH / NKV, ldq = NH * HS, ldk = NKV * HS;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < NH; ++h) {
      const float* qb = q + b * T * ldq + h * HS;
      const float* kb = k + b * T * ldk + (h / G) * HS;
      float* s = att + (b * NH + h) * T * T;
      Gemm(ctx, Desc(false, true, T, T, HS, ldq, ldk, T, scale, 0.0f), qb, kb, s, stream);
    }
  }
  internal::LaunchAttentionSoftmax(att, B * NH * T, T, stream, causal);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < NH; ++h) {
      const float* p = att + (b * NH + h) * T * T;
      const float* vb = v + b * T * ldk + (h / G) * HS;
      float* ob = out + b * T * ldq + h * HS;
      Gemm(ctx, Desc(false, false, T, HS, T, T, ldk, ldq, 1.0f, 0.0f), p, vb, ob, stream);
    }
  }
}

void AttentionBackwardGemm(BlasContext& ctx, const float* dout, const float* q, const float* k,
                           const float* v, const float* att, float* dq, float* dk, float* dv,
                           float* scratch, int64_t B, int64_t T, int64_t NH, int64_t NKV,
                           int64_t HS, cudaStream_t stream, bool causal) {
  GTP_CHECK(NKV > 0 && NH % NKV == 0, "attention: NH ", NH, " not a multiple of NKV ", NKV);
  const int64_t G = NH / NKV, ldq = NH * HS, ldk = NKV * HS;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  // dP = dO Vᵀ into scratch, then dS in place.
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < NH; ++h) {
      const float* dob = dout + b * T * ldq + h * HS;
      const float* vb = v + b * T * ldk + (h / G) * HS;
      float* dp = scratch + (b * NH + h) * T * T;
      Gemm(ctx, Desc(false, true, T, T, HS, ldq, ldk, T, 1.0f, 0.0f), dob, vb, dp, stream);
    }
  }
  internal::LaunchAttentionSoftmaxBackward(att, scratch, B * NH * T, T, scale, stream, causal);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < NH; ++h) {
      const float* ds = scratch + (b * NH + h) * T * T;
      const float* p = att + (b * NH + h) * T * T;
      const int64_t kv = h / G;
      const float beta = (h % G == 0) ? 0.0f : 1.0f;  // first head of its group writes
      const float* qb = q + b * T * ldq + h * HS;
      const float* kb = k + b * T * ldk + kv * HS;
      const float* dob = dout + b * T * ldq + h * HS;
      Gemm(ctx, Desc(false, false, T, HS, T, T, ldk, ldq, 1.0f, 0.0f), ds, kb,
           dq + b * T * ldq + h * HS, stream);
      Gemm(ctx, Desc(true, false, T, HS, T, T, ldq, ldk, 1.0f, beta), ds, qb,
           dk + b * T * ldk + kv * HS, stream);
      Gemm(ctx, Desc(true, false, T, HS, T, T, ldq, ldk, 1.0f, beta), p, dob,
           dv + b * T * ldk + kv * HS, stream);
    }
  }
}

}  // namespace gtp::kernels::cuda
