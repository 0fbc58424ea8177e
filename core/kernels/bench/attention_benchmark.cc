// Causal self-attention throughput (naive kernels: probabilities materialised).
//   bazel run -c opt //core/kernels/bench:attention_benchmark
// Third argument: 0 naive kernels, 1 GEMM-based (cuBLASLt + row kernels).
// FLOPs counted as the causal work of QKᵀ and PV: 2·(2·B·NH·T²·HS)/2 forward,
// twice that backward. CUDA variants register when a GPU is visible.
#include <vector>

#include "benchmark/benchmark.h"
#include "core/cuda_runtime.h"
#include "core/kernels/cpu.h"
#include "core/kernels/cuda.h"
#include "core/philox.h"

namespace gtp::kernels {
namespace {

constexpr int64_t kB = 4, kNH = 8, kHS = 64;

double FwdFlops(int64_t T) { return 2.0 * kB * kNH * T * T * kHS; }

std::vector<float> Rand(uint64_t key, int64_t n) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = PhiloxNormal(key, i);
  return v;
}

void BM_CpuAttention(benchmark::State& state) {
  const int64_t T = state.range(0), bwd = state.range(1), n = kB * T * kNH * kHS;
  auto q = Rand(1, n), k = Rand(2, n), v = Rand(3, n), dout = Rand(4, n);
  std::vector<float> out(n), att(kB * kNH * T * T), dq(n), dk(n), dv(n), scratch(att.size());
  for (auto _ : state) {
    cpu::AttentionForward(q.data(), k.data(), v.data(), out.data(), att.data(), kB, T, kNH, kNH, kHS);
    if (bwd)
      cpu::AttentionBackward(dout.data(), q.data(), k.data(), v.data(), att.data(), dq.data(),
                             dk.data(), dv.data(), scratch.data(), kB, T, kNH, kNH, kHS);
  }
  state.counters["GFLOP/s"] = benchmark::Counter(FwdFlops(T) * (bwd ? 3 : 1) * 1e-9,
                                                 benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_CpuAttention)->Args({64, 0})->Args({256, 0})->Args({256, 1})->Unit(benchmark::kMillisecond);

void BM_CudaAttention(benchmark::State& state) {
  const int64_t T = state.range(0), bwd = state.range(1), n = kB * T * kNH * kHS;
  const int64_t na = kB * kNH * T * T;
  GTP_CUDA_CHECK(cudaSetDevice(0));
  float *q, *k, *v, *dout, *out, *att, *dq, *dk, *dv, *scratch;
  for (float** p : {&q, &k, &v, &dout, &out, &dq, &dk, &dv})
    GTP_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(p), n * 4));
  GTP_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&att), na * 4));
  GTP_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&scratch), na * 4));
  int key = 1;
  for (float* p : {q, k, v, dout}) {
    auto h = Rand(key++, n);
    GTP_CUDA_CHECK(cudaMemcpy(p, h.data(), n * 4, cudaMemcpyHostToDevice));
  }
  cudaStream_t stream;
  GTP_CUDA_CHECK(cudaStreamCreate(&stream));
  cudaEvent_t start, stop;
  GTP_CUDA_CHECK(cudaEventCreate(&start));
  GTP_CUDA_CHECK(cudaEventCreate(&stop));
  const bool gemm = state.range(2) != 0;
  cuda::BlasContext ctx(0);
  auto step = [&] {
    if (gemm) {
      cuda::AttentionForwardGemm(ctx, q, k, v, out, att, kB, T, kNH, kNH, kHS, stream);
      if (bwd)
        cuda::AttentionBackwardGemm(ctx, dout, q, k, v, att, dq, dk, dv, scratch, kB, T, kNH, kNH,
                                    kHS, stream);
      return;
    }
    cuda::AttentionForward(q, k, v, out, att, kB, T, kNH, kNH, kHS, stream);
    if (bwd)
      cuda::AttentionBackward(dout, q, k, v, att, dq, dk, dv, scratch, kB, T, kNH, kNH, kHS, stream);
  };
  step();
  for (auto _ : state) {
    GTP_CUDA_CHECK(cudaEventRecord(start, stream));
    step();
    GTP_CUDA_CHECK(cudaEventRecord(stop, stream));
    GTP_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    GTP_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    state.SetIterationTime(ms / 1000.0);
  }
  state.counters["TFLOP/s"] = benchmark::Counter(FwdFlops(T) * (bwd ? 3 : 1) * 1e-12,
                                                 benchmark::Counter::kIsIterationInvariantRate);
  for (float* p : {q, k, v, dout, out, att, dq, dk, dv, scratch}) cudaFree(p);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaStreamDestroy(stream);
}

}  // namespace
}  // namespace gtp::kernels

int main(int argc, char** argv) {
  if (gtp::CudaDeviceCount() > 0) {
    benchmark::RegisterBenchmark("BM_CudaAttention", gtp::kernels::BM_CudaAttention)
        ->Args({256, 0, 0})->Args({1024, 0, 0})->Args({1024, 1, 0})->Args({2048, 1, 0})
        ->Args({256, 0, 1})->Args({1024, 0, 1})->Args({1024, 1, 1})->Args({2048, 1, 1})
        ->UseManualTime()->Unit(benchmark::kMicrosecond);
  }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
