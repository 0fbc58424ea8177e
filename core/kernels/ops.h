// core/kernels/ops.h — Tensor-level entry points that dispatch to the CPU or
// CUDA kernels by the Exec's device.
//
// Layers are written once against these; the tensors must live on
// exec.device, be contiguous (unless noted: FlashAttention* take
// token-strided q/k/v) and have the dtypes the kernels expect (f32 unless
// noted). Shape mismatches abort (GTP_CHECK). CPU calls run on the
// calling thread; CUDA calls are enqueued on exec.stream.
//
// Mixed precision: Axpby, Fill, SumSquares, Embedding*, LayerNorm*, RMSNorm*,
// Gelu*, SwiGlu*, Rope* and the CrossEntropy stages other than Loss dispatch
// on the dtype of their activations and parameter values (all f32, or all
// bf16); statistics (mean, rstd, row_max, target_logit, sumexp, dloss) and
// parameter gradients (dtable, dw, db) are f32 either way. Any other
// combination aborts naming the op and every dtype.
//
//   Exec exec = Exec::Cpu(host_alloc);
//   ops::Linear(exec, x, w, y);                 // y[N, out] = x[N, in]·wᵀ
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "core/allocator.h"
#include "core/device.h"
#include "core/kernels/kernels.h"
#include "core/tensor.h"

namespace gtp::kernels {

namespace cuda {
class BlasContext;
}

// A fused attention on CUDA other than the built-in flash kernels (cuDNN's:
// core/kernels/cudnn_engine.h), with their contract
// (cuda::FlashAttentionForward/Backward: bf16 q[B, T, NH, HS], k/v[B, T, NKV,
// HS], out like q, lse[B, NH, T] f32; backward writes dq, dk, dv). When an
// Exec carries one, ops::FlashAttention* use it for every shape it supports.
class AttentionEngine {
 public:
  // The problem: sizes, and whether query t sees only keys ≤ t (causal) or
  // every key. An engine must key its plans on all of it (a causal plan never
  // serves a bidirectional call).
  struct Shape {
    int64_t B, T, NH, NKV, HS;
    bool causal = true;
    // Elements between consecutive tokens of q, k, v, dq, dk and dv, which
    // are then token-strided views (strides {T·row_stride, row_stride, HS,
    // 1}: column blocks of one packed [B·T, R] QKV matrix); 0: dense (NH·HS
    // for q/dq, NKV·HS for k/v/dk/dv). out, dout and lse are always dense.
    int64_t row_stride = 0;
  };
  virtual ~AttentionEngine() = default;
  virtual const char* name() const = 0;
  // Device bytes of workspace a pass needs, or -1 when the engine does not
  // take the shape (the flash kernels run it). The first call for a shape
  // may build plans and block: make it outside CUDA-graph capture.
  virtual int64_t ForwardWorkspace(const Shape& s) = 0;
  virtual int64_t BackwardWorkspace(const Shape& s) = 0;
  // Enqueue on `stream`; never block for a shape already queried.
  virtual absl::Status Forward(const bf16* q, const bf16* k, const bf16* v, bf16* out, float* lse,
                               const Shape& s, void* workspace, int64_t workspace_bytes,
                               cudaStream_t stream) = 0;
  virtual absl::Status Backward(const bf16* dout, const bf16* q, const bf16* k, const bf16* v,
                                const bf16* out, const float* lse, bf16* dq, bf16* dk, bf16* dv,
                                const Shape& s, void* workspace, int64_t workspace_bytes,
                                cudaStream_t stream) = 0;
};

// Where kernels run and what they may use. Not owning.
struct Exec {
  Device device = Device::Cpu();
  Allocator* alloc = nullptr;           // for outputs and scratch
  cudaStream_t stream = nullptr;        // CUDA only
  cuda::BlasContext* blas = nullptr;    // CUDA only
  AttentionEngine* attention = nullptr; // CUDA only, optional (null: the flash kernels)

  static Exec Cpu(Allocator& a) { return Exec{Device::Cpu(), &a, nullptr, nullptr}; }
  bool is_cuda() const { return device.is_cuda(); }
  // New uninitialised / zeroed tensors on this device.
  Tensor Empty(const Shape& s, DType t = DType::kF32) const;
  Tensor Zeros(const Shape& s, DType t = DType::kF32) const;
};

namespace ops {

// y[N, out] = x[N, in]·w[out, in]ᵀ + beta·y (+ bias[out], fused into the GEMM,
// when given: same dtype as y). x/w f32 or bf16 (same), y f32 or bf16.
void Linear(const Exec& e, const Tensor& x, const Tensor& w, const Tensor& y, float beta = 0.0f,
            const Tensor& bias = Tensor());
// y[N, out] = x[N, in]·w[out, in]ᵀ (+ bias[out]) + residual[N, out]: Linear
// with a residual added in the same GEMM (GemmDesc::c_in: residual is read
// by the epilogue and left as it is; y is written, not read). residual has
// y's shape and dtype. One rounding of the f32 sum into y, where Linear
// followed by Axpby rounds twice.
void LinearResidual(const Exec& e, const Tensor& x, const Tensor& w, const Tensor& y,
                    const Tensor& bias, const Tensor& residual);
// dx[N, in] = dy[N, out]·w[out, in] + beta·dx.
void LinearBackwardData(const Exec& e, const Tensor& dy, const Tensor& w, const Tensor& dx,
                        float beta = 0.0f);
// dw[out, in] = dy[N, out]ᵀ·x[N, in] + beta·dw (dw may have more rows than
// out, e.g. a padded GTP wgrad buffer: only the first `out` rows are written).
void LinearBackwardWeight(const Exec& e, const Tensor& dy, const Tensor& x, const Tensor& dw,
                          float beta = 0.0f);
// The MLP's fused GEMM epilogues (GemmDesc::epilogue; cuBLASLt on CUDA, which
// needs out resp. in to be a multiple of 8 for the pre-activation matrix):
// pre[N, out] = x[N, in]·w[out, in]ᵀ (+ bias[out]) and y = gelu(pre), the
// tanh GELU computed from the f32 pre before either is rounded. x/w share a
// dtype; y, pre and bias (optional) share y's.
void LinearGelu(const Exec& e, const Tensor& x, const Tensor& w, const Tensor& bias,
                const Tensor& y, const Tensor& pre);
// dx[N, in] = (dy[N, out]·w[out, in]) ∘ gelu'(pre[N, in]) (=), pre as saved by
// LinearGelu (dx's dtype); dbias (optional, f32 [in], =) = Σ_N dx, summed
// from the f32 values before dx is rounded.
void LinearBackwardDataDGelu(const Exec& e, const Tensor& dy, const Tensor& w, const Tensor& pre,
                             const Tensor& dx, const Tensor& dbias = Tensor());
// LinearBackwardWeight plus db (f32 [out], =) = Σ_N dy[N, out], from the
// GEMM's own read of dy.
void LinearBackwardWeightBGrad(const Exec& e, const Tensor& dy, const Tensor& x, const Tensor& dw,
                               float beta, const Tensor& db);
// Raw GEMM on tensors (row-major; see GemmDesc).
void Gemm(const Exec& e, const GemmDesc& d, const Tensor& a, const Tensor& b, const Tensor& c);

// ---- Grouped GEMM (mixture of experts) -------------------------------------------
// G independent GEMMs in one call (GemmGroup in kernels.h: d holds the shared
// transposes, scalars and types, each group its sizes and pointers, which
// must point into memory on e's device). CUDA: cuda::GroupedGemm.
void GroupedGemm(const Exec& e, const GemmDesc& d, const std::vector<GemmGroup>& groups);
// Stacked expert weights w[G·N, K] (expert g owns rows [g·N, (g+1)·N)) over
// rows of x split by host offsets off (G + 1 entries, off[0] = 0,
// nondecreasing, off[G] = M): expert g owns rows [off[g], off[g+1]) of x, y,
// dx and dy. An expert with no rows computes nothing (its y/dx rows are none)
// — except in the weight gradient, where dw_g = beta·dw_g.
// y_g[M_g, N] = x_g[M_g, K]·w_gᵀ (=). x/w f32 or bf16 (same), y f32 or bf16.
void GroupedLinear(const Exec& e, const Tensor& x, const Tensor& w, const std::vector<int64_t>& off,
                   const Tensor& y);
// dx_g[M_g, K] = dy_g[M_g, N]·w_g[N, K] (=). dy/w f32 or bf16 (same).
void GroupedLinearBackwardData(const Exec& e, const Tensor& dy, const Tensor& w,
                               const std::vector<int64_t>& off, const Tensor& dx);
// dw_g[N, K] = alpha·dy_gᵀ·x_g + beta·dw_g; dw f32 [G·N, K], dy [M, N] and
// x [M, K] f32 or bf16 (same). beta = 1 accumulates (micro-batches).
void GroupedLinearBackwardWeight(const Exec& e, const Tensor& dy, const Tensor& x,
                                 const std::vector<int64_t>& off, float alpha, float beta,
                                 const Tensor& dw);

// y ← alpha·x + beta·y (same numel).
void Axpby(const Exec& e, float alpha, const Tensor& x, float beta, const Tensor& y);
// sums (f32 [C]) += Σ_r x[r, c] over x [R, C] (f32 or bf16; any rank, rows =
// numel / C), in kernels.h's fixed order on both backends (the same bits);
// CUDA scratch from e.Empty. A bias gradient from its dy.
void ColumnSumAccumulate(const Exec& e, const Tensor& x, const Tensor& sums);
void Fill(const Exec& e, const Tensor& x, float value);
// Σ x² (synchronises the stream on CUDA).
double SumSquares(const Exec& e, const Tensor& x);
// Copy between tensors of the same shape/dtype on e's stream (any devices).
void CopyInto(const Exec& e, const Tensor& src, const Tensor& dst);
// dst ← src converted (f32 → bf16 rounds to nearest even, bf16 → f32 is
// exact); same element count, both on e's device.
void Cast(const Exec& e, const Tensor& src, const Tensor& dst);
// dsts[i] ← srcs[i], f32 or bf16: converted as Cast converts it, or copied
// where the dtypes match; each view contiguous or a column block of a
// matrix (rank 2, unit column stride). On CUDA one launch for every 16
// pairs: a layer's small parameters widened, or a packed projection's
// column blocks copied out, in one launch.
void CastMany(const Exec& e, const std::vector<Tensor>& srcs, const std::vector<Tensor>& dsts);

void EmbeddingForward(const Exec& e, const Tensor& idx, const Tensor& table, const Tensor& out,
                      int64_t vocab_start);
void EmbeddingBackward(const Exec& e, const Tensor& idx, const Tensor& dout, const Tensor& dtable,
                       int64_t vocab_start);

// x[N, C]; mean/rstd [N]; b may be undefined (no bias).
void LayerNormForward(const Exec& e, const Tensor& x, const Tensor& w, const Tensor& b,
                      const Tensor& y, const Tensor& mean, const Tensor& rstd, float eps);
// dresidual (optional, shaped like dx): added into dx (a residual branch's
// gradient, fused into the same pass).
void LayerNormBackward(const Exec& e, const Tensor& dy, const Tensor& x, const Tensor& w,
                       const Tensor& mean, const Tensor& rstd, const Tensor& dx, const Tensor& dw,
                       const Tensor& db, const Tensor& dresidual = Tensor());
void RMSNormForward(const Exec& e, const Tensor& x, const Tensor& w, const Tensor& y,
                    const Tensor& rstd, float eps);
void RMSNormBackward(const Exec& e, const Tensor& dy, const Tensor& x, const Tensor& w,
                     const Tensor& rstd, const Tensor& dx, const Tensor& dw,
                     const Tensor& dresidual = Tensor());

void GeluForward(const Exec& e, const Tensor& x, const Tensor& y);
void GeluBackward(const Exec& e, const Tensor& dy, const Tensor& x, const Tensor& dx);
// x[N, 2H] → y[N, H].
void SwiGluForward(const Exec& e, const Tensor& x, const Tensor& y);
void SwiGluBackward(const Exec& e, const Tensor& dy, const Tensor& x, const Tensor& dx);

// q[B, T, NH, HS], k/v[B, T, NKV, HS], out like q, att[B, NH, T, T]. causal:
// query t sees keys s ≤ t (the decoder); otherwise every key (bidirectional,
// e.g. a vision encoder). The backward takes the forward's causal.
void AttentionForward(const Exec& e, const Tensor& q, const Tensor& k, const Tensor& v,
                      const Tensor& out, const Tensor& att, bool causal = true);
void AttentionBackward(const Exec& e, const Tensor& dout, const Tensor& q, const Tensor& k,
                       const Tensor& v, const Tensor& att, const Tensor& dq, const Tensor& dk,
                       const Tensor& dv, bool causal = true);

// Fused attention (FlashAttention contract, no T×T buffer), causal or not as
// above: q[B, T, NH, HS],
// k/v[B, T, NKV, HS], out like q, lse[B, NH, T] f32 (saved for the backward).
// q/k/v/out (and dout/dq/dk/dv) share one dtype: CUDA bf16 only (HS 64 or 128),
// CPU f32 or bf16 (any HS). The backward writes dq, dk, dv (=); its CUDA scratch
// comes from e.alloc.
// q, k, v, dq, dk, dv may each be contiguous or a token-strided view (strides
// {T·rs, rs, HS, 1}, rs ≥ heads·HS), e.g. column blocks of one packed
// [B·T, (NH + 2·NKV)·HS] QKV matrix; out, dout and lse must be contiguous;
// any other view aborts naming the tensor. The backward writes only the
// dq/dk/dv views' own elements. When all of them share one rs, a CUDA Exec's
// engine reads and writes them in place (AttentionEngine::Shape::row_stride)
// if it takes that shape; otherwise the strided ones are copied into dense
// temporaries on e.alloc (gradients copied back) and the results are the
// bits of the contiguous call on the same values.
void FlashAttentionForward(const Exec& e, const Tensor& q, const Tensor& k, const Tensor& v,
                           const Tensor& out, const Tensor& lse, bool causal = true);
void FlashAttentionBackward(const Exec& e, const Tensor& dout, const Tensor& q, const Tensor& k,
                            const Tensor& v, const Tensor& out, const Tensor& lse, const Tensor& dq,
                            const Tensor& dk, const Tensor& dv, bool causal = true);

// RoPE on x[B, T, NH, HS] (y may be x). Row t is at position t, or at
// positions[t] when given (i32 [T] on e's device; context parallelism).
// x and y are contiguous, or both token-strided with one row stride
// (strides {T·rs, rs, HS, 1}: e.g. q and k in place in a packed QKV matrix,
// whose other columns are not touched); any other layout aborts.
void RopeForward(const Exec& e, const Tensor& x, const Tensor& y, float theta,
                 const Tensor& positions = Tensor());
void RopeBackward(const Exec& e, const Tensor& dy, const Tensor& dx, float theta,
                  const Tensor& positions = Tensor());

// Vocab-sharded cross-entropy stages (see cpu.h). logits[N, V_local]; with
// valid_cols ≥ 0 only the first valid_cols columns are vocabulary, the rest
// padding (dlogits 0 there).
void CrossEntropyStats(const Exec& e, const Tensor& logits, const Tensor& targets,
                       const Tensor& row_max, const Tensor& target_logit, int64_t vocab_start,
                       int64_t valid_cols = -1);
void CrossEntropySumExp(const Exec& e, const Tensor& logits, const Tensor& row_max,
                        const Tensor& sumexp, int64_t valid_cols = -1);
void CrossEntropyLoss(const Exec& e, const Tensor& row_max, const Tensor& sumexp,
                      const Tensor& target_logit, const Tensor& targets, const Tensor& loss);
void CrossEntropyBackward(const Exec& e, const Tensor& logits, const Tensor& row_max,
                          const Tensor& sumexp, const Tensor& targets, const Tensor& dloss,
                          const Tensor& dlogits, int64_t vocab_start, int64_t valid_cols = -1);
// (CrossEntropyBackward may run in place: dlogits may be logits.)
// Unsharded (TP = 1) forward and backward in one call, in place: loss[n] as
// CrossEntropyLoss, then logits ← dloss[n]·(softmax − onehot(target)) over
// the first valid_cols columns, 0 in the rest. On CUDA bf16 one pass over
// the logits (cuda::CrossEntropyFused); otherwise the four stages.
void CrossEntropyFused(const Exec& e, const Tensor& logits, const Tensor& targets,
                       const Tensor& dloss, const Tensor& loss, int64_t valid_cols = -1);

// Σ x² of each tensor (f32), in one pass and — on CUDA — one stream
// synchronisation for all of them.
std::vector<double> SumSquaresMany(const Exec& e, const std::vector<Tensor>& xs);
// The same sums left on e's device: sums (8-byte storage, i64 dtype holding
// doubles, ≥ xs.size() elements) ← Σ x² of each. Never blocks.
void SumSquaresInto(const Exec& e, const std::vector<Tensor>& xs, const Tensor& sums);
// Grad-norm bookkeeping without reading back (core/kernels/cpu/grad_norm.cc):
// words f32 [2] ← sums[0, n) with the first n_count counting; out f32 [3] ←
// {norm, clip scale, skip} from words f32 [2·num_buffers].
void GradNormWords(const Exec& e, const Tensor& sums, int n_count, int n, const Tensor& words);
void GradNormFinalize(const Exec& e, const Tensor& words, double max_norm, const Tensor& out);

// Loss bookkeeping without host synchronisation: loss f32 [N], targets i32
// [N]; count f32 [1] ← valid targets; acc f32 [1] += their mean loss.
void MaskedMeanAccumulate(const Exec& e, const Tensor& loss, const Tensor& targets,
                          const Tensor& acc, const Tensor& count);
// out f32 [n] ← 1 / count[0] (0 when count is 0).
void FillReciprocal(const Exec& e, const Tensor& count, const Tensor& out);
// count f32 [1] ← valid targets (targets[n] ≥ 0).
void CountValid(const Exec& e, const Tensor& targets, const Tensor& count);

// MXFP8: fp8 with one E8M0 scale byte per kFp8BlockSize elements (cpu.h,
// cpu/cast.cc): x f32 or bf16 [n] → q (n bytes, kU8 or the fp8 dtype) and
// scales kU8 [ceil(n / 32)], byte e meaning 2^(e − 127), the smallest power
// of two that fits the block's amax under fmt_max (255 = NaN: the block held
// NaN or ±inf and dequantises to NaN); dequantize writes y (f32 or bf16,
// [n]) = q·2^(e − 127), bit-identical on CPU and CUDA. fmt: kF8E4M3 or kF8E5M2.
void QuantizeFp8Blockwise(const Exec& e, const Tensor& x, const Tensor& q, const Tensor& scales,
                          DType fmt = DType::kF8E4M3);
void DequantizeFp8Blockwise(const Exec& e, const Tensor& q, const Tensor& scales, const Tensor& y,
                            DType fmt = DType::kF8E4M3);

// NVFP4, a GTP gather wire format (issue 31; kernels.h has the layout, the
// rules and the error bound): e2m1 codes, an e4m3 scale per
// kNvfp4BlockSize = 16 elements and an f32 scale per tensor, 0.5625 bytes
// per element for large n. CPU and CUDA write the same bits, every byte of
// the wire included (padding 0). A NaN or ±inf anywhere in x poisons the
// whole wire: every element decodes to NaN.
// wire (u8 [Nvfp4WireBytes(x.numel())]) ← x (f32 or bf16, contiguous, any
// shape; flattened). CUDA: two kernels on e.stream and a 4-byte scratch
// from e.alloc; never blocks.
void EncodeNvfp4(const Exec& e, const Tensor& x, const Tensor& wire);
// y (f32 or bf16, contiguous, n elements, any shape) ← wire (u8
// [Nvfp4WireBytes(n)]). CUDA: one kernel on e.stream; never blocks.
void DecodeNvfp4(const Exec& e, const Tensor& wire, const Tensor& y);

}  // namespace ops
}  // namespace gtp::kernels
