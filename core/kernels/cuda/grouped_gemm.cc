// core/kernels/cuda/grouped_gemm.cc — GroupedGemm: G independent row-major
// GEMMs C_g = alpha·op(A_g)·op(B_g) + beta·C_g (GemmGroup in kernels.h).
//
// With BlasContext::grouped_batched (the default; see there why) same-type groups
// (ab_type == c_type) go to cublasGemmGroupedBatchedEx, one
// problem per cuBLAS "group" (group_size 1), with the row-major → column-major
// swap of cuda::Gemm (gemm.cc): row-major C[m, n] = op(A)·op(B) is the
// column-major Cᵀ[n, m] = op(B)ᵀ·op(A)ᵀ, so cuBLAS gets
//   its m, n, k   = our n, m, k;
//   its A (op)    = our B (trans_b), ld = B's packed row length (k or n);
//   its B (op)    = our A (trans_a), ld = A's packed row length (m or k);
//   its C         = our C, ld = n.
// Its A/B/C pointer arrays live in device memory: the context's array
// (BlasContext::grouped_ptrs), written by internal::WritePointers on the
// stream just before the call, so back-to-back calls and graph replays each
// see their own pointers. The size, ld, transpose and scalar arrays are host
// arrays, read when the call is made.
//
// Everything else loops over cuda::Gemm: bf16 A/B with an f32 C (cuBLAS'
// grouped GEMM has only matching A/B/C types), sizes beyond int, and a type
// whose grouped call cuBLAS refused once. k == 0 groups are scaled
// (internal::ScaleMatrix); empty groups are skipped.
#include <cublas_v2.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <vector>

#include "core/kernels/cuda.h"
#include "core/kernels/cuda/lt_common.h"
#include "core/status.h"

namespace gtp::kernels::cuda {

namespace internal {
// Defined in gemm_util.cu.
void ScaleMatrix(void* c, DType type, int64_t rows, int64_t cols, int64_t ld, float beta,
                 cudaStream_t stream);
void WritePointers(const void* const* first, const void* const* second, void* const* c, int count,
                   const void** dst_first, const void** dst_second, void** dst_c,
                   cudaStream_t stream);
}  // namespace internal

namespace {

cudaDataType_t CudaType(DType t) { return t == DType::kBF16 ? CUDA_R_16BF : CUDA_R_32F; }

bool FitsInt(const GemmGroup& p) { return p.m <= INT_MAX && p.n <= INT_MAX && p.k <= INT_MAX; }

// The host-side arrays of one cublasGemmGroupedBatchedEx call, in cuBLAS'
// column-major terms (see the file comment).
struct Batch {
  std::vector<cublasOperation_t> trans_first, trans_second;
  std::vector<int> m, n, k, ld_first, ld_second, ldc, size;
  std::vector<float> alpha, beta;
  std::vector<const void*> first, second;
  std::vector<void*> c;

  void Add(const GemmDesc& d, const GemmGroup& p) {
    trans_first.push_back(d.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N);
    trans_second.push_back(d.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N);
    m.push_back(static_cast<int>(p.n));
    n.push_back(static_cast<int>(p.m));
    k.push_back(static_cast<int>(p.k));
    ld_first.push_back(static_cast<int>(d.trans_b ? p.k : p.n));
    ld_second.push_back(static_cast<int>(d.trans_a ? p.m : p.k));
    ldc.push_back(static_cast<int>(p.n));
    size.push_back(1);
    alpha.push_back(d.alpha);
    beta.push_back(d.beta);
    first.push_back(p.b);
    second.push_back(p.a);
    c.push_back(p.c);
  }
  int count() const { return static_cast<int>(c.size()); }
};

// The loop's GEMMs share a cuBLASLt algorithm per bucket of kRowBucket rows
// (m and k rounded up; internal::GemmBucketed): an expert's row count changes
// every step, and a heuristic query per new count would cost more than the
// GEMM.
constexpr int64_t kRowBucket = 128;

void RunOne(BlasContext& ctx, const GemmDesc& d, const GemmGroup& p, cudaStream_t stream) {
  GemmDesc one = d;
  one.m = p.m, one.n = p.n, one.k = p.k;
  internal::GemmBucketed(ctx, one, kRowBucket, p.a, p.b, p.c, stream);
}

// One cublasGemmGroupedBatchedEx call over groups[idx[begin, end)]; false
// (nothing computed) when cuBLAS refuses it.
bool RunBatched(BlasContext& ctx, const GemmDesc& d, const GemmGroup* groups,
                const std::vector<int>& idx, size_t begin, size_t end, cudaStream_t stream) {
  Batch b;
  for (size_t i = begin; i < end; ++i) b.Add(d, groups[idx[i]]);
  const int count = b.count();
  const int cap = BlasContext::kGroupedPtrCapacity;
  void** ptrs = ctx.grouped_ptrs();
  const void** dev_first = const_cast<const void**>(ptrs);
  const void** dev_second = const_cast<const void**>(ptrs + cap);
  void** dev_c = ptrs + 2 * cap;
  internal::WritePointers(b.first.data(), b.second.data(), b.c.data(), count, dev_first, dev_second,
                          dev_c, stream);
  ctx.SetBlasStream(stream);
  const cudaDataType_t ab = CudaType(d.ab_type), ct = CudaType(d.c_type);
  const cublasStatus_t status = cublasGemmGroupedBatchedEx(
      static_cast<cublasHandle_t>(ctx.blas_handle()), b.trans_first.data(), b.trans_second.data(),
      b.m.data(), b.n.data(), b.k.data(), b.alpha.data(), dev_first, ab, b.ld_first.data(),
      dev_second, ab, b.ld_second.data(), b.beta.data(), dev_c, ct, b.ldc.data(), count,
      b.size.data(), CUBLAS_COMPUTE_32F);
  if (status == CUBLAS_STATUS_SUCCESS) {
    ++ctx.grouped_stats().batched_calls;
    return true;
  }
  // A refused call enqueues no GEMM (the pointer writes are harmless).
  std::fprintf(stderr,
               "GroupedGemm: cublasGemmGroupedBatchedEx refused %s A/B/C (%d groups, ta=%d "
               "tb=%d: %s); %s groups loop over Gemm from now on\n",
               DTypeName(d.ab_type), count, d.trans_a, d.trans_b, cublasGetStatusString(status),
               DTypeName(d.ab_type));
  return false;
}

}  // namespace

void GroupedGemm(BlasContext& ctx, const GemmDesc& d, const GemmGroup* groups, int count,
                 cudaStream_t stream) {
  CheckGroupedGemm(d, groups, count);
  bool& refused = ctx.grouped_stats().refused[d.ab_type == DType::kBF16 ? 1 : 0];
  const bool grouped = ctx.grouped_batched() && d.ab_type == d.c_type && !refused;
  std::vector<int> batched;  // indices of the groups for cublasGemmGroupedBatchedEx
  for (int g = 0; g < count; ++g) {
    const GemmGroup& p = groups[g];
    if (p.m == 0 || p.n == 0) continue;
    if (p.k == 0) {
      // op(A)·op(B) is the zero matrix.
      internal::ScaleMatrix(p.c, d.c_type, p.m, p.n, p.n, d.beta, stream);
    } else if (grouped && FitsInt(p)) {
      batched.push_back(g);
    } else {
      RunOne(ctx, d, p, stream);
    }
  }
  const size_t cap = BlasContext::kGroupedPtrCapacity;
  for (size_t begin = 0; begin < batched.size(); begin += cap) {
    const size_t end = std::min(batched.size(), begin + cap);
    if (!refused && RunBatched(ctx, d, groups, batched, begin, end, stream)) continue;
    refused = true;
    for (size_t i = begin; i < end; ++i) RunOne(ctx, d, groups[batched[i]], stream);
  }
}

}  // namespace gtp::kernels::cuda
