#include "tools/plan/calibrate.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>

#include <cuda_runtime_api.h>

#include "absl/strings/str_cat.h"
#include "core/allocator.h"
#include "core/cuda_runtime.h"
#include "core/kernels/cpu.h"
#include "core/kernels/cuda.h"
#include "core/kernels/ops.h"
#include "core/kernels/ssm/ssd_scan.h"
#include "core/kernels/tensor_io.h"
#include "core/philox.h"

namespace gtp::plan {

namespace {

namespace ops = kernels::ops;

struct Bench {
  kernels::Exec exec;
  std::optional<Stream> stream;
  bool cuda = false;
};

// Normal values for timing: a 4093-long draw tiled over the tensor (a
// kernel's time does not depend on the values, only on them being finite
// and not denormal); drawing every element took seconds for the 8192 × 32768
// GEMM operands and minutes for the whole table.
Tensor Random(const kernels::Exec& e, const Shape& s, DType dt, uint64_t key) {
  constexpr size_t kPattern = 4093;  // prime: no alignment with a row length
  std::vector<float> pattern(kPattern);
  for (size_t i = 0; i < kPattern; ++i) pattern[i] = 0.5f * PhiloxNormal(key, i);
  std::vector<float> host(s.numel());
  for (size_t i = 0; i < host.size(); i += kPattern) {
    std::copy_n(pattern.begin(), std::min(kPattern, host.size() - i), host.begin() + i);
  }
  return kernels::TensorFromHost(e, host.data(), s, dt);
}

// Seconds per call of `fn` (after one warm-up call).
double Time(const Bench& d, int reps, const std::function<void()>& fn) {
  auto sync = [&] {
    if (d.cuda) (void)d.stream->Synchronize();
  };
  fn();
  sync();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; ++i) fn();
  sync();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
}

const char* Name(DType t) { return t == DType::kBF16 ? "bf16" : "f32"; }

}  // namespace

absl::StatusOr<std::vector<Measurement>> Calibrate(const CalibrateOptions& o, std::string* device_name) {
  const bool have_gpu = CudaDeviceCount() > 0;
  if (o.device == "cuda" && !have_gpu) return absl::FailedPreconditionError("--device=cuda but no GPU is visible");
  if (o.device != "auto" && o.device != "cpu" && o.device != "cuda") {
    return absl::InvalidArgumentError(absl::StrCat("--device = '", o.device, "' is not auto, cpu or cuda"));
  }
  const bool cuda = o.device == "cuda" || (o.device == "auto" && have_gpu);
  HeapAllocator host;
  std::unique_ptr<CudaCachingAllocator> dev_alloc;
  std::unique_ptr<kernels::cuda::BlasContext> blas;
  Bench d;
  d.exec = kernels::Exec::Cpu(host);
  *device_name = "cpu";
  if (cuda) {
    dev_alloc = std::make_unique<CudaCachingAllocator>(0);
    absl::StatusOr<Stream> s = Stream::Create(0);
    if (!s.ok()) return s.status();
    d.stream.emplace(std::move(*s));
    blas = std::make_unique<kernels::cuda::BlasContext>(0);
    d.exec = kernels::Exec{gtp::Device::Cuda(0), dev_alloc.get(), d.stream->get(), blas.get()};
    d.cuda = true;
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, 0) == cudaSuccess) *device_name = p.name;
  }
  const kernels::Exec& e = d.exec;
  const int reps = std::max(1, o.reps);
  std::vector<Measurement> rows;
  // Each measurement as it is taken, on stderr: the full table takes a while.
  const auto t_begin = std::chrono::steady_clock::now();
  auto add = [&](Measurement m) {
    const double in = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_begin).count();
    std::fprintf(stderr, "calibrate: %s %s %s: %.4f ms (%.0f s in)\n", OpName(m.op), m.dtype.c_str(),
                 m.shape.c_str(), m.seconds * 1e3, in);
    rows.push_back(std::move(m));
  };
  const std::vector<DType> dtypes = cuda ? std::vector<DType>{DType::kBF16, DType::kF32}
                                         : std::vector<DType>{DType::kF32, DType::kBF16};

  // GEMM: y[m, n] = x[m, k]·wᵀ (the Linear layout every layer uses).
  std::vector<std::array<int64_t, 3>> gemms;
  if (!cuda || o.quick) {
    gemms = {{64, 64, 64}, {128, 128, 128}, {256, 256, 256}};
    if (!o.quick) gemms.push_back({512, 512, 512});
  } else {
    for (int64_t n : {512, 1024, 2048, 4096, 8192}) gemms.push_back({n, n, n});
    for (int64_t c : {768, 1024, 2048, 4096, 8192}) {  // transformer shapes at 8192 rows
      gemms.push_back({8192, c, c});
      gemms.push_back({8192, 4 * c, c});
      gemms.push_back({8192, c, 4 * c});
    }
  }
  for (DType dt : dtypes) {
    for (auto [m, n, k] : gemms) {
      if (dt == DType::kF32 && cuda && m * n * k > int64_t{4096} * 4096 * 4096) continue;
      Tensor x = Random(e, {m, k}, dt, 1), w = Random(e, {n, k}, dt, 2), y = e.Empty({m, n}, dt);
      const double s = Time(d, reps, [&] { ops::Linear(e, x, w, y); });
      const double es = SizeOf(dt);
      add({Op::kGemm, Name(dt), absl::StrCat("m=", m, ",n=", n, ",k=", k), 2.0 * m * n * k,
                      es * (m * k + n * k + m * n), s});
    }
  }

  // Attention, causal: q[B, T, NH, HS], k/v with NH heads too. CUDA: the
  // fused bf16 kernels; CPU: the f32 kernels that keep the probabilities.
  {
    std::vector<std::array<int64_t, 4>> shapes;  // B, T, NH, HS
    if (!cuda || o.quick) {
      shapes = {{1, 64, 2, 32}, {1, 128, 2, 32}};
    } else {
      shapes = {{8, 1024, 16, 64}, {4, 2048, 16, 128}, {2, 4096, 32, 128}, {1, 8192, 64, 128}};
    }
    const DType dt = cuda ? DType::kBF16 : DType::kF32;
    for (auto [B, T, NH, HS] : shapes) {
      Tensor q = Random(e, {B, T, NH, HS}, dt, 3), k = Random(e, {B, T, NH, HS}, dt, 4),
             v = Random(e, {B, T, NH, HS}, dt, 5), y = e.Empty({B, T, NH, HS}, dt);
      Tensor dq = e.Empty(q.shape(), dt), dk = e.Empty(q.shape(), dt), dv = e.Empty(q.shape(), dt);
      Tensor dy = Random(e, {B, T, NH, HS}, dt, 6);
      const double flops = 2.0 * B * T * T * NH * HS;  // 4·B·T²·C, causal half
      const double bytes = SizeOf(dt) * 4.0 * B * T * NH * HS;
      const std::string shape = absl::StrCat("b=", B, ",t=", T, ",h=", NH, ",d=", HS);
      double f = 0, b = 0;
      if (cuda) {
        Tensor lse = e.Empty({B, NH, T});
        f = Time(d, reps, [&] { ops::FlashAttentionForward(e, q, k, v, y, lse); });
        b = Time(d, reps, [&] { ops::FlashAttentionBackward(e, dy, q, k, v, y, lse, dq, dk, dv); });
      } else {
        Tensor att = e.Empty({B, NH, T, T});
        f = Time(d, reps, [&] { ops::AttentionForward(e, q, k, v, y, att); });
        b = Time(d, reps, [&] { ops::AttentionBackward(e, dy, q, k, v, att, dq, dk, dv); });
      }
      add({Op::kAttentionFwd, Name(dt), shape, flops, bytes, f});
      add({Op::kAttentionBwd, Name(dt), shape, 2.5 * flops, 2 * bytes, b});
    }
  }

  // The SSD scan (f32): x[B, T, H, P], dt[B, T, H], A[H], B/C[B, T, G, N], D[H].
  {
    std::vector<std::array<int64_t, 5>> shapes;  // B, T, H, P, N (G = 1)
    shapes = cuda && !o.quick ? std::vector<std::array<int64_t, 5>>{{1, 4096, 64, 64, 128}, {2, 4096, 128, 64, 128}}
                              : std::vector<std::array<int64_t, 5>>{{1, 128, 4, 16, 16}};
    for (auto [B, T, H, P, N] : shapes) {
      Tensor x = Random(e, {B, T, H, P}, DType::kF32, 7), dtt = e.Zeros({B, T, H}), A = e.Zeros({H});
      Tensor Bm = Random(e, {B, T, 1, N}, DType::kF32, 8), Cm = Random(e, {B, T, 1, N}, DType::kF32, 9);
      Tensor D = e.Zeros({H}), y = e.Empty({B, T, H, P});
      Tensor dx = e.Empty(x.shape()), ddt = e.Empty(dtt.shape()), dA = e.Zeros({H}), dB = e.Empty(Bm.shape()),
             dC = e.Empty(Cm.shape()), dD = e.Zeros({H});
      const double flops = 7.0 * B * T * H * P * N;  // mfu.h: 7·d_inner·d_state a token
      const double bytes = 4.0 * B * T * (2 * H * P + H + 2 * N);
      const std::string shape = absl::StrCat("b=", B, ",t=", T, ",h=", H, ",p=", P, ",n=", N);
      add({Op::kSsmFwd, "f32", shape, flops, bytes,
                      Time(d, reps, [&] { kernels::ssm::SsdScanForward(e, x, dtt, A, Bm, Cm, D, y); })});
      add({Op::kSsmBwd, "f32", shape, 2 * flops, 2 * bytes, Time(d, reps, [&] {
                        kernels::ssm::SsdScanBackward(e, y, x, dtt, A, Bm, Cm, D, dx, ddt, dA, dB, dC, dD);
                      })});
    }
  }

  // RMSNorm forward and an elementwise pass (y ← x + y), by bytes moved.
  for (DType dt : dtypes) {
    std::vector<std::array<int64_t, 2>> shapes = cuda && !o.quick
                                                     ? std::vector<std::array<int64_t, 2>>{{8192, 1024}, {8192, 4096}, {16384, 8192}}
                                                     : std::vector<std::array<int64_t, 2>>{{256, 128}, {1024, 256}};
    for (auto [R, C] : shapes) {
      Tensor x = Random(e, {R, C}, dt, 10), w = Random(e, {C}, dt, 11), y = e.Empty({R, C}, dt), rstd = e.Empty({R});
      const double es = SizeOf(dt);
      const std::string shape = absl::StrCat("rows=", R, ",c=", C);
      add({Op::kNorm, Name(dt), shape, 0, 2 * es * R * C,
                      Time(d, reps, [&] { ops::RMSNormForward(e, x, w, y, rstd, 1e-5f); })});
      add({Op::kElementwise, Name(dt), shape, 0, 3 * es * R * C,
                      Time(d, reps, [&] { ops::Axpby(e, 1.0f, x, 1.0f, y); })});
    }
  }

  // AdamW over n f32 elements: p, m, v read and written, g read (28 bytes each).
  for (int64_t n : cuda && !o.quick ? std::vector<int64_t>{1 << 20, 1 << 24, 1 << 27} : std::vector<int64_t>{1 << 16, 1 << 18}) {
    Tensor p = e.Zeros({n}), g = Random(e, {n}, DType::kF32, 12), m = e.Zeros({n}), v = e.Zeros({n});
    kernels::AdamWParams hp;
    const double s = Time(d, reps, [&] {
      if (cuda) {
        kernels::cuda::AdamW(p.data<float>(), g.data<float>(), m.data<float>(), v.data<float>(), n, hp, d.exec.stream);
      } else {
        kernels::cpu::AdamW(p.data<float>(), g.data<float>(), m.data<float>(), v.data<float>(), n, hp);
      }
    });
    add({Op::kAdamW, "f32", absl::StrCat("n=", n), 0, 28.0 * n, s});
  }
  return rows;
}

}  // namespace gtp::plan
