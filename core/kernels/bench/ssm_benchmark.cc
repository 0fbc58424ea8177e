// The Mamba-2 mixer's SSM ops on the CUDA exec (core/kernels/ssm), forward
// and backward, one benchmark per op and pass, so that a layer's time can be
// split by op:
//   bazel run -c opt //core/kernels/bench:ssm_benchmark
//   bazel run -c opt //core/kernels/bench:ssm_benchmark -- --benchmark_filter=Scan
// Shapes: batch 8 × 1024 tokens (B·T = 8192 rows), d_inner 1536.
//   Scan/<shape>/<fwd|bwd>/<chunked|recurrence|chunked32|chunked16|heads|heads32|heads16>:
//     ssm::SsdScanForward / SsdScanBackward with that SsdCudaKernel (chunked32/16: chunk 32/16;
//     heads: kChunkedHeads, heads32/16 with chunk 32/16; mma: kChunkedMma;
//     mma_bf16: kChunkedMmaBf16; mma32, mma32_bf16: the two with 32-step chunks),
//     f32, chunk 128, shapes "h96p16n16" (our hybrid GPT: H = 96, P = 16, N = 16, G = 1),
//     "h24p64n128" and "h24p64n64" (Mamba-2's usual head dim and states, G = 1).
//   ScanAuto/h96p16n16_t<T>/<fwd|bwd>: the default kernels (kAuto) at T = 1024,
//     4096, 8192 (B = 8): the side-by-side with tools/bench/torch_ssd.py;
//     ScanMma/…, ScanMmaBf16/…: the same with kChunkedMma, kChunkedMmaBf16.
//   Conv1d/<fwd|bwd|bwd_bf16dx>: CausalConv1d on [8, 1024, 1536], K = 4, SiLU (bwd_bf16dx:
//     dx in bf16, as the bf16 hybrid's mixer writes it).
//   GatedRmsNorm/<fwd|bwd>: [8192, 1536], one group of 1536 (ngroups = 1).
//   SoftplusBias/<fwd|bwd>: dt [8192, 96].
// Timed with CUDA events around `reps` back-to-back calls on one stream
// (after warm-up calls, which also fill the caching allocator that the ops'
// scratch comes from); the time column is ms per call. GB/s counts the
// bytes each call must move at least (inputs read once, outputs written
// once), so it says how far from memory-bound an op is. Registers only when a
// GPU is visible.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "core/allocator.h"
#include "core/cuda_runtime.h"
#include "core/kernels/bench/bench_util.h"
#include "core/kernels/ops.h"
#include "core/kernels/ssm/mamba_ops.h"
#include "core/kernels/ssm/ssd_scan.h"
#include "core/tensor.h"

namespace gtp::kernels {
namespace {

constexpr int64_t kB = 8, kT = 1024, kDInner = 1536, kChunk = 128;

// A cheap LCG (tensors of tens of millions of elements, made per run):
// uniform in [lo, hi).
Tensor Uniform(const Exec& e, const Shape& s, uint64_t seed, float lo, float hi) {
  Tensor t = e.Empty(s);
  std::vector<float> host(t.numel());
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (float& v : host) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    v = lo + (hi - lo) * (static_cast<float>(x >> 40) / static_cast<float>(1 << 24));
  }
  GTP_CUDA_CHECK(cudaMemcpy(t.raw_data(), host.data(), t.nbytes(), cudaMemcpyHostToDevice));
  return t;
}

// ms per call of `run` into state (bench::TimeCalls); `bytes` per call for
// the GB/s counter.
void TimeCalls(benchmark::State& state, cudaStream_t stream, const std::function<void()>& run,
               double bytes) {
  bench::TimeCalls(state, stream, run);
  state.counters["GB/s"] =
      benchmark::Counter(bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

// One stream, a caching allocator and the exec over them, per benchmark.
struct CudaEnv {
  CudaEnv() : alloc(0) {
    GTP_CUDA_CHECK(cudaSetDevice(0));
    GTP_CUDA_CHECK(cudaStreamCreate(&stream));
    e = Exec{Device::Cuda(0), &alloc, stream, nullptr, nullptr};
  }
  ~CudaEnv() {
    cudaStreamSynchronize(stream);
    cudaStreamDestroy(stream);
  }
  CudaCachingAllocator alloc;
  cudaStream_t stream = nullptr;
  Exec e;
};

struct ScanShape {
  const char* name;
  int64_t H, P, N, G;
  int64_t T = kT;
};

void BM_Scan(benchmark::State& state, ScanShape s, bool backward, ssm::SsdCudaKernel kernel,
             int64_t chunk) {
  CudaEnv env;
  const Exec& e = env.e;
  {
    const Shape xs{kB, s.T, s.H, s.P}, ts{kB, s.T, s.H}, hs{s.H}, bs{kB, s.T, s.G, s.N};
    // dt in the range softplus(dt_bias) starts at (Mamba-2: [0.001, 0.1]);
    // A = −exp(A_log) with A_log in [0, log 16].
    const Tensor x = Uniform(e, xs, 1, -1, 1), dt = Uniform(e, ts, 2, 0.001f, 0.1f),
                 A = Uniform(e, hs, 3, -16, -1), Bm = Uniform(e, bs, 4, -1, 1),
                 Cm = Uniform(e, bs, 5, -1, 1), D = Uniform(e, hs, 6, -1, 1),
                 dy = Uniform(e, xs, 7, -1, 1);
    const Tensor y = e.Empty(xs), dx = e.Empty(xs), ddt = e.Empty(ts), dBm = e.Empty(bs),
                 dCm = e.Empty(bs), dA = e.Zeros(hs), dD = e.Zeros(hs);
    const double xb = 4.0 * x.numel(), tb = 4.0 * dt.numel(), bb = 4.0 * Bm.numel();
    if (!backward) {
      TimeCalls(
          state, env.stream, [&] { ssm::SsdScanForward(e, x, dt, A, Bm, Cm, D, y, chunk, kernel); },
          2 * xb + tb + 2 * bb);
    } else {
      TimeCalls(
          state, env.stream,
          [&] {
            ssm::SsdScanBackward(e, dy, x, dt, A, Bm, Cm, D, dx, ddt, dA, dBm, dCm, dD, chunk,
                                 kernel);
          },
          3 * xb + 2 * tb + 4 * bb);
    }
    // State-update FLOPs: 2 per (b, t, h, p, n) for the recurrence and 2 for
    // each product with C or B (forward 4, backward about 10).
    state.counters["GFLOP/s"] =
        benchmark::Counter((backward ? 10.0 : 4.0) * kB * s.T * s.H * s.P * s.N * 1e-9,
                           benchmark::Counter::kIsIterationInvariantRate);
  }
}

// backward: dx f32, or bf16 as the bf16 hybrid writes in_proj_x's gradient
// input (bf16_dx; its bytes counted as such).
void BM_Conv1d(benchmark::State& state, bool backward, bool bf16_dx = false) {
  CudaEnv env;
  const Exec& e = env.e;
  {
    const int64_t K = 4;
    const Shape xs{kB, kT, kDInner};
    const Tensor x = Uniform(e, xs, 1, -1, 1), w = Uniform(e, {kDInner, K}, 2, -0.5f, 0.5f),
                 bias = Uniform(e, {kDInner}, 3, -0.1f, 0.1f), dy = Uniform(e, xs, 4, -1, 1);
    const Tensor y = e.Empty(xs), dx = e.Empty(xs, bf16_dx ? DType::kBF16 : DType::kF32),
                 dw = e.Zeros({kDInner, K}), db = e.Zeros({kDInner});
    const double xb = 4.0 * x.numel();
    if (!backward) {
      TimeCalls(
          state, env.stream, [&] { ssm::CausalConv1dForward(e, x, w, bias, y, true); }, 2 * xb);
    } else {
      TimeCalls(
          state, env.stream,
          [&] { ssm::CausalConv1dBackward(e, dy, x, w, bias, true, dx, dw, db); },
          (bf16_dx ? 2.5 : 3.0) * xb);
    }
  }
}

// backward: the backward (dy f32, or bf16 as the bf16 hybrid's out_proj
// gives it: bf16_dy), else the forward; the bytes counted as f32 throughout.
void BM_GatedRmsNorm(benchmark::State& state, bool backward, bool bf16_dy = false) {
  CudaEnv env;
  const Exec& e = env.e;
  {
    const int64_t rows = kB * kT, group = kDInner;
    const Shape xs{rows, kDInner}, rs{rows, kDInner / group};
    const Tensor x = Uniform(e, xs, 1, -1, 1), z = Uniform(e, xs, 2, -1, 1),
                 w = Uniform(e, {kDInner}, 3, 0.5f, 1.5f), dy = Uniform(e, xs, 4, -1, 1);
    const Tensor y = e.Empty(xs), rstd = e.Empty(rs), dx = e.Empty(xs), dz = e.Empty(xs),
                 dw = e.Zeros({kDInner});
    ssm::GatedRmsNormForward(e, x, z, w, y, rstd, group, 1e-5f);  // rstd for the backward
    const double xb = 4.0 * x.numel();
    if (!backward) {
      TimeCalls(
          state, env.stream, [&] { ssm::GatedRmsNormForward(e, x, z, w, y, rstd, group, 1e-5f); },
          3 * xb);
    } else {
      Tensor dyin = dy;
      if (bf16_dy) {
        dyin = e.Empty(xs, DType::kBF16);
        ops::Cast(e, dy, dyin);
      }
      TimeCalls(
          state, env.stream,
          [&] { ssm::GatedRmsNormBackward(e, dyin, x, z, w, rstd, group, dx, dz, dw); }, 5 * xb);
    }
  }
}

void BM_SoftplusBias(benchmark::State& state, bool backward) {
  CudaEnv env;
  const Exec& e = env.e;
  {
    const int64_t rows = kB * kT, H = 96;
    const Shape rs{rows, H};
    const Tensor raw = Uniform(e, rs, 1, -4, 4), bias = Uniform(e, {H}, 2, -5, -2),
                 ddt = Uniform(e, rs, 3, -1, 1);
    const Tensor dt = e.Empty(rs), draw = e.Empty(rs), db = e.Zeros({H});
    const double rb = 4.0 * raw.numel();
    if (!backward) {
      TimeCalls(
          state, env.stream, [&] { ssm::SoftplusBiasForward(e, raw, bias, dt); }, 2 * rb);
    } else {
      TimeCalls(
          state, env.stream, [&] { ssm::SoftplusBiasBackward(e, ddt, raw, bias, draw, db); },
          3 * rb);
    }
  }
}

// A fixed count of timed iterations (each `reps` calls; bench::TimeCalls):
// the library otherwise probes the count by running a row several times,
// and every run builds the row's inputs on the host again (hundreds of MB at
// T = 8192), which made a row take about 10 s.
constexpr int kIterations = 20;

void Register(const std::string& name, std::function<void(benchmark::State&)> f) {
  benchmark::RegisterBenchmark(name.c_str(), std::move(f))
      ->UseManualTime()
      ->Iterations(kIterations)
      ->Unit(benchmark::kMillisecond);
}

void RegisterAll() {
  for (const ScanShape& s :
       {ScanShape{"h96p16n16", 96, 16, 16, 1}, ScanShape{"h24p64n128", 24, 64, 128, 1},
        ScanShape{"h24p64n64", 24, 64, 64, 1}}) {
    for (bool bwd : {false, true}) {
      for (ssm::SsdCudaKernel k : {ssm::SsdCudaKernel::kChunked, ssm::SsdCudaKernel::kRecurrence}) {
        const char* kn = k == ssm::SsdCudaKernel::kChunked ? "/chunked" : "/recurrence";
        Register(std::string("BM_CudaSsm/Scan/") + s.name + (bwd ? "/bwd" : "/fwd") + kn,
                 [s, bwd, k](benchmark::State& st) { BM_Scan(st, s, bwd, k, kChunk); });
      }
      // A block per (b, chunk, heads of a group), where its block fits at
      // kChunked's chunk length (the backward: h96p16n16, and h24p64n64 at 16
      // steps). At P = N = 16 one 64-step backward block fits an SM, three
      // 32-step ones: heads32 and heads16 say which hides latency better.
      for (int64_t chunk : {kChunk, int64_t{32}, int64_t{16}}) {
        if (!ssm::SsdCudaKernelFits(ssm::SsdCudaKernel::kChunkedHeads, bwd, s.P, s.N, chunk)) {
          continue;
        }
        Register(std::string("BM_CudaSsm/Scan/") + s.name + (bwd ? "/bwd" : "/fwd") + "/heads" +
                     (chunk == kChunk ? "" : std::to_string(chunk)),
                 [s, bwd, chunk](benchmark::State& st) {
                   BM_Scan(st, s, bwd, ssm::SsdCudaKernel::kChunkedHeads, chunk);
                 });
      }
      // A warp per (b, h, chunk) (kChunkedMma; P, N ≤ 64), and the same with
      // bf16 products (kChunkedMmaBf16).
      if (ssm::SsdCudaKernelFits(ssm::SsdCudaKernel::kChunkedMma, bwd, s.P, s.N, kChunk)) {
        Register(std::string("BM_CudaSsm/Scan/") + s.name + (bwd ? "/bwd" : "/fwd") + "/mma",
                 [s, bwd](benchmark::State& st) {
                   BM_Scan(st, s, bwd, ssm::SsdCudaKernel::kChunkedMma, kChunk);
                 });
        Register(std::string("BM_CudaSsm/Scan/") + s.name + (bwd ? "/bwd" : "/fwd") + "/mma_bf16",
                 [s, bwd](benchmark::State& st) {
                   BM_Scan(st, s, bwd, ssm::SsdCudaKernel::kChunkedMmaBf16, kChunk);
                 });
        // 32-step chunks where kChunk gives 64 (width 32: max(P, N) in
        // 17..32; width 16 takes 32-step chunks anyway): about half the
        // shared memory a block, so about twice the blocks an SM.
        if (ssm::SsdCudaChunkLength(ssm::SsdCudaKernel::kChunkedMma, bwd, s.P, s.N, kChunk) == 64) {
          Register(std::string("BM_CudaSsm/Scan/") + s.name + (bwd ? "/bwd" : "/fwd") + "/mma32",
                   [s, bwd](benchmark::State& st) {
                     BM_Scan(st, s, bwd, ssm::SsdCudaKernel::kChunkedMma, 32);
                   });
          Register(
              std::string("BM_CudaSsm/Scan/") + s.name + (bwd ? "/bwd" : "/fwd") + "/mma32_bf16",
              [s, bwd](benchmark::State& st) {
                BM_Scan(st, s, bwd, ssm::SsdCudaKernel::kChunkedMmaBf16, 32);
              });
        }
      }
      // The chunked kernels' other chunk lengths (kChunk = 128 runs 64-step chunks).
      for (int64_t chunk : {32, 16}) {
        Register(std::string("BM_CudaSsm/Scan/") + s.name + (bwd ? "/bwd" : "/fwd") + "/chunked" +
                     std::to_string(chunk),
                 [s, bwd, chunk](benchmark::State& st) {
                   BM_Scan(st, s, bwd, ssm::SsdCudaKernel::kChunked, chunk);
                 });
      }
    }
  }
  // The default (kAuto) at the hybrid's heads and T = 1024, 4096, 8192: the
  // side-by-side with tools/bench/torch_ssd.py (issue 31; acceptance.sh).
  for (const ScanShape& s : {ScanShape{"h96p16n16_t1024", 96, 16, 16, 1, 1024},
                             ScanShape{"h96p16n16_t4096", 96, 16, 16, 1, 4096},
                             ScanShape{"h96p16n16_t8192", 96, 16, 16, 1, 8192}}) {
    for (bool bwd : {false, true}) {
      Register(std::string("BM_CudaSsm/ScanAuto/") + s.name + (bwd ? "/bwd" : "/fwd"),
               [s, bwd](benchmark::State& st) {
                 BM_Scan(st, s, bwd, ssm::SsdCudaKernel::kAuto, kChunk);
               });
      Register(std::string("BM_CudaSsm/ScanMma/") + s.name + (bwd ? "/bwd" : "/fwd"),
               [s, bwd](benchmark::State& st) {
                 BM_Scan(st, s, bwd, ssm::SsdCudaKernel::kChunkedMma, kChunk);
               });
      Register(std::string("BM_CudaSsm/ScanMmaBf16/") + s.name + (bwd ? "/bwd" : "/fwd"),
               [s, bwd](benchmark::State& st) {
                 BM_Scan(st, s, bwd, ssm::SsdCudaKernel::kChunkedMmaBf16, kChunk);
               });
    }
  }
  for (bool bwd : {false, true}) {
    const std::string pass = bwd ? "/bwd" : "/fwd";
    Register("BM_CudaSsm/Conv1d" + pass, [bwd](benchmark::State& st) { BM_Conv1d(st, bwd); });
    Register("BM_CudaSsm/GatedRmsNorm" + pass,
             [bwd](benchmark::State& st) { BM_GatedRmsNorm(st, bwd); });
    Register("BM_CudaSsm/SoftplusBias" + pass,
             [bwd](benchmark::State& st) { BM_SoftplusBias(st, bwd); });
  }
  Register("BM_CudaSsm/Conv1d/bwd_bf16dx",
           [](benchmark::State& st) { BM_Conv1d(st, true, /*bf16_dx=*/true); });
  Register("BM_CudaSsm/GatedRmsNorm/bwd_bf16dy",
           [](benchmark::State& st) { BM_GatedRmsNorm(st, true, /*bf16_dy=*/true); });
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
