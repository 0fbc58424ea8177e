// core/kernels/cuda/common.cuh — private helpers of the CUDA kernels.
//
//   - Error checks that abort with file:line (the .cu files are compiled by
//     nvcc without abseil, so core/status.h is not available here).
//   - Warp and block reductions through xor shuffles in a fixed order: the
//     same inputs give the same bits on every run (kernels.h: deterministic).
//   - Launch-size helpers. Index arithmetic is int64 throughout.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace gtp::kernels::cuda::internal {

[[noreturn]] inline void Die(const char* file, int line, const char* what, const char* msg) {
  std::fprintf(stderr, "%s:%d: check failed: %s: %s\n", file, line, what, msg);
  std::fflush(stderr);
  std::abort();
}

}  // namespace gtp::kernels::cuda::internal

// Aborts with file:line when a CUDA runtime call fails.
#define GTP_CU_CHECK(expr)                                                  \
  do {                                                                      \
    cudaError_t gtp_cu_err_ = (expr);                                       \
    if (gtp_cu_err_ != cudaSuccess) {                                       \
      ::gtp::kernels::cuda::internal::Die(__FILE__, __LINE__, #expr,        \
                                          cudaGetErrorString(gtp_cu_err_)); \
    }                                                                       \
  } while (0)

// Checks the launch just made (bad configuration, or an earlier async error).
// (Under GTP_CUDA_HOST_EMULATION the host warp emulator ran it: nothing to check.)
#if defined(GTP_CUDA_HOST_EMULATION)
#define GTP_CU_LAUNCH_CHECK() ((void)0)
#else
#define GTP_CU_LAUNCH_CHECK() GTP_CU_CHECK(cudaGetLastError())
#endif

// The block's dynamic shared memory as `T name[]`. Kernels declare it so,
// and launch through Launch below, so that a CPU test can run them on the
// host warp emulator (core/kernels/cuda/testing/warp_emulator.h).
// GTP_DYNAMIC_SHARED_ALIGNED names a larger alignment (wmma's 32 bytes and up).
#if defined(GTP_CUDA_HOST_EMULATION)
#define GTP_DYNAMIC_SHARED(T, name) T* name = ::gtp::emu::DynamicShared<T>()
#define GTP_DYNAMIC_SHARED_ALIGNED(T, name, bytes) T* name = ::gtp::emu::DynamicShared<T>()
#else
#define GTP_DYNAMIC_SHARED(T, name) extern __shared__ __align__(16) T name[]
#define GTP_DYNAMIC_SHARED_ALIGNED(T, name, bytes) \
  extern __shared__ __align__(bytes)               \
  T name[]
#endif

// Host-side invariant check with a printf-style message.
#define GTP_CU_REQUIRE(cond, ...)                                                   \
  do {                                                                              \
    if (!(cond)) {                                                                  \
      std::fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond); \
      std::fprintf(stderr, __VA_ARGS__);                                            \
      std::fputc('\n', stderr);                                                     \
      std::fflush(stderr);                                                          \
      std::abort();                                                                 \
    }                                                                               \
  } while (0)

namespace gtp::kernels::cuda::internal {

// kernel<<<grid, block, smem_bytes, stream>>>(args…), first raising the
// kernel's dynamic shared-memory limit where smem_bytes pass 48 KB. Under
// GTP_CUDA_HOST_EMULATION the host warp emulator runs the grid, at once.
// The caller checks the launch (GTP_CU_LAUNCH_CHECK).
template <class... Params, class... Args>
void Launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem_bytes,
            cudaStream_t stream, Args... args) {
#if defined(GTP_CUDA_HOST_EMULATION)
  (void)stream;
  ::gtp::emu::RunGrid(grid, block, static_cast<int64_t>(smem_bytes), [&] { kernel(args...); });
#else
  if (smem_bytes > 48 * 1024) {
    GTP_CU_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      static_cast<int>(smem_bytes)));
  }
  // clang-format off
  kernel<<<grid, block, smem_bytes, stream>>>(args...);
  // clang-format on
#endif
}

// The blocks of `kernel` an SM runs at once with `threads` threads and
// `smem_bytes` of dynamic shared memory (the occupancy calculator). Under
// GTP_CUDA_HOST_EMULATION a model of an H100/H200 SM by threads and shared
// memory alone (2048 threads, 228 KB, 1 KB reserved a block), so that the
// callers' choices run on the emulator too.
template <class K>
int BlocksPerSm(K kernel, int threads, size_t smem_bytes) {
#if defined(GTP_CUDA_HOST_EMULATION)
  (void)kernel;
  const int by_threads = 2048 / threads;
  const int by_smem = static_cast<int>((228 * 1024) / (smem_bytes + 1024));
  return by_threads < by_smem ? by_threads : by_smem;
#else
  int blocks = 0;
  GTP_CU_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, threads, smem_bytes));
  return blocks;
#endif
}

// The current device's SM count (4 under GTP_CUDA_HOST_EMULATION: few
// enough that grid-stride loops take several turns in a CPU test).
inline int SmCount() {
#if defined(GTP_CUDA_HOST_EMULATION)
  return 4;
#else
  int device = 0, sms = 0;
  GTP_CU_CHECK(cudaGetDevice(&device));
  GTP_CU_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  return sms > 0 ? sms : 1;
#endif
}

// n bytes of `byte` at p, in stream order (at once under emulation).
inline void FillBytesAsync(void* p, int byte, size_t n, cudaStream_t stream) {
#if defined(GTP_CUDA_HOST_EMULATION)
  (void)stream;
  std::memset(p, byte, n);
#else
  GTP_CU_CHECK(cudaMemsetAsync(p, byte, n, stream));
#endif
}
inline void ZeroAsync(void* p, size_t n, cudaStream_t stream) { FillBytesAsync(p, 0, n, stream); }

inline constexpr int kWarpSize = 32;
inline constexpr unsigned kFullMask = 0xffffffffu;

__host__ __device__ __forceinline__ int64_t CeilDiv(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// Blocks for a grid-stride loop over n items with `threads` per block.
inline unsigned GridFor(int64_t n, int threads) {
  const int64_t kMaxBlocks = int64_t{1} << 16;
  int64_t blocks = CeilDiv(n, threads);
  if (blocks > kMaxBlocks) blocks = kMaxBlocks;
  if (blocks < 1) blocks = 1;
  return static_cast<unsigned>(blocks);
}

__device__ __forceinline__ float WarpSum(float v) {
  for (int o = kWarpSize / 2; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
}

__device__ __forceinline__ float WarpMax(float v) {
  for (int o = kWarpSize / 2; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, o));
  return v;
}

// acc + p[0] + p[stride] + … + p[(n − 1)·stride], added in that order (the
// plain loop's sum, bit for bit) with kBatch loads issued before any is
// added: a reduction over many partials otherwise waits on one load at a time.
template <int kBatch>
__device__ __forceinline__ float InOrderSum(const float* __restrict__ p, int64_t n, int64_t stride,
                                            float acc = 0.0f) {
  int64_t i = 0;
  for (; i + kBatch <= n; i += kBatch) {
    float v[kBatch];
#pragma unroll
    for (int k = 0; k < kBatch; ++k) v[k] = p[(i + k) * stride];
#pragma unroll
    for (int k = 0; k < kBatch; ++k) acc += v[k];
  }
  for (; i < n; ++i) acc += p[i * stride];
  return acc;
}

// Sum over a block of kThreads threads (a multiple of 32, at most 1024);
// every thread gets the result. All threads of the block must call it.
template <int kThreads>
__device__ __forceinline__ float BlockSum(float v) {
  static_assert(kThreads % kWarpSize == 0 && kThreads <= 1024, "block size");
  __shared__ float partial[kThreads / kWarpSize];
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  v = WarpSum(v);
  __syncthreads();  // an earlier call may still be reading `partial`
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  float r = lane < kThreads / kWarpSize ? partial[lane] : 0.0f;
  return WarpSum(r);
}

template <int kThreads>
__device__ __forceinline__ float BlockMax(float v) {
  static_assert(kThreads % kWarpSize == 0 && kThreads <= 1024, "block size");
  __shared__ float partial[kThreads / kWarpSize];
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  v = WarpMax(v);
  __syncthreads();
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  float r = lane < kThreads / kWarpSize ? partial[lane] : -INFINITY;
  return WarpMax(r);
}

// ---- cp.async (sm_80+): global → shared copies that do not hold registers
// while in flight. Each thread commits its copies as a group and waits for
// its own groups; a barrier after the wait makes every thread's copies
// visible to the block. (With GTP_CUDA_HOST_EMULATION a host test's warp
// emulator, core/kernels/cuda/testing/warp_emulator.h, defines them instead.)

#if !defined(GTP_CUDA_HOST_EMULATION)
__device__ __forceinline__ uint32_t SmemAddr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes global → shared (both 16-byte aligned); when !valid nothing is
// read and zeros are written.
__device__ __forceinline__ void CpAsync16(uint32_t dst, const void* src, bool valid) {
  const int bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(bytes)
               : "memory");
}
// One float global → shared; when !valid nothing is read and a zero is
// written (src must still be a valid address).
__device__ __forceinline__ void CpAsync4(float* dst, const float* src, bool valid) {
  const int bytes = valid ? 4 : 0;
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(SmemAddr(dst)), "l"(src),
               "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void CpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Waits until at most N of this thread's committed groups are in flight.
template <int N>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

#endif  // !GTP_CUDA_HOST_EMULATION

}  // namespace gtp::kernels::cuda::internal
