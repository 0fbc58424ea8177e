// core/kernels/cuda/gemm_util.cu — small strided-matrix kernels for the
// corners of Gemm (gemm.cc) that cuBLASLt does not cover:
//   - k == 0: C = beta·C (C not read when beta == 0);
//   - f32 A/B with a bf16 C: cuBLASLt has no such type combination, so the
//     product goes through an f32 temporary and is converted here;
//   - GroupedGemm (grouped_gemm.cc): cublasGemmGroupedBatchedEx reads its
//     A/B/C pointer arrays from device memory, written here stream-ordered
//     from kernel parameters (no host→device copy, no host synchronisation,
//     and a captured graph replays the same pointers).
// Matrices are row-major [rows, cols] with a leading dimension (row stride).
#include <cuda_runtime.h>

#include "core/dtype.h"
#include "core/kernels/cuda/common.cuh"

namespace gtp::kernels::cuda::internal {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float Load(const void* p, bool bf16, int64_t i) {
  return bf16 ? BF16BitsToF32(static_cast<const uint16_t*>(p)[i]) : static_cast<const float*>(p)[i];
}

__device__ __forceinline__ void Store(void* p, bool bf16, int64_t i, float v) {
  if (bf16) {
    static_cast<uint16_t*>(p)[i] = F32ToBF16Bits(v);
  } else {
    static_cast<float*>(p)[i] = v;
  }
}

__global__ void ScaleMatrixKernel(void* __restrict__ c, bool bf16, int64_t rows, int64_t cols,
                                  int64_t ld, float beta) {
  const int64_t total = rows * cols;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = i / cols, col = i % cols;
    const int64_t at = r * ld + col;
    Store(c, bf16, at, beta == 0.0f ? 0.0f : beta * Load(c, bf16, at));
  }
}

__global__ void ConvertMatrixKernel(const void* __restrict__ src, bool src_bf16, int64_t lds,
                                    void* __restrict__ dst, bool dst_bf16, int64_t ldd,
                                    int64_t rows, int64_t cols) {
  const int64_t total = rows * cols;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = i / cols, col = i % cols;
    Store(dst, dst_bf16, r * ldd + col, Load(src, src_bf16, r * lds + col));
  }
}

// Pointers per WritePointersKernel launch: 3·64 of them, 1.5 KiB of
// parameters (well under the 4 KiB limit).
constexpr int kPtrChunk = 64;

struct PtrChunk {
  const void* first[kPtrChunk];
  const void* second[kPtrChunk];
  void* c[kPtrChunk];
  int count;
};

__global__ void WritePointersKernel(PtrChunk chunk, const void** __restrict__ first,
                                    const void** __restrict__ second, void** __restrict__ c) {
  const int i = threadIdx.x;
  if (i >= chunk.count) return;
  first[i] = chunk.first[i];
  second[i] = chunk.second[i];
  c[i] = chunk.c[i];
}

bool IsBF16(DType t) {
  GTP_CU_REQUIRE(t == DType::kF32 || t == DType::kBF16, "matrix dtype must be f32 or bf16, got %d",
                 static_cast<int>(t));
  return t == DType::kBF16;
}

}  // namespace

// C[rows, cols] (leading dimension ld) = beta·C; beta == 0 writes zeros.
void ScaleMatrix(void* c, DType type, int64_t rows, int64_t cols, int64_t ld, float beta,
                 cudaStream_t stream) {
  if (rows == 0 || cols == 0) return;
  const bool bf16 = IsBF16(type);
  ScaleMatrixKernel<<<GridFor(rows * cols, kThreads), kThreads, 0, stream>>>(c, bf16, rows, cols,
                                                                             ld, beta);
  GTP_CU_LAUNCH_CHECK();
}

// dst[rows, cols] = src[rows, cols] converted between f32 and bf16.
void ConvertMatrix(const void* src, DType src_type, int64_t lds, void* dst, DType dst_type,
                   int64_t ldd, int64_t rows, int64_t cols, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return;
  const bool sb = IsBF16(src_type), db = IsBF16(dst_type);
  ConvertMatrixKernel<<<GridFor(rows * cols, kThreads), kThreads, 0, stream>>>(src, sb, lds, dst,
                                                                               db, ldd, rows, cols);
  GTP_CU_LAUNCH_CHECK();
}

// dst_first/dst_second/dst_c[0, count) (device arrays) = the host arrays
// first/second/c, by kernels on `stream` that carry the values as parameters.
void WritePointers(const void* const* first, const void* const* second, void* const* c,
                   int count, const void** dst_first, const void** dst_second, void** dst_c,
                   cudaStream_t stream) {
  for (int base = 0; base < count; base += kPtrChunk) {
    PtrChunk chunk;
    chunk.count = count - base < kPtrChunk ? count - base : kPtrChunk;
    for (int i = 0; i < chunk.count; ++i) {
      chunk.first[i] = first[base + i];
      chunk.second[i] = second[base + i];
      chunk.c[i] = c[base + i];
    }
    WritePointersKernel<<<1, kPtrChunk, 0, stream>>>(chunk, dst_first + base, dst_second + base,
                                                     dst_c + base);
    GTP_CU_LAUNCH_CHECK();
  }
}

}  // namespace gtp::kernels::cuda::internal
