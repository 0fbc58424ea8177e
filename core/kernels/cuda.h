// core/kernels/cuda.h — CUDA implementations of every numeric op, same
// signatures as core/kernels/cpu.h plus a stream (see core/kernels/kernels.h
// for the conventions). Device pointers; every call is enqueued on `stream`
// and never blocks the host. Launch errors abort with file:line.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>

#include "core/kernels/kernels.h"

namespace gtp::kernels {

namespace cuda {

// cuBLASLt handle + workspace for one device; create once per (device,
// thread) and pass to GEMM calls. Not thread-safe.
class BlasContext {
 public:
  // Aborts (GTP_CHECK) if cuBLASLt cannot be initialised; check
  // CudaDeviceCount() first.
  explicit BlasContext(int device);
  ~BlasContext();
  BlasContext(const BlasContext&) = delete;
  BlasContext& operator=(const BlasContext&) = delete;
  void* lt_handle() const { return lt_; }
  void* workspace() const { return workspace_; }
  size_t workspace_bytes() const { return workspace_bytes_; }

  // cuBLASLt's algorithm choice per GEMM shape (types, transposes, sizes,
  // leading dimensions, operand alignments), remembered after the first
  // heuristic query: the query costs more than a small GEMM.
  struct AlgoCache;
  AlgoCache& algo_cache() { return *cache_; }

 private:
  void* lt_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  std::unique_ptr<AlgoCache> cache_;
};

void Gemm(BlasContext& ctx, const GemmDesc& d, const void* A, const void* B, void* C,
          cudaStream_t stream);

void EmbeddingForward(const int32_t* idx, const float* table, float* out, int64_t N, int64_t V,
                      int64_t C, int64_t vocab_start, cudaStream_t stream);
void EmbeddingBackward(const int32_t* idx, const float* dout, float* dtable, int64_t N, int64_t V,
                       int64_t C, int64_t vocab_start, cudaStream_t stream);

void LayerNormForward(const float* x, const float* w, const float* b, float* y, float* mean,
                      float* rstd, int64_t N, int64_t C, float eps, cudaStream_t stream);
// scratch: at least LayerNormBackwardScratchFloats(N, C) floats (deterministic
// two-pass reduction of dw/db).
int64_t LayerNormBackwardScratchFloats(int64_t N, int64_t C);
void LayerNormBackward(const float* dy, const float* x, const float* w, const float* mean,
                       const float* rstd, float* dx, float* dw, float* db, float* scratch,
                       int64_t N, int64_t C, cudaStream_t stream);
void RMSNormForward(const float* x, const float* w, float* y, float* rstd, int64_t N, int64_t C,
                    float eps, cudaStream_t stream);
// scratch: at least RMSNormBackwardScratchFloats(N, C) floats (never more
// than LayerNormBackwardScratchFloats(N, C)).
int64_t RMSNormBackwardScratchFloats(int64_t N, int64_t C);
void RMSNormBackward(const float* dy, const float* x, const float* w, const float* rstd, float* dx,
                     float* dw, float* scratch, int64_t N, int64_t C, cudaStream_t stream);

void GeluForward(const float* x, float* y, int64_t n, cudaStream_t stream);
void GeluBackward(const float* dy, const float* x, float* dx, int64_t n, cudaStream_t stream);
void SwiGluForward(const float* x, float* y, int64_t N, int64_t H, cudaStream_t stream);
void SwiGluBackward(const float* dy, const float* x, float* dx, int64_t N, int64_t H,
                    cudaStream_t stream);

void SoftmaxForward(const float* x, float* y, int64_t N, int64_t C, cudaStream_t stream);
void SoftmaxBackward(const float* dy, const float* y, float* dx, int64_t N, int64_t C,
                     cudaStream_t stream);

void AttentionForward(const float* q, const float* k, const float* v, float* out, float* att,
                      int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS,
                      cudaStream_t stream);
void AttentionBackward(const float* dout, const float* q, const float* k, const float* v,
                       const float* att, float* dq, float* dk, float* dv, float* scratch,
                       int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS,
                       cudaStream_t stream);

void CrossEntropyStats(const float* logits, const int32_t* targets, float* row_max,
                       float* target_logit, int64_t N, int64_t V, int64_t vocab_start,
                       cudaStream_t stream);
void CrossEntropySumExp(const float* logits, const float* row_max, float* sumexp, int64_t N,
                        int64_t V, cudaStream_t stream);
void CrossEntropyLoss(const float* row_max, const float* sumexp, const float* target_logit,
                      const int32_t* targets, float* loss, int64_t N, cudaStream_t stream);
void CrossEntropyBackward(const float* logits, const float* row_max, const float* sumexp,
                          const int32_t* targets, const float* dloss, float* dlogits, int64_t N,
                          int64_t V, int64_t vocab_start, cudaStream_t stream);
void CrossEntropyForward(const float* logits, const int32_t* targets, float* loss, float* scratch,
                         int64_t N, int64_t V, cudaStream_t stream);

void CastF32ToBF16(const float* x, bf16* y, int64_t n, cudaStream_t stream);
void CastBF16ToF32(const bf16* x, float* y, int64_t n, cudaStream_t stream);
void QuantizeFp8Blockwise(const void* x, DType x_type, uint8_t* q, float* scales, int64_t n,
                          DType fmt, cudaStream_t stream);
void DequantizeFp8Blockwise(const uint8_t* q, const float* scales, void* y, DType y_type, int64_t n,
                            DType fmt, cudaStream_t stream);

void AdamW(float* p, const float* g, float* m, float* v, int64_t n, const AdamWParams& hp,
           cudaStream_t stream);

// scratch: device floats, same count as the CPU version, plus 1 for the norm.
void NewtonSchulz(BlasContext& ctx, const float* G, float* X, float* scratch, int64_t M, int64_t N,
                  int steps, NsCoefficients coeffs, cudaStream_t stream);


// ---- Elementwise (f32) ----------------------------------------------------------------
// y ← alpha·x + beta·y over n elements (beta == 0: y is not read).
void Axpby(float alpha, const float* x, float beta, float* y, int64_t n, cudaStream_t stream);
// x ← value.
void Fill(float* x, float value, int64_t n, cudaStream_t stream);
// Σ x² accumulated in double, written to *out (host pointer for CPU; device for CUDA).
void SumSquares(const float* x, int64_t n, double* out, cudaStream_t stream);


// ---- Rotary position embedding (RoPE, the "rotate half" convention of Llama) ----
// x[B, T, NH, HS], position of row (b, t) = t. For d < HS/2, with
// f_d = theta^(−2d/HS) and a = t·f_d:
//   y[d] = x[d]·cos a − x[d + HS/2]·sin a;  y[d + HS/2] = x[d + HS/2]·cos a + x[d]·sin a.
// Backward rotates by −a. In place (y == x) is allowed.
void RopeForward(const float* x, float* y, int64_t B, int64_t T, int64_t NH, int64_t HS,
                 float theta, cudaStream_t stream);
void RopeBackward(const float* dy, float* dx, int64_t B, int64_t T, int64_t NH, int64_t HS,
                  float theta, cudaStream_t stream);


// Causal attention through cuBLASLt GEMMs and fused causal-softmax row
// kernels: the same contract and outputs as AttentionForward/Backward above
// (att saved, upper triangle 0; dq, dk, dv written), much faster for
// T ≥ 128. scratch: B·NH·T·T floats.
void AttentionForwardGemm(BlasContext& ctx, const float* q, const float* k, const float* v,
                          float* out, float* att, int64_t B, int64_t T, int64_t NH, int64_t NKV,
                          int64_t HS, cudaStream_t stream);
void AttentionBackwardGemm(BlasContext& ctx, const float* dout, const float* q, const float* k,
                           const float* v, const float* att, float* dq, float* dk, float* dv,
                           float* scratch, int64_t B, int64_t T, int64_t NH, int64_t NKV,
                           int64_t HS, cudaStream_t stream);

}  // namespace cuda
}  // namespace gtp::kernels
