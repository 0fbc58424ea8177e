// A linear layer's three GEMMs in bf16 against block-scaled FP8, at the
// linears of GPT-2 124M, 350M and 1.3B (N = 8192 tokens: B=8, T=1024), on
// the GPU (CUDA only; nothing registers without one):
//
//   bazel run -c opt //core/kernels/bench:fp8_linear_benchmark
//   (GPU machine, bundled) ./bin/core_kernels_bench_fp8_linear_benchmark
//
// For each shape (in → out) and pass (fwd y = x·Wᵀ, dgrad dx = dy·W, wgrad
// dW += dyᵀ·x into f32), three implementations on the same bf16 tensors:
//   bf16      ops::Linear / LinearBackwardData / LinearBackwardWeight (what
//             train.precision=bf16 runs, without its epilogues);
//   fp8       fp8::Fp8Linear* from the bf16 tensors: quantisation + GEMM,
//             what a linear pays today under train.precision=fp8 when
//             nothing is shared;
//   fp8_gemm  fp8::BlockScaledGemm alone on operands quantised beforehand:
//             the GEMM's own speed, the floor quantisation fusion could reach.
//   fp8_wgmma the same operands through our own kernel
//             (Fp8GemmEngine::kWgmma, core/kernels/fp8/wgmma_gemm.cu), its
//             default plan (WgmmaGemmPlan: 192-row tiles, or 128-row tiles
//             in a 2 × 1 cluster, b's stage tiles multicast to a pair of
//             CTAs; y prefetched into L2 where beta ≠ 0). The rows below
//             set every flag of their plan, prefetch_y off but in _pf;
//   fp8_wgmma_1x1, _1x2, _2x2  128-row tiles with another cluster shape
//             (cuda::WgmmaPlan; none, a's tiles shared, both);
//   fp8_wgmma_pp, _1x1_pp  the default plan, and no cluster, with the
//             consumer warpgroups taking turns (WgmmaPlan::ping_pong);
//   fp8_wgmma_bulk  the default plan with the epilogue's rows stored by
//             bulk copies (WgmmaPlan::bulk_store);
//   fp8_wgmma_m192, _m192_bulk, _m192_1x2  192-row tiles (WgmmaPlan::tile_m:
//             three consumer warpgroups) without a cluster, the same with
//             bulk stores, and in a 1 × 2 cluster (a's tiles shared);
//   fp8_wgmma_m128  the default plan with 128-row tiles (the 128-row
//             plan's pair, when the default took 192 rows): the default
//             before session 27; fp8_wgmma_m128_ov the same with each
//             consumer's next block issued before this one's promotion
//             (WgmmaPlan::overlap);
//   fp8_wgmma_pf  the default plan with each tile's old y asked into L2
//             before its epilogue (WgmmaPlan::prefetch_y; the wgrad, beta 1):
//             since session 28 the default itself, so the same kernel.
// Names: BM_Fp8Linear/<model>_<in>x<out>/<pass>/<impl>; time = ms per call,
// TFLOP/s = 2·N·in·out per call.
//
// BM_Fp8GemmAlgo/<model>_<in>x<out>/<pass>/algo<k>: the block-scaled GEMM
// alone with the k-th algorithm cuBLASLt's heuristic offers
// (fp8::BlockScaledGemmPlan; BlockScaledGemm runs algo0), labelled with the
// algorithm's attributes (tile, stages, split-K): which one a shape should
// run. --benchmark_filter=Fp8GemmAlgo for these alone.
//
// BM_Fp8EpilogueProbe/<model>_<in>x<out>/{gelu_aux_bias,dgelu}: how many
// algorithms cuBLASLt offers for the forward GEMM with a fused bias + GELU
// (and its input kept), or the dgrad with the GELU's derivative applied —
// whether fp8 can fuse GELU as the bf16 linears do (counter `algos`).
#include <string>
#include <tuple>
#include <vector>

#include "benchmark/benchmark.h"
#include "core/allocator.h"
#include "core/cuda_runtime.h"
#include "core/kernels/bench/bench_util.h"
#include "core/kernels/cuda.h"
#include "core/kernels/fp8/block_gemm.h"
#include "core/kernels/fp8/linear.h"
#include "core/kernels/fp8/wgmma_gemm_cuda.h"
#include "core/kernels/ops.h"
#include "core/tensor.h"

namespace gtp::kernels {
namespace {

constexpr int64_t kTokens = 8192;

enum class Pass { kFwd, kDgrad, kWgrad };
enum class Impl {
  kBf16,
  kFp8,
  kFp8Gemm,
  kFp8Wgmma,
  kWgmma1x1,
  kWgmma1x2,
  kWgmma2x2,
  kWgmmaPingPong,
  kWgmma1x1PingPong,
  kWgmmaBulk,
  kWgmmaTall,
  kWgmmaTallBulk,
  kWgmmaTall1x2,
  kWgmmaShort,
  kWgmmaOverlap,
  kWgmmaPrefetch
};

// One linear's tensors on the GPU (N = kTokens rows, random bf16) and, for
// a pass, its block-scaled GEMM's operands quantised once (x and dy through
// the linear's own shared-input quantisation, which keeps them) and output:
// forward y [N, out] bf16, dgrad dx [N, in] bf16, wgrad dW [out, in] f32
// accumulated into (beta 1).
struct LinearBench : bench::CudaEnv {
  LinearBench(int64_t in, int64_t out)
      : in(in),
        out(out),
        x(bench::RandomBF16(e, {kTokens, in}, 1)),
        w(bench::RandomBF16(e, {out, in}, 2)),
        dy(bench::RandomBF16(e, {kTokens, out}, 3)) {}

  struct Gemm {
    fp8::Fp8Matrix a, b;
    Tensor y;
    float beta = 0.0f;
  };
  Gemm Quantized(Pass pass) {
    Gemm g;
    switch (pass) {
      case Pass::kFwd:
        g = {xq.Rows(x), fp8::QuantizeWeight(e, w), e.Empty({kTokens, out}, DType::kBF16)};
        break;
      case Pass::kDgrad:
        g = {dyq.Rows(dy), fp8::QuantizeWeightPair(e, w).wt, e.Empty({kTokens, in}, DType::kBF16)};
        break;
      case Pass::kWgrad:
        g = {dyq.Transposed(dy), xq.Transposed(x), e.Zeros({out, in}, DType::kF32), 1.0f};
        break;
    }
    return g;
  }
  // 2·N·in·out per call.
  benchmark::Counter Tflops() const {
    return benchmark::Counter(2.0 * kTokens * in * out * 1e-12,
                              benchmark::Counter::kIsIterationInvariantRate);
  }

  int64_t in, out;
  Tensor x, w, dy;
  fp8::Fp8SharedInput xq{e}, dyq{e};
};

void BM_Fp8Linear(benchmark::State& state, int64_t in, int64_t out, Pass pass, Impl impl) {
  LinearBench lb(in, out);
  const Exec& e = lb.e;
  const Tensor &x = lb.x, &w = lb.w, &dy = lb.dy;
  const Tensor y = e.Empty({kTokens, out}, DType::kBF16), dx = e.Empty({kTokens, in}, DType::kBF16),
               dw = e.Zeros({out, in}, DType::kF32);
  LinearBench::Gemm g;
  if (impl != Impl::kBf16 && impl != Impl::kFp8) g = lb.Quantized(pass);  // not timed
  // The wgmma kernel with the default plan's splits and another cluster shape.
  fp8::cuda::WgmmaPlan plan;
  Tensor partial;
  // Every fp8_wgmma_* row but the default: a plan of its own.
  const bool raw = impl != Impl::kBf16 && impl != Impl::kFp8 && impl != Impl::kFp8Gemm &&
                   impl != Impl::kFp8Wgmma;
  if (raw) {
    const int64_t M = g.a.q.dim(0), N = g.b.q.dim(0), K = g.a.q.dim(1);
    plan = fp8::cuda::WgmmaGemmPlan(M, N, K);
    const bool tall =
        impl == Impl::kWgmmaTall || impl == Impl::kWgmmaTallBulk || impl == Impl::kWgmmaTall1x2;
    if (tall) {
      plan.tile_m = 192;
      plan.cluster_m = 1;
      plan.cluster_n = impl == Impl::kWgmmaTall1x2 ? 2 : 1;
    } else if (impl == Impl::kWgmmaShort || impl == Impl::kWgmmaOverlap) {
      if (plan.tile_m == 192) {  // the 128-row plan's pair; the splits stay 1
        plan.cluster_m = M % 256 == 0 ? 2 : 1;
        plan.cluster_n = plan.cluster_m == 1 && N % 256 == 0 ? 2 : 1;
      }
      plan.tile_m = 128;
      plan.overlap = impl == Impl::kWgmmaOverlap;
    } else if (impl != Impl::kWgmmaPingPong && impl != Impl::kWgmmaBulk &&
               impl != Impl::kWgmmaPrefetch) {  // the cluster rows
      plan.tile_m = 128;
      plan.cluster_m = impl == Impl::kWgmma2x2 ? 2 : 1;
      plan.cluster_n = impl == Impl::kWgmma1x2 || impl == Impl::kWgmma2x2 ? 2 : 1;
    }
    plan.ping_pong = impl == Impl::kWgmmaPingPong || impl == Impl::kWgmma1x1PingPong;
    plan.bulk_store = impl == Impl::kWgmmaBulk || impl == Impl::kWgmmaTallBulk;
    plan.prefetch_y = impl == Impl::kWgmmaPrefetch;
    if (plan.splits > 1) partial = e.Empty({plan.splits, M, N});
  }
  auto run_plan = [&] {
    const int64_t M = g.a.q.dim(0), N = g.b.q.dim(0), K = g.a.q.dim(1);
    fp8::cuda::WgmmaBlockScaledGemm(
        static_cast<const uint8_t*>(g.a.q.raw_data()), g.a.scales.data<float>(),
        g.a.layout == fp8::Fp8Layout::kTile128x128, static_cast<const uint8_t*>(g.b.q.raw_data()),
        g.b.scales.data<float>(), g.b.layout == fp8::Fp8Layout::kTile128x128, M, N, K,
        g.y.raw_data(), g.y.dtype() == DType::kBF16, g.beta, nullptr, plan,
        plan.splits > 1 ? partial.data<float>() : nullptr, lb.stream);
  };
  auto run = [&] {
    switch (impl) {
      case Impl::kBf16:
        if (pass == Pass::kFwd) return ops::Linear(e, x, w, y);
        if (pass == Pass::kDgrad) return ops::LinearBackwardData(e, dy, w, dx);
        return ops::LinearBackwardWeight(e, dy, x, dw, 1.0f);
      case Impl::kFp8:
        if (pass == Pass::kFwd) return fp8::Fp8Linear(e, x, w, y);
        if (pass == Pass::kDgrad) return fp8::Fp8LinearBackwardData(e, dy, w, dx);
        return fp8::Fp8LinearBackwardWeight(e, dy, x, dw, 1.0f);
      case Impl::kFp8Gemm:
        return fp8::BlockScaledGemm(e, g.a, g.b, g.y, g.beta);
      case Impl::kFp8Wgmma:
        return fp8::BlockScaledGemm(e, g.a, g.b, g.y, g.beta, Tensor(), fp8::Fp8GemmEngine::kWgmma);
      case Impl::kWgmma1x1:
      case Impl::kWgmma1x2:
      case Impl::kWgmma2x2:
      case Impl::kWgmmaPingPong:
      case Impl::kWgmma1x1PingPong:
      case Impl::kWgmmaBulk:
      case Impl::kWgmmaTall:
      case Impl::kWgmmaTallBulk:
      case Impl::kWgmmaTall1x2:
      case Impl::kWgmmaShort:
      case Impl::kWgmmaOverlap:
      case Impl::kWgmmaPrefetch:
        return run_plan();
    }
  };
  bench::TimeCalls(state, lb.stream, run);
  state.counters["TFLOP/s"] = lb.Tflops();
  if (impl == Impl::kFp8Wgmma)
    plan = fp8::cuda::WgmmaGemmPlan(g.a.q.dim(0), g.b.q.dim(0), g.a.q.dim(1));
  if (impl != Impl::kBf16 && impl != Impl::kFp8 && impl != Impl::kFp8Gemm) {
    state.counters["clusters"] =
        fp8::cuda::WgmmaMaxClusters(plan.cluster_m, plan.cluster_n, plan.tile_m);
    state.counters["splits"] = plan.splits;
    state.counters["rows"] = plan.tile_m;
  }
}

constexpr int kMaxAlgos = 8;

void BM_Fp8GemmAlgo(benchmark::State& state, int64_t in, int64_t out, Pass pass, int k) {
  LinearBench lb(in, out);
  const LinearBench::Gemm g = lb.Quantized(pass);
  const fp8::BlockScaledGemmPlan plan(lb.e, g.a, g.b, g.y, kMaxAlgos);
  if (k >= plan.num_algos()) {
    state.SkipWithError(
        ("cuBLASLt offers " + std::to_string(plan.num_algos()) + " algorithms").c_str());
    return;
  }
  state.SetLabel(plan.Describe(k));
  bench::TimeCalls(state, lb.stream, [&] { plan.Run(lb.e, k, g.a, g.b, g.y, g.beta); });
  state.counters["TFLOP/s"] = lb.Tflops();
}

// Whether cuBLASLt fuses GELU into the block-scaled GEMM as bf16's linears
// do (fp8::BlockScaledEpilogueAlgos): the forward with GELU_AUX_BIAS, the
// dgrad with DGELU; counter `algos` (0: none); nothing is timed.
void BM_Fp8EpilogueProbe(benchmark::State& state, int64_t in, int64_t out,
                         fp8::Fp8ProbeEpilogue epi) {
  LinearBench lb(in, out);
  const bool gelu = epi == fp8::Fp8ProbeEpilogue::kGeluAuxBias;
  const LinearBench::Gemm g = lb.Quantized(gelu ? Pass::kFwd : Pass::kDgrad);
  const Tensor aux = lb.e.Empty(g.y.shape(), DType::kBF16);
  const Tensor bias = gelu ? lb.e.Zeros({g.y.dim(1)}, DType::kBF16) : Tensor();
  const int n = fp8::BlockScaledEpilogueAlgos(lb.e, g.a, g.b, g.y, epi, aux, bias);
  for (auto _ : state) state.SetIterationTime(1e-9);
  state.counters["algos"] = n;
}

void Register() {
  struct Shape2 {
    const char* model;
    int64_t in, out;
  };
  const Shape2 shapes[] = {
      {"124m", 768, 768},   {"124m", 768, 3072},  {"124m", 3072, 768},
      {"350m", 1024, 1024}, {"350m", 1024, 4096}, {"350m", 4096, 1024},
      {"1p3b", 2048, 2048}, {"1p3b", 2048, 8192}, {"1p3b", 8192, 2048},
  };
  for (const Shape2& s : shapes) {
    for (auto [epi_name, epi] :
         {std::make_pair("gelu_aux_bias", fp8::Fp8ProbeEpilogue::kGeluAuxBias),
          std::make_pair("dgelu", fp8::Fp8ProbeEpilogue::kDGelu)}) {
      const std::string name = std::string("BM_Fp8EpilogueProbe/") + s.model + "_" +
                               std::to_string(s.in) + "x" + std::to_string(s.out) + "/" + epi_name;
      benchmark::RegisterBenchmark(name.c_str(),
                                   [in = s.in, out = s.out, epi = epi](benchmark::State& st) {
                                     BM_Fp8EpilogueProbe(st, in, out, epi);
                                   })
          ->UseManualTime()
          ->Iterations(1);
    }
    for (auto [pass_name, pass] :
         {std::make_pair("fwd", Pass::kFwd), std::make_pair("dgrad", Pass::kDgrad),
          std::make_pair("wgrad", Pass::kWgrad)}) {
      for (auto [impl_name, impl] :
           {std::make_pair("bf16", Impl::kBf16), std::make_pair("fp8", Impl::kFp8),
            std::make_pair("fp8_gemm", Impl::kFp8Gemm),
            std::make_pair("fp8_wgmma", Impl::kFp8Wgmma),
            std::make_pair("fp8_wgmma_1x1", Impl::kWgmma1x1),
            std::make_pair("fp8_wgmma_1x2", Impl::kWgmma1x2),
            std::make_pair("fp8_wgmma_2x2", Impl::kWgmma2x2),
            std::make_pair("fp8_wgmma_pp", Impl::kWgmmaPingPong),
            std::make_pair("fp8_wgmma_1x1_pp", Impl::kWgmma1x1PingPong),
            std::make_pair("fp8_wgmma_bulk", Impl::kWgmmaBulk),
            std::make_pair("fp8_wgmma_m192", Impl::kWgmmaTall),
            std::make_pair("fp8_wgmma_m192_bulk", Impl::kWgmmaTallBulk),
            std::make_pair("fp8_wgmma_m192_1x2", Impl::kWgmmaTall1x2),
            std::make_pair("fp8_wgmma_m128", Impl::kWgmmaShort),
            std::make_pair("fp8_wgmma_m128_ov", Impl::kWgmmaOverlap),
            std::make_pair("fp8_wgmma_pf", Impl::kWgmmaPrefetch)}) {
        const std::string name = std::string("BM_Fp8Linear/") + s.model + "_" +
                                 std::to_string(s.in) + "x" + std::to_string(s.out) + "/" +
                                 pass_name + "/" + impl_name;
        benchmark::RegisterBenchmark(
            name.c_str(), [in = s.in, out = s.out, pass = pass, impl = impl](
                              benchmark::State& st) { BM_Fp8Linear(st, in, out, pass, impl); })
            ->UseManualTime()
            ->MinTime(0.05)
            ->Unit(benchmark::kMillisecond);
      }
      for (int k = 0; k < kMaxAlgos; ++k) {
        const std::string name = std::string("BM_Fp8GemmAlgo/") + s.model + "_" +
                                 std::to_string(s.in) + "x" + std::to_string(s.out) + "/" +
                                 pass_name + "/algo" + std::to_string(k);
        benchmark::RegisterBenchmark(
            name.c_str(), [in = s.in, out = s.out, pass = pass,
                           k](benchmark::State& st) { BM_Fp8GemmAlgo(st, in, out, pass, k); })
            ->UseManualTime()
            ->MinTime(0.02)
            ->Unit(benchmark::kMillisecond);
      }
    }
  }
}

}  // namespace
}  // namespace gtp::kernels

int main(int argc, char** argv) {
  if (gtp::CudaDeviceCount() > 0) gtp::kernels::Register();
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  return 0;
}
