// core/kernels/cuda/norm.cu — LayerNorm and RMSNorm over the last dim C of
// x[N, C].
//
//   LayerNorm: y = (x − mean)·rstd·w + b,  rstd = 1/√(var + eps)
//   RMSNorm:   y = x·rstd·w,               rstd = 1/√(mean(x²) + eps)
//   Backward with x̂ = (x − mean)·rstd (x·rstd for RMSNorm), g = dy·w:
//     dx = rstd·(g − mean(g) − x̂·mean(g·x̂))    (RMSNorm: no mean(g) term)
//     dw += Σ_n dy·x̂,  db += Σ_n dy
//
// Row statistics and dx: one warp per row. dw/db deterministically in two
// passes: the rows are cut into P chunks (P depends on N only); pass 1 writes
// each chunk's column sums to scratch[P, C], pass 2 adds the P partials of a
// column in increasing chunk order and then adds the total into dw/db.
#include <cuda_runtime.h>

#include "core/kernels/cuda.h"
#include "core/kernels/cuda/common.cuh"

namespace gtp::kernels::cuda {
namespace {

using internal::CeilDiv;
using internal::kWarpSize;
using internal::WarpSum;

constexpr int kRowThreads = 256;  // 8 rows (warps) per block
constexpr int kRowsPerBlock = kRowThreads / kWarpSize;
constexpr int kColThreads = 256;
constexpr int64_t kMinRowsPerChunk = 16;
constexpr int64_t kMaxChunks = 256;

// Number of row chunks of the dw/db reduction; a function of N only, so the
// summation order (and the bits) never depend on the device.
int64_t NormChunks(int64_t N) {
  const int64_t p = CeilDiv(N, kMinRowsPerChunk);
  return p < kMaxChunks ? (p > 0 ? p : 1) : kMaxChunks;
}

__global__ void LayerNormForwardKernel(const float* __restrict__ x, const float* __restrict__ w,
                                       const float* __restrict__ b, float* __restrict__ y,
                                       float* __restrict__ mean, float* __restrict__ rstd,
                                       int64_t N, int64_t C, float eps) {
  const int lane = threadIdx.x % kWarpSize;
  const int64_t row = blockIdx.x * int64_t{kRowsPerBlock} + threadIdx.x / kWarpSize;
  if (row >= N) return;
  const float* xr = x + row * C;
  float* yr = y + row * C;
  float s = 0.0f;
  for (int64_t c = lane; c < C; c += kWarpSize) s += xr[c];
  const float m = WarpSum(s) / static_cast<float>(C);
  float v = 0.0f;
  for (int64_t c = lane; c < C; c += kWarpSize) {
    const float d = xr[c] - m;
    v += d * d;
  }
  const float var = WarpSum(v) / static_cast<float>(C);
  const float r = 1.0f / sqrtf(var + eps);
  for (int64_t c = lane; c < C; c += kWarpSize) {
    const float o = (xr[c] - m) * r * w[c];
    yr[c] = b != nullptr ? o + b[c] : o;
  }
  if (lane == 0) {
    if (mean != nullptr) mean[row] = m;
    if (rstd != nullptr) rstd[row] = r;
  }
}

// mean == nullptr selects RMSNorm (x̂ = x·rstd, no mean(g) term).
__global__ void NormBackwardDxKernel(const float* __restrict__ dy, const float* __restrict__ x,
                                     const float* __restrict__ w, const float* __restrict__ mean,
                                     const float* __restrict__ rstd, float* __restrict__ dx,
                                     int64_t N, int64_t C) {
  const int lane = threadIdx.x % kWarpSize;
  const int64_t row = blockIdx.x * int64_t{kRowsPerBlock} + threadIdx.x / kWarpSize;
  if (row >= N) return;
  const float* dyr = dy + row * C;
  const float* xr = x + row * C;
  float* dxr = dx + row * C;
  const float m = mean != nullptr ? mean[row] : 0.0f;
  const float r = rstd[row];
  float sg = 0.0f, sgx = 0.0f;
  for (int64_t c = lane; c < C; c += kWarpSize) {
    const float g = dyr[c] * w[c];
    sg += g;
    sgx += g * ((xr[c] - m) * r);
  }
  const float mean_g = mean != nullptr ? WarpSum(sg) / static_cast<float>(C) : 0.0f;
  const float mean_gx = WarpSum(sgx) / static_cast<float>(C);
  for (int64_t c = lane; c < C; c += kWarpSize) {
    const float xhat = (xr[c] - m) * r;
    dxr[c] = (dyr[c] * w[c] - mean_g - xhat * mean_gx) * r;
  }
}

// Pass 1: block (column tile, chunk p) sums its chunk's rows per column.
// partial_w[p, c] = Σ dy·x̂, partial_b[p, c] = Σ dy (when partial_b is set).
__global__ void NormBackwardPartialKernel(const float* __restrict__ dy, const float* __restrict__ x,
                                          const float* __restrict__ mean,
                                          const float* __restrict__ rstd,
                                          float* __restrict__ partial_w,
                                          float* __restrict__ partial_b, int64_t N, int64_t C,
                                          int64_t rows_per_chunk) {
  const int64_t c = blockIdx.x * int64_t{kColThreads} + threadIdx.x;
  const int64_t p = blockIdx.y;
  if (c >= C) return;
  const int64_t r0 = p * rows_per_chunk;
  const int64_t r1 = r0 + rows_per_chunk < N ? r0 + rows_per_chunk : N;
  float sw = 0.0f, sb = 0.0f;
  for (int64_t n = r0; n < r1; ++n) {
    const float d = dy[n * C + c];
    const float m = mean != nullptr ? mean[n] : 0.0f;
    sw += d * ((x[n * C + c] - m) * rstd[n]);
    sb += d;
  }
  partial_w[p * C + c] = sw;
  if (partial_b != nullptr) partial_b[p * C + c] = sb;
}

// Pass 2: dw[c] += Σ_p partial_w[p, c] in increasing p (and db likewise).
__global__ void NormBackwardFinalKernel(const float* __restrict__ partial_w,
                                        const float* __restrict__ partial_b, float* __restrict__ dw,
                                        float* __restrict__ db, int64_t C, int64_t chunks) {
  const int64_t c = blockIdx.x * int64_t{kColThreads} + threadIdx.x;
  if (c >= C) return;
  float sw = 0.0f, sb = 0.0f;
  for (int64_t p = 0; p < chunks; ++p) {
    sw += partial_w[p * C + c];
    if (partial_b != nullptr) sb += partial_b[p * C + c];
  }
  dw[c] += sw;
  if (partial_b != nullptr) db[c] += sb;
}

__global__ void RMSNormForwardKernel(const float* __restrict__ x, const float* __restrict__ w,
                                     float* __restrict__ y, float* __restrict__ rstd, int64_t N,
                                     int64_t C, float eps) {
  const int lane = threadIdx.x % kWarpSize;
  const int64_t row = blockIdx.x * int64_t{kRowsPerBlock} + threadIdx.x / kWarpSize;
  if (row >= N) return;
  const float* xr = x + row * C;
  float* yr = y + row * C;
  float s = 0.0f;
  for (int64_t c = lane; c < C; c += kWarpSize) s += xr[c] * xr[c];
  const float ms = WarpSum(s) / static_cast<float>(C);
  const float r = 1.0f / sqrtf(ms + eps);
  for (int64_t c = lane; c < C; c += kWarpSize) yr[c] = xr[c] * r * w[c];
  if (lane == 0 && rstd != nullptr) rstd[row] = r;
}

void CheckArgs(const char* op, int64_t N, int64_t C) {
  GTP_CU_REQUIRE(N >= 0 && C >= 0, "%s: negative size N=%lld C=%lld", op, static_cast<long long>(N),
                 static_cast<long long>(C));
}

unsigned RowBlocks(int64_t N) { return static_cast<unsigned>(CeilDiv(N, kRowsPerBlock)); }

// Shared backward of both norms; mean == nullptr selects RMSNorm.
void NormBackward(const float* dy, const float* x, const float* w, const float* mean,
                  const float* rstd, float* dx, float* dw, float* db, float* scratch, int64_t N,
                  int64_t C, cudaStream_t stream) {
  if (N == 0 || C == 0) return;
  NormBackwardDxKernel<<<RowBlocks(N), kRowThreads, 0, stream>>>(dy, x, w, mean, rstd, dx, N, C);
  GTP_CU_LAUNCH_CHECK();
  if (dw == nullptr && db == nullptr) return;
  GTP_CU_REQUIRE(dw != nullptr, "norm backward: db without dw is not supported");
  GTP_CU_REQUIRE(scratch != nullptr, "norm backward: scratch is required for dw/db");
  const int64_t chunks = NormChunks(N);
  const int64_t rows_per_chunk = CeilDiv(N, chunks);
  float* partial_w = scratch;
  float* partial_b = db != nullptr ? scratch + chunks * C : nullptr;
  const dim3 grid(static_cast<unsigned>(CeilDiv(C, kColThreads)), static_cast<unsigned>(chunks));
  NormBackwardPartialKernel<<<grid, kColThreads, 0, stream>>>(dy, x, mean, rstd, partial_w,
                                                              partial_b, N, C, rows_per_chunk);
  GTP_CU_LAUNCH_CHECK();
  NormBackwardFinalKernel<<<static_cast<unsigned>(CeilDiv(C, kColThreads)), kColThreads, 0,
                            stream>>>(partial_w, partial_b, dw, db, C, chunks);
  GTP_CU_LAUNCH_CHECK();
}

}  // namespace

void LayerNormForward(const float* x, const float* w, const float* b, float* y, float* mean,
                      float* rstd, int64_t N, int64_t C, float eps, cudaStream_t stream) {
  CheckArgs("LayerNormForward", N, C);
  if (N == 0) return;
  GTP_CU_REQUIRE(C > 0, "LayerNormForward: C must be positive");
  LayerNormForwardKernel<<<RowBlocks(N), kRowThreads, 0, stream>>>(x, w, b, y, mean, rstd, N, C,
                                                                   eps);
  GTP_CU_LAUNCH_CHECK();
}

int64_t LayerNormBackwardScratchFloats(int64_t N, int64_t C) { return 2 * NormChunks(N) * C; }

void LayerNormBackward(const float* dy, const float* x, const float* w, const float* mean,
                       const float* rstd, float* dx, float* dw, float* db, float* scratch,
                       int64_t N, int64_t C, cudaStream_t stream) {
  CheckArgs("LayerNormBackward", N, C);
  GTP_CU_REQUIRE(N == 0 || mean != nullptr, "LayerNormBackward: mean is required");
  NormBackward(dy, x, w, mean, rstd, dx, dw, db, scratch, N, C, stream);
}

void RMSNormForward(const float* x, const float* w, float* y, float* rstd, int64_t N, int64_t C,
                    float eps, cudaStream_t stream) {
  CheckArgs("RMSNormForward", N, C);
  if (N == 0) return;
  GTP_CU_REQUIRE(C > 0, "RMSNormForward: C must be positive");
  RMSNormForwardKernel<<<RowBlocks(N), kRowThreads, 0, stream>>>(x, w, y, rstd, N, C, eps);
  GTP_CU_LAUNCH_CHECK();
}

int64_t RMSNormBackwardScratchFloats(int64_t N, int64_t C) { return NormChunks(N) * C; }

void RMSNormBackward(const float* dy, const float* x, const float* w, const float* rstd, float* dx,
                     float* dw, float* scratch, int64_t N, int64_t C, cudaStream_t stream) {
  CheckArgs("RMSNormBackward", N, C);
  NormBackward(dy, x, w, /*mean=*/nullptr, rstd, dx, dw, /*db=*/nullptr, scratch, N, C, stream);
}

}  // namespace gtp::kernels::cuda
