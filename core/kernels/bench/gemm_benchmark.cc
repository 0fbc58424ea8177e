// GEMM throughput: C[m,n] = A[m,k]·B[n,k]ᵀ (the Linear layout), square sizes.
//   bazel run -c opt //core/kernels/bench:gemm_benchmark
// CPU: f32 through OpenBLAS. CUDA (when a GPU is visible): cuBLASLt with f32
// and bf16 inputs (f32 accumulate), timed with CUDA events.
#include <vector>

#include "benchmark/benchmark.h"
#include "core/cuda_runtime.h"
#include "core/kernels/cpu.h"
#include "core/kernels/cuda.h"
#include "core/philox.h"

namespace gtp::kernels {
namespace {

GemmDesc Desc(int64_t n, DType ab, DType c) {
  GemmDesc d;
  d.trans_b = true;
  d.m = d.n = d.k = n;
  d.ab_type = ab;
  d.c_type = c;
  return d;
}

void BM_CpuGemmF32(benchmark::State& state) {
  const int64_t n = state.range(0);
  std::vector<float> a(n * n), b(n * n), c(n * n);
  for (int64_t i = 0; i < n * n; ++i) a[i] = PhiloxNormal(1, i), b[i] = PhiloxNormal(2, i);
  GemmDesc d = Desc(n, DType::kF32, DType::kF32);
  for (auto _ : state) {
    cpu::Gemm(d, a.data(), b.data(), c.data());
    benchmark::DoNotOptimize(c.data());
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * n * n * n * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_CpuGemmF32)->Arg(128)->Arg(256)->Arg(512)->Arg(1024)->Unit(benchmark::kMillisecond);

void BM_CudaGemm(benchmark::State& state, DType ab, DType c_type) {
  const int64_t n = state.range(0);
  const size_t es = SizeOf(ab);
  // Random data (never zeros: zeros run faster than real data on tensor cores).
  std::vector<uint8_t> host(n * n * es);
  for (int64_t i = 0; i < n * n; ++i) {
    float v = PhiloxNormal(3, i);
    if (ab == DType::kF32) {
      reinterpret_cast<float*>(host.data())[i] = v;
    } else {
      reinterpret_cast<uint16_t*>(host.data())[i] = F32ToBF16Bits(v);
    }
  }
  void *a, *b, *c;
  GTP_CUDA_CHECK(cudaSetDevice(0));
  GTP_CUDA_CHECK(cudaMalloc(&a, n * n * es));
  GTP_CUDA_CHECK(cudaMalloc(&b, n * n * es));
  GTP_CUDA_CHECK(cudaMalloc(&c, n * n * SizeOf(c_type)));
  GTP_CUDA_CHECK(cudaMemcpy(a, host.data(), host.size(), cudaMemcpyHostToDevice));
  GTP_CUDA_CHECK(cudaMemcpy(b, host.data(), host.size(), cudaMemcpyHostToDevice));
  cuda::BlasContext ctx(0);
  cudaStream_t stream;
  GTP_CUDA_CHECK(cudaStreamCreate(&stream));
  cudaEvent_t start, stop;
  GTP_CUDA_CHECK(cudaEventCreate(&start));
  GTP_CUDA_CHECK(cudaEventCreate(&stop));
  GemmDesc d = Desc(n, ab, c_type);
  for (int i = 0; i < 3; ++i) cuda::Gemm(ctx, d, a, b, c, stream);  // warm-up
  const int reps = 10;
  for (auto _ : state) {
    GTP_CUDA_CHECK(cudaEventRecord(start, stream));
    for (int i = 0; i < reps; ++i) cuda::Gemm(ctx, d, a, b, c, stream);
    GTP_CUDA_CHECK(cudaEventRecord(stop, stream));
    GTP_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    GTP_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    state.SetIterationTime(ms / 1000.0 / reps);
  }
  state.counters["TFLOP/s"] =
      benchmark::Counter(2.0 * n * n * n * 1e-12, benchmark::Counter::kIsIterationInvariantRate);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaStreamDestroy(stream);
  cudaFree(a);
  cudaFree(b);
  cudaFree(c);
}

}  // namespace
}  // namespace gtp::kernels

int main(int argc, char** argv) {
  using gtp::DType;
  if (gtp::CudaDeviceCount() > 0) {
    for (auto [name, ab, c] : {std::make_tuple("BM_CudaGemm/f32", DType::kF32, DType::kF32),
                               std::make_tuple("BM_CudaGemm/bf16_in_f32_out", DType::kBF16, DType::kF32),
                               std::make_tuple("BM_CudaGemm/bf16", DType::kBF16, DType::kBF16)}) {
      benchmark::RegisterBenchmark(name, [ab = ab, c = c](benchmark::State& s) {
        gtp::kernels::BM_CudaGemm(s, ab, c);
      })->Arg(1024)->Arg(4096)->Arg(8192)->UseManualTime()->Unit(benchmark::kMicrosecond);
    }
  }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
