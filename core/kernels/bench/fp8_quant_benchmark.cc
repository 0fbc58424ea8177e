// The FP8 quantisers alone (core/kernels/fp8/block_quant.h) at the tensors a
// GPT step quantises (N = 8192 tokens: B=8, T=1024), on the GPU (CUDA only;
// nothing registers without one), beside a device-to-device copy of the same
// input as the memory ceiling:
//
//   bazel run -c opt //core/kernels/bench:fp8_quant_benchmark
//   (GPU machine, bundled) ./bin/core_kernels_bench_fp8_quant_benchmark
//
// BM_Fp8Quant/<op>/<R>x<C>, x [R, C] bf16 (random, bench_util.h):
//   copy       cudaMemcpyAsync of x (reads and writes 2 bytes an element);
//   rows       QuantizeBlocks(x, 1×128): a forward input's codes;
//   rows_t     QuantizeRowsTransposed(x): the wgrad's xᵀ codes;
//   both       QuantizeRowsAndTransposed(x): a gradient dy's two codes;
//   both_sums  the same with its column sums into an f32 [C] (a bias grad);
//   tile_pair  QuantizeTilesAndTransposed(x): a weight's W and Wᵀ tiles;
//   gelu_both          QuantizeActRowsAndTransposed(kGelu, x): proj's input
//                      GELU(x) quantised as x is read (the fp8 MLP forward);
//   gelu_then_both     ops::GeluForward into bf16, then both: what it replaces;
//   dgelu_both_sums    QuantizeActRowsAndTransposed(kGeluGrad, dy, pre) with
//                      the column sums (fc's output gradient, the backward);
//   dgelu_then_both_sums  ops::GeluBackward into bf16, then both_sums.
// (The GELU ops' bytes: x (and pre) read, the codes written; the _then_
// forms' intermediate bf16 tensor not counted, so their GB/s compare as
// time.)
// Every quantiser writes the cuBLASLt copy of its scales, as the linears do.
// Counter GB/s: bytes read + written per call (x once, each code once; the
// scales, under 1 %, not counted) over the call's time.
#include <cuda_runtime_api.h>

#include <string>

#include "benchmark/benchmark.h"
#include "core/cuda_runtime.h"
#include "core/kernels/bench/bench_util.h"
#include "core/kernels/fp8/block_quant.h"
#include "core/kernels/fp8/lt_scale_layout.h"
#include "core/kernels/ops.h"
#include "core/tensor.h"

namespace gtp::kernels {
namespace {

enum class Op {
  kCopy,
  kRows,
  kRowsT,
  kBoth,
  kBothSums,
  kTilePair,
  kGeluBoth,
  kGeluThenBoth,
  kDGeluBothSums,
  kDGeluThenBothSums
};

// Codes, scales and their cuBLASLt copy for a [rows, K] operand.
struct Codes {
  Codes(const Exec& e, int64_t rows, int64_t K, fp8::Fp8Layout l)
      : q(e.Empty({rows, K}, DType::kF8E4M3)),
        scales(e.Empty(fp8::Fp8ScaleShape(rows, K, l))),
        lt(e.Empty({fp8::LtScaleCount(l == fp8::Fp8Layout::kTile128x128, rows, K)}, DType::kF32)) {}
  Tensor q, scales, lt;
};

void BM_Fp8Quant(benchmark::State& state, Op op, int64_t R, int64_t C) {
  bench::CudaEnv env;
  const Exec& e = env.e;
  const Tensor x = bench::RandomBF16(e, {R, C}, 1);
  const fp8::Fp8Layout row = fp8::Fp8Layout::kRow1x128, tile = fp8::Fp8Layout::kTile128x128;
  const fp8::Fp8Layout l = op == Op::kTilePair ? tile : row;
  Codes a(e, R, C, l), b(e, C, R, l);
  const Tensor copy = e.Empty({R, C}, DType::kBF16), sums = e.Zeros({C}, DType::kF32);
  const bool dgelu = op == Op::kDGeluBothSums || op == Op::kDGeluThenBothSums;
  const Tensor pre = dgelu ? bench::RandomBF16(e, {R, C}, 2) : Tensor();
  double bytes = (dgelu ? 4.0 : 2.0) * R * C;  // x (and pre) read
  switch (op) {
    case Op::kCopy:
      bytes += 2.0 * R * C;
      break;
    case Op::kRows:
    case Op::kRowsT:
      bytes += 1.0 * R * C;
      break;
    default:
      bytes += 2.0 * R * C;
      break;
  }
  bench::TimeCalls(state, env.stream, [&] {
    switch (op) {
      case Op::kCopy:
        GTP_CUDA_CHECK(cudaMemcpyAsync(copy.raw_data(), x.raw_data(), x.nbytes(),
                                       cudaMemcpyDeviceToDevice, env.stream));
        return;
      case Op::kRows:
        return fp8::QuantizeBlocks(e, x, row, a.q, a.scales, a.lt);
      case Op::kRowsT:
        return fp8::QuantizeRowsTransposed(e, x, b.q, b.scales, b.lt);
      case Op::kBoth:
        return fp8::QuantizeRowsAndTransposed(e, x, a.q, a.scales, b.q, b.scales, a.lt, b.lt);
      case Op::kBothSums:
        return fp8::QuantizeRowsAndTransposed(e, x, a.q, a.scales, b.q, b.scales, a.lt, b.lt, sums);
      case Op::kTilePair:
        return fp8::QuantizeTilesAndTransposed(e, x, a.q, a.scales, b.q, b.scales, a.lt, b.lt);
      case Op::kGeluBoth:
        return fp8::QuantizeActRowsAndTransposed(e, fp8::Fp8InputAct::kGelu, x, Tensor(), a.q,
                                                 a.scales, b.q, b.scales, a.lt, b.lt);
      case Op::kGeluThenBoth:
        ops::GeluForward(e, x, copy);
        return fp8::QuantizeRowsAndTransposed(e, copy, a.q, a.scales, b.q, b.scales, a.lt, b.lt);
      case Op::kDGeluBothSums:
        return fp8::QuantizeActRowsAndTransposed(e, fp8::Fp8InputAct::kGeluGrad, x, pre, a.q,
                                                 a.scales, b.q, b.scales, a.lt, b.lt, sums);
      case Op::kDGeluThenBothSums:
        ops::GeluBackward(e, x, pre, copy);
        return fp8::QuantizeRowsAndTransposed(e, copy, a.q, a.scales, b.q, b.scales, a.lt, b.lt,
                                              sums);
    }
  });
  state.counters["GB/s"] =
      benchmark::Counter(bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

void Register() {
  const std::pair<const char*, Op> ops[] = {{"copy", Op::kCopy},
                                            {"rows", Op::kRows},
                                            {"rows_t", Op::kRowsT},
                                            {"both", Op::kBoth},
                                            {"both_sums", Op::kBothSums},
                                            {"tile_pair", Op::kTilePair},
                                            {"gelu_both", Op::kGeluBoth},
                                            {"gelu_then_both", Op::kGeluThenBoth},
                                            {"dgelu_both_sums", Op::kDGeluBothSums},
                                            {"dgelu_then_both_sums", Op::kDGeluThenBothSums}};
  // Activations and gradients [8192, C] of the 124M/350M/1.3B linears; the
  // weights [out, in] for tile_pair.
  const std::pair<int64_t, int64_t> act[] = {{8192, 768}, {8192, 2048}, {8192, 3072}, {8192, 8192}};
  const std::pair<int64_t, int64_t> weights[] = {
      {768, 768}, {3072, 768}, {2048, 2048}, {8192, 2048}};
  for (const auto& [name, op] : ops) {
    for (const auto& [R, C] : op == Op::kTilePair ? weights : act) {
      const std::string bm =
          std::string("BM_Fp8Quant/") + name + "/" + std::to_string(R) + "x" + std::to_string(C);
      benchmark::RegisterBenchmark(
          bm.c_str(), [op = op, R = R, C = C](benchmark::State& st) { BM_Fp8Quant(st, op, R, C); })
          ->UseManualTime()
          ->MinTime(0.05)
          ->Unit(benchmark::kMicrosecond);
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
