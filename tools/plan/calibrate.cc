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
#include "core/kernels/ssm/mamba_ops.h"
#include "core/kernels/ssm/ssd_scan.h"
#include "core/kernels/tensor_io.h"
#include "core/philox.h"
#include "layers/moe/combine.h"
#include "layers/moe/routing.h"

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
  // Shape classes P·N (plan/calibration.h): the hybrid GPT's P = N = 16 at
  // three sizes, Mamba-2's usual P = 64 with N = 64 and N = 128.
  {
    std::vector<std::array<int64_t, 5>> shapes;  // B, T, H, P, N (G = 1)
    shapes = cuda && !o.quick ? std::vector<std::array<int64_t, 5>>{{1, 1024, 96, 16, 16},
                                                                    {8, 1024, 96, 16, 16},
                                                                    {4, 4096, 128, 16, 16},
                                                                    {8, 1024, 24, 64, 64},
                                                                    {1, 4096, 64, 64, 128},
                                                                    {2, 4096, 128, 64, 128}}
                              : std::vector<std::array<int64_t, 5>>{{1, 128, 4, 16, 16}};
    for (auto [B, T, H, P, N] : shapes) {
      Tensor x = Random(e, {B, T, H, P}, DType::kF32, 7), dtt = e.Zeros({B, T, H}), A = e.Zeros({H});
      Tensor Bm = Random(e, {B, T, 1, N}, DType::kF32, 8), Cm = Random(e, {B, T, 1, N}, DType::kF32, 9);
      Tensor D = e.Zeros({H}), y = e.Empty({B, T, H, P});
      Tensor dx = e.Empty(x.shape()), ddt = e.Empty(dtt.shape()), dA = e.Zeros({H}), dB = e.Empty(Bm.shape()),
             dC = e.Empty(Cm.shape()), dD = e.Zeros({H});
      const double flops = ScanFlops(B, T, H, P, N);
      const double bytes = ScanBytes(B, T, H, P, N);
      const std::string shape = absl::StrCat("b=", B, ",t=", T, ",h=", H, ",p=", P, ",n=", N);
      add({Op::kSsmFwd, "f32", shape, flops, bytes,
                      Time(d, reps, [&] { kernels::ssm::SsdScanForward(e, x, dtt, A, Bm, Cm, D, y); })});
      add({Op::kSsmBwd, "f32", shape, 2 * flops, 2 * bytes, Time(d, reps, [&] {
                        kernels::ssm::SsdScanBackward(e, y, x, dtt, A, Bm, Cm, D, dx, ddt, dA, dB, dC, dD);
                      })});
    }
  }

  // The Mamba-2 mixer's small ops (f32, core/kernels/ssm/mamba_ops.h) at the
  // channel counts of d_inner, G·N and the heads.
  {
    using Rows = std::vector<std::array<int64_t, 2>>;  // rows (B·T), channels
    const bool big = cuda && !o.quick;
    const int64_t K = 4;
    for (auto [R, Ch] : big ? Rows{{8192, 16}, {8192, 1536}, {8192, 6144}} : Rows{{128, 16}, {128, 64}}) {
      const int64_t B = R >= 1024 ? R / 1024 : 1, T = R / B;
      Tensor x = Random(e, {B, T, Ch}, DType::kF32, 13), w = Random(e, {Ch, K}, DType::kF32, 14);
      Tensor bias = e.Zeros({Ch}), y = e.Empty({B, T, Ch}), dx = e.Empty({B, T, Ch}), dw = e.Zeros({Ch, K}),
             db = e.Zeros({Ch});
      const std::string shape = absl::StrCat("b=", B, ",t=", T, ",c=", Ch, ",k=", K);
      add({Op::kConv1dFwd, "f32", shape, 0, Conv1dBytes(R, Ch, false),
           Time(d, reps, [&] { kernels::ssm::CausalConv1dForward(e, x, w, bias, y, true); })});
      add({Op::kConv1dBwd, "f32", shape, 0, Conv1dBytes(R, Ch, true),
           Time(d, reps, [&] { kernels::ssm::CausalConv1dBackward(e, y, x, w, bias, true, dx, dw, db); })});
    }
    for (auto [R, Ch] : big ? Rows{{8192, 768}, {8192, 1536}, {8192, 6144}} : Rows{{128, 64}, {256, 128}}) {
      Tensor x = Random(e, {R, Ch}, DType::kF32, 15), z = Random(e, {R, Ch}, DType::kF32, 16);
      Tensor w = Random(e, {Ch}, DType::kF32, 17), y = e.Empty({R, Ch}), rstd = e.Empty({R, 1});
      Tensor dx = e.Empty({R, Ch}), dz = e.Empty({R, Ch}), dw = e.Zeros({Ch});
      const std::string shape = absl::StrCat("rows=", R, ",c=", Ch, ",group=", Ch);
      add({Op::kGatedNormFwd, "f32", shape, 0, GatedNormBytes(R, Ch, false),
           Time(d, reps, [&] { kernels::ssm::GatedRmsNormForward(e, x, z, w, y, rstd, Ch, 1e-5f); })});
      add({Op::kGatedNormBwd, "f32", shape, 0, GatedNormBytes(R, Ch, true), Time(d, reps, [&] {
             kernels::ssm::GatedRmsNormBackward(e, y, x, z, w, rstd, Ch, dx, dz, dw);
           })});
    }
    for (auto [R, H] : big ? Rows{{8192, 48}, {8192, 96}, {32768, 256}} : Rows{{128, 4}, {512, 8}}) {
      Tensor raw = Random(e, {R, H}, DType::kF32, 18), bias = Random(e, {H}, DType::kF32, 19);
      Tensor dt = e.Empty({R, H}), draw = e.Empty({R, H}), db = e.Zeros({H});
      const std::string shape = absl::StrCat("rows=", R, ",h=", H);
      add({Op::kSoftplusFwd, "f32", shape, 0, SoftplusBytes(R, H, false),
           Time(d, reps, [&] { kernels::ssm::SoftplusBiasForward(e, raw, bias, dt); })});
      add({Op::kSoftplusBwd, "f32", shape, 0, SoftplusBytes(R, H, true),
           Time(d, reps, [&] { kernels::ssm::SoftplusBiasBackward(e, dt, raw, bias, draw, db); })});
    }
  }

  // bf16 <-> f32 casts (ops::Cast), both directions as "cast bf16" rows (the
  // two directions move the same bytes; repeats of one size are averaged).
  for (int64_t n : cuda && !o.quick ? std::vector<int64_t>{8192 * 16, 8192 * 1536, 8192 * 6144}
                                    : std::vector<int64_t>{1 << 12, 1 << 16}) {
    Tensor h = Random(e, {n}, DType::kBF16, 20), f = e.Empty({n});
    add({Op::kCast, "bf16", absl::StrCat("n=", n, ",bf16->f32"), 0, CastBytes(n),
         Time(d, reps, [&] { ops::Cast(e, h, f); })});
    add({Op::kCast, "bf16", absl::StrCat("n=", n, ",f32->bf16"), 0, CastBytes(n),
         Time(d, reps, [&] { ops::Cast(e, f, h); })});
  }

  // The MoE layer's ops (layers/moe), in the activation dtype (bf16 on CUDA,
  // f32 on the CPU) and f32 where the layer runs f32 (routing, gate).
  {
    const DType adt = cuda ? DType::kBF16 : DType::kF32;
    const double ab = SizeOf(adt);
    struct MoeShape {
      int64_t n, E, k, C, H;  // tokens, experts, top-k, width, expert hidden
    };
    const std::vector<MoeShape> shapes =
        cuda && !o.quick ? std::vector<MoeShape>{{2048, 8, 2, 768, 1536}, {8192, 8, 2, 768, 1536},
                                                 {16384, 16, 2, 2048, 2048}}
                         : std::vector<MoeShape>{{64, 4, 2, 32, 64}, {128, 4, 2, 32, 64}};
    for (const MoeShape& m : shapes) {
      const int64_t S = m.n * m.k, M = S;  // slots; expert rows (dropless)
      const std::string shape = absl::StrCat("n=", m.n, ",e=", m.E, ",k=", m.k, ",c=", m.C, ",h=", m.H);
      // Experts: one grouped GEMM per projection over E equal groups.
      std::vector<int64_t> off(m.E + 1);
      for (int64_t g = 0; g <= m.E; ++g) off[g] = M * g / m.E;
      Tensor xe = Random(e, {M, m.C}, adt, 21), w1 = Random(e, {m.E * m.H, m.C}, adt, 22);
      Tensor w2 = Random(e, {m.E * m.C, m.H}, adt, 23), pre = e.Empty({M, m.H}, adt), ye = e.Empty({M, m.C}, adt);
      Tensor dw1 = e.Zeros({m.E * m.H, m.C}), dw2 = e.Zeros({m.E * m.C, m.H});
      const double f = 2.0 * M * m.H * m.C;
      const double gb = ab * (M * m.C + m.E * m.H * m.C + M * m.H);
      add({Op::kGroupedGemm, Name(adt), shape + ",fc1", f, gb,
           Time(d, reps, [&] { ops::GroupedLinear(e, xe, w1, off, pre); })});
      add({Op::kGroupedGemm, Name(adt), shape + ",fc2", f, gb,
           Time(d, reps, [&] { ops::GroupedLinear(e, pre, w2, off, ye); })});
      add({Op::kGroupedGemm, Name(adt), shape + ",fc1_dgrad", f, gb,
           Time(d, reps, [&] { ops::GroupedLinearBackwardData(e, pre, w1, off, xe); })});
      add({Op::kGroupedGemmWgrad, Name(adt), shape + ",fc1", f, ab * (M * m.H + M * m.C) + 4.0 * m.E * m.H * m.C,
           Time(d, reps, [&] { ops::GroupedLinearBackwardWeight(e, pre, xe, off, 1.0f, 1.0f, dw1); })});
      add({Op::kGroupedGemmWgrad, Name(adt), shape + ",fc2", f, ab * (M * m.C + M * m.H) + 4.0 * m.E * m.C * m.H,
           Time(d, reps, [&] { ops::GroupedLinearBackwardWeight(e, ye, pre, off, 1.0f, 1.0f, dw2); })});
      // The router's device ops after its gate GEMM (Router::Forward / Backward).
      layers::moe::RouteParams p;
      p.E = static_cast<int>(m.E);
      p.k = static_cast<int>(m.k);
      p.aux_coeff = 0.01f;
      p.z_coeff = 0.001f;
      p.lane_rows = m.n;
      Tensor logits = Random(e, {m.n, m.E}, DType::kF32, 24), dlogits = e.Empty({m.n, m.E});
      Tensor sel = e.Empty({S}, DType::kI32), wt = e.Empty({S}, DType::kF32), pos = e.Empty({S}, DType::kI32);
      Tensor row_slot = e.Empty({S}, DType::kI32), row_tok = e.Empty({S}, DType::kI32);
      Tensor counts = e.Empty({m.E}, DType::kI32), aux_counts = e.Empty({m.E}, DType::kF32);
      Tensor acc = e.Zeros({m.E + 3}, DType::kI64), dwt = Random(e, {S}, DType::kF32, 25);
      add({Op::kMoeRouteFwd, "f32", shape, 0, RouteBytes(m.n, m.E, m.k, false), Time(d, reps, [&] {
             layers::moe::RouteTokens(e, p, logits, Tensor(), sel, wt);
             layers::moe::Dispatch(e, p.E, p.k, sel, counts, pos, row_slot, row_tok);
             layers::moe::CountSelections(e, p, sel, aux_counts);
             layers::moe::AuxLoss(e, p, logits, aux_counts, acc.Slice(m.E + 1, m.E + 2));
             layers::moe::AccumulateCounts(e, S, counts, counts, acc);
           })});
      add({Op::kMoeRouteBwd, "f32", shape, 0, RouteBytes(m.n, m.E, m.k, true), Time(d, reps, [&] {
             layers::moe::RouteBackward(e, p, logits, sel, sel, dwt, aux_counts, dlogits,
                                        acc.Slice(m.E + 2, m.E + 3));
           })});
      // The permutation (the dispatcher's row gather), its backward (zeroed
      // f32 rows and the scatter-add) and the weighted combine, with the
      // routing's own token order and positions.
      Tensor x = Random(e, {m.n, m.C}, adt, 26), xp = e.Empty({M, m.C}, adt), dx32 = e.Empty({m.n, m.C});
      Tensor y = e.Empty({m.n, m.C}, adt), dye = e.Empty({M, m.C}, adt), dw = e.Empty({S});
      add({Op::kMoePermute, Name(adt), shape, 0, PermuteBytes(M, m.C, ab),
           Time(d, reps, [&] { ops::EmbeddingForward(e, row_tok, x, xp, 0); })});
      add({Op::kMoeScatterAdd, Name(adt), shape, 0, ScatterAddBytes(M, m.C, ab), Time(d, reps, [&] {
             ops::Fill(e, dx32, 0.0f);
             ops::EmbeddingBackward(e, row_tok, xp, dx32, 0);
           })});
      add({Op::kMoeCombineFwd, Name(adt), shape, 0, CombineBytes(m.n, M, m.C, ab, false),
           Time(d, reps, [&] { layers::moe::CombineForward(e, xp, pos, wt, y); })});
      add({Op::kMoeCombineBwd, Name(adt), shape, 0, CombineBytes(m.n, M, m.C, ab, true),
           Time(d, reps, [&] { layers::moe::CombineBackward(e, y, xp, pos, wt, dye, dw); })});
    }
    // The dispatcher's one host read of the counts a layer forward (a small
    // device-to-host copy that waits for the stream): its round trip is the
    // time the stream stands idle while the host wakes and launches again.
    for (int64_t E : {8, 64}) {
      Tensor cnt = e.Zeros({3 * E}, DType::kI32);
      add({Op::kHostSync, "f32", absl::StrCat("i32=", 3 * E), 0, 4.0 * 3 * E,
           Time(d, reps, [&] { (void)kernels::DeviceToHost<int32_t>(e, cnt); })});
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
