// core/kernels/cuda/newton_schulz_util.cu — the non-GEMM steps of
// NewtonSchulz (newton_schulz.cc):
//   - the Frobenius-norm denominator ‖G‖_F + 1e-7, summed in double like the
//     CPU version, deterministically: P partial sums (P a function of the size
//     only) into scratch, then one block adds them in a fixed order;
//   - dst = src / denom, optionally transposed, and a plain transpose.
#include <cuda_runtime.h>

#include "core/kernels/cuda/common.cuh"

namespace gtp::kernels::cuda::internal {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kItemsPerBlock = 8 * kThreads;
constexpr int64_t kMaxPartials = 1024;
constexpr int kTile = 32;

__device__ __forceinline__ double WarpSumD(double v) {
  for (int o = kWarpSize / 2; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
}

__device__ __forceinline__ double BlockSumD(double v) {
  __shared__ double partial[kThreads / kWarpSize];
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  v = WarpSumD(v);
  __syncthreads();
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  double r = lane < kThreads / kWarpSize ? partial[lane] : 0.0;
  return WarpSumD(r);
}

__global__ void __launch_bounds__(kThreads)
    SquaresPartialKernel(const float* __restrict__ x, int64_t n, double* __restrict__ partials) {
  double s = 0.0;
  for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * kThreads) {
    const double v = x[i];
    s += v * v;
  }
  s = BlockSumD(s);
  if (threadIdx.x == 0) partials[blockIdx.x] = s;
}

__global__ void __launch_bounds__(kThreads)
    NormDenomKernel(const double* __restrict__ partials, int64_t count, float* __restrict__ denom) {
  double s = 0.0;
  for (int64_t i = threadIdx.x; i < count; i += kThreads) s += partials[i];
  s = BlockSumD(s);
  if (threadIdx.x == 0) *denom = static_cast<float>(sqrt(s) + 1e-7);
}

// dst = src / *denom (src [rows, cols]); transposed: dst [cols, rows].
// denom == nullptr copies. 32×32 tiles through shared memory.
__global__ void ScaleCopyKernel(const float* __restrict__ src, float* __restrict__ dst,
                                int64_t rows, int64_t cols, bool transpose,
                                const float* __restrict__ denom) {
  __shared__ float tile[kTile][kTile + 1];
  const float dn = denom != nullptr ? *denom : 1.0f;
  const int64_t r0 = blockIdx.y * int64_t{kTile}, c0 = blockIdx.x * int64_t{kTile};
  // blockDim = (32, 8): each thread moves 4 elements of the tile.
  for (int j = threadIdx.y; j < kTile; j += blockDim.y) {
    const int64_t r = r0 + j, c = c0 + threadIdx.x;
    if (r < rows && c < cols) {
      const float v = denom != nullptr ? __fdiv_rn(src[r * cols + c], dn) : src[r * cols + c];
      if (transpose) {
        tile[j][threadIdx.x] = v;
      } else {
        dst[r * cols + c] = v;
      }
    }
  }
  if (!transpose) return;  // uniform over the block
  __syncthreads();
  for (int j = threadIdx.y; j < kTile; j += blockDim.y) {
    const int64_t c = c0 + j, r = r0 + threadIdx.x;  // dst row c, column r
    if (r < rows && c < cols) dst[c * rows + r] = tile[threadIdx.x][j];
  }
}

}  // namespace

int64_t NormPartials(int64_t n) {
  const int64_t p = CeilDiv(n, kItemsPerBlock);
  return p < 1 ? 1 : (p < kMaxPartials ? p : kMaxPartials);
}

// *denom = ‖x‖_F + 1e-7 (f32), x of n floats; partials: NormPartials(n) doubles.
void FrobeniusDenominator(const float* x, int64_t n, double* partials, float* denom,
                          cudaStream_t stream) {
  const int64_t p = NormPartials(n);
  SquaresPartialKernel<<<static_cast<unsigned>(p), kThreads, 0, stream>>>(x, n, partials);
  GTP_CU_LAUNCH_CHECK();
  NormDenomKernel<<<1, kThreads, 0, stream>>>(partials, p, denom);
  GTP_CU_LAUNCH_CHECK();
}

// dst = src / *denom (or a copy when denom is null), transposed if asked.
void ScaleCopy(const float* src, float* dst, int64_t rows, int64_t cols, bool transpose,
               const float* denom, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return;
  const int64_t gy = CeilDiv(rows, kTile);
  GTP_CU_REQUIRE(gy <= 65535, "ScaleCopy: %lld rows exceed the grid", static_cast<long long>(rows));
  const dim3 grid(static_cast<unsigned>(CeilDiv(cols, kTile)), static_cast<unsigned>(gy));
  ScaleCopyKernel<<<grid, dim3(kTile, 8), 0, stream>>>(src, dst, rows, cols, transpose, denom);
  GTP_CU_LAUNCH_CHECK();
}

}  // namespace gtp::kernels::cuda::internal
