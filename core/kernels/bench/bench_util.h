// core/kernels/bench/bench_util.h — what the CUDA benchmarks share: random
// bf16 operands, a CUDA environment (CudaEnv) and the CUDA-event timing of a
// call.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "benchmark/benchmark.h"
#include "core/allocator.h"
#include "core/cuda_runtime.h"
#include "core/kernels/cuda.h"
#include "core/dtype.h"
#include "core/kernels/ops.h"
#include "core/tensor.h"

namespace gtp::kernels::bench {

// A bf16 tensor of random values in ±[0.5, 1) (never zeros: zeros run
// faster than real data on tensor cores). A cheap LCG, not Philox: the
// tensors have tens of millions of elements and are made per benchmark run.
inline Tensor RandomBF16(const Exec& e, const Shape& s, uint64_t seed) {
  Tensor t = e.Empty(s, DType::kBF16);
  std::vector<uint16_t> host(t.numel());
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (size_t i = 0; i < host.size(); ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    const float u = 0.5f + static_cast<float>(x >> 41) / static_cast<float>(1 << 24);  // [0.5, 1)
    host[i] = F32ToBF16Bits((x >> 40) & 1 ? u : -u);
  }
  GTP_CUDA_CHECK(cudaMemcpy(t.raw_data(), host.data(), t.nbytes(), cudaMemcpyHostToDevice));
  return t;
}

// A stream, caching allocator and BLAS context on device 0 and the Exec
// over them (initialised in this order: the device is set before anything
// uses it).
struct CudaEnv {
  static cudaStream_t NewStream() {
    GTP_CUDA_CHECK(cudaSetDevice(0));
    cudaStream_t s = nullptr;
    GTP_CUDA_CHECK(cudaStreamCreate(&s));
    return s;
  }
  CudaEnv() = default;
  ~CudaEnv() { cudaStreamDestroy(stream); }
  CudaEnv(const CudaEnv&) = delete;
  CudaEnv& operator=(const CudaEnv&) = delete;

  cudaStream_t stream = NewStream();
  CudaCachingAllocator alloc{0};
  cuda::BlasContext ctx{0};
  Exec e{Device::Cuda(0), &alloc, stream, &ctx};
};

// Times run() on `stream`: 3 warm-up calls (algorithm choice, allocator),
// then per benchmark iteration 10 calls between two CUDA events; sets the
// iteration time to one call's (use with UseManualTime()). Returns after the
// stream's work is done.
template <typename Run>
void TimeCalls(benchmark::State& state, cudaStream_t stream, Run run) {
  cudaEvent_t start, stop;
  GTP_CUDA_CHECK(cudaEventCreate(&start));
  GTP_CUDA_CHECK(cudaEventCreate(&stop));
  for (int i = 0; i < 3; ++i) run();
  const int reps = 10;
  for (auto _ : state) {
    GTP_CUDA_CHECK(cudaEventRecord(start, stream));
    for (int i = 0; i < reps; ++i) run();
    GTP_CUDA_CHECK(cudaEventRecord(stop, stream));
    GTP_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    GTP_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    state.SetIterationTime(ms / 1000.0 / reps);
  }
  GTP_CUDA_CHECK(cudaStreamSynchronize(stream));
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
}

}  // namespace gtp::kernels::bench
