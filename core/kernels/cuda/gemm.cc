// core/kernels/cuda/gemm.cc — BlasContext and Gemm through cuBLASLt.
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
#include <cublasLt.h>

#include <array>
#include <map>
#include <memory>

#include <cstdint>

#include "core/cuda_runtime.h"
#include "core/kernels/cuda.h"
#include "core/status.h"

// Aborts with file:line when a cuBLASLt call fails.
#define GTP_CUBLAS_CHECK(expr)                                          \
  do {                                                                  \
    cublasStatus_t gtp_cublas_status_ = (expr);                         \
    GTP_CHECK(gtp_cublas_status_ == CUBLAS_STATUS_SUCCESS, #expr, ": ", \
              cublasLtGetStatusString(gtp_cublas_status_));             \
  } while (0)

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

// Largest power of two (at most 256) that divides the address; cuBLASLt's
// heuristic otherwise assumes 256-byte aligned operands.
uint32_t Alignment(const void* p) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  uint32_t align = 256;
  while (align > 1 && a % align != 0) align >>= 1;
  return align;
}

// The cuBLASLt descriptors and algorithm of one GEMM shape, created on its
// first call and reused (creating them costs more than a small GEMM).
struct LtCall {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo = {};
  LtCall() = default;
  LtCall(const LtCall&) = delete;
  LtCall& operator=(const LtCall&) = delete;
  ~LtCall() {
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

}  // namespace

struct BlasContext::AlgoCache {
  // (ab, c, trans_a, trans_b, m, n, k, lda, ldb, ldc, align_a, align_b, align_c, bias)
  using Key = std::array<int64_t, 14>;
  std::map<Key, std::unique_ptr<LtCall>> calls;
};

BlasContext::BlasContext(int device) : cache_(std::make_unique<AlgoCache>()) {
  int previous = 0;
  GTP_CUDA_CHECK(cudaGetDevice(&previous));
  GTP_CUDA_CHECK(cudaSetDevice(device));
  cublasLtHandle_t handle = nullptr;
  GTP_CUBLAS_CHECK(cublasLtCreate(&handle));
  lt_ = handle;
  workspace_bytes_ = kWorkspaceBytes;
  GTP_CUDA_CHECK(cudaMalloc(&workspace_, workspace_bytes_));
  GTP_CUDA_CHECK(cudaSetDevice(previous));
}

BlasContext::~BlasContext() {
  if (workspace_ != nullptr) cudaFree(workspace_);
  if (lt_ != nullptr) cublasLtDestroy(static_cast<cublasLtHandle_t>(lt_));
}

void Gemm(BlasContext& ctx, const GemmDesc& d, const void* A, const void* B, void* C,
          cudaStream_t stream) {
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
  if (d.m == 0 || d.n == 0) return;
  GTP_CHECK(C != nullptr, "Gemm: null C");
  GTP_CHECK(d.bias == nullptr || (d.k > 0 && !(d.ab_type == DType::kF32 && d.c_type == DType::kBF16)),
            "Gemm: a bias epilogue needs k > 0 and matching operand/output types");
  if (d.k == 0) {
    // op(A)·op(B) is the zero matrix.
    internal::ScaleMatrix(C, d.c_type, d.m, d.n, ldc, d.beta, stream);
    return;
  }
  GTP_CHECK(A != nullptr && B != nullptr, "Gemm: null A or B");

  if (d.ab_type == DType::kF32 && d.c_type == DType::kBF16) {
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
    Gemm(ctx, f, A, B, tmp, stream);
    internal::ConvertMatrix(tmp, DType::kF32, d.n, C, DType::kBF16, ldc, d.m, d.n, stream);
    GTP_CUDA_CHECK(cudaFreeAsync(tmp, stream));
    return;
  }

  cublasLtHandle_t handle = static_cast<cublasLtHandle_t>(ctx.lt_handle());
  const uint32_t align_a = Alignment(B), align_b = Alignment(A), align_c = Alignment(C);
  const BlasContext::AlgoCache::Key key = {
      static_cast<int64_t>(d.ab_type), static_cast<int64_t>(d.c_type), d.trans_a, d.trans_b,
      d.m, d.n, d.k, lda, ldb, ldc, align_a, align_b, align_c, d.bias != nullptr};
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
    if (d.bias != nullptr) {
      // Column-major D is [n, m]: a bias per D row is our per-column bias.
      const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
      GTP_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(call->op, CUBLASLT_MATMUL_DESC_EPILOGUE,
                                                      &epi, sizeof(epi)));
      GTP_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
          call->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &c_type, sizeof(c_type)));
      GTP_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
          call->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &d.bias, sizeof(d.bias)));
    }
    // Column-major views: rows = the stored row length, cols = stored rows.
    const uint64_t first_rows = d.trans_b ? d.k : d.n, first_cols = d.trans_b ? d.n : d.k;
    const uint64_t second_rows = d.trans_a ? d.m : d.k, second_cols = d.trans_a ? d.k : d.m;
    GTP_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&call->a, ab_type, first_rows, first_cols, ldb));
    GTP_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&call->b, ab_type, second_rows, second_cols, lda));
    GTP_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&call->c, c_type, d.n, d.m, ldc));

    cublasLtMatmulPreference_t pref = nullptr;
    GTP_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    const uint64_t ws = ctx.workspace_bytes();
    GTP_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
    GTP_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a, sizeof(align_a)));
    GTP_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b, sizeof(align_b)));
    GTP_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_c, sizeof(align_c)));
    GTP_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_c, sizeof(align_c)));
    cublasLtMatmulHeuristicResult_t result = {};
    int found = 0;
    const cublasStatus_t hs = cublasLtMatmulAlgoGetHeuristic(handle, call->op, call->a, call->b,
                                                             call->c, call->c, pref, 1, &result,
                                                             &found);
    cublasLtMatmulPreferenceDestroy(pref);
    GTP_CHECK(hs == CUBLAS_STATUS_SUCCESS && found > 0, "Gemm: no cuBLASLt algorithm for m=", d.m,
              " n=", d.n, " k=", d.k, " trans_a=", d.trans_a, " trans_b=", d.trans_b,
              " ab=", DTypeName(d.ab_type), " c=", DTypeName(d.c_type), " lda=", lda,
              " ldb=", ldb, " ldc=", ldc, " bias=", d.bias != nullptr, ": ",
              cublasLtGetStatusString(hs));
    call->algo = result.algo;
    cached = calls.emplace(key, std::move(call)).first;
  }
  LtCall& call = *cached->second;
  if (d.bias != nullptr) {  // the pointer changes from call to call; the shape does not
    GTP_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(call.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                    &d.bias, sizeof(d.bias)));
  }
  GTP_CUBLAS_CHECK(cublasLtMatmul(handle, call.op, &d.alpha, B, call.a, A, call.b, &d.beta, C,
                                  call.c, C, call.c, &call.algo, ctx.workspace(),
                                  ctx.workspace_bytes(), stream));
}

}  // namespace gtp::kernels::cuda
