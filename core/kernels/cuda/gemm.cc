// core/kernels/cuda/gemm.cc — BlasContext and Gemm through cuBLASLt (GroupedGemm,
// which also uses the context's cuBLAS handle, is in grouped_gemm.cc).
//
// Row-major C[m, n] = op(A)·op(B) is the column-major product
// Cᵀ[n, m] = op(B)ᵀ·op(A)ᵀ, and a row-major buffer read as column-major is
// its own transpose. So cuBLASLt gets (B, A) in that order, each with the
// transpose flag the caller gave for it, and the row-major leading dimensions
// unchanged:
//   cuBLASLt "A" = our B: column-major [n, k] (ld ldb), or [k, n] with op T
//                          when trans_b;
//   cuBLASLt "B" = our A: column-major [k, m] (ld lda), or [m, k] with op T
//                          when trans_a;
//   cuBLASLt "C" = our C: column-major [n, m] (ld ldc).
// Compute is CUBLAS_COMPUTE_32F with f32 scalars for every type combination
// (never TF32): f32 inputs multiply in full f32, bf16 inputs accumulate in
// f32. cuBLASLt has no f32·f32 → bf16 combination; that one runs in f32 into
// a stream-ordered temporary and is rounded to bf16 afterwards.
//
// Epilogues (GemmDesc::epilogue) map to cuBLASLt's, in its column-major terms
// (D = our Cᵀ, [n, m]; its "A" = our B, its "B" = our A):
//   kNone + bias  → BIAS: the bias per D row is our bias per column j.
//   kGeluAux      → GELU_AUX[_BIAS] (GELU[_BIAS] without aux): the aux matrix
//                   is D-shaped, [n, m] column-major = our [m, n] row-major.
//   kDGeluBGrad   → DGELU_BGRAD (DGELU without bias_grad): the bias gradient
//                   per D row (n elements) sums over our rows.
//   kBGrad        → BGRADB: "bias gradient of input B; size = columns of D
//                   (our m); reduction over k", i.e. Σ_k of our op(A).
// Pointers (bias, aux, bias gradient) are set on every call; everything else
// is part of the cached descriptor's key, with the pointers' alignments
// (cuBLASLt's heuristic reads them from the pointer values).
//
// Types. cuBLASLt documents the bias-gradient vector as having the output's
// type (Ctype) and the GELU aux matrix as having D's type unless
// EPILOGUE_AUX_DATA_TYPE says otherwise (left unset here: aux is c_type), with
// EPILOGUE_AUX_LD a multiple of 8 and ≥ the rows of D (our n). Our bias
// gradient is always f32 (BIAS_DATA_TYPE = CUDA_R_32F): documented for an f32
// C. For a bf16 C it is tried first; if cuBLASLt finds no algorithm (or
// cublasLtMatmul refuses the call), that shape runs from then on with an f32
// D through stream-ordered temporaries (aux widened to f32, C rounded once
// afterwards: the documented combination, same results up to f32 rounding),
// and says so once on stderr.
#include <cublasLt.h>
#include <cublas_v2.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <memory>

#include "core/cuda_runtime.h"
#include "core/kernels/cuda.h"
#include "core/kernels/cuda/lt_common.h"
#include "core/status.h"

namespace gtp::kernels::cuda {

namespace internal {
// Defined in gemm_util.cu.
void ScaleMatrix(void* c, DType type, int64_t rows, int64_t cols, int64_t ld, float beta,
                 cudaStream_t stream);
void ConvertMatrix(const void* src, DType src_type, int64_t lds, void* dst, DType dst_type,
                   int64_t ldd, int64_t rows, int64_t cols, cudaStream_t stream);
}  // namespace internal

namespace {

constexpr size_t kWorkspaceBytes = size_t{32} << 20;

cudaDataType_t CudaType(DType t) {
  switch (t) {
    case DType::kF32:
      return CUDA_R_32F;
    case DType::kBF16:
      return CUDA_R_16BF;
    default:
      break;
  }
  GTP_CHECK(false, "Gemm supports f32 and bf16 matrices, got ", DTypeName(t));
  return CUDA_R_32F;
}

using internal::LtCall;

cublasLtEpilogue_t LtEpilogue(const GemmDesc& d) {
  switch (d.epilogue) {
    case GemmEpilogue::kNone:
      return d.bias != nullptr ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    case GemmEpilogue::kGeluAux:
      if (d.aux != nullptr) {
        return d.bias != nullptr ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
      }
      return d.bias != nullptr ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU;
    case GemmEpilogue::kDGeluBGrad:
      return d.bias_grad != nullptr ? CUBLASLT_EPILOGUE_DGELU_BGRAD : CUBLASLT_EPILOGUE_DGELU;
    case GemmEpilogue::kBGrad:
      return CUBLASLT_EPILOGUE_BGRADB;
  }
  return CUBLASLT_EPILOGUE_DEFAULT;
}

// The pointer cuBLASLt's BIAS_POINTER carries: the bias, or the bias gradient.
const void* BiasPointer(const GemmDesc& d) {
  return d.bias != nullptr ? d.bias : static_cast<const void*>(d.bias_grad);
}

int64_t RoundUp8(int64_t x) { return (x + 7) / 8 * 8; }

}  // namespace

BlasContext::BlasContext(int device) : cache_(std::make_unique<AlgoCache>()) {
  int previous = 0;
  GTP_CUDA_CHECK(cudaGetDevice(&previous));
  GTP_CUDA_CHECK(cudaSetDevice(device));
  cublasLtHandle_t handle = nullptr;
  GTP_CUBLAS_CHECK(cublasLtCreate(&handle));
  lt_ = handle;
  workspace_bytes_ = kWorkspaceBytes;
  GTP_CUDA_CHECK(cudaMalloc(&workspace_, workspace_bytes_));
  // GroupedGemm's cuBLAS handle and pointer arrays, made here so that no
  // GEMM call allocates (cuBLAS is bound to our workspace, never its pool).
  cublasHandle_t blas = nullptr;
  GTP_CUBLAS_CHECK(cublasCreate(&blas));
  blas_ = blas;
  GTP_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&grouped_ptrs_),
                            3 * static_cast<size_t>(kGroupedPtrCapacity) * sizeof(void*)));
  GTP_CUDA_CHECK(cudaSetDevice(previous));
}

BlasContext::~BlasContext() {
  if (grouped_ptrs_ != nullptr) cudaFree(grouped_ptrs_);
  if (blas_ != nullptr) cublasDestroy(static_cast<cublasHandle_t>(blas_));
  if (workspace_ != nullptr) cudaFree(workspace_);
  if (lt_ != nullptr) cublasLtDestroy(static_cast<cublasLtHandle_t>(lt_));
}

void BlasContext::SetBlasStream(cudaStream_t stream) {
  if (blas_stream_set_ && stream == blas_stream_) return;
  cublasHandle_t blas = static_cast<cublasHandle_t>(blas_);
  GTP_CUBLAS_CHECK(cublasSetStream(blas, stream));
  // cublasSetStream resets the workspace to cuBLAS' own pool, which would
  // allocate (and break graph capture).
  GTP_CUBLAS_CHECK(cublasSetWorkspace(blas, workspace_, workspace_bytes_));
  blas_stream_ = stream;
  blas_stream_set_ = true;
}

namespace {

void WarnViaF32(const GemmDesc& d, const char* where, cublasStatus_t status) {
  std::fprintf(stderr,
               "Gemm(%s): %s refused an f32 bias gradient with a bf16 C (m=%lld n=%lld k=%lld: "
               "%s); this shape runs with an f32 D through temporaries\n",
               GemmEpilogueName(d.epilogue), where, static_cast<long long>(d.m),
               static_cast<long long>(d.n), static_cast<long long>(d.k),
               cublasLtGetStatusString(status));
}

// d (a bias-gradient epilogue, bf16 C) as the same GEMM with an f32 D: C
// (when beta reads it) and aux widened into f32 temporaries, the result
// rounded into C once. The bias gradient is the same f32 sum of the f32
// values before rounding.
void GemmViaF32(BlasContext& ctx, const GemmDesc& d, int64_t lda, int64_t ldb, int64_t ldc,
                const void* A, const void* B, void* C, cudaStream_t stream) {
  GemmDesc f = d;
  f.c_type = DType::kF32;
  f.lda = lda;
  f.ldb = ldb;
  f.ldc = d.n;
  f.c_in = nullptr;  // bias-gradient epilogues take no c_in (CheckGemmEpilogue)
  float* tmp = nullptr;
  GTP_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&tmp),
                                 static_cast<size_t>(d.m * d.n) * sizeof(float), stream));
  if (d.beta != 0.0f) {
    internal::ConvertMatrix(C, DType::kBF16, ldc, tmp, DType::kF32, d.n, d.m, d.n, stream);
  }
  float* aux = nullptr;
  if (d.aux != nullptr) {
    f.ld_aux = RoundUp8(d.n);
    GTP_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&aux),
                                   static_cast<size_t>(d.m * f.ld_aux) * sizeof(float), stream));
    internal::ConvertMatrix(d.aux, DType::kBF16, d.ld_aux > 0 ? d.ld_aux : d.n, aux, DType::kF32,
                            f.ld_aux, d.m, d.n, stream);
    f.aux = aux;
  }
  Gemm(ctx, f, A, B, tmp, stream);
  internal::ConvertMatrix(tmp, DType::kF32, d.n, C, DType::kBF16, ldc, d.m, d.n, stream);
  if (aux != nullptr) GTP_CUDA_CHECK(cudaFreeAsync(aux, stream));
  GTP_CUDA_CHECK(cudaFreeAsync(tmp, stream));
}

// GemmBucketed's algorithm for a new exact shape (its descriptors in `exact`):
// the heuristic's best for the bucket shape — m and k rounded up to a
// multiple of `bucket`, packed leading dimensions, the same alignments —
// asked once a bucket, if cublasLtMatmulAlgoCheck accepts it for the exact
// shape within the workspace. false: the caller asks for the exact shape's
// own. Either way a shape always gets the same algorithm (the bucket's is a
// function of the bucket), whatever order the shapes come in.
bool BucketAlgo(BlasContext& ctx, cublasLtHandle_t handle, const GemmDesc& d, int64_t bucket,
                uint32_t align_a, uint32_t align_b, uint32_t align_c, const LtCall& exact,
                cublasLtMatmulAlgo_t* algo) {
  const int64_t m = (d.m + bucket - 1) / bucket * bucket, k = (d.k + bucket - 1) / bucket * bucket;
  const BlasContext::AlgoCache::BucketKey key = {static_cast<int64_t>(d.ab_type),
                                                 static_cast<int64_t>(d.c_type),
                                                 d.trans_a,
                                                 d.trans_b,
                                                 m,
                                                 d.n,
                                                 k,
                                                 align_a,
                                                 align_b,
                                                 align_c};
  BlasContext::AlgoCache& cache = ctx.algo_cache();
  auto it = cache.buckets.find(key);
  if (it == cache.buckets.end()) {
    LtCall probe;  // the bucket shape's descriptors, for the heuristic only
    GTP_CUBLAS_CHECK(cublasLtMatmulDescCreate(&probe.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t op_first = d.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t op_second = d.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    GTP_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(probe.op, CUBLASLT_MATMUL_DESC_TRANSA,
                                                    &op_first, sizeof(op_first)));
    GTP_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(probe.op, CUBLASLT_MATMUL_DESC_TRANSB,
                                                    &op_second, sizeof(op_second)));
    const uint64_t first_rows = d.trans_b ? k : d.n, first_cols = d.trans_b ? d.n : k;
    const uint64_t second_rows = d.trans_a ? m : k, second_cols = d.trans_a ? k : m;
    GTP_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&probe.a, CudaType(d.ab_type), first_rows,
                                                first_cols, first_rows));
    GTP_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&probe.b, CudaType(d.ab_type), second_rows,
                                                second_cols, second_rows));
    GTP_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&probe.c, CudaType(d.c_type), d.n, m, d.n));
    cublasLtMatmulHeuristicResult_t result = {};
    int found = 0;
    const cublasStatus_t hs = internal::LtFirstAlgo(handle, probe, ctx.workspace_bytes(), align_a,
                                                    align_b, align_c, &result, &found);
    ++cache.queries;
    BlasContext::AlgoCache::BucketAlgo entry;
    entry.ok = hs == CUBLAS_STATUS_SUCCESS && found > 0;
    entry.algo = result.algo;
    it = cache.buckets.emplace(key, entry).first;
  }
  if (!it->second.ok) return false;
  cublasLtMatmulHeuristicResult_t check = {};
  if (cublasLtMatmulAlgoCheck(handle, exact.op, exact.a, exact.b, exact.c, exact.c,
                              &it->second.algo, &check) != CUBLAS_STATUS_SUCCESS ||
      check.workspaceSize > ctx.workspace_bytes()) {
    return false;
  }
  *algo = it->second.algo;
  return true;
}

}  // namespace

void Gemm(BlasContext& ctx, const GemmDesc& d, const void* A, const void* B, void* C,
          cudaStream_t stream) {
  internal::GemmBucketed(ctx, d, /*algo_bucket=*/0, A, B, C, stream);
}

namespace internal {

void GemmBucketed(BlasContext& ctx, const GemmDesc& d, int64_t algo_bucket, const void* A,
                  const void* B, void* C, cudaStream_t stream) {
  GTP_CHECK(algo_bucket >= 0, "Gemm: negative algorithm bucket ", algo_bucket);
  GTP_CHECK(d.m >= 0 && d.n >= 0 && d.k >= 0, "Gemm: negative size m=", d.m, " n=", d.n,
            " k=", d.k);
  const cudaDataType_t ab_type = CudaType(d.ab_type);
  const cudaDataType_t c_type = CudaType(d.c_type);
  // Stored shapes (row-major): A is [m, k] or [k, m]; B is [k, n] or [n, k].
  const int64_t a_cols = d.trans_a ? d.m : d.k;
  const int64_t b_cols = d.trans_b ? d.k : d.n;
  const int64_t lda = d.lda > 0 ? d.lda : a_cols;
  const int64_t ldb = d.ldb > 0 ? d.ldb : b_cols;
  const int64_t ldc = d.ldc > 0 ? d.ldc : d.n;
  GTP_CHECK(lda >= a_cols && ldb >= b_cols && ldc >= d.n,
            "Gemm: leading dimension too small: lda=", lda, " ldb=", ldb, " ldc=", ldc,
            " for m=", d.m, " n=", d.n, " k=", d.k);
  CheckGemmEpilogue(d);
  if (d.m == 0 || d.n == 0) return;
  GTP_CHECK(C != nullptr, "Gemm: null C");
  // c_in (GemmDesc): cuBLASLt reads beta·C from it and writes C; the other
  // routes below read C in place, so they copy c_in into C first.
  const void* c_read = d.c_in != nullptr && d.beta != 0.0f ? d.c_in : C;
  auto c_in_to_c = [&] {
    if (c_read == C) return;
    const size_t row = static_cast<size_t>(d.n) * (d.c_type == DType::kBF16 ? 2 : 4);
    const size_t pitch = static_cast<size_t>(ldc) * (d.c_type == DType::kBF16 ? 2 : 4);
    GTP_CUDA_CHECK(cudaMemcpy2DAsync(C, pitch, c_read, pitch, row, static_cast<size_t>(d.m),
                                     cudaMemcpyDeviceToDevice, stream));
  };
  GTP_CHECK(d.bias == nullptr || (d.k > 0 && !(d.ab_type == DType::kF32 && d.c_type == DType::kBF16)),
            "Gemm: a bias epilogue needs k > 0 and matching operand/output types");
  const bool has_epilogue = d.epilogue != GemmEpilogue::kNone;
  const int64_t ld_aux = d.aux != nullptr ? (d.ld_aux > 0 ? d.ld_aux : d.n) : 0;
  if (has_epilogue) {
    const char* name = GemmEpilogueName(d.epilogue);
    GTP_CHECK(d.k > 0, "Gemm(", name, "): CUDA epilogues need k > 0 (m=", d.m, " n=", d.n, ")");
    GTP_CHECK(!(d.ab_type == DType::kF32 && d.c_type == DType::kBF16), "Gemm(", name,
              "): cuBLASLt has no f32 A/B with a bf16 C; use bf16 operands or an f32 C");
    GTP_CHECK(ld_aux % 8 == 0, "Gemm(", name, "): cuBLASLt needs the GELU aux leading dimension "
              "to be a multiple of 8 elements; got ld_aux=", ld_aux, " (n=", d.n,
              "): pad the pre-activation rows to ld_aux=", RoundUp8(d.n));
  }
  if (d.k == 0) {
    // op(A)·op(B) is the zero matrix.
    c_in_to_c();
    internal::ScaleMatrix(C, d.c_type, d.m, d.n, ldc, d.beta, stream);
    return;
  }
  GTP_CHECK(A != nullptr && B != nullptr, "Gemm: null A or B");

  if (d.ab_type == DType::kF32 && d.c_type == DType::kBF16) {
    c_in_to_c();
    float* tmp = nullptr;
    GTP_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&tmp),
                                   static_cast<size_t>(d.m * d.n) * sizeof(float), stream));
    if (d.beta != 0.0f) {
      internal::ConvertMatrix(C, DType::kBF16, ldc, tmp, DType::kF32, d.n, d.m, d.n, stream);
    }
    GemmDesc f = d;
    f.c_type = DType::kF32;
    f.lda = lda;
    f.ldb = ldb;
    f.ldc = d.n;
    f.c_in = nullptr;
    Gemm(ctx, f, A, B, tmp, stream);
    internal::ConvertMatrix(tmp, DType::kF32, d.n, C, DType::kBF16, ldc, d.m, d.n, stream);
    GTP_CUDA_CHECK(cudaFreeAsync(tmp, stream));
    return;
  }

  cublasLtHandle_t handle = static_cast<cublasLtHandle_t>(ctx.lt_handle());
  const uint32_t align_a = internal::LtAlignment(B), align_b = internal::LtAlignment(A),
                 align_c = std::min(internal::LtAlignment(C), internal::LtAlignment(c_read));
  const void* bias_ptr = BiasPointer(d);
  const bool f32_route_allowed = d.bias_grad != nullptr && d.c_type == DType::kBF16;
  const BlasContext::AlgoCache::Key key = {static_cast<int64_t>(d.ab_type),
                                           static_cast<int64_t>(d.c_type),
                                           d.trans_a,
                                           d.trans_b,
                                           d.m,
                                           d.n,
                                           d.k,
                                           lda,
                                           ldb,
                                           ldc,
                                           align_a,
                                           align_b,
                                           align_c,
                                           d.bias != nullptr,
                                           static_cast<int64_t>(d.epilogue),
                                           d.aux != nullptr,
                                           ld_aux,
                                           d.bias_grad != nullptr,
                                           internal::LtAlignment(bias_ptr),
                                           internal::LtAlignment(d.aux),
                                           algo_bucket};
  auto& calls = ctx.algo_cache().calls;
  auto cached = calls.find(key);
  if (cached == calls.end()) {
    auto call = std::make_unique<LtCall>();
    GTP_CUBLAS_CHECK(cublasLtMatmulDescCreate(&call->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t op_first = d.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t op_second = d.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    GTP_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(call->op, CUBLASLT_MATMUL_DESC_TRANSA,
                                                    &op_first, sizeof(op_first)));
    GTP_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(call->op, CUBLASLT_MATMUL_DESC_TRANSB,
                                                    &op_second, sizeof(op_second)));
    const cublasLtEpilogue_t epi = LtEpilogue(d);
    if (epi != CUBLASLT_EPILOGUE_DEFAULT) {
      GTP_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(call->op, CUBLASLT_MATMUL_DESC_EPILOGUE,
                                                      &epi, sizeof(epi)));
    }
    if (bias_ptr != nullptr) {
      // Column-major D is [n, m]: a bias per D row is our per-column bias; a
      // bias gradient is f32 whatever C is.
      const cudaDataType_t bias_type = d.bias != nullptr ? c_type : CUDA_R_32F;
      GTP_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
          call->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof(bias_type)));
      GTP_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
          call->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias_ptr, sizeof(bias_ptr)));
    }
    if (d.aux != nullptr) {
      GTP_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
          call->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &d.aux, sizeof(d.aux)));
      GTP_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
          call->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld_aux, sizeof(ld_aux)));
    }
    // Column-major views: rows = the stored row length, cols = stored rows.
    const uint64_t first_rows = d.trans_b ? d.k : d.n, first_cols = d.trans_b ? d.n : d.k;
    const uint64_t second_rows = d.trans_a ? d.m : d.k, second_cols = d.trans_a ? d.k : d.m;
    GTP_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&call->a, ab_type, first_rows, first_cols, ldb));
    GTP_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&call->b, ab_type, second_rows, second_cols, lda));
    GTP_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&call->c, c_type, d.n, d.m, ldc));

    cublasLtMatmulHeuristicResult_t result = {};
    int found = 0;
    cublasStatus_t hs = CUBLAS_STATUS_SUCCESS;
    // A bucket's algorithm only for a plain product (no epilogue, no bias):
    // the grouped GEMMs' loop, the one caller that asks for it.
    if (algo_bucket > 0 && epi == CUBLASLT_EPILOGUE_DEFAULT && bias_ptr == nullptr &&
        BucketAlgo(ctx, handle, d, algo_bucket, align_a, align_b, align_c, *call, &result.algo)) {
      found = 1;
    } else {
      hs = internal::LtFirstAlgo(handle, *call, ctx.workspace_bytes(), align_a, align_b, align_c,
                                 &result, &found);
      ++ctx.algo_cache().queries;
    }
    const bool ok = hs == CUBLAS_STATUS_SUCCESS && found > 0;
    if (!ok && f32_route_allowed) {
      call->via_f32 = true;
      WarnViaF32(d, "cublasLtMatmulAlgoGetHeuristic", hs);
    } else {
      GTP_CHECK(ok, "Gemm: no cuBLASLt algorithm for m=", d.m, " n=", d.n, " k=", d.k,
                " trans_a=", d.trans_a, " trans_b=", d.trans_b, " ab=", DTypeName(d.ab_type),
                " c=", DTypeName(d.c_type), " lda=", lda, " ldb=", ldb, " ldc=", ldc,
                " bias=", d.bias != nullptr, " epilogue=", GemmEpilogueName(d.epilogue),
                " ld_aux=", ld_aux, ": ", cublasLtGetStatusString(hs));
      call->algo = result.algo;
    }
    cached = calls.emplace(key, std::move(call)).first;
  }
  LtCall& call = *cached->second;
  if (!call.via_f32) {
    // The pointers change from call to call; the shape does not.
    if (bias_ptr != nullptr) {
      GTP_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(call.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                      &bias_ptr, sizeof(bias_ptr)));
    }
    if (d.aux != nullptr) {
      GTP_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
          call.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &d.aux, sizeof(d.aux)));
    }
    const cublasStatus_t ms =
        cublasLtMatmul(handle, call.op, &d.alpha, B, call.a, A, call.b, &d.beta, c_read, call.c, C,
                       call.c, &call.algo, ctx.workspace(), ctx.workspace_bytes(), stream);
    if (ms == CUBLAS_STATUS_SUCCESS) return;
    // A rejected argument enqueues nothing; cuBLASLt may refuse the f32 bias
    // gradient of a bf16 C only here.
    GTP_CHECK(f32_route_allowed &&
                  (ms == CUBLAS_STATUS_NOT_SUPPORTED || ms == CUBLAS_STATUS_INVALID_VALUE),
              "Gemm: cublasLtMatmul failed for m=", d.m, " n=", d.n, " k=", d.k,
              " epilogue=", GemmEpilogueName(d.epilogue), ": ", cublasLtGetStatusString(ms));
    call.via_f32 = true;
    WarnViaF32(d, "cublasLtMatmul", ms);
  }
  GemmViaF32(ctx, d, lda, ldb, ldc, A, B, C, stream);
}

}  // namespace internal

}  // namespace gtp::kernels::cuda
