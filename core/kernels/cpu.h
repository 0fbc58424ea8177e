// core/kernels/cpu.h — CPU implementations of every numeric op (see
// core/kernels/kernels.h for the conventions). Host pointers; each call runs
// on the calling thread (GEMM through OpenBLAS) and is thread-safe.
#pragma once

#include "core/kernels/kernels.h"

namespace gtp::kernels {

namespace cpu {

// ---- GEMM ------------------------------------------------------------------
void Gemm(const GemmDesc& d, const void* A, const void* B, void* C);
// G = count independent GEMMs sharing d's transposes, scalars and types (see
// GemmGroup in kernels.h), one cpu::Gemm after another.
void GroupedGemm(const GemmDesc& d, const GemmGroup* groups, int count);
// Threads the BLAS may use per GEMM call (process-wide). Ranks running as
// threads of one process should share the cores: n = cores / ranks.
void SetGemmThreads(int n);

// ---- Embedding ---------------------------------------------------------------
// out[N, C] = table[idx[n] - vocab_start] for idx in [vocab_start, vocab_start + V),
// else 0 (vocab-parallel: this rank holds rows [vocab_start, vocab_start + V)).
void EmbeddingForward(const int32_t* idx, const float* table, float* out, int64_t N, int64_t V,
                      int64_t C, int64_t vocab_start);
// dtable[idx[n] - vocab_start] += dout[n] for in-range idx (deterministic order).
void EmbeddingBackward(const int32_t* idx, const float* dout, float* dtable, int64_t N, int64_t V,
                       int64_t C, int64_t vocab_start);

// ---- Norms (over the last dim C of x[N, C]) ------------------------------------
// y = (x − mean)·rstd·w + b; saves mean[N], rstd[N]. b may be null.
void LayerNormForward(const float* x, const float* w, const float* b, float* y, float* mean,
                      float* rstd, int64_t N, int64_t C, float eps);
// dx (=), dw (+=), db (+=, may be null).
void LayerNormBackward(const float* dy, const float* x, const float* w, const float* mean,
                       const float* rstd, float* dx, float* dw, float* db, int64_t N, int64_t C,
                       const float* dresidual = nullptr);
// y = x·rstd·w, rstd = 1/sqrt(mean(x²) + eps); saves rstd[N].
void RMSNormForward(const float* x, const float* w, float* y, float* rstd, int64_t N, int64_t C,
                    float eps);
void RMSNormBackward(const float* dy, const float* x, const float* w, const float* rstd, float* dx,
                     float* dw, int64_t N, int64_t C,
                     const float* dresidual = nullptr);

// ---- Activations ---------------------------------------------------------------
// GELU, tanh approximation: 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))).
void GeluForward(const float* x, float* y, int64_t n);
void GeluBackward(const float* dy, const float* x, float* dx, int64_t n);
// SwiGLU on x[N, 2H] = [gate | up] per row: y[N, H] = silu(gate)·up.
void SwiGluForward(const float* x, float* y, int64_t N, int64_t H);
void SwiGluBackward(const float* dy, const float* x, float* dx, int64_t N, int64_t H);

// ---- Softmax over the last dim of x[N, C] ----------------------------------------
void SoftmaxForward(const float* x, float* y, int64_t N, int64_t C);
// dx = y ⊙ (dy − Σ dy·y).
void SoftmaxBackward(const float* dy, const float* y, float* dx, int64_t N, int64_t C);

// ---- Self-attention (naive; materialises probabilities) ---------------------------
// q[B, T, NH, HS], k/v[B, T, NKV, HS] (GQA: NH % NKV == 0, head h reads kv head
// h / (NH/NKV)); out[B, T, NH, HS]; att[B, NH, T, T] saves the probabilities.
// scale = 1/√HS. causal: query t sees keys s ≤ t (upper triangle of att
// written as 0); otherwise every key (bidirectional, e.g. a vision encoder).
void AttentionForward(const float* q, const float* k, const float* v, float* out, float* att,
                      int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS,
                      bool causal = true);
// dq, dk, dv written (=). scratch: B·NH·T·T floats. causal as in the forward.
void AttentionBackward(const float* dout, const float* q, const float* k, const float* v,
                       const float* att, float* dq, float* dk, float* dv, float* scratch, int64_t B,
                       int64_t T, int64_t NH, int64_t NKV, int64_t HS, bool causal = true);

// ---- Softmax cross-entropy over (possibly vocab-sharded) logits[N, V] -------------
// This rank holds vocab columns [vocab_start, vocab_start + V). Targets are
// global ids; a target < 0 is ignored (loss 0, no gradient). The staged API
// lets layers all-reduce between stages over the TP group:
//   1. CrossEntropyStats: local row max → row_max[N]; the target's logit if
//      this rank holds it, else 0 → target_logit[N].      (all-reduce max / sum)
//   2. CrossEntropySumExp: Σ_v exp(logit − row_max) → sumexp[N]. (all-reduce sum)
//   3. CrossEntropyLoss: loss[N] = log(sumexp) + row_max − target_logit.
//   4. CrossEntropyBackward: dlogits = dloss[n]·(softmax − onehot(target)) (=).
// ld: the row stride of logits/dlogits (0: V); columns [V, ld) are padding,
// left out of the statistics and written 0 in dlogits.
void CrossEntropyStats(const float* logits, const int32_t* targets, float* row_max,
                       float* target_logit, int64_t N, int64_t V, int64_t vocab_start, int64_t ld = 0);
void CrossEntropySumExp(const float* logits, const float* row_max, float* sumexp, int64_t N,
                        int64_t V, int64_t ld = 0);
void CrossEntropyLoss(const float* row_max, const float* sumexp, const float* target_logit,
                      const int32_t* targets, float* loss, int64_t N);
void CrossEntropyBackward(const float* logits, const float* row_max, const float* sumexp,
                          const int32_t* targets, const float* dloss, float* dlogits, int64_t N,
                          int64_t V, int64_t vocab_start, int64_t ld = 0);
// Unsharded convenience: stages 1–3 in one call. scratch: 3·N floats, left
// holding [row_max | target_logit | sumexp] for CrossEntropyBackward.
void CrossEntropyForward(const float* logits, const int32_t* targets, float* loss, float* scratch,
                         int64_t N, int64_t V);

// ---- Casts and fp8 -----------------------------------------------------------------
void CastF32ToBF16(const float* x, bf16* y, int64_t n);
void CastBF16ToF32(const bf16* x, float* y, int64_t n);
// MXFP8 (cpu/cast.cc): one E8M0 scale byte e per block of 32 elements, the
// smallest power of two 2^(e − 127) that brings the block's amax to at most
// fmt_max (Fp8BlockExponent in kernels.h; 255 = NaN for a block holding NaN or
// ±inf); q = round(x / 2^(e − 127)). fmt is kF8E4M3 or kF8E5M2. x is f32 or
// bf16 (x_type). scales has ceil(n / 32) entries.
void QuantizeFp8Blockwise(const void* x, DType x_type, uint8_t* q, uint8_t* scales, int64_t n,
                          DType fmt);
// y = q·2^(e − 127) (exact in f32; NaN for e = 255), written as f32 or bf16 (y_type).
void DequantizeFp8Blockwise(const uint8_t* q, const uint8_t* scales, void* y, DType y_type,
                            int64_t n, DType fmt);
// Backward of quantize→dequantize is the straight-through estimator: dx = dy.

// NVFP4 (cpu/nvfp4.cc; format, rules and error bound in kernels.h): wire
// (Nvfp4WireBytes(n) bytes, every one written) ← x (n elements, f32 or bf16:
// x_type); y (n elements, f32 or bf16: y_type) ← wire.
void EncodeNvfp4(const void* x, DType x_type, uint8_t* wire, int64_t n);
void DecodeNvfp4(const uint8_t* wire, void* y, DType y_type, int64_t n);

// ---- Optimizer math ------------------------------------------------------------------
// AdamW on n elements: m ← β1·m + (1−β1)·g; v ← β2·v + (1−β2)·g²;
// p ← p − lr·(m̂ / (√v̂ + eps) + wd·p), m̂ = m/(1−β1^t), v̂ = v/(1−β2^t).
void AdamW(float* p, const float* g, float* m, float* v, int64_t n, const AdamWParams& hp);
// AdamW over many tensors at once (segments[i].weight_decay per tensor), the
// same arithmetic as AdamW element for element.
void AdamWMulti(const AdamWSegment* segments, int num_segments, const AdamWParams& hp);

// Newton–Schulz orthogonalisation of G[M, N] (f32) into X[M, N]:
// X ← G / (‖G‖_F + 1e-7); transpose when M > N; `steps` iterations of
// X ← aX + (bA + cA²)X, A = XXᵀ; transpose back. scratch: at least
// 2·min(M,N)² + 2·M·N floats.
void NewtonSchulz(const float* G, float* X, float* scratch, int64_t M, int64_t N, int steps,
                  NsCoefficients coeffs);


// ---- Elementwise (f32) ----------------------------------------------------------------
// y ← alpha·x + beta·y over n elements (beta == 0: y is not read).
void Axpby(float alpha, const float* x, float beta, float* y, int64_t n);
// x ← value.
void Fill(float* x, float value, int64_t n);
// Σ x² accumulated in double, written to *out (host pointer for CPU; device for CUDA).
void SumSquares(const float* x, int64_t n, double* out);
// sums[c] += Σ_r x[r, c] over x [R, C] (f32 sums [C]), in the fixed order of
// kernels.h's kColumnSumSlabRows (the same bits on both backends).
void ColumnSumAccumulate(const float* x, int64_t R, int64_t C, float* sums);
void ColumnSumAccumulate(const bf16* x, int64_t R, int64_t C, float* sums);

// ---- Rotary position embedding (RoPE, the "rotate half" convention of Llama) ----
// x[B, T, NH, HS], position of row (b, t) = t. For d < HS/2, with
// f_d = theta^(−2d/HS) and a = t·f_d:
//   y[d] = x[d]·cos a − x[d + HS/2]·sin a;  y[d + HS/2] = x[d + HS/2]·cos a + x[d]·sin a.
// Backward rotates by −a. In place (y == x) is allowed. row_stride: elements
// between consecutive rows (b, t) of x and of y (0: NH·HS, dense; more: the
// heads are a column block of wider rows, e.g. q and k inside a packed QKV
// matrix, and the other columns are not touched).
void RopeForward(const float* x, float* y, int64_t B, int64_t T, int64_t NH, int64_t HS,
                 float theta, const int32_t* pos = nullptr, int64_t row_stride = 0);
void RopeBackward(const float* dy, float* dx, int64_t B, int64_t T, int64_t NH, int64_t HS,
                  float theta, const int32_t* pos = nullptr, int64_t row_stride = 0);

// ---- bf16 variants (mixed precision) -------------------------------------------
// The same ops and contracts as above with activations and parameter values in
// bf16; statistics (mean, rstd, row_max, target_logit, sumexp, loss, dloss) and
// parameter gradients (dtable, dw, db) stay f32. Math is f32; each bf16 output
// is rounded once (nearest even, core/dtype.h).
void EmbeddingForward(const int32_t* idx, const bf16* table, bf16* out, int64_t N, int64_t V,
                      int64_t C, int64_t vocab_start);
void EmbeddingBackward(const int32_t* idx, const bf16* dout, float* dtable, int64_t N, int64_t V,
                       int64_t C, int64_t vocab_start);
void LayerNormForward(const bf16* x, const bf16* w, const bf16* b, bf16* y, float* mean,
                      float* rstd, int64_t N, int64_t C, float eps);
void LayerNormBackward(const bf16* dy, const bf16* x, const bf16* w, const float* mean,
                       const float* rstd, bf16* dx, float* dw, float* db, int64_t N, int64_t C,
                       const bf16* dresidual = nullptr);
void RMSNormForward(const bf16* x, const bf16* w, bf16* y, float* rstd, int64_t N, int64_t C,
                    float eps);
void RMSNormBackward(const bf16* dy, const bf16* x, const bf16* w, const float* rstd, bf16* dx,
                     float* dw, int64_t N, int64_t C,
                     const bf16* dresidual = nullptr);
void GeluForward(const bf16* x, bf16* y, int64_t n);
void GeluBackward(const bf16* dy, const bf16* x, bf16* dx, int64_t n);
void SwiGluForward(const bf16* x, bf16* y, int64_t N, int64_t H);
void SwiGluBackward(const bf16* dy, const bf16* x, bf16* dx, int64_t N, int64_t H);
void CrossEntropyStats(const bf16* logits, const int32_t* targets, float* row_max,
                       float* target_logit, int64_t N, int64_t V, int64_t vocab_start, int64_t ld = 0);
void CrossEntropySumExp(const bf16* logits, const float* row_max, float* sumexp, int64_t N,
                        int64_t V, int64_t ld = 0);
void CrossEntropyBackward(const bf16* logits, const float* row_max, const float* sumexp,
                          const int32_t* targets, const float* dloss, bf16* dlogits, int64_t N,
                          int64_t V, int64_t vocab_start, int64_t ld = 0);
// y ← alpha·x + beta·y in f32, rounded once (x may alias y; beta == 0: y not read).
void Axpby(float alpha, const bf16* x, float beta, bf16* y, int64_t n);
// x ← bf16(value).
void Fill(bf16* x, float value, int64_t n);
// Σ x² of the (exactly widened) bf16 values, in double.
void SumSquares(const bf16* x, int64_t n, double* out);
void RopeForward(const bf16* x, bf16* y, int64_t B, int64_t T, int64_t NH, int64_t HS, float theta,
                 const int32_t* pos = nullptr, int64_t row_stride = 0);
void RopeBackward(const bf16* dy, bf16* dx, int64_t B, int64_t T, int64_t NH, int64_t HS,
                  float theta, const int32_t* pos = nullptr, int64_t row_stride = 0);

// ---- Grad-norm bookkeeping (see cpu/grad_norm.cc for the math) -------------
// words[2] = this rank's Σ ss[0, n_count) (+ 0·ss[n_count, n)) as two f32 words.
void GradNormWords(const double* ss, int n_count, int n, float* words);
// out[3] = {norm, clip scale, skip} from num_buffers pairs of summed words.
void GradNormFinalize(const float* words, int num_buffers, double max_norm, float* out);

// ---- Loss bookkeeping (kept on the device during training) -----------------
// count[0] = #{targets >= 0}; acc[0] += Σ_{targets ≥ 0} loss / count (nothing
// when count is 0).
void MaskedMeanAccumulate(const float* loss, const int32_t* targets, int64_t N, float* acc,
                          float* count);
// out[0, n) = count[0] > 0 ? 1 / count[0] : 0.
void FillReciprocal(const float* count, float* out, int64_t n);
// count[0] = #{targets >= 0}.
void CountValid(const int32_t* targets, int64_t N, float* count);

// ---- Fused attention (the contract of cuda::FlashAttentionForward/Backward) -------
// q[B, T, NH, HS], k/v[B, T, NKV, HS] (head h reads kv head h / (NH/NKV)), out
// like q; lse[B, NH, T] f32 = log Σ_j exp(scale·q_i·k_j), scale = 1/√HS, over
// j ≤ i when causal, over all j < T when not (bidirectional).
// No T×T buffer. Computed in double (the CPU fallback and a shape-for-shape
// reference of the CUDA kernels; slow). Any HS ≥ 1.
void FlashAttentionForward(const float* q, const float* k, const float* v, float* out, float* lse,
                           int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS,
                           bool causal = true);
void FlashAttentionForward(const bf16* q, const bf16* k, const bf16* v, bf16* out, float* lse,
                           int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS,
                           bool causal = true);
// dq, dk, dv written (=); out and lse are the forward's (D = rowsum(dout∘out)),
// causal the forward's.
void FlashAttentionBackward(const float* dout, const float* q, const float* k, const float* v,
                            const float* out, const float* lse, float* dq, float* dk, float* dv,
                            int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS,
                            bool causal = true);
void FlashAttentionBackward(const bf16* dout, const bf16* q, const bf16* k, const bf16* v,
                            const bf16* out, const float* lse, bf16* dq, bf16* dk, bf16* dv,
                            int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS,
                            bool causal = true);

}  // namespace cpu

}  // namespace gtp::kernels
