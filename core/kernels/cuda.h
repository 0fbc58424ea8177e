// core/kernels/cuda.h — CUDA implementations of every numeric op, same
// signatures as core/kernels/cpu.h plus a stream (see core/kernels/kernels.h
// for the conventions). Device pointers; every call is enqueued on `stream`
// and never blocks the host. Launch errors abort with file:line.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>
#include <vector>

#include "core/kernels/kernels.h"

namespace gtp::kernels {

namespace cuda {

// cuBLASLt handle + workspace for one device; create once per (device,
// thread) and pass to GEMM calls. Not thread-safe. Also holds a cuBLAS handle
// and a small device array of pointers for GroupedGemm (both created here,
// so that no GEMM call allocates and all of them may be graph-captured). The
// workspace and that pointer array are reused by every call in stream order:
// calls on different streams through one context must be ordered by the
// caller (as for the workspace).
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
  // cuBLAS (not Lt) handle, for cublasGemmGroupedBatchedEx; its stream is set
  // by SetBlasStream.
  void* blas_handle() const { return blas_; }
  // Binds the cuBLAS handle to `stream` (and to the shared workspace, which
  // cublasSetStream resets); a no-op when already bound to it.
  void SetBlasStream(cudaStream_t stream);
  // Device array of 3·kGroupedPtrCapacity pointers: the A, B and C arrays of
  // one cublasGemmGroupedBatchedEx call (cuBLAS reads them on the device).
  static constexpr int kGroupedPtrCapacity = 1024;
  void** grouped_ptrs() const { return grouped_ptrs_; }
  // GroupedGemm's bookkeeping: cublasGemmGroupedBatchedEx calls made through
  // this context (tests check which path ran), and whether cuBLAS refused a
  // call for ab_type == c_type f32 ([0]) or bf16 ([1]): that type then loops
  // over Gemm without asking again.
  struct GroupedStats {
    int64_t batched_calls = 0;
    bool refused[2] = {false, false};
  };
  GroupedStats& grouped_stats() { return grouped_stats_; }
  // Whether GroupedGemm hands same-type groups to cublasGemmGroupedBatchedEx
  // (true, the default) or runs one cuBLASLt GEMM per group (false). With
  // fixed shapes the loop is faster on the H200 (8 × [2048 rows, 768 → 3072]
  // bf16: 0.148 vs 0.274 ms forward; core/kernels/bench:gemm_benchmark), but
  // a dropless MoE's per-expert row counts change every step and each new
  // shape cost the loop a cuBLASLt algorithm search: recipes/moe_gpu ran
  // 104 ms/step with the loop, 36.7 ms with the grouped call
  // (docs/PERFORMANCE.md, 2026-12-01). The loop now shares one algorithm per
  // 128-row bucket (internal::GemmBucketed, lt_common.h), and with row counts
  // changing on every call it ran fc1's forward in 0.097 ms against the
  // grouped call's 0.148 on an H100 (BM_CudaGroupedVarying; PERFORMANCE.md's
  // forty-second section); a MoE step with the loop as the default is not
  // yet measured.
  void set_grouped_batched(bool on) { grouped_batched_ = on; }
  bool grouped_batched() const { return grouped_batched_; }
  // Which kernel fp8::BlockScaledGemm runs where its caller leaves the
  // choice to the context (Fp8GemmEngine::kContext, every fp8 linear):
  // cuBLASLt's (false, the default) or gtp's own Hopper wgmma kernel (true;
  // core/kernels/fp8/block_gemm.h). The trainer's train.fp8_gemm.
  void set_fp8_wgmma(bool on) { fp8_wgmma_ = on; }
  bool fp8_wgmma() const { return fp8_wgmma_; }

  // cuBLASLt's algorithm choice per GEMM shape (types, transposes, sizes,
  // leading dimensions, operand alignments), remembered after the first
  // heuristic query: the query costs more than a small GEMM.
  struct AlgoCache;
  AlgoCache& algo_cache() { return *cache_; }

 private:
  void* lt_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  void* blas_ = nullptr;
  cudaStream_t blas_stream_ = nullptr;
  bool blas_stream_set_ = false;
  void** grouped_ptrs_ = nullptr;
  GroupedStats grouped_stats_;
  bool grouped_batched_ = true;
  bool fp8_wgmma_ = false;
  std::unique_ptr<AlgoCache> cache_;
};

void Gemm(BlasContext& ctx, const GemmDesc& d, const void* A, const void* B, void* C,
          cudaStream_t stream);

// G = count independent GEMMs sharing d's transposes, scalars and types (see
// GemmGroup in kernels.h; `groups` is a host array of device pointers).
// With ctx.grouped_batched() and ab_type == c_type the non-empty groups go to cublasGemmGroupedBatchedEx
// (one problem per group, CUBLAS_COMPUTE_32F: never TF32) in calls of up to
// BlasContext::kGroupedPtrCapacity groups, their pointer arrays written into
// the context's array by a small kernel on `stream`; bf16 A/B with an f32 C
// (the weight-gradient case, which cuBLAS does not group), groups whose sizes
// exceed int, and a type cuBLAS refuses (said once on stderr; see
// BlasContext::GroupedStats) — and every group without grouped_batched —
// run one cuda::Gemm (cuBLASLt) per group instead. k == 0
// groups: C = beta·C by a scale kernel.
// Enqueued on `stream`; never blocks and never allocates (graph-capture safe).
void GroupedGemm(BlasContext& ctx, const GemmDesc& d, const GemmGroup* groups, int count,
                 cudaStream_t stream);

void EmbeddingForward(const int32_t* idx, const float* table, float* out, int64_t N, int64_t V,
                      int64_t C, int64_t vocab_start, cudaStream_t stream);
// scratch: EmbeddingBackwardScratchBytes(N, V) bytes of device memory, or
// null (then allocated stream-ordered for the call).
int64_t EmbeddingBackwardScratchBytes(int64_t N, int64_t V);
void EmbeddingBackward(const int32_t* idx, const float* dout, float* dtable, int64_t N, int64_t V,
                       int64_t C, int64_t vocab_start, cudaStream_t stream,
                       void* scratch = nullptr);

void LayerNormForward(const float* x, const float* w, const float* b, float* y, float* mean,
                      float* rstd, int64_t N, int64_t C, float eps, cudaStream_t stream);
// scratch: at least LayerNormBackwardScratchFloats(N, C) floats (deterministic
// two-pass reduction of dw/db). dresidual (optional, like dx): added into dx
// (the residual branch's gradient, fused).
int64_t LayerNormBackwardScratchFloats(int64_t N, int64_t C);
void LayerNormBackward(const float* dy, const float* x, const float* w, const float* mean,
                       const float* rstd, float* dx, float* dw, float* db, float* scratch,
                       int64_t N, int64_t C, cudaStream_t stream,
                       const float* dresidual = nullptr);
void RMSNormForward(const float* x, const float* w, float* y, float* rstd, int64_t N, int64_t C,
                    float eps, cudaStream_t stream);
// scratch: at least RMSNormBackwardScratchFloats(N, C) floats (never more
// than LayerNormBackwardScratchFloats(N, C)).
int64_t RMSNormBackwardScratchFloats(int64_t N, int64_t C);
void RMSNormBackward(const float* dy, const float* x, const float* w, const float* rstd, float* dx,
                     float* dw, float* scratch, int64_t N, int64_t C, cudaStream_t stream,
                     const float* dresidual = nullptr);

void GeluForward(const float* x, float* y, int64_t n, cudaStream_t stream);
void GeluBackward(const float* dy, const float* x, float* dx, int64_t n, cudaStream_t stream);
void SwiGluForward(const float* x, float* y, int64_t N, int64_t H, cudaStream_t stream);
void SwiGluBackward(const float* dy, const float* x, float* dx, int64_t N, int64_t H,
                    cudaStream_t stream);

void SoftmaxForward(const float* x, float* y, int64_t N, int64_t C, cudaStream_t stream);
void SoftmaxBackward(const float* dy, const float* y, float* dx, int64_t N, int64_t C,
                     cudaStream_t stream);

// causal (as in cpu.h): query t sees keys s ≤ t; otherwise every key.
void AttentionForward(const float* q, const float* k, const float* v, float* out, float* att,
                      int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS,
                      cudaStream_t stream, bool causal = true);
void AttentionBackward(const float* dout, const float* q, const float* k, const float* v,
                       const float* att, float* dq, float* dk, float* dv, float* scratch, int64_t B,
                       int64_t T, int64_t NH, int64_t NKV, int64_t HS, cudaStream_t stream,
                       bool causal = true);

// ld: row stride of logits/dlogits (0: V); columns [V, ld) are padding, left
// out of the statistics and written 0 in dlogits.
void CrossEntropyStats(const float* logits, const int32_t* targets, float* row_max,
                       float* target_logit, int64_t N, int64_t V, int64_t vocab_start,
                       cudaStream_t stream, int64_t ld = 0);
void CrossEntropySumExp(const float* logits, const float* row_max, float* sumexp, int64_t N,
                        int64_t V, cudaStream_t stream, int64_t ld = 0);
void CrossEntropyLoss(const float* row_max, const float* sumexp, const float* target_logit,
                      const int32_t* targets, float* loss, int64_t N, cudaStream_t stream);
void CrossEntropyBackward(const float* logits, const float* row_max, const float* sumexp,
                          const int32_t* targets, const float* dloss, float* dlogits, int64_t N,
                          int64_t V, int64_t vocab_start, cudaStream_t stream, int64_t ld = 0);
void CrossEntropyForward(const float* logits, const int32_t* targets, float* loss, float* scratch,
                         int64_t N, int64_t V, cudaStream_t stream);

void CastF32ToBF16(const float* x, bf16* y, int64_t n, cudaStream_t stream);
void CastBF16ToF32(const bf16* x, float* y, int64_t n, cudaStream_t stream);
// Several conversions or copies in one launch: pair i's rows × width
// elements, rows src_pitch / dst_pitch elements apart, converted as the two
// casts above convert them (f32 → bf16, bf16 → f32) or copied where the
// dtypes match (f32 or bf16); count ≤ kCastManyMax.
struct CastPair {
  const void* src;
  void* dst;
  int64_t rows, width, src_pitch, dst_pitch;
  DType src_type, dst_type;
};
constexpr int kCastManyMax = 16;
void CastMany(const CastPair* pairs, int count, cudaStream_t stream);
void QuantizeFp8Blockwise(const void* x, DType x_type, uint8_t* q, uint8_t* scales, int64_t n,
                          DType fmt, cudaStream_t stream);
void DequantizeFp8Blockwise(const uint8_t* q, const uint8_t* scales, void* y, DType y_type,
                            int64_t n, DType fmt, cudaStream_t stream);
// NVFP4 (the CPU's bits; kernels.h): two kernels, the tensor amax (an
// unsigned atomicMax of |x|'s bits into amax_scratch, one device u32 that
// the call zeroes first: order-free and exact), then the encode, one thread
// per code byte. amax_scratch must not be shared with concurrent calls.
void EncodeNvfp4(const void* x, DType x_type, uint8_t* wire, int64_t n, uint32_t* amax_scratch,
                 cudaStream_t stream);
// One thread per code byte (two elements).
void DecodeNvfp4(const uint8_t* wire, void* y, DType y_type, int64_t n, cudaStream_t stream);

// Multi-tensor AdamW in one launch (see cpu.h): `segments` is a device
// array of num_segments entries; `chunks` a device array of num_chunks
// (segment, first element) pairs covering every segment in pieces of at
// most kAdamWChunk elements (AdamWChunks builds it on the host).
inline constexpr int64_t kAdamWChunk = 65536;
struct AdamWChunk {
  int32_t segment;
  int64_t begin;
};
std::vector<AdamWChunk> AdamWChunks(const AdamWSegment* host_segments, int num_segments);
void AdamWMulti(const AdamWSegment* segments, const AdamWChunk* chunks, int num_chunks,
                const AdamWParams& hp, cudaStream_t stream);
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
// sums[c] += Σ_r x[r, c] over x [R, C] (f32 sums [C]), in the fixed order of
// kernels.h's kColumnSumSlabRows (the same bits on both backends). Two
// launches: the slabs' partials into `partial` (device scratch, f32
// [ColumnSumPartials(R, C)]), then each column's in-order total.
void ColumnSumAccumulate(const float* x, int64_t R, int64_t C, float* sums, float* partial,
                         cudaStream_t stream);
void ColumnSumAccumulate(const bf16* x, int64_t R, int64_t C, float* sums, float* partial,
                         cudaStream_t stream);
int64_t ColumnSumPartials(int64_t R, int64_t C);

// ---- Rotary position embedding (RoPE, the "rotate half" convention of Llama) ----
// x[B, T, NH, HS], position of row (b, t) = t. For d < HS/2, with
// f_d = theta^(−2d/HS) and a = t·f_d:
//   y[d] = x[d]·cos a − x[d + HS/2]·sin a;  y[d + HS/2] = x[d + HS/2]·cos a + x[d]·sin a.
// Backward rotates by −a. In place (y == x) is allowed. row_stride: elements
// between consecutive rows (b, t) of x and of y (0: NH·HS, dense; more: the
// heads are a column block of wider rows, e.g. q and k inside a packed QKV
// matrix, and the other columns are not touched).
void RopeForward(const float* x, float* y, int64_t B, int64_t T, int64_t NH, int64_t HS,
                 float theta, cudaStream_t stream, const int32_t* pos = nullptr,
                 int64_t row_stride = 0);
void RopeBackward(const float* dy, float* dx, int64_t B, int64_t T, int64_t NH, int64_t HS,
                  float theta, cudaStream_t stream, const int32_t* pos = nullptr,
                  int64_t row_stride = 0);

// ---- bf16 variants (mixed precision; contracts as in core/kernels/cpu.h) ------
// Activations and parameter values bf16; statistics and parameter gradients
// f32; f32 math, each bf16 output rounded once. Memory-bound kernels move 16
// bytes per thread access when the buffers are 16-byte aligned and the row
// length is a multiple of 8 (else one element at a time); the result differs
// between the two only by f32 summation order, and is deterministic either way.
void EmbeddingForward(const int32_t* idx, const bf16* table, bf16* out, int64_t N, int64_t V,
                      int64_t C, int64_t vocab_start, cudaStream_t stream);
void EmbeddingBackward(const int32_t* idx, const bf16* dout, float* dtable, int64_t N, int64_t V,
                       int64_t C, int64_t vocab_start, cudaStream_t stream,
                       void* scratch = nullptr);
void LayerNormForward(const bf16* x, const bf16* w, const bf16* b, bf16* y, float* mean,
                      float* rstd, int64_t N, int64_t C, float eps, cudaStream_t stream);
// scratch: LayerNormBackwardScratchFloats(N, C) floats, as for f32.
void LayerNormBackward(const bf16* dy, const bf16* x, const bf16* w, const float* mean,
                       const float* rstd, bf16* dx, float* dw, float* db, float* scratch,
                       int64_t N, int64_t C, cudaStream_t stream,
                       const bf16* dresidual = nullptr);
void RMSNormForward(const bf16* x, const bf16* w, bf16* y, float* rstd, int64_t N, int64_t C,
                    float eps, cudaStream_t stream);
// scratch: RMSNormBackwardScratchFloats(N, C) floats, as for f32.
void RMSNormBackward(const bf16* dy, const bf16* x, const bf16* w, const float* rstd, bf16* dx,
                     float* dw, float* scratch, int64_t N, int64_t C, cudaStream_t stream,
                     const bf16* dresidual = nullptr);
void GeluForward(const bf16* x, bf16* y, int64_t n, cudaStream_t stream);
void GeluBackward(const bf16* dy, const bf16* x, bf16* dx, int64_t n, cudaStream_t stream);
void SwiGluForward(const bf16* x, bf16* y, int64_t N, int64_t H, cudaStream_t stream);
void SwiGluBackward(const bf16* dy, const bf16* x, bf16* dx, int64_t N, int64_t H,
                    cudaStream_t stream);
void CrossEntropyStats(const bf16* logits, const int32_t* targets, float* row_max,
                       float* target_logit, int64_t N, int64_t V, int64_t vocab_start,
                       cudaStream_t stream, int64_t ld = 0);
void CrossEntropySumExp(const bf16* logits, const float* row_max, float* sumexp, int64_t N,
                        int64_t V, cudaStream_t stream, int64_t ld = 0);
void CrossEntropyBackward(const bf16* logits, const float* row_max, const float* sumexp,
                          const int32_t* targets, const float* dloss, bf16* dlogits, int64_t N,
                          int64_t V, int64_t vocab_start, cudaStream_t stream, int64_t ld = 0);
// Unsharded cross-entropy forward and backward in one pass, in place over
// bf16 logits[N, ld] (vocabulary V ≤ ld, the rest padding): loss[n] as
// CrossEntropyLoss, then logits[n, :] ← dloss[n]·(softmax − onehot(t_n)),
// 0 for t_n < 0 and in the pad columns. Requires CrossEntropyFusedSupported
// (aborts otherwise).
bool CrossEntropyFusedSupported(const void* logits, int64_t V, int64_t ld);
void CrossEntropyFused(bf16* logits, const int32_t* targets, const float* dloss, float* loss,
                       int64_t N, int64_t V, int64_t ld, cudaStream_t stream);
void Axpby(float alpha, const bf16* x, float beta, bf16* y, int64_t n, cudaStream_t stream);
// x ← bf16(value).
void Fill(bf16* x, float value, int64_t n, cudaStream_t stream);
// Σ x² of the widened bf16 values, in double; *out is a device pointer.
void SumSquares(const bf16* x, int64_t n, double* out, cudaStream_t stream);
void RopeForward(const bf16* x, bf16* y, int64_t B, int64_t T, int64_t NH, int64_t HS, float theta,
                 cudaStream_t stream, const int32_t* pos = nullptr, int64_t row_stride = 0);
void RopeBackward(const bf16* dy, bf16* dx, int64_t B, int64_t T, int64_t NH, int64_t HS,
                  float theta, cudaStream_t stream, const int32_t* pos = nullptr,
                  int64_t row_stride = 0);

// Attention through cuBLASLt GEMMs and fused (optionally causal) softmax row
// kernels: the same contract and outputs as AttentionForward/Backward above
// (att saved, upper triangle 0 when causal; dq, dk, dv written), much faster
// for T ≥ 128. scratch: B·NH·T·T floats.
void AttentionForwardGemm(BlasContext& ctx, const float* q, const float* k, const float* v,
                          float* out, float* att, int64_t B, int64_t T, int64_t NH, int64_t NKV,
                          int64_t HS, cudaStream_t stream, bool causal = true);
void AttentionBackwardGemm(BlasContext& ctx, const float* dout, const float* q, const float* k,
                           const float* v, const float* att, float* dq, float* dk, float* dv,
                           float* scratch, int64_t B, int64_t T, int64_t NH, int64_t NKV,
                           int64_t HS, cudaStream_t stream, bool causal = true);

// ---- Fused attention (FlashAttention-2 on the tensor cores), bf16 ----------
// q[B, T, NH, HS], k/v[B, T, NKV, HS] (head h reads kv head h / (NH/NKV)),
// out like q, all bf16; lse[B, NH, T] f32 = log Σ_j exp(scale·q_i·k_j),
// scale = 1/√HS, over j ≤ i when causal, all j < T when not. No T×T buffer.
// HS must be 64 or 128 (aborts otherwise); any T ≥ 0; bf16 pointers 16-byte
// aligned. Deterministic (no atomics).
void FlashAttentionForward(const bf16* q, const bf16* k, const bf16* v, bf16* out, float* lse,
                           int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS,
                           cudaStream_t stream, bool causal = true);
// Device bytes of scratch FlashAttentionBackward needs (D = rowsum(dout∘out), B·NH·T f32).
int64_t FlashAttentionBackwardScratchBytes(int64_t B, int64_t T, int64_t NH, int64_t NKV,
                                           int64_t HS);
// dq, dk, dv written (=), bf16; out and lse are the forward's. dk/dv sum over
// the query heads of their kv head inside one block; dq blocks own query tiles
// (no atomics). HS 64 runs the dk/dv and dq blocks in one launch, HS 128 as two
// kernels. causal: the forward's.
void FlashAttentionBackward(const bf16* dout, const bf16* q, const bf16* k, const bf16* v,
                            const bf16* out, const float* lse, bf16* dq, bf16* dk, bf16* dv,
                            void* scratch, int64_t B, int64_t T, int64_t NH, int64_t NKV,
                            int64_t HS, cudaStream_t stream, bool causal = true);

// ---- Grad-norm bookkeeping (see cpu.h); device pointers, never blocks ----
void GradNormWords(const double* ss, int n_count, int n, float* words, cudaStream_t stream);
void GradNormFinalize(const float* words, int num_buffers, double max_norm, float* out,
                      cudaStream_t stream);

// ---- Loss bookkeeping (see cpu.h); count/acc/out are device pointers ----
void MaskedMeanAccumulate(const float* loss, const int32_t* targets, int64_t N, float* acc,
                          float* count, cudaStream_t stream);
void FillReciprocal(const float* count, float* out, int64_t n, cudaStream_t stream);
// count f32 [1] ← #{n : targets[n] ≥ 0}.
void CountValid(const int32_t* targets, int64_t N, float* count, cudaStream_t stream);

}  // namespace cuda
}  // namespace gtp::kernels
