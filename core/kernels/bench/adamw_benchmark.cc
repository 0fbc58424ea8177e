// The multi-tensor AdamW of the optimizer (cuda::AdamWMulti) at GPT-2 124M's
// and 350M's parameter counts, with the bf16 weight copy the bf16 recipes
// keep (CUDA only):
//   bazel run -c opt //core/kernels/bench:adamw_benchmark
// One segment per parameter tensor of a GPT-2 layout (wte, wpe, per layer
// 12·C² + 13·C weights in 12 tensors, the final norm), so the chunks and
// alignment are the optimizer's. The time column is ms per call; the
// `bytes` counter is the rate of the 30 bytes an element must move (g, m, v, p
// read; m, v, p and the bf16 copy written), printed as e.g. 3.5T/s (TB/s),
// against the H200's ~4.8 TB/s. Registers only when a GPU is visible.
#include <cstdint>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "core/kernels/bench/bench_util.h"
#include "core/cuda_runtime.h"
#include "core/kernels/cuda.h"
#include "core/kernels/ops.h"

namespace gtp::kernels::bench {
namespace {

struct Model {
  const char* name;
  int64_t layers, C, vocab, seq;
};

// The parameter tensors' sizes, GPT-2 style (the embeddings tied with the head).
std::vector<int64_t> TensorSizes(const Model& m) {
  std::vector<int64_t> n = {m.vocab * m.C, m.seq * m.C};
  const int64_t C = m.C;
  for (int64_t l = 0; l < m.layers; ++l) {
    for (int64_t s : {C, C, 3 * C * C, 3 * C, C * C, C, C, C, 4 * C * C, 4 * C, 4 * C * C, C}) {
      n.push_back(s);
    }
  }
  n.push_back(C);
  n.push_back(C);
  return n;
}

void BM_AdamWMulti(benchmark::State& state, Model m) {
  CudaEnv env;
  const std::vector<int64_t> sizes = TensorSizes(m);
  int64_t total = 0;
  for (int64_t s : sizes) total += (s + 3) / 4 * 4;  // each tensor 16-byte aligned
  Tensor p = env.e.Empty({total}), g = env.e.Empty({total}), mo = env.e.Zeros({total}),
         v = env.e.Zeros({total});
  Tensor pb = env.e.Empty({total}, DType::kBF16);
  ops::Fill(env.e, p, 0.02f);
  ops::Fill(env.e, g, 1e-3f);
  std::vector<AdamWSegment> segs;
  int64_t off = 0;
  for (int64_t s : sizes) {
    AdamWSegment seg;
    seg.p = p.data<float>() + off;
    seg.p_bf16 = pb.data<bf16>() + off;
    seg.g = g.data<float>() + off;
    seg.m = mo.data<float>() + off;
    seg.v = v.data<float>() + off;
    seg.n = s;
    seg.weight_decay = 0.1f;
    segs.push_back(seg);
    off += (s + 3) / 4 * 4;
  }
  const std::vector<cuda::AdamWChunk> chunks =
      cuda::AdamWChunks(segs.data(), static_cast<int>(segs.size()));
  Tensor dsegs =
      env.e.Empty({static_cast<int64_t>(segs.size() * sizeof(AdamWSegment))}, DType::kU8);
  Tensor dchunks =
      env.e.Empty({static_cast<int64_t>(chunks.size() * sizeof(cuda::AdamWChunk))}, DType::kU8);
  GTP_CUDA_CHECK(cudaMemcpy(dsegs.raw_data(), segs.data(), segs.size() * sizeof(AdamWSegment),
                            cudaMemcpyHostToDevice));
  GTP_CUDA_CHECK(cudaMemcpy(dchunks.raw_data(), chunks.data(),
                            chunks.size() * sizeof(cuda::AdamWChunk), cudaMemcpyHostToDevice));
  AdamWParams hp;
  hp.lr = 6e-4f;
  hp.weight_decay = 0.1f;
  hp.step = 10;
  TimeCalls(state, env.stream, [&] {
    cuda::AdamWMulti(static_cast<const AdamWSegment*>(dsegs.raw_data()),
                     static_cast<const cuda::AdamWChunk*>(dchunks.raw_data()),
                     static_cast<int>(chunks.size()), hp, env.stream);
  });
  int64_t elems = 0;
  for (int64_t s : sizes) elems += s;
  state.counters["params_M"] = static_cast<double>(elems) / 1e6;
  state.counters["bytes"] = benchmark::Counter(static_cast<double>(elems) * 30.0,
                                               benchmark::Counter::kIsIterationInvariantRate);
}

void RegisterAll() {
  for (const Model& m : {Model{"gpt2_124m", 12, 768, 50304, 1024},
                         Model{"gpt2_350m", 24, 1024, 50304, 1024}}) {
    benchmark::RegisterBenchmark((std::string("BM_CudaAdamWMulti/") + m.name).c_str(),
                                 [m](benchmark::State& st) { BM_AdamWMulti(st, m); })
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond);
  }
}

}  // namespace
}  // namespace gtp::kernels::bench

int main(int argc, char** argv) {
  if (gtp::CudaDeviceCount() > 0) gtp::kernels::bench::RegisterAll();
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
