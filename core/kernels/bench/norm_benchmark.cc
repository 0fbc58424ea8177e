// The norms of the GPT block on the CUDA exec (ops::LayerNormForward /
// LayerNormBackward, ops::RMSNormForward / RMSNormBackward), bf16 as the bf16
// model runs them, at B·T = 8192 rows:
//   bazel run -c opt //core/kernels/bench:norm_benchmark
//   bazel run -c opt //core/kernels/bench:norm_benchmark -- --benchmark_filter=LayerNorm/1024
// Rows: BM_CudaNorm/<LayerNorm|RMSNorm>/<C>/<fwd|bwd>, C = 768 (GPT-2 124M),
// 1024 (350M), 1536, 2048 (1.3B). The backward is the trainer's: dw (and db)
// accumulated, the residual branch's gradient added into dx.
// Timed with CUDA events around back-to-back calls on one stream
// (bench::TimeCalls); the time column is ms per call. GB/s counts the bytes a
// call must move at least (each input read once, each output written once:
// forward x in, y out; backward dy, x and the residual gradient in, dx out),
// so it says how far from memory-bound a kernel is. Registers only when a GPU
// is visible.
#include <cstdint>
#include <string>

#include "benchmark/benchmark.h"
#include "core/cuda_runtime.h"
#include "core/kernels/bench/bench_util.h"
#include "core/kernels/ops.h"
#include "core/tensor.h"

namespace gtp::kernels {
namespace {

using bench::CudaEnv;
using bench::RandomBF16;
using bench::TimeCalls;

constexpr int64_t kRows = 8 * 1024;

void BM_Norm(benchmark::State& state, bool rms, int64_t C, bool backward) {
  CudaEnv env;
  const Exec& e = env.e;
  {
    const Shape xs{kRows, C};
    const Tensor x = RandomBF16(e, xs, 1), w = RandomBF16(e, {C}, 2), b = RandomBF16(e, {C}, 3),
                 dy = RandomBF16(e, xs, 4), dres = RandomBF16(e, xs, 5);
    const Tensor y = e.Empty(xs, DType::kBF16), dx = e.Empty(xs, DType::kBF16);
    const Tensor mean = e.Empty({kRows}), rstd = e.Empty({kRows});
    const Tensor dw = e.Zeros({C}), db = e.Zeros({C});
    const double tb = 2.0 * kRows * C;  // one bf16 [rows, C] tensor
    auto forward = [&] {
      if (rms) {
        ops::RMSNormForward(e, x, w, y, rstd, 1e-5f);
      } else {
        ops::LayerNormForward(e, x, w, b, y, mean, rstd, 1e-5f);
      }
    };
    forward();  // mean and rstd for the backward
    if (!backward) {
      TimeCalls(state, env.stream, forward);
      state.counters["GB/s"] =
          benchmark::Counter(2 * tb * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
    } else {
      TimeCalls(state, env.stream, [&] {
        if (rms) {
          ops::RMSNormBackward(e, dy, x, w, rstd, dx, dw, dres);
        } else {
          ops::LayerNormBackward(e, dy, x, w, mean, rstd, dx, dw, db, dres);
        }
      });
      state.counters["GB/s"] =
          benchmark::Counter(4 * tb * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
    }
  }
}

void RegisterAll() {
  for (bool rms : {false, true}) {
    for (int64_t C : {768, 1024, 1536, 2048}) {
      for (bool bwd : {false, true}) {
        const std::string name = std::string("BM_CudaNorm/") + (rms ? "RMSNorm/" : "LayerNorm/") +
                                 std::to_string(C) + (bwd ? "/bwd" : "/fwd");
        benchmark::RegisterBenchmark(
            name.c_str(), [rms, C, bwd](benchmark::State& st) { BM_Norm(st, rms, C, bwd); })
            ->UseManualTime()
            ->Iterations(50)
            ->Unit(benchmark::kMicrosecond);
      }
    }
  }
}

}  // namespace
}  // namespace gtp::kernels

int main(int argc, char** argv) {
  if (gtp::CudaDeviceCount() > 0) gtp::kernels::RegisterAll();
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
