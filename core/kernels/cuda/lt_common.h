// core/kernels/cuda/lt_common.h — the cuBLASLt plumbing that cuda::Gemm
// (gemm.cc) and fp8::BlockScaledGemm (core/kernels/fp8/block_gemm_cuda.cc)
// share: the status check, the operand alignment cuBLASLt's heuristic is
// told, one GEMM shape's cached descriptors and algorithm (LtCall), and the
// per-context cache that owns them (BlasContext::AlgoCache, declared in
// cuda.h). The handle and workspace come from the BlasContext the caller
// passes (an Exec's `blas`); nothing here is global. Not a public API.
#pragma once

#include <cublasLt.h>

#include <array>
#include <cstdint>
#include <map>
#include <memory>

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

// Largest power of two (at most 256) that divides the address; cuBLASLt's
// heuristic otherwise assumes 256-byte aligned operands.
inline uint32_t LtAlignment(const void* p) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  uint32_t align = 256;
  while (align > 1 && a % align != 0) align >>= 1;
  return align;
}

// The cuBLASLt descriptors and algorithm of one GEMM shape, created on its
// first call and reused (creating them costs more than a small GEMM). Owns
// the descriptors.
struct LtCall {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo = {};
  // Gemm only: no algorithm for an f32 bias gradient with this bf16 C, so the
  // shape runs with an f32 D.
  bool via_f32 = false;
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

// Asks cuBLASLt's heuristic for up to `requested` algorithms for call's
// descriptors (C and D share call.c) with `workspace` bytes and these
// operand alignments (align_c for C and D), best first, into results.
// Returns the heuristic's status; *found = 0 when it offers nothing.
inline cublasStatus_t LtAlgos(cublasLtHandle_t handle, const LtCall& call, uint64_t workspace,
                              uint32_t align_a, uint32_t align_b, uint32_t align_c, int requested,
                              cublasLtMatmulHeuristicResult_t* results, int* found) {
  cublasLtMatmulPreference_t pref = nullptr;
  GTP_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  GTP_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace, sizeof(workspace)));
  GTP_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a, sizeof(align_a)));
  GTP_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b, sizeof(align_b)));
  GTP_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_c, sizeof(align_c)));
  GTP_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_c, sizeof(align_c)));
  *found = 0;
  const cublasStatus_t hs = cublasLtMatmulAlgoGetHeuristic(
      handle, call.op, call.a, call.b, call.c, call.c, pref, requested, results, found);
  cublasLtMatmulPreferenceDestroy(pref);
  return hs;
}

// The first (the heuristic's best) of LtAlgos.
inline cublasStatus_t LtFirstAlgo(cublasLtHandle_t handle, const LtCall& call, uint64_t workspace,
                                  uint32_t align_a, uint32_t align_b, uint32_t align_c,
                                  cublasLtMatmulHeuristicResult_t* result, int* found) {
  return LtAlgos(handle, call, workspace, align_a, align_b, align_c, 1, result, found);
}

// cuda::Gemm with algo_bucket > 0 (0: Gemm itself): a shape met for the
// first time takes the algorithm cuBLASLt's heuristic gives for its bucket
// shape — m and k rounded up to a multiple of algo_bucket — where
// cublasLtMatmulAlgoCheck accepts it for the shape, else the shape's own; so
// the GEMMs of a mixture of experts, whose row counts change every step, ask
// the heuristic once a bucket instead of once a row count. Only for a plain
// product (no epilogue, no bias); the algorithm of a shape does not depend on
// the order shapes come in. Defined in gemm.cc; GroupedGemm's loop calls it.
void GemmBucketed(BlasContext& ctx, const GemmDesc& d, int64_t algo_bucket, const void* A,
                  const void* B, void* C, cudaStream_t stream);

}  // namespace internal

struct BlasContext::AlgoCache {
  // Gemm: (ab, c, trans_a, trans_b, m, n, k, lda, ldb, ldc, align_a, align_b, align_c, bias,
  //  epilogue, aux, ld_aux, bias_grad, align_bias, align_aux, algo_bucket): a shape met
  //  through GemmBucketed and through Gemm has an entry for each, so neither
  //  decides the other's algorithm.
  using Key = std::array<int64_t, 21>;
  std::map<Key, std::unique_ptr<internal::LtCall>> calls;
  // internal::GemmBucketed: the heuristic's algorithm for a bucket shape (m and
  // k rounded up to the bucket, packed leading dimensions), asked once a bucket;
  // ok false where it offered none. Key: (ab, c, trans_a, trans_b, m, n, k,
  // align_a, align_b, align_c). `queries` counts every heuristic query Gemm
  // and GemmBucketed made through this cache (tests read it).
  using BucketKey = std::array<int64_t, 10>;
  struct BucketAlgo {
    bool ok = false;
    cublasLtMatmulAlgo_t algo = {};
  };
  std::map<BucketKey, BucketAlgo> buckets;
  int64_t queries = 0;
  // fp8::BlockScaledGemm: (layout a, layout b, y dtype, M, N, K, align a.q, align b.q, align y)
  using BlockScaledKey = std::array<int64_t, 11>;
  std::map<BlockScaledKey, std::unique_ptr<internal::LtCall>> block_scaled;
};

}  // namespace gtp::kernels::cuda
