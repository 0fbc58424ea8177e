// GEMM throughput: C[m,n] = A[m,k]·B[n,k]ᵀ (the Linear layout), square sizes.
//   bazel run -c opt //core/kernels/bench:gemm_benchmark
//   bazel run -c opt //core/kernels/bench:gemm_benchmark -- --benchmark_filter=Grouped
// CPU: f32 through OpenBLAS. CUDA (when a GPU is visible): cuBLASLt with f32
// and bf16 inputs (f32 accumulate), timed with CUDA events.
//
// Grouped (mixture of experts, CUDA, bf16): ops::GroupedLinear, its
// BackwardData and BackwardWeight (f32 dw, beta 1) over G = 8 stacked experts
// against a loop of per-expert ops::Linear / LinearBackwardData /
// LinearBackwardWeight on the same tensors, for the expert MLP's fc1 (K = 768
// → N = 3072) and fc2 (K = 3072 → N = 768), with 2048 rows per expert
// (balanced) or 8192 rows split 4000/2000/1000/500/300/200/100/92 (skewed).
// Names: BM_CudaGroupedLinear/<fc>/<split>/<pass>/<grouped|loop>; the time
// column is ms per call. BM_CudaGroupedVarying (below): the same with the
// row counts changing on every call, as training meets them.
//
// Bias gradients (BM_CudaBiasGrad, below): cuBLASLt's BGRADB epilogue against
// ops::ColumnSumAccumulate.
#include <algorithm>
#include <string>
#include <tuple>
#include <vector>

#include "benchmark/benchmark.h"
#include "core/allocator.h"
#include "core/cuda_runtime.h"
#include "core/kernels/bench/bench_util.h"
#include "core/kernels/cpu.h"
#include "core/kernels/cuda.h"
#include "core/kernels/cuda/lt_common.h"
#include "core/kernels/ops.h"
#include "core/philox.h"
#include "core/tensor.h"

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

enum class Pass { kFwd, kDgrad, kWgrad };

// The stacked experts' operands of one pass: x [M, K], w [G·N, K], dy [M, N]
// in; y, dx (bf16) and dw (f32, beta 1) out.
struct GroupedOperands {
  Tensor x, w, dy, y, dx, dw;
  int64_t N = 0;
};

// One pass over the groups at offsets `off`: the grouped op (GroupedGemm:
// the grouped call or its loop, as the context says), or with per_group_ops
// one ops::Linear-family call a group.
void RunGroupedPass(const Exec& e, const GroupedOperands& t, const std::vector<int64_t>& off,
                    Pass pass, bool per_group_ops) {
  if (!per_group_ops) {
    switch (pass) {
      case Pass::kFwd:
        return ops::GroupedLinear(e, t.x, t.w, off, t.y);
      case Pass::kDgrad:
        return ops::GroupedLinearBackwardData(e, t.dy, t.w, off, t.dx);
      case Pass::kWgrad:
        return ops::GroupedLinearBackwardWeight(e, t.dy, t.x, off, 1.0f, 1.0f, t.dw);
    }
  }
  const int64_t N = t.N;
  for (int64_t g = 0; g + 1 < static_cast<int64_t>(off.size()); ++g) {
    const int64_t r0 = off[g], r1 = off[g + 1];
    const Tensor wg = t.w.Slice(g * N, (g + 1) * N);
    switch (pass) {
      case Pass::kFwd:
        ops::Linear(e, t.x.Slice(r0, r1), wg, t.y.Slice(r0, r1));
        break;
      case Pass::kDgrad:
        ops::LinearBackwardData(e, t.dy.Slice(r0, r1), wg, t.dx.Slice(r0, r1));
        break;
      case Pass::kWgrad:
        ops::LinearBackwardWeight(e, t.dy.Slice(r0, r1), t.x.Slice(r0, r1),
                                  t.dw.Slice(g * N, (g + 1) * N), 1.0f);
        break;
    }
  }
}

// The operands for M rows, G experts of [N, K].
GroupedOperands MakeGroupedOperands(const Exec& e, int64_t M, int64_t G, int64_t N, int64_t K) {
  GroupedOperands t;
  t.N = N;
  t.x = bench::RandomBF16(e, {M, K}, 1);
  t.w = bench::RandomBF16(e, {G * N, K}, 2);
  t.dy = bench::RandomBF16(e, {M, N}, 3);
  t.y = e.Empty({M, N}, DType::kBF16);
  t.dx = e.Empty({M, K}, DType::kBF16);
  t.dw = e.Zeros({G * N, K}, DType::kF32);
  return t;
}

void BM_CudaGroupedLinear(benchmark::State& state, int64_t N, int64_t K,
                          std::vector<int64_t> rows, Pass pass, bool grouped) {
  GTP_CUDA_CHECK(cudaSetDevice(0));
  CudaCachingAllocator alloc(0);
  cuda::BlasContext ctx(0);
  ctx.set_grouped_batched(grouped);  // grouped: cuBLAS' grouped GEMM; loop: ops' default
  cudaStream_t stream;
  GTP_CUDA_CHECK(cudaStreamCreate(&stream));
  const Exec e{Device::Cuda(0), &alloc, stream, &ctx};
  const int64_t G = static_cast<int64_t>(rows.size());
  std::vector<int64_t> off = {0};
  for (int64_t r : rows) off.push_back(off.back() + r);
  const int64_t M = off.back();
  const GroupedOperands t = MakeGroupedOperands(e, M, G, N, K);
  bench::TimeCalls(state, stream, [&] { RunGroupedPass(e, t, off, pass, !grouped); });
  state.counters["TFLOP/s"] = benchmark::Counter(2.0 * M * N * K * 1e-12,
                                                 benchmark::Counter::kIsIterationInvariantRate);
  state.counters["grouped_calls"] = static_cast<double>(ctx.grouped_stats().batched_calls);
  cudaStreamDestroy(stream);
}

void RegisterGroupedLinear() {
  const std::vector<int64_t> balanced(8, 2048);
  const std::vector<int64_t> skewed = {4000, 2000, 1000, 500, 300, 200, 100, 92};
  for (auto [fc, N, K] : {std::make_tuple("fc1", int64_t{3072}, int64_t{768}),
                          std::make_tuple("fc2", int64_t{768}, int64_t{3072})}) {
    for (auto [split, rows] : {std::make_pair("balanced", balanced),
                               std::make_pair("skewed", skewed)}) {
      for (auto [pass_name, pass] : {std::make_pair("fwd", Pass::kFwd),
                                     std::make_pair("dgrad", Pass::kDgrad),
                                     std::make_pair("wgrad", Pass::kWgrad)}) {
        for (bool grouped : {true, false}) {
          const std::string name = std::string("BM_CudaGroupedLinear/") + fc + "/" + split + "/" +
                                   pass_name + (grouped ? "/grouped" : "/loop");
          benchmark::RegisterBenchmark(
              name.c_str(),
              [N = N, K = K, rows = rows, pass = pass, grouped](benchmark::State& s) {
                BM_CudaGroupedLinear(s, N, K, rows, pass, grouped);
              })
              ->UseManualTime()
              ->Unit(benchmark::kMillisecond);
        }
      }
    }
  }
}

// A mixture of experts' grouped linears as training meets them: the 8
// experts' row counts change on every call (16 384 rows split afresh each
// time, every expert 1 048..3 048 rows, from a fixed pseudo-random sequence),
// at the moeb bench shapes (fc1 768 → 1536, fc2 1536 → 768). Modes:
//   grouped   GroupedGemm → cublasGemmGroupedBatchedEx (the default)
//   bucketed  GroupedGemm's loop over cuBLASLt (set_grouped_batched(false)):
//             one heuristic query a 128-row bucket
//   exact     one cuda::Gemm a group: one heuristic query a new row count
// (wgrad, bf16 → f32, loops in grouped mode too: cuBLAS does not group it).
// GPU time per call between events, so host stalls on heuristic queries that
// leave the GPU idle count. Names: BM_CudaGroupedVarying/<fc>/<pass>/<mode>.
enum class GroupedMode { kGrouped, kBucketed, kExact };

void BM_CudaGroupedVarying(benchmark::State& state, int64_t N, int64_t K, Pass pass,
                           GroupedMode mode) {
  GTP_CUDA_CHECK(cudaSetDevice(0));
  CudaCachingAllocator alloc(0);
  cuda::BlasContext ctx(0);
  ctx.set_grouped_batched(mode == GroupedMode::kGrouped);
  cudaStream_t stream;
  GTP_CUDA_CHECK(cudaStreamCreate(&stream));
  const Exec e{Device::Cuda(0), &alloc, stream, &ctx};
  const int64_t G = 8, M = 16384;
  const GroupedOperands t = MakeGroupedOperands(e, M, G, N, K);
  uint64_t seed = 12345;
  auto next_split = [&] {  // G counts in 1048..3048 summing to M
    std::vector<int64_t> off = {0};
    int64_t left = M;
    for (int64_t g = 0; g < G - 1; ++g) {
      seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
      const int64_t lo = std::max<int64_t>(1048, left - 3048 * (G - 1 - g));
      const int64_t hi = std::min<int64_t>(3048, left - 1048 * (G - 1 - g));
      const int64_t r =
          lo + static_cast<int64_t>((seed >> 33) % static_cast<uint64_t>(hi - lo + 1));
      off.push_back(off.back() + r);
      left -= r;
    }
    off.push_back(M);
    return off;
  };
  auto run = [&] { RunGroupedPass(e, t, next_split(), pass, mode == GroupedMode::kExact); };
  bench::TimeCalls(state, stream, run);
  state.counters["TFLOP/s"] =
      benchmark::Counter(2.0 * M * N * K * 1e-12, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["heuristic_queries"] = static_cast<double>(ctx.algo_cache().queries);
  cudaStreamDestroy(stream);
}

void RegisterGroupedVarying() {
  for (auto [fc, N, K] : {std::make_tuple("fc1", int64_t{1536}, int64_t{768}),
                          std::make_tuple("fc2", int64_t{768}, int64_t{1536})}) {
    for (auto [pass_name, pass] :
         {std::make_pair("fwd", Pass::kFwd), std::make_pair("dgrad", Pass::kDgrad),
          std::make_pair("wgrad", Pass::kWgrad)}) {
      for (auto [mode_name, mode] : {std::make_pair("grouped", GroupedMode::kGrouped),
                                     std::make_pair("bucketed", GroupedMode::kBucketed),
                                     std::make_pair("exact", GroupedMode::kExact)}) {
        const std::string name =
            std::string("BM_CudaGroupedVarying/") + fc + "/" + pass_name + "/" + mode_name;
        benchmark::RegisterBenchmark(name.c_str(),
                                     [N = N, K = K, pass = pass, mode = mode](benchmark::State& s) {
                                       BM_CudaGroupedVarying(s, N, K, pass, mode);
                                     })
            ->UseManualTime()
            ->Unit(benchmark::kMillisecond);
      }
    }
  }
}

// A bias'd linear's weight and bias gradients on CUDA (bf16 dy [8192, out],
// x [8192, in], f32 dw and db, beta 1), four ways:
//   epilogue  ops::LinearBackwardWeightBGrad (cuBLASLt's BGRADB epilogue,
//             db written to scratch) + Axpby into db: the layers until
//             the fourteenth session
//   colsum    ops::LinearBackwardWeight + ops::ColumnSumAccumulate into db
//             (what layers/parallel_linear.cc runs now)
//   wgrad     ops::LinearBackwardWeight alone; sum  ColumnSumAccumulate alone
// Names: BM_CudaBiasGrad/<in>x<out>/<way>, ms per call.
void BM_CudaBiasGrad(benchmark::State& state, int64_t in, int64_t out, int way) {
  bench::CudaEnv env;
  const Exec& e = env.e;
  const int64_t N = 8192;
  const Tensor x = bench::RandomBF16(e, {N, in}, 1), dy = bench::RandomBF16(e, {N, out}, 2);
  const Tensor dw = e.Zeros({out, in}), db = e.Zeros({out}), part = e.Empty({out});
  bench::TimeCalls(state, env.stream, [&] {
    switch (way) {
      case 0:
        ops::LinearBackwardWeightBGrad(e, dy, x, dw, 1.0f, part);
        ops::Axpby(e, 1.0f, part, 1.0f, db);
        break;
      case 1:
        ops::LinearBackwardWeight(e, dy, x, dw, 1.0f);
        ops::ColumnSumAccumulate(e, dy, db);
        break;
      case 2:
        ops::LinearBackwardWeight(e, dy, x, dw, 1.0f);
        break;
      default:
        ops::ColumnSumAccumulate(e, dy, db);
    }
  });
  state.counters["dy_GB/s"] = benchmark::Counter(
      static_cast<double>(dy.nbytes()) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

void RegisterBiasGrad() {
  const char* ways[] = {"epilogue", "colsum", "wgrad", "sum"};
  for (auto [in, out] : {std::make_pair(int64_t{768}, int64_t{768}),
                         std::make_pair(int64_t{768}, int64_t{2304}),
                         std::make_pair(int64_t{768}, int64_t{3072}),
                         std::make_pair(int64_t{3072}, int64_t{768}),
                         std::make_pair(int64_t{2048}, int64_t{8192})}) {
    for (int way = 0; way < 4; ++way) {
      const std::string name = "BM_CudaBiasGrad/" + std::to_string(in) + "x" +
                               std::to_string(out) + "/" + ways[way];
      benchmark::RegisterBenchmark(name.c_str(),
                                   [in = in, out = out, way](benchmark::State& st) {
                                     BM_CudaBiasGrad(st, in, out, way);
                                   })
          ->UseManualTime()
          ->Unit(benchmark::kMillisecond);
    }
  }
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
    gtp::kernels::RegisterGroupedLinear();
    gtp::kernels::RegisterGroupedVarying();
    gtp::kernels::RegisterBiasGrad();
  }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
