// core/kernels/ssm/ssm.cu — CUDA kernels of the Mamba-2 ops (ssm_cuda.h;
// math in ssd_scan.h and mamba_ops.h). Simple and deterministic first: every
// reduction is done by one thread in a fixed order or by a warp's xor
// shuffles; no atomics.
//
// SSD scan, one block per (b, h), one thread per p, the state row S[p, :] in
// local memory, the plain recurrence (not the chunked form):
//   a_t = exp(dt_t·A_h),  S_t = a_t·S_{t−1} + dt_t·x_t[p]·B_t,
//   y_t[p] = S_t·C_t + D_h·x_t[p].
// Backward, with dS the gradient of S_t (from y_t and S_{t+1}):
//   dS_t   = a_{t+1}·dS_{t+1} + dy_t[p]·C_t
//   dx_t[p] = dt_t·(dS_t·B_t) + D_h·dy_t[p]
//   ddt_t  = Σ_p x_t[p]·(dS_t·B_t) + A_h·a_t·(dS_t·S_{t−1})
//   dB_t  += Σ_{h in g} Σ_p dt_t·x_t[p]·dS_t,   dC_t += Σ_{h in g} Σ_p dy_t[p]·S_t
//   dA_h  += Σ_{b,t,p} dt_t·a_t·(dS_t·S_{t−1}),  dD_h += Σ_{b,t,p} dy_t[p]·x_t[p]
// The forward checkpoints S every L steps into scratch; the backward walks
// the chunks in reverse, recomputes a chunk's states from its checkpoint into
// scratch and runs the reverse recurrence over them. Sums over p go through
// shared memory (thread n adds the P partials in order) into per-head rows;
// a second kernel adds the heads of a group, and one more the batches of dA
// and dD, each in a fixed order.
#include <cuda_runtime.h>

#include "core/kernels/cuda/common.cuh"
#include "core/kernels/ssm/ssm_cuda.h"

namespace gtp::kernels::ssm::cuda {
namespace {

using ::gtp::kernels::cuda::internal::CeilDiv;
using ::gtp::kernels::cuda::internal::GridFor;
using ::gtp::kernels::cuda::internal::kWarpSize;
using ::gtp::kernels::cuda::internal::WarpSum;

constexpr int kThreads = 256;
constexpr int kWarpsPerBlock = kThreads / kWarpSize;
constexpr int kMaxN = static_cast<int>(kSsdMaxN);
constexpr size_t kMaxSharedBytes = 227 * 1024;

__device__ __forceinline__ float Sigmoid(float v) { return 1.0f / (1.0f + expf(-v)); }
__device__ __forceinline__ float Silu(float v) { return v * Sigmoid(v); }
__device__ __forceinline__ float SiluGrad(float v) {
  const float s = Sigmoid(v);
  return s * (1.0f + v * (1.0f - s));
}

// ---------------------------------------------------------------- SSD scan

// State slot `slot` of block bh, element n of thread p: [B·H, slots, N, P],
// so that the P threads of a block touch consecutive floats.
__device__ __forceinline__ size_t StateIndex(int64_t bh, int64_t slots, int64_t slot, int64_t n,
                                             int64_t N, int64_t P, int64_t p) {
  return static_cast<size_t>(((bh * slots + slot) * N + n) * P + p);
}

// y may be null (checkpoints only); ckpt may be null (y only). ckpt slot c
// holds the state entering step c·L.
__global__ void SsdForwardKernel(const float* __restrict__ x, const float* __restrict__ dt,
                                 const float* __restrict__ A, const float* __restrict__ Bm,
                                 const float* __restrict__ Cm, const float* __restrict__ D,
                                 float* __restrict__ y, float* __restrict__ ckpt, int64_t T,
                                 int64_t H, int64_t P, int64_t G, int64_t N, int64_t L,
                                 int64_t slots) {
  const int64_t bh = blockIdx.x, b = bh / H, h = bh % H, g = h / (H / G), p = threadIdx.x;
  if (p >= P) return;
  float S[kMaxN];
  for (int64_t n = 0; n < N; ++n) S[n] = 0.0f;
  const float Ah = A[h], Dh = D[h];
  for (int64_t t = 0; t < T; ++t) {
    if (ckpt != nullptr && t % L == 0) {
      for (int64_t n = 0; n < N; ++n) ckpt[StateIndex(bh, slots, t / L, n, N, P, p)] = S[n];
    }
    const int64_t row = (b * T + t) * H + h, grow = (b * T + t) * G + g;
    const float dtv = dt[row], a = expf(dtv * Ah), xv = x[row * P + p], w = dtv * xv;
    const float* bt = Bm + grow * N;
    const float* ct = Cm + grow * N;
    float acc = 0.0f;
    for (int64_t n = 0; n < N; ++n) {
      S[n] = a * S[n] + w * bt[n];
      acc += S[n] * ct[n];
    }
    if (y != nullptr) y[row * P + p] = acc + Dh * xv;
  }
}

// One block per (b, h), P threads. states: the forward's checkpoints in slots
// [0, chunks), then L slots for one chunk's recomputed states. dBh, dCh
// [B, T, H, N] per-head rows; dad[B·H, 2] the block's (dA, dD) in double.
__global__ void SsdBackwardKernel(const float* __restrict__ dy, const float* __restrict__ x,
                                  const float* __restrict__ dt, const float* __restrict__ A,
                                  const float* __restrict__ Bm, const float* __restrict__ Cm,
                                  const float* __restrict__ D, float* __restrict__ dx,
                                  float* __restrict__ ddt, float* __restrict__ dBh,
                                  float* __restrict__ dCh, double* __restrict__ dad,
                                  float* __restrict__ states, int64_t T, int64_t H, int64_t P,
                                  int64_t G, int64_t N, int64_t L, int64_t chunks) {
  extern __shared__ double smem[];
  double* dad_part = smem;                               // [2, P]
  float* red = reinterpret_cast<float*>(smem + 2 * P);  // [P, N]
  float* part = red + P * N;                             // [P]
  const int64_t bh = blockIdx.x, b = bh / H, h = bh % H, g = h / (H / G), p = threadIdx.x;
  const int64_t slots = chunks + L;
  const float Ah = A[h], Dh = D[h];
  float dS[kMaxN], S[kMaxN];
  for (int64_t n = 0; n < N; ++n) dS[n] = 0.0f;
  double dA_acc = 0.0, dD_acc = 0.0;
  for (int64_t c = chunks - 1; c >= 0; --c) {
    const int64_t c0 = c * L, Lc = L < T - c0 ? L : T - c0;
    // Recompute the chunk's states S_{c0}, …, S_{c0+Lc−1} from its checkpoint.
    for (int64_t n = 0; n < N; ++n) S[n] = states[StateIndex(bh, slots, c, n, N, P, p)];
    for (int64_t j = 0; j < Lc; ++j) {
      const int64_t row = (b * T + c0 + j) * H + h, grow = (b * T + c0 + j) * G + g;
      const float dtv = dt[row], a = expf(dtv * Ah), w = dtv * x[row * P + p];
      const float* bt = Bm + grow * N;
      for (int64_t n = 0; n < N; ++n) {
        S[n] = a * S[n] + w * bt[n];
        states[StateIndex(bh, slots, chunks + j, n, N, P, p)] = S[n];
      }
    }
    for (int64_t j = Lc - 1; j >= 0; --j) {
      const int64_t t = c0 + j, row = (b * T + t) * H + h, grow = (b * T + t) * G + g;
      const float dtv = dt[row], a = expf(dtv * Ah), xv = x[row * P + p], dyv = dy[row * P + p];
      const int64_t prev = j > 0 ? chunks + j - 1 : c, cur = chunks + j;
      const float* bt = Bm + grow * N;
      const float* ct = Cm + grow * N;
      float gb = 0.0f, gs = 0.0f;
      for (int64_t n = 0; n < N; ++n) {
        dS[n] += dyv * ct[n];
        gb += dS[n] * bt[n];
        gs += dS[n] * states[StateIndex(bh, slots, prev, n, N, P, p)];
      }
      dx[row * P + p] = dtv * gb + Dh * dyv;
      part[p] = xv * gb + Ah * a * gs;
      dA_acc += static_cast<double>(dtv) * a * gs;
      dD_acc += static_cast<double>(dyv) * xv;
      for (int64_t n = 0; n < N; ++n)
        red[p * N + n] = dyv * states[StateIndex(bh, slots, cur, n, N, P, p)];
      __syncthreads();
      for (int64_t n = p; n < N; n += P) {
        float s = 0.0f;
        for (int64_t q = 0; q < P; ++q) s += red[q * N + n];
        dCh[row * N + n] = s;
      }
      if (p == 0) {
        float s = 0.0f;
        for (int64_t q = 0; q < P; ++q) s += part[q];
        ddt[row] = s;
      }
      __syncthreads();
      const float w = dtv * xv;
      for (int64_t n = 0; n < N; ++n) red[p * N + n] = w * dS[n];
      __syncthreads();
      for (int64_t n = p; n < N; n += P) {
        float s = 0.0f;
        for (int64_t q = 0; q < P; ++q) s += red[q * N + n];
        dBh[row * N + n] = s;
      }
      __syncthreads();
      for (int64_t n = 0; n < N; ++n) dS[n] *= a;
    }
  }
  dad_part[p] = dA_acc;
  dad_part[P + p] = dD_acc;
  __syncthreads();
  if (p == 0) {
    double sa = 0.0, sd = 0.0;
    for (int64_t q = 0; q < P; ++q) {
      sa += dad_part[q];
      sd += dad_part[P + q];
    }
    dad[bh * 2] = sa;
    dad[bh * 2 + 1] = sd;
  }
}

// out[b, t, g, n] = Σ_{k < H/G} in[b, t, g·(H/G) + k, n] (=), k in order.
__global__ void SumGroupHeadsKernel(const float* __restrict__ in, float* __restrict__ out,
                                    int64_t rows, int64_t H, int64_t G, int64_t N) {
  const int64_t total = rows * G * N, hpg = H / G;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t n = i % N, g = (i / N) % G, r = i / (N * G);
    float s = 0.0f;
    for (int64_t k = 0; k < hpg; ++k) s += in[((r * H) + g * hpg + k) * N + n];
    out[i] = s;
  }
}

// dA[h] += Σ_b dad[b·H + h, 0], dD[h] += Σ_b dad[b·H + h, 1], b in order.
__global__ void AddHeadParamsKernel(const double* __restrict__ dad, float* __restrict__ dA,
                                    float* __restrict__ dD, int64_t B, int64_t H) {
  const int64_t h = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (h >= H) return;
  double sa = 0.0, sd = 0.0;
  for (int64_t b = 0; b < B; ++b) {
    sa += dad[(b * H + h) * 2];
    sd += dad[(b * H + h) * 2 + 1];
  }
  dA[h] += static_cast<float>(sa);
  dD[h] += static_cast<float>(sd);
}

int64_t Spacing(int64_t T, int64_t chunk) { return chunk < T ? chunk : (T > 0 ? T : 1); }

void CheckScanSizes(int64_t H, int64_t P, int64_t G, int64_t N) {
  GTP_CU_REQUIRE(P >= 1 && P <= 1024, "SsdScan (CUDA): head dim P = %lld must be in [1, 1024]",
                 static_cast<long long>(P));
  GTP_CU_REQUIRE(N <= kSsdMaxN, "SsdScan (CUDA): state size N = %lld exceeds %lld",
                 static_cast<long long>(N), static_cast<long long>(kSsdMaxN));
  GTP_CU_REQUIRE(G >= 1 && H % G == 0, "SsdScan (CUDA): H = %lld, G = %lld",
                 static_cast<long long>(H), static_cast<long long>(G));
}

// ---------------------------------------------------------------- conv1d

__device__ __forceinline__ float ConvAt(const float* __restrict__ x, const float* __restrict__ w,
                                        const float* __restrict__ bias, int64_t T, int64_t Ch,
                                        int64_t K, int64_t b, int64_t t, int64_t c) {
  float acc = bias[c];
  for (int64_t k = 0; k < K; ++k) {
    const int64_t s = t - (K - 1) + k;
    if (s >= 0) acc += w[c * K + k] * x[(b * T + s) * Ch + c];
  }
  return acc;
}

__global__ void ConvForwardKernel(const float* __restrict__ x, const float* __restrict__ w,
                                  const float* __restrict__ bias, float* __restrict__ y,
                                  int64_t B, int64_t T, int64_t Ch, int64_t K, bool silu) {
  const int64_t total = B * T * Ch;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t c = i % Ch, t = (i / Ch) % T, b = i / (Ch * T);
    const float v = ConvAt(x, w, bias, T, Ch, K, b, t, c);
    y[i] = silu ? Silu(v) : v;
  }
}

// g = dy·act'(pre), the gradient of the pre-activation, into scratch.
__global__ void ConvPreGradKernel(const float* __restrict__ dy, const float* __restrict__ x,
                                  const float* __restrict__ w, const float* __restrict__ bias,
                                  float* __restrict__ gpre, int64_t B, int64_t T, int64_t Ch,
                                  int64_t K, bool silu) {
  const int64_t total = B * T * Ch;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t c = i % Ch, t = (i / Ch) % T, b = i / (Ch * T);
    float v = dy[i];
    if (silu) v *= SiluGrad(ConvAt(x, w, bias, T, Ch, K, b, t, c));
    gpre[i] = v;
  }
}

// dx[b, s, c] = Σ_k g[b, s + K − 1 − k, c]·w[c, k] (=).
__global__ void ConvDxKernel(const float* __restrict__ gpre, const float* __restrict__ w,
                             float* __restrict__ dx, int64_t B, int64_t T, int64_t Ch,
                             int64_t K) {
  const int64_t total = B * T * Ch;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t c = i % Ch, s = (i / Ch) % T, b = i / (Ch * T);
    float acc = 0.0f;
    for (int64_t k = 0; k < K; ++k) {
      const int64_t t = s + (K - 1) - k;
      if (t < T) acc += gpre[(b * T + t) * Ch + c] * w[c * K + k];
    }
    dx[i] = acc;
  }
}

// Thread (k, c): dw[c, k] += Σ_{b, t} g[b, t, c]·x[b, t − (K−1) + k, c],
// (b, t) in order.
__global__ void ConvDwKernel(const float* __restrict__ gpre, const float* __restrict__ x,
                             float* __restrict__ dw, int64_t B, int64_t T, int64_t Ch,
                             int64_t K) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i >= Ch * K) return;
  const int64_t c = i % Ch, k = i / Ch;
  float acc = 0.0f;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      const int64_t s = t - (K - 1) + k;
      if (s >= 0) acc += gpre[(b * T + t) * Ch + c] * x[(b * T + s) * Ch + c];
    }
  dw[c * K + k] += acc;
}

// out[c] += Σ_r in[r, c] over `rows` rows in order.
__global__ void ColumnSumAddKernel(const float* __restrict__ in, float* __restrict__ out,
                                   int64_t rows, int64_t cols) {
  const int64_t c = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (c >= cols) return;
  float acc = 0.0f;
  for (int64_t r = 0; r < rows; ++r) acc += in[r * cols + c];
  out[c] += acc;
}

// ---------------------------------------------------------------- softplus

__global__ void SoftplusForwardKernel(const float* __restrict__ raw, const float* __restrict__ bias,
                                      float* __restrict__ dt, int64_t N, int64_t H) {
  const int64_t total = N * H;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float u = raw[i] + bias[i % H];
    dt[i] = u > 20.0f ? u : log1pf(expf(u));
  }
}

__global__ void SoftplusBackwardKernel(const float* __restrict__ ddt,
                                       const float* __restrict__ raw,
                                       const float* __restrict__ bias, float* __restrict__ draw,
                                       int64_t N, int64_t H) {
  const int64_t total = N * H;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float u = raw[i] + bias[i % H];
    draw[i] = ddt[i] * (u > 20.0f ? 1.0f : Sigmoid(u));
  }
}

// ---------------------------------------------------------------- A = −exp(A_log)

__global__ void NegExpForwardKernel(const float* __restrict__ a_log, float* __restrict__ a,
                                    int64_t H) {
  const int64_t h = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (h < H) a[h] = -expf(a_log[h]);
}

__global__ void NegExpBackwardKernel(const float* __restrict__ da, const float* __restrict__ a,
                                     float* __restrict__ a_log_grad, int64_t H) {
  const int64_t h = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (h < H) a_log_grad[h] += da[h] * a[h];
}

// ---------------------------------------------------------------- gated RMSNorm

// One warp per (row, group); lanes stride over the group's channels.
__global__ void GatedRmsNormForwardKernel(const float* __restrict__ x, const float* __restrict__ z,
                                          const float* __restrict__ w, float* __restrict__ y,
                                          float* __restrict__ rstd, int64_t N, int64_t Ch,
                                          int64_t group, float eps) {
  const int64_t Gs = Ch / group;
  const int64_t item = blockIdx.x * int64_t{kWarpsPerBlock} + threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  if (item >= N * Gs) return;
  const int64_t n = item / Gs, gi = item % Gs, base = n * Ch + gi * group;
  float ss = 0.0f;
  for (int64_t j = lane; j < group; j += kWarpSize) {
    const float g = x[base + j] * Silu(z[base + j]);
    ss += g * g;
  }
  ss = WarpSum(ss);
  const float r = 1.0f / sqrtf(ss / static_cast<float>(group) + eps);
  if (lane == 0) rstd[item] = r;
  for (int64_t j = lane; j < group; j += kWarpSize) {
    const float g = x[base + j] * Silu(z[base + j]);
    y[base + j] = g * r * w[gi * group + j];
  }
}

// dg = r·w·dy − g·r³·mean(w·dy·g); dx = dg·silu(z), dz = dg·x·silu'(z).
__global__ void GatedRmsNormBackwardKernel(const float* __restrict__ dy,
                                           const float* __restrict__ x,
                                           const float* __restrict__ z,
                                           const float* __restrict__ w,
                                           const float* __restrict__ rstd, float* __restrict__ dx,
                                           float* __restrict__ dz, int64_t N, int64_t Ch,
                                           int64_t group) {
  const int64_t Gs = Ch / group;
  const int64_t item = blockIdx.x * int64_t{kWarpsPerBlock} + threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  if (item >= N * Gs) return;
  const int64_t n = item / Gs, gi = item % Gs, base = n * Ch + gi * group;
  const float r = rstd[item];
  float dot = 0.0f;
  for (int64_t j = lane; j < group; j += kWarpSize) {
    const float g = x[base + j] * Silu(z[base + j]);
    dot += w[gi * group + j] * dy[base + j] * g;
  }
  const float m = WarpSum(dot) / static_cast<float>(group);
  for (int64_t j = lane; j < group; j += kWarpSize) {
    const float zi = z[base + j], xi = x[base + j], si = Silu(zi);
    const float g = xi * si;
    const float dg = r * w[gi * group + j] * dy[base + j] - g * r * r * r * m;
    dx[base + j] = dg * si;
    dz[base + j] = dg * xi * SiluGrad(zi);
  }
}

// dw[c] += Σ_n dy[n, c]·g[n, c]·rstd[n, c / group], n in order.
__global__ void GatedRmsNormDwKernel(const float* __restrict__ dy, const float* __restrict__ x,
                                     const float* __restrict__ z, const float* __restrict__ rstd,
                                     float* __restrict__ dw, int64_t N, int64_t Ch,
                                     int64_t group) {
  const int64_t c = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (c >= Ch) return;
  const int64_t Gs = Ch / group, gi = c / group;
  float acc = 0.0f;
  for (int64_t n = 0; n < N; ++n) {
    const int64_t i = n * Ch + c;
    acc += dy[i] * (x[i] * Silu(z[i])) * rstd[n * Gs + gi];
  }
  dw[c] += acc;
}

unsigned Blocks(int64_t n) { return static_cast<unsigned>(CeilDiv(n, kThreads)); }

}  // namespace

void SsdScanForward(const float* x, const float* dt, const float* A, const float* Bm,
                    const float* Cm, const float* D, float* y, int64_t B, int64_t T, int64_t H,
                    int64_t P, int64_t G, int64_t N, cudaStream_t stream) {
  if (B * T * H == 0) return;
  CheckScanSizes(H, P, G, N);
  SsdForwardKernel<<<static_cast<unsigned>(B * H), static_cast<unsigned>(P), 0, stream>>>(
      x, dt, A, Bm, Cm, D, y, nullptr, T, H, P, G, N, /*L=*/1, /*slots=*/0);
  GTP_CU_LAUNCH_CHECK();
}

int64_t SsdScanBackwardScratchFloats(int64_t B, int64_t T, int64_t H, int64_t P, int64_t N,
                                     int64_t chunk) {
  const int64_t L = Spacing(T, chunk), chunks = CeilDiv(T, L);
  // (dA, dD) partials as doubles, dBh, dCh, the states.
  return 4 * B * H + 2 * B * T * H * N + B * H * (chunks + L) * N * P;
}

void SsdScanBackward(const float* dy, const float* x, const float* dt, const float* A,
                     const float* Bm, const float* Cm, const float* D, float* dx, float* ddt,
                     float* dA, float* dBm, float* dCm, float* dD, float* scratch, int64_t B,
                     int64_t T, int64_t H, int64_t P, int64_t G, int64_t N, int64_t chunk,
                     cudaStream_t stream) {
  if (B * T * H == 0) {
    if (B * T * G * N > 0) {
      GTP_CU_CHECK(cudaMemsetAsync(dBm, 0, sizeof(float) * B * T * G * N, stream));
      GTP_CU_CHECK(cudaMemsetAsync(dCm, 0, sizeof(float) * B * T * G * N, stream));
    }
    return;
  }
  CheckScanSizes(H, P, G, N);
  GTP_CU_REQUIRE(chunk >= 1, "SsdScanBackward (CUDA): chunk = %lld", static_cast<long long>(chunk));
  const int64_t L = Spacing(T, chunk), chunks = CeilDiv(T, L), slots = chunks + L;
  double* dad = reinterpret_cast<double*>(scratch);
  float* dBh = scratch + 4 * B * H;
  float* dCh = dBh + B * T * H * N;
  float* states = dCh + B * T * H * N;
  const unsigned blocks = static_cast<unsigned>(B * H), threads = static_cast<unsigned>(P);
  SsdForwardKernel<<<blocks, threads, 0, stream>>>(x, dt, A, Bm, Cm, D, nullptr, states, T, H, P,
                                                   G, N, L, slots);
  GTP_CU_LAUNCH_CHECK();
  const size_t smem = sizeof(double) * 2 * P + sizeof(float) * (P * N + P);
  GTP_CU_REQUIRE(smem <= kMaxSharedBytes,
                 "SsdScanBackward (CUDA): P·N = %lld needs %zu bytes of shared memory",
                 static_cast<long long>(P * N), smem);
  if (smem > 48 * 1024) {
    GTP_CU_CHECK(cudaFuncSetAttribute(SsdBackwardKernel,
                                      cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      static_cast<int>(smem)));
  }
  SsdBackwardKernel<<<blocks, threads, smem, stream>>>(dy, x, dt, A, Bm, Cm, D, dx, ddt, dBh, dCh,
                                                       dad, states, T, H, P, G, N, L, chunks);
  GTP_CU_LAUNCH_CHECK();
  const int64_t out = B * T * G * N;
  if (out > 0) {
    SumGroupHeadsKernel<<<GridFor(out, kThreads), kThreads, 0, stream>>>(dBh, dBm, B * T, H, G, N);
    GTP_CU_LAUNCH_CHECK();
    SumGroupHeadsKernel<<<GridFor(out, kThreads), kThreads, 0, stream>>>(dCh, dCm, B * T, H, G, N);
    GTP_CU_LAUNCH_CHECK();
  }
  AddHeadParamsKernel<<<Blocks(H), kThreads, 0, stream>>>(dad, dA, dD, B, H);
  GTP_CU_LAUNCH_CHECK();
}

void CausalConv1dForward(const float* x, const float* w, const float* bias, float* y, int64_t B,
                         int64_t T, int64_t Ch, int64_t K, bool silu, cudaStream_t stream) {
  const int64_t total = B * T * Ch;
  if (total == 0) return;
  ConvForwardKernel<<<GridFor(total, kThreads), kThreads, 0, stream>>>(x, w, bias, y, B, T, Ch, K,
                                                                       silu);
  GTP_CU_LAUNCH_CHECK();
}

int64_t CausalConv1dBackwardScratchFloats(int64_t B, int64_t T, int64_t Ch) { return B * T * Ch; }

void CausalConv1dBackward(const float* dy, const float* x, const float* w, const float* bias,
                          bool silu, float* dx, float* dw, float* dbias, float* scratch,
                          int64_t B, int64_t T, int64_t Ch, int64_t K, cudaStream_t stream) {
  const int64_t total = B * T * Ch;
  if (total == 0) return;
  ConvPreGradKernel<<<GridFor(total, kThreads), kThreads, 0, stream>>>(dy, x, w, bias, scratch, B,
                                                                       T, Ch, K, silu);
  GTP_CU_LAUNCH_CHECK();
  ConvDxKernel<<<GridFor(total, kThreads), kThreads, 0, stream>>>(scratch, w, dx, B, T, Ch, K);
  GTP_CU_LAUNCH_CHECK();
  if (Ch * K > 0) {
    ConvDwKernel<<<Blocks(Ch * K), kThreads, 0, stream>>>(scratch, x, dw, B, T, Ch, K);
    GTP_CU_LAUNCH_CHECK();
  }
  ColumnSumAddKernel<<<Blocks(Ch), kThreads, 0, stream>>>(scratch, dbias, B * T, Ch);
  GTP_CU_LAUNCH_CHECK();
}

void SoftplusBiasForward(const float* raw, const float* bias, float* dt, int64_t N, int64_t H,
                         cudaStream_t stream) {
  if (N * H == 0) return;
  SoftplusForwardKernel<<<GridFor(N * H, kThreads), kThreads, 0, stream>>>(raw, bias, dt, N, H);
  GTP_CU_LAUNCH_CHECK();
}

void SoftplusBiasBackward(const float* ddt, const float* raw, const float* bias, float* draw,
                          float* dbias, int64_t N, int64_t H, cudaStream_t stream) {
  if (N * H == 0) return;
  SoftplusBackwardKernel<<<GridFor(N * H, kThreads), kThreads, 0, stream>>>(ddt, raw, bias, draw,
                                                                            N, H);
  GTP_CU_LAUNCH_CHECK();
  ColumnSumAddKernel<<<Blocks(H), kThreads, 0, stream>>>(draw, dbias, N, H);
  GTP_CU_LAUNCH_CHECK();
}

void NegExpForward(const float* a_log, float* a, int64_t H, cudaStream_t stream) {
  if (H == 0) return;
  NegExpForwardKernel<<<Blocks(H), kThreads, 0, stream>>>(a_log, a, H);
  GTP_CU_LAUNCH_CHECK();
}

void NegExpBackwardAccumulate(const float* da, const float* a, float* a_log_grad, int64_t H,
                              cudaStream_t stream) {
  if (H == 0) return;
  NegExpBackwardKernel<<<Blocks(H), kThreads, 0, stream>>>(da, a, a_log_grad, H);
  GTP_CU_LAUNCH_CHECK();
}

void GatedRmsNormForward(const float* x, const float* z, const float* w, float* y, float* rstd,
                         int64_t N, int64_t Ch, int64_t group, float eps, cudaStream_t stream) {
  const int64_t items = N * (Ch / group);
  if (items == 0) return;
  GatedRmsNormForwardKernel<<<static_cast<unsigned>(CeilDiv(items, kWarpsPerBlock)), kThreads, 0,
                              stream>>>(x, z, w, y, rstd, N, Ch, group, eps);
  GTP_CU_LAUNCH_CHECK();
}

void GatedRmsNormBackward(const float* dy, const float* x, const float* z, const float* w,
                          const float* rstd, float* dx, float* dz, float* dw, int64_t N,
                          int64_t Ch, int64_t group, cudaStream_t stream) {
  const int64_t items = N * (Ch / group);
  if (items == 0) return;
  GatedRmsNormBackwardKernel<<<static_cast<unsigned>(CeilDiv(items, kWarpsPerBlock)), kThreads, 0,
                               stream>>>(dy, x, z, w, rstd, dx, dz, N, Ch, group);
  GTP_CU_LAUNCH_CHECK();
  GatedRmsNormDwKernel<<<Blocks(Ch), kThreads, 0, stream>>>(dy, x, z, rstd, dw, N, Ch, group);
  GTP_CU_LAUNCH_CHECK();
}

}  // namespace gtp::kernels::ssm::cuda
