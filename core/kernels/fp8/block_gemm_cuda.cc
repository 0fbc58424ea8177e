// BlockScaledGemm on CUDA (block_gemm_cuda.h). Fp8GemmEngine::kWgmma hands the
// raw operands to our own kernel (wgmma_gemm.cu) after its checks, at the
// end of this file's internal part; the rest is kCublasLt: cuBLASLt's FP8 GEMM with
// per-block f32 scales, CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F for a 1×128
// operand and CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F for a 128×128 one.
//
// Row-major y[M, N] = a[M, K]·b[N, K]ᵀ is the column-major yᵀ[N, M] =
// b·aᵀ, and a row-major K-contiguous matrix read as column-major is its own
// transpose, so (as cuda::Gemm in core/kernels/cuda/gemm.cc) cuBLASLt gets
// the operands swapped, in the "TN" form its FP8 kernels require:
//   cuBLASLt A = our b: column-major [K, N], ld K, op T (scale mode of b);
//   cuBLASLt B = our a: column-major [K, M], ld K, op N (scale mode of a);
//   cuBLASLt C = D = our y: column-major [N, M], ld N (f32 or bf16), beta as given.
// Compute CUBLAS_COMPUTE_32F, scale type f32, FAST_ACCUM off (the default:
// "intermediate results ... periodically promoted to a higher precision",
// cublasLt.h). Each operand's scales in cuBLASLt's layout are its
// lt_scales, written by the quantiser, or else rewritten from its table by
// lt_scales.cu (lt_scale_layout.h: the one place that layout lives, with
// its sources; verified by block_gemm_gpu_test.cc's probe on an H200) into
// stream-ordered scratch from e.Empty, freed on return without a sync as in
// RequantizeRowsTransposed (the caching allocator hands it out again only to
// work ordered after ours on the same stream).
//
// Descriptors and the algorithm are cached per shape in the BlasContext
// (BlasContext::AlgoCache::block_scaled, core/kernels/cuda/lt_common.h), as
// cuda::Gemm caches its own: the first call's heuristic pick is reused, so a
// shape always runs the same algorithm (deterministic). Only the scale
// pointers are set on every call.
#include "core/kernels/fp8/block_gemm_cuda.h"

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/cuda_runtime.h"
#include "core/kernels/cuda.h"
#include "core/kernels/cuda/lt_common.h"
#include "core/kernels/fp8/lt_scale_layout.h"
#include "core/kernels/fp8/lt_scales_cuda.h"
#include "core/kernels/fp8/wgmma_gemm_cuda.h"
#include "core/status.h"

namespace gtp::kernels::fp8::internal {
namespace {

using kernels::cuda::BlasContext;
using kernels::cuda::internal::LtAlignment;
using kernels::cuda::internal::LtCall;
using kernels::cuda::internal::LtFirstAlgo;

// cuBLAS' FP8 requirements (cublasLtMatmul, "To use FP8 kernels"): every
// matrix pointer 16-byte aligned, every matrix dimension meeting the Tensor
// Core Usage requirements, i.e. 16-byte aligned rows: 16 FP8 elements.
constexpr int64_t kDimMultiple = 16;
constexpr uintptr_t kPointerAlignment = 16;

bool Tiles(const Fp8Matrix& m) { return m.layout == Fp8Layout::kTile128x128; }

int32_t LtScaleMode(const Fp8Matrix& m) {
  return Tiles(m) ? CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F
                  : CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
}

const char* LtScaleModeName(const Fp8Matrix& m) {
  return Tiles(m) ? "BLK128x128_32F" : "VEC128_32F";
}

// The operand's scales in cuBLASLt's layout: its lt_scales when the
// quantiser wrote them, else a rewrite of its table (scratch on e's device).
Tensor LtScales(const Exec& e, const Fp8Matrix& m, const char* op, const char* what) {
  const int64_t rows = m.q.dim(0), K = m.q.dim(1);
  const int64_t count = LtScaleCount(Tiles(m), rows, K);
  if (m.lt_scales.defined()) {
    GTP_CHECK(m.lt_scales.dtype() == DType::kF32 && m.lt_scales.numel() == count &&
                  m.lt_scales.is_contiguous() && m.lt_scales.device() == m.q.device(),
              op, ": ", what, ".lt_scales must be f32 [", count, "] beside its codes, got ",
              m.lt_scales.ToString());
    return m.lt_scales;
  }
  Tensor lt = e.Empty({count}, DType::kF32);
  cuda::ToLtScales(m.scales.data<float>(), Tiles(m), rows, K, lt.data<float>(), e.stream);
  return lt;
}

// The address of t's data modulo 16 (0: aligned).
uintptr_t Misalignment(const Tensor& t) {
  return reinterpret_cast<uintptr_t>(t.raw_data()) % kPointerAlignment;
}

// cuBLASLt's descriptors for y = a·bᵀ (+ beta·y, + bias when bias_ptr is
// set), without an algorithm. The scale buffers (cuBLASLt's layout) are set
// too: its heuristic offers nothing for block scaling without them (the
// H200, CUDA 13.0); Run sets them again for each call's operands.
std::unique_ptr<LtCall> NewCall(const Fp8Matrix& a, const Fp8Matrix& b, const Tensor& y,
                                const void* bias_ptr, const Tensor& a_scales,
                                const Tensor& b_scales) {
  const int64_t M = a.q.dim(0), N = b.q.dim(0), K = a.q.dim(1);
  const bool bf16_out = y.dtype() == DType::kBF16;
  auto call = std::make_unique<LtCall>();
  GTP_CUBLAS_CHECK(cublasLtMatmulDescCreate(&call->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t trans_a = CUBLAS_OP_T, trans_b = CUBLAS_OP_N;
  GTP_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(call->op, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a,
                                                  sizeof(trans_a)));
  GTP_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(call->op, CUBLASLT_MATMUL_DESC_TRANSB, &trans_b,
                                                  sizeof(trans_b)));
  // cuBLASLt's A is our b and its B our a (the file comment).
  const int32_t mode_a = LtScaleMode(b), mode_b = LtScaleMode(a);
  GTP_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(call->op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE,
                                                  &mode_a, sizeof(mode_a)));
  GTP_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(call->op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE,
                                                  &mode_b, sizeof(mode_b)));
  const void* lt_a_scale = b_scales.raw_data();
  const void* lt_b_scale = a_scales.raw_data();
  GTP_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(call->op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
                                                  &lt_a_scale, sizeof(lt_a_scale)));
  GTP_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(call->op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
                                                  &lt_b_scale, sizeof(lt_b_scale)));
  if (bias_ptr != nullptr) {
    // Column-major D is [N, M]: cuBLASLt's bias per D row is our bias per
    // column n, in D's type.
    const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
    const cudaDataType_t bias_type = bf16_out ? CUDA_R_16BF : CUDA_R_32F;
    GTP_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(call->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
    GTP_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(call->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                                    &bias_type, sizeof(bias_type)));
    GTP_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(call->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                    &bias_ptr, sizeof(bias_ptr)));
  }
  const int8_t fast_accum = 0;
  GTP_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(call->op, CUBLASLT_MATMUL_DESC_FAST_ACCUM,
                                                  &fast_accum, sizeof(fast_accum)));
  const cudaDataType_t d_type = bf16_out ? CUDA_R_16BF : CUDA_R_32F;
  GTP_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&call->a, CUDA_R_8F_E4M3, K, N, K));
  GTP_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&call->b, CUDA_R_8F_E4M3, K, M, K));
  GTP_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&call->c, d_type, N, M, N));
  return call;
}

// Aborts, naming the configuration, when the heuristic offered nothing.
void CheckFound(const char* op, cublasStatus_t hs, int found, const Fp8Matrix& a,
                const Fp8Matrix& b, const Tensor& y, bool bias) {
  GTP_CHECK(hs == CUBLAS_STATUS_SUCCESS && found > 0, op,
            ": cuBLASLt has no algorithm for M=", a.q.dim(0), " N=", b.q.dim(0), " K=", a.q.dim(1),
            " with a ", Fp8LayoutName(a.layout), " (its B, scale mode ", LtScaleModeName(a),
            "), b ", Fp8LayoutName(b.layout), " (its A, scale mode ", LtScaleModeName(b), "), y ",
            DTypeName(y.dtype()), bias ? " with the BIAS epilogue" : "", ": ",
            cublasLtGetStatusString(hs), ", ", found, " algorithms");
}

// One cublasLtMatmul with `algo` on e.stream: the operands' scale buffers
// (and the bias) are set on every call, the rest is the call's.
void Run(const Exec& e, const LtCall& call, const cublasLtMatmulAlgo_t& algo, const Fp8Matrix& a,
         const Fp8Matrix& b, const Tensor& y, float beta, const void* bias_ptr,
         const Tensor& a_scales, const Tensor& b_scales, const char* op) {
  const void* lt_a_scale = b_scales.raw_data();
  const void* lt_b_scale = a_scales.raw_data();
  if (bias_ptr != nullptr) {
    GTP_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(call.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                    &bias_ptr, sizeof(bias_ptr)));
  }
  GTP_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(call.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
                                                  &lt_a_scale, sizeof(lt_a_scale)));
  GTP_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(call.op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
                                                  &lt_b_scale, sizeof(lt_b_scale)));
  BlasContext& ctx = *e.blas;
  const float alpha = 1.0f;
  void* d = y.raw_data();
  const cublasStatus_t ms =
      cublasLtMatmul(static_cast<cublasLtHandle_t>(ctx.lt_handle()), call.op, &alpha,
                     b.q.raw_data(), call.a, a.q.raw_data(), call.b, &beta, d, call.c, d, call.c,
                     &algo, ctx.workspace(), ctx.workspace_bytes(), e.stream);
  GTP_CHECK(ms == CUBLAS_STATUS_SUCCESS, op, ": cublasLtMatmul failed for M=", a.q.dim(0),
            " N=", b.q.dim(0), " K=", a.q.dim(1), " with scale modes A ", LtScaleModeName(b),
            ", B ", LtScaleModeName(a), ", y ", DTypeName(y.dtype()), ": ",
            cublasLtGetStatusString(ms));
}

}  // namespace

void BlockScaledGemmCuda(const Exec& e, const Fp8Matrix& a, const Fp8Matrix& b, const Tensor& y,
                         float beta, const Tensor& bias) {
  const char* op = "fp8::BlockScaledGemm (CUDA)";
  const int64_t M = a.q.dim(0), N = b.q.dim(0), K = a.q.dim(1);
  GTP_CHECK(M % kDimMultiple == 0 && N % kDimMultiple == 0 && K % kDimMultiple == 0, op,
            ": cuBLASLt's FP8 GEMM needs M, N and K to be multiples of ", kDimMultiple,
            " (16-byte aligned FP8 rows); got M=", M, " N=", N, " K=", K, " (a ", a.q.ToString(),
            ", b ", b.q.ToString(), ")");
  GTP_CHECK(!(Tiles(a) && Tiles(b)), op,
            ": cuBLASLt has no 128x128 x 128x128 block scaling "
            "(BLK128x128_32F on both operands); quantise one of them 1x128 (M=",
            M, " N=", N, " K=", K, ")");
  GTP_CHECK(!bias.defined() || y.dtype() == DType::kBF16, op,
            ": cuBLASLt has no block-scaled FP8 GEMM with a BIAS epilogue for an f32 y (none "
            "found on an H200, CUDA 13.0); pass a bf16 y, or add the bias after the GEMM (M=",
            M, " N=", N, " K=", K, ")");
  GTP_CHECK(
      Misalignment(a.q) == 0 && Misalignment(b.q) == 0 && Misalignment(y) == 0, op,
      ": cuBLASLt's FP8 GEMM needs 16-byte aligned matrices; the addresses modulo 16 are a.q ",
      Misalignment(a.q), ", b.q ", Misalignment(b.q), ", y ", Misalignment(y));
  GTP_CHECK(e.blas != nullptr, op, ": a CUDA Exec needs a BlasContext (Exec::blas)");
  if (M == 0 || N == 0) return;
  GTP_CHECK(!bias.defined() || Misalignment(bias) == 0, op,
            ": cuBLASLt's bias epilogue needs a 16-byte aligned bias; its address modulo 16 is ",
            bias.defined() ? Misalignment(bias) : 0);
  GTP_CHECK(K > 0 || !bias.defined(), op, ": K = 0 with a bias is not supported");
  if (K == 0) {  // the empty sum; 0 bits are +0 in f32 and bf16
    GTP_CHECK(beta == 0.0f || beta == 1.0f, op, ": K = 0 with beta ", beta,
              " (only 0 or 1) is not supported");
    if (beta == 0.0f) GTP_CUDA_CHECK(cudaMemsetAsync(y.raw_data(), 0, y.nbytes(), e.stream));
    return;
  }

  BlasContext& ctx = *e.blas;
  cublasLtHandle_t handle = static_cast<cublasLtHandle_t>(ctx.lt_handle());
  const void* bias_ptr = bias.defined() ? bias.raw_data() : nullptr;
  const bool bf16_out = y.dtype() == DType::kBF16;
  const BlasContext::AlgoCache::BlockScaledKey key = {static_cast<int64_t>(a.layout),
                                                      static_cast<int64_t>(b.layout),
                                                      static_cast<int64_t>(bf16_out),
                                                      M,
                                                      N,
                                                      K,
                                                      LtAlignment(b.q.raw_data()),
                                                      LtAlignment(a.q.raw_data()),
                                                      LtAlignment(y.raw_data()),
                                                      bias_ptr != nullptr,
                                                      beta != 0.0f};
  const Tensor a_scales = LtScales(e, a, op, "a"), b_scales = LtScales(e, b, op, "b");
  auto& calls = ctx.algo_cache().block_scaled;
  auto cached = calls.find(key);
  if (cached == calls.end()) {
    std::unique_ptr<LtCall> call = NewCall(a, b, y, bias_ptr, a_scales, b_scales);
    cublasLtMatmulHeuristicResult_t result = {};
    int found = 0;
    const cublasStatus_t hs =
        LtFirstAlgo(handle, *call, ctx.workspace_bytes(), static_cast<uint32_t>(key[6]),
                    static_cast<uint32_t>(key[7]), static_cast<uint32_t>(key[8]), &result, &found);
    CheckFound(op, hs, found, a, b, y, bias_ptr != nullptr);
    call->algo = result.algo;
    cached = calls.emplace(key, std::move(call)).first;
  }
  Run(e, *cached->second, cached->second->algo, a, b, y, beta, bias_ptr, a_scales, b_scales, op);
}

void BlockScaledGemmWgmma(const Exec& e, const Fp8Matrix& a, const Fp8Matrix& b, const Tensor& y,
                          float beta, const Tensor& bias) {
  const char* op = "fp8::BlockScaledGemm (CUDA, Fp8GemmEngine::kWgmma)";
  const int64_t M = a.q.dim(0), N = b.q.dim(0), K = a.q.dim(1);
  GTP_CHECK(cuda::WgmmaGemmSupported(e.device.index), op,
            ": gtp's wgmma kernel runs on compute capability 9.0 (H100, H200) only; device ",
            e.device.index, " is another: use Fp8GemmEngine::kCublasLt");
  GTP_CHECK(M % kDimMultiple == 0 && N % kDimMultiple == 0 && K % kDimMultiple == 0, op,
            ": M, N and K must be multiples of ", kDimMultiple,
            " (16-byte aligned FP8 rows for TMA); got M=", M, " N=", N, " K=", K);
  GTP_CHECK(Misalignment(a.q) == 0 && Misalignment(b.q) == 0 && Misalignment(y) == 0 &&
                (!bias.defined() || Misalignment(bias) == 0),
            op, ": needs 16-byte aligned matrices; the addresses modulo 16 are a.q ",
            Misalignment(a.q), ", b.q ", Misalignment(b.q), ", y ", Misalignment(y));
  if (M == 0 || N == 0) return;
  GTP_CHECK(K > 0 || !bias.defined(), op, ": K = 0 with a bias is not supported");
  if (K == 0) {  // the empty sum, as BlockScaledGemmCuda
    GTP_CHECK(beta == 0.0f || beta == 1.0f, op, ": K = 0 with beta ", beta,
              " (only 0 or 1) is not supported");
    if (beta == 0.0f) GTP_CUDA_CHECK(cudaMemsetAsync(y.raw_data(), 0, y.nbytes(), e.stream));
    return;
  }
  // The plan's cluster and split-K (wgmma_gemm_cuda.h); a split's ranges sum
  // into stream-ordered scratch (freed on return without a sync, as LtScales').
  const cuda::WgmmaPlan plan = cuda::WgmmaGemmPlan(M, N, K);
  const Tensor partial = plan.splits > 1 ? e.Empty({plan.splits, M, N}) : Tensor();
  cuda::WgmmaBlockScaledGemm(
      static_cast<const uint8_t*>(a.q.raw_data()), a.scales.data<float>(), Tiles(a),
      static_cast<const uint8_t*>(b.q.raw_data()), b.scales.data<float>(), Tiles(b), M, N, K,
      y.raw_data(), y.dtype() == DType::kBF16, beta, bias.defined() ? bias.raw_data() : nullptr,
      plan, plan.splits > 1 ? partial.data<float>() : nullptr, e.stream);
}

}  // namespace gtp::kernels::fp8::internal

namespace gtp::kernels::fp8 {

using internal::CheckFound;
using internal::NewCall;
using kernels::cuda::internal::LtAlgos;
using kernels::cuda::internal::LtAlignment;
using kernels::cuda::internal::LtCall;

// ---- BlockScaledGemmPlan -------------------------------------------------------------

struct BlockScaledGemmPlan::State {
  std::unique_ptr<LtCall> call;
  std::vector<cublasLtMatmulHeuristicResult_t> algos;
  // The configuration the descriptors describe (Run checks its operands).
  int64_t M = 0, N = 0, K = 0;
  Fp8Layout la = Fp8Layout::kRow1x128, lb = Fp8Layout::kRow1x128;
  DType y_type = DType::kF32;
};

namespace {

// a, b and y's scale buffers in cuBLASLt's layout (internal::LtScales).
std::pair<Tensor, Tensor> PlanScales(const Exec& e, const Fp8Matrix& a, const Fp8Matrix& b,
                                     const char* op) {
  return {internal::LtScales(e, a, op, "a"), internal::LtScales(e, b, op, "b")};
}

}  // namespace

BlockScaledGemmPlan::BlockScaledGemmPlan(const Exec& e, const Fp8Matrix& a, const Fp8Matrix& b,
                                         const Tensor& y, int max_algos)
    : state_(std::make_unique<State>()) {
  const char* op = "fp8::BlockScaledGemmPlan";
  GTP_CHECK(e.is_cuda() && e.blas != nullptr, op, ": a CUDA Exec with a BlasContext only");
  GTP_CHECK(max_algos >= 1, op, ": max_algos must be at least 1, got ", max_algos);
  const int64_t M = a.q.dim(0), N = b.q.dim(0), K = a.q.dim(1);
  GTP_CHECK(M > 0 && N > 0 && K > 0 && b.q.dim(1) == K && y.shape() == Shape({M, N}), op, ": a ",
            a.q.ToString(), ", b ", b.q.ToString(), ", y ", y.ToString(),
            " do not form a non-empty y = a·bᵀ");
  const auto [a_scales, b_scales] = PlanScales(e, a, b, op);
  state_->call = NewCall(a, b, y, nullptr, a_scales, b_scales);
  state_->M = M, state_->N = N, state_->K = K;
  state_->la = a.layout, state_->lb = b.layout, state_->y_type = y.dtype();
  state_->algos.resize(static_cast<size_t>(max_algos));
  int found = 0;
  const cublasStatus_t hs =
      LtAlgos(static_cast<cublasLtHandle_t>(e.blas->lt_handle()), *state_->call,
              e.blas->workspace_bytes(), LtAlignment(b.q.raw_data()), LtAlignment(a.q.raw_data()),
              LtAlignment(y.raw_data()), max_algos, state_->algos.data(), &found);
  CheckFound(op, hs, found, a, b, y, false);
  state_->algos.resize(static_cast<size_t>(found));
}

BlockScaledGemmPlan::~BlockScaledGemmPlan() = default;

int BlockScaledGemmPlan::num_algos() const { return static_cast<int>(state_->algos.size()); }

std::string BlockScaledGemmPlan::Describe(int k) const {
  GTP_CHECK(k >= 0 && k < num_algos(), "fp8::BlockScaledGemmPlan: no algorithm ", k, " of ",
            num_algos());
  const cublasLtMatmulHeuristicResult_t& r = state_->algos[static_cast<size_t>(k)];
  auto get = [&](cublasLtMatmulAlgoConfigAttributes_t attr) {
    int32_t v = 0;  // every attribute read here is 32 bits or fewer, little-endian
    size_t written = 0;
    cublasLtMatmulAlgoConfigGetAttribute(&r.algo, attr, &v, sizeof(v), &written);
    return v;
  };
  return absl::StrCat(
      "id ", get(CUBLASLT_ALGO_CONFIG_ID), " tile ", get(CUBLASLT_ALGO_CONFIG_TILE_ID), " stages ",
      get(CUBLASLT_ALGO_CONFIG_STAGES_ID), " splitK ", get(CUBLASLT_ALGO_CONFIG_SPLITK_NUM),
      " reduction ", get(CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME), " waves ", r.wavesCount);
}

void BlockScaledGemmPlan::Run(const Exec& e, int k, const Fp8Matrix& a, const Fp8Matrix& b,
                              const Tensor& y, float beta) const {
  GTP_CHECK(k >= 0 && k < num_algos(), "fp8::BlockScaledGemmPlan: no algorithm ", k, " of ",
            num_algos());
  const char* op = "fp8::BlockScaledGemmPlan";
  const State& p = *state_;
  GTP_CHECK(a.q.dim(0) == p.M && b.q.dim(0) == p.N && a.q.dim(1) == p.K && b.q.dim(1) == p.K &&
                a.layout == p.la && b.layout == p.lb && y.shape() == Shape({p.M, p.N}) &&
                y.dtype() == p.y_type,
            op, ": planned for M=", p.M, " N=", p.N, " K=", p.K, ", run with a ", a.q.ToString(),
            ", b ", b.q.ToString(), ", y ", y.ToString(), " (or other layouts)");
  const auto [a_scales, b_scales] = PlanScales(e, a, b, op);
  internal::Run(e, *state_->call, state_->algos[static_cast<size_t>(k)].algo, a, b, y, beta,
                nullptr, a_scales, b_scales, op);
}

// ---- BlockScaledEpilogueAlgos ---------------------------------------------------------

int BlockScaledEpilogueAlgos(const Exec& e, const Fp8Matrix& a, const Fp8Matrix& b, const Tensor& y,
                             Fp8ProbeEpilogue epilogue, const Tensor& aux, const Tensor& bias) {
  const char* op = "fp8::BlockScaledEpilogueAlgos";
  GTP_CHECK(e.is_cuda() && e.blas != nullptr, op, ": a CUDA Exec with a BlasContext only");
  const int64_t M = a.q.dim(0), N = b.q.dim(0), K = a.q.dim(1);
  GTP_CHECK(M > 0 && N > 0 && K > 0 && b.q.dim(1) == K && y.shape() == Shape({M, N}), op, ": a ",
            a.q.ToString(), ", b ", b.q.ToString(), ", y ", y.ToString(),
            " do not form a non-empty y = a·bᵀ");
  const bool gelu = epilogue == Fp8ProbeEpilogue::kGeluAuxBias;
  GTP_CHECK(y.dtype() == DType::kBF16 && aux.defined() && aux.shape() == y.shape() &&
                aux.dtype() == DType::kBF16,
            op, ": a bf16 y and a bf16 aux of its shape; got y ", y.ToString(), ", aux ",
            aux.defined() ? aux.ToString() : "none");
  GTP_CHECK(gelu == (bias.defined() && bias.dtype() == DType::kBF16 && bias.shape() == Shape({N})),
            op, ": GELU_AUX_BIAS takes a bf16 bias [N], DGELU none");
  const auto [a_scales, b_scales] = PlanScales(e, a, b, op);
  const std::unique_ptr<LtCall> call = NewCall(a, b, y, nullptr, a_scales, b_scales);
  const cublasLtEpilogue_t epi = gelu ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_DGELU;
  GTP_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(call->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
  const cudaDataType_t bf16 = CUDA_R_16BF;
  if (bias.defined()) {
    const void* ptr = bias.raw_data();
    GTP_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(call->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                                    &bf16, sizeof(bf16)));
    GTP_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(call->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                    &ptr, sizeof(ptr)));
  }
  {
    // Column-major D is [N, M] with leading dimension N; the aux the same.
    const void* ptr = aux.raw_data();
    const int64_t ld = N;
    GTP_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
        call->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &ptr, sizeof(ptr)));
    GTP_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(call->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD,
                                                    &ld, sizeof(ld)));
    GTP_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
        call->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, &bf16, sizeof(bf16)));
  }
  constexpr int kMax = 8;
  cublasLtMatmulHeuristicResult_t results[kMax] = {};
  int found = 0;
  const cublasStatus_t hs =
      LtAlgos(static_cast<cublasLtHandle_t>(e.blas->lt_handle()), *call, e.blas->workspace_bytes(),
              LtAlignment(b.q.raw_data()), LtAlignment(a.q.raw_data()), LtAlignment(y.raw_data()),
              kMax, results, &found);
  return hs == CUBLAS_STATUS_SUCCESS ? found : 0;
}

}  // namespace gtp::kernels::fp8
