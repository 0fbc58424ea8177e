// BlockScaledGemm on CUDA (cuBLASLt's VEC128_32F / BLK128x128_32F block
// scaling, block_gemm_cuda.cc). Written in a session without a GPU: it
// compiles, it has not run yet, and the scale layout it depends on
// (lt_scale_layout.h) is our reading of public sources, not a verified fact.
// So the first test is a probe of that layout. Skips without a GPU.
//
// 1. Layout probe (runs first). Codes 1.0 (e4m3 0x38) in one K block kb of
//    every row of both operands and 0 elsewhere; the probed operand's scale
//    table entry f = i·L + j is 2^(f − off), the other operand's scales are
//    1. Then y[m, n] = 128·2^(f − off) exactly (powers of two and a sum of
//    128 ones are exact at any accumulation precision), so each output names
//    the one table entry cuBLASLt applied. Expected: the entry of the output's
//    row (or 128-row tile) and K block kb. On a mismatch the test prints, per
//    output, which entry (i, j) of our table cuBLASLt used and at which
//    offset of the buffer we handed it (LtScaleOffset) — what the next person
//    needs to correct lt_scale_layout.h. Every pairing we accept: a 1×128
//    with b 128×128 (forward, dgrad), b 1×128 (wgrad), and a 128×128 with
//    b 1×128, each operand probed; 128×128 tables with 1, 2 and 3 rows of
//    tiles and L = 3 and 5 K blocks (so BLK128x128's padding to a multiple
//    of 4 is exercised).
//
// 2. The conversion kernel (lt_scales.cu) against LtScaleOffset on the host,
//    bit for bit, padding NaN.
//
// 3. Against the exact GEMM of the dequantised operands (double), the
//    tolerance of block_gemm_test.cc (GemmRoundingGamma, block_testing.h):
//    |y − y_deq| ≤ (L·u_block + (nb + 2)·2⁻²⁴ + K·2⁻⁵²)·Σ_k |da_k·db_k|.
//    cuBLASLt sums in another order than the CPU; the bound holds for any
//    order, but u_block is the unit roundoff of the partial sums within a
//    128-wide K block, which Hopper's FP8 tensor cores keep in fewer than
//    f32's 24 bits: DeepSeek-V3 (arXiv 2412.19437, §3.3.2) measured "around
//    14 bits" on H800, the reason for promoting to f32 every 128 elements
//    (FAST_ACCUM off). So u_block = 2⁻¹³ here (L·u_block = 1/64 at most), and
//    each case also prints its worst error against the f32 bound (u_block =
//    2⁻²⁴) as information. A scale applied to the wrong block is still off
//    by orders of magnitude (BlockyMatrix: each block its own power of two in
//    2^±26). Each case also checks against the CPU reference
//    (BlockScaledGemm on a CPU Exec): |y_gpu − y_cpu| ≤ (γ_gpu + γ_cpu)·S.
//    A bf16 y additionally rounds once: + 2⁻⁸·(|y_deq| + γ·S) (a bf16 ulp,
//    so truncation would pass too: cuBLASLt's rounding of D is not pinned).
//    Shapes: M, N, K = 128, 256, and 208 × 304 with K = 384 and 1008 (not
//    multiples of 128; 1008 ends in a short K block; M, N, K must be
//    multiples of 16, block_gemm.h, and block_gemm_test.cc checks the
//    refusal of 200, 300 and 1000 on any machine). A linear layer's forward
//    (1×128 · 128×128), dgrad (1×128 · TransposeTiles'd 128×128) and wgrad
//    (1×128 · 1×128, K = tokens = 208).
//
// 4. Every output written: y is poisoned (0xff bytes: NaN) before the first
//    run and with 0x5a bytes before the second; the two runs must agree bit
//    for bit (the algorithm is cached per shape in the BlasContext).
//
// NaN/inf blocks: cuBLAS does not document what its block-scaled GEMM does
// with NaN codes (0x7f) or NaN scales; not tested, finite data only.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/cuda_runtime.h"
#include "core/dtype.h"
#include "core/kernels/cuda.h"
#include "core/kernels/fp8/block_gemm.h"
#include "core/kernels/fp8/block_quant.h"
#include "core/kernels/fp8/block_testing.h"
#include "core/kernels/fp8/gpu_env.h"
#include "core/kernels/fp8/lt_scale_layout.h"
#include "core/kernels/fp8/lt_scales_cuda.h"
#include "core/kernels/fp8/wgmma_gemm_cuda.h"
#include "core/kernels/ops.h"
#include "core/kernels/testing/gpu.h"
#include "core/kernels/testing/harness.h"
#include "core/tensor.h"
#include "gtest/gtest.h"

namespace gtp::kernels::fp8 {
namespace {

using kernels::testing::DeviceBuffer;
using testing::BlockyMatrix;
using testing::Bytes;
using testing::Floats;
using testing::GemmRoundingGamma;
using testing::MakeMatrix;
using testing::RefDequantize;
using ByteVec = std::vector<uint8_t>;

#define SKIP_WITHOUT_GPU() \
  if (CudaDeviceCount() == 0) GTEST_SKIP() << NoGpuReason()

constexpr Fp8Layout kRow = Fp8Layout::kRow1x128, kTile = Fp8Layout::kTile128x128;
// The unit roundoff assumed for the tensor cores' partial sums within a K
// block (the header comment: DeepSeek-V3's "around 14 bits").
constexpr double kTensorCoreU = 0x1p-13;
constexpr uint8_t kOne = 0x38;  // e4m3 1.0

using Env = testing::GpuEnv;

// A host matrix of one-byte codes or f32 scales from values.
Tensor HostCodes(const Exec& cpu, const ByteVec& q, int64_t R, int64_t C) {
  Tensor t = cpu.Empty({R, C}, DType::kF8E4M3);
  if (!q.empty()) std::memcpy(t.raw_data(), q.data(), q.size());
  return t;
}
Tensor HostScales(const Exec& cpu, const std::vector<float>& s, const Shape& shape) {
  Tensor t = cpu.Empty(shape, DType::kF32);
  if (!s.empty()) std::memcpy(t.raw_data(), s.data(), s.size() * sizeof(float));
  return t;
}

// ---------------------------------------------------------------- 1. layout probe

struct ProbeCase {
  const char* name;
  Fp8Layout la;
  int64_t M;
  Fp8Layout lb;
  int64_t N;
  int64_t K;
  bool probe_a;  // which operand's scales are the distinct powers of two
};

// Every pairing we accept, each operand probed.
constexpr ProbeCase kProbeCases[] = {
    // forward / dgrad: a 1×128 (VEC128, cuBLASLt's B), b 128×128 (BLK, its A).
    {"fwd_a_rows", kRow, 32, kTile, 256, 384, true},
    {"fwd_b_tiles", kRow, 32, kTile, 256, 384, false},
    {"fwd_b_tiles_3x5", kRow, 16, kTile, 384, 640, false},
    {"fwd_b_tile_1x3", kRow, 16, kTile, 48, 384, false},
    // wgrad: both 1×128.
    {"wgrad_a_rows", kRow, 32, kRow, 48, 384, true},
    {"wgrad_b_rows", kRow, 48, kRow, 32, 384, false},
    // a 128×128 with b 1×128.
    {"tile_a_tiles", kTile, 256, kRow, 16, 384, true},
    {"tile_b_rows", kTile, 256, kRow, 32, 384, false},
};

void RunProbe(Env& env, const ProbeCase& c) {
  SCOPED_TRACE(c.name);
  const int64_t L = Fp8NumBlocks(c.K);
  const Fp8Layout lp = c.probe_a ? c.la : c.lb;
  const int64_t prow = c.probe_a ? c.M : c.N;  // rows of the probed operand
  const bool tiles = lp == kTile;
  const int64_t trows = tiles ? Fp8NumBlocks(prow) : prow;  // rows of its scale table
  const int64_t entries = trows * L, off = entries / 2;
  ASSERT_LT(entries, 200) << "2^(f − off) must stay well inside f32";
  std::vector<float> probe_scales(static_cast<size_t>(entries));
  for (int64_t f = 0; f < entries; ++f)
    probe_scales[f] = std::ldexp(1.0f, static_cast<int>(f - off));
  auto ones = [](const Shape& s) {
    return std::vector<float>(static_cast<size_t>(s.numel()), 1.0f);
  };
  const Shape sa = Fp8ScaleShape(c.M, c.K, c.la), sb = Fp8ScaleShape(c.N, c.K, c.lb);
  const Tensor scales_a = HostScales(env.cpu, c.probe_a ? probe_scales : ones(sa), sa);
  const Tensor scales_b = HostScales(env.cpu, c.probe_a ? ones(sb) : probe_scales, sb);
  const char* which = c.probe_a ? "a" : "b";

  int64_t checked = 0, wrong = 0;
  std::ostringstream report;
  for (int64_t kb = 0; kb < L; ++kb) {
    // Codes 1.0 in K block kb of every row, 0 elsewhere.
    auto codes = [&](int64_t R) {
      ByteVec q(static_cast<size_t>(R * c.K), 0);
      for (int64_t r = 0; r < R; ++r)
        for (int64_t k = kb * kFp8Block; k < std::min(c.K, (kb + 1) * kFp8Block); ++k)
          q[r * c.K + k] = kOne;
      return q;
    };
    const Fp8Matrix a = env.Up(Fp8Matrix{HostCodes(env.cpu, codes(c.M), c.M, c.K), scales_a, c.la});
    const Fp8Matrix b = env.Up(Fp8Matrix{HostCodes(env.cpu, codes(c.N), c.N, c.K), scales_b, c.lb});
    const Tensor y = env.Poisoned({c.M, c.N}, DType::kF32, 0xff);
    BlockScaledGemm(env.gpu, a, b, y);
    const std::vector<float> yv = env.DownFloats(y);
    const double ones_in_block =
        static_cast<double>(std::min(c.K, (kb + 1) * kFp8Block) - kb * kFp8Block);
    for (int64_t m = 0; m < c.M; ++m) {
      for (int64_t n = 0; n < c.N; ++n) {
        ++checked;
        const int64_t row = c.probe_a ? m : n;
        const int64_t want_i = tiles ? row / kFp8Block : row;
        const float v = yv[m * c.N + n];
        // v = ones_in_block · 2^(f − off) for the entry f cuBLASLt applied.
        int e = 0;
        const double fr = std::isfinite(v) && v > 0 ? std::frexp(v / ones_in_block, &e) : 0.0;
        const int64_t f = fr == 0.5 ? (e - 1) + off : -1;
        const bool used_one = f >= 0 && f < entries;
        if (used_one && f / L == want_i && f % L == kb) continue;
        if (wrong++ >= 24) continue;
        report << "  y[" << m << "][" << n << "] (codes in K block " << kb << "): ";
        const int64_t f_inv = fr == 0.5 ? off - (e - 1) : -1;  // y = ones·2^−(f − off)
        if (f_inv >= 0 && f_inv < entries && f_inv / L == want_i && f_inv % L == kb) {
          report << "cuBLASLt divided by the expected scale instead of multiplying (it reads "
                    "scales as reciprocals: hand it 1/scale)";
        } else if (used_one) {
          report << "cuBLASLt applied " << which << "-scale (" << f / L << ", " << f % L
                 << ") of our [" << trows << "][" << L << "] table, which we put at offset "
                 << LtScaleOffset(tiles, prow, c.K, f / L, f % L) << " of its buffer";
        } else {
          report << "y = " << v << " is no single entry of our table ("
                 << (std::isnan(v) ? "NaN: a padding entry, or y never written"
                                   : "a mix of entries, or a scale read outside the table")
                 << ")";
        }
        report << "; expected (" << want_i << ", " << kb << ") at offset "
               << LtScaleOffset(tiles, prow, c.K, want_i, kb) << "\n";
      }
    }
  }
  std::printf(
      "layout probe %s (%s-scales %s, [%lld][%lld] table; a %s [%lld, %lld], b %s [%lld, %lld]): "
      "%lld of %lld outputs used the expected entry\n",
      c.name, which, tiles ? "BLK128x128_32F" : "VEC128_32F", static_cast<long long>(trows),
      static_cast<long long>(L), Fp8LayoutName(c.la), static_cast<long long>(c.M),
      static_cast<long long>(c.K), Fp8LayoutName(c.lb), static_cast<long long>(c.N),
      static_cast<long long>(c.K), static_cast<long long>(checked - wrong),
      static_cast<long long>(checked));
  EXPECT_EQ(wrong, 0)
      << wrong << " outputs used another scale than lt_scale_layout.h says "
      << "(first 24; offsets are LtScaleOffset's, i.e. where we wrote each entry):\n"
      << report.str();
}

// A plain TEST, defined first in this file: gtest runs these in file order
// and every parameterised test after them, so the probe's report comes first.
TEST(LayoutProbe, EachOutputUsesTheScalesOfItsRowAndKBlock) {
  SKIP_WITHOUT_GPU();
  Env env;
  for (const ProbeCase& c : kProbeCases) RunProbe(env, c);
}

// ---------------------------------------------------------------- 2. the conversion kernel

TEST(LtScalesGpu, TheKernelWritesLtScaleOffsetsLayoutAndNaNPadding) {
  SKIP_WITHOUT_GPU();
  Env env;
  struct Shape2 {
    int64_t rows, K;
  };
  for (const bool tiles : {false, true}) {
    for (const Shape2 s : {Shape2{1, 1}, Shape2{16, 16}, Shape2{208, 1008}, Shape2{304, 384},
                           Shape2{384, 640}, Shape2{1000, 4096}}) {
      SCOPED_TRACE(::testing::Message() << (tiles ? "tiles " : "rows ") << s.rows << " x " << s.K);
      const int64_t L = Fp8NumBlocks(s.K), trows = tiles ? Fp8NumBlocks(s.rows) : s.rows;
      kernels::testing::Rng rng(static_cast<uint64_t>(s.rows * 7 + s.K));
      const std::vector<float> table = rng.Normal(static_cast<size_t>(trows * L));
      // Padding: the NaN the kernel's 0xff byte fill leaves.
      std::vector<float> want(static_cast<size_t>(LtScaleCount(tiles, s.rows, s.K)));
      const uint32_t nan_bits = 0xffffffffu;
      for (float& v : want) std::memcpy(&v, &nan_bits, sizeof(v));
      for (int64_t i = 0; i < trows; ++i)
        for (int64_t j = 0; j < L; ++j)
          want[LtScaleOffset(tiles, s.rows, s.K, i, j)] = table[i * L + j];
      DeviceBuffer<float> src(table), dst(want.size());
      GTP_CUDA_CHECK(cudaMemset(dst.get(), 0x5a, dst.bytes()));
      cuda::ToLtScales(src.get(), tiles, s.rows, s.K, dst.get(), nullptr);
      const std::vector<float> got = dst.Download();
      ASSERT_EQ(got.size(), want.size());
      EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0);
    }
  }
}

// ---------------------------------------------------------------- 3./4. correctness

// A GEMM operand: its host form (CPU tensors) and exact dequantised values.
struct Operand {
  Fp8Matrix host;
  std::vector<double> deq;
};

Operand FromHost(const Fp8Matrix& m) {
  return {m, RefDequantize(Bytes(m.q), Floats(m.scales), m.q.dim(0), m.q.dim(1), m.layout)};
}

Operand Quantized(const Exec& cpu, const std::vector<float>& x, int64_t R, int64_t K, Fp8Layout l) {
  Fp8Matrix m{cpu.Empty({R, K}, DType::kF8E4M3), cpu.Empty(Fp8ScaleShape(R, K, l)), l};
  QuantizeBlocks(cpu, MakeMatrix(x, R, K, *cpu.alloc), l, m.q, m.scales);
  return FromHost(m);
}

// Runs y = a·bᵀ (+ bias, when given: [N] values representable in y_type)
// on the GPU twice (y poisoned 0xff, then 0x5a) and checks each element
// against the double reference and the CPU, as in the header; a bias adds
// one f32 rounding of the sum (2⁻²⁴ of |y| + |bias|, doubled for the order
// cuBLASLt adds in).
// algo ≥ 0: through a BlockScaledGemmPlan's algorithm `algo` instead of
// BlockScaledGemm (which runs the heuristic's first).
// engine: which CUDA kernel BlockScaledGemm runs (algo < 0 only).
// beta_y0 (may be null): y starts as these values (f32 [M, N], representable
// in y_type) and the GEMM runs with beta 1, so y = a·bᵀ + y0; the bound adds
// one rounding of the sum (2⁻²³ of |ref| + |y0|: the epilogue's order is
// the kernel's).
// wgmma_plan (may be null; splits 1): the wgmma kernel with this plan
// instead of BlockScaledGemm's choice (engine and algo unused).
void ExpectMatchesReference(Env& env, const std::string& what, const Operand& a, const Operand& b,
                            DType y_type, const std::vector<float>* bias = nullptr, int algo = -1,
                            Fp8GemmEngine engine = Fp8GemmEngine::kCublasLt,
                            const std::vector<float>* beta_y0 = nullptr,
                            const cuda::WgmmaPlan* wgmma_plan = nullptr) {
  SCOPED_TRACE(what + ", y " + DTypeName(y_type) + (bias != nullptr ? " + bias" : "") +
               (beta_y0 != nullptr ? " + y0 (beta 1)" : "") +
               (engine == Fp8GemmEngine::kWgmma ? " [wgmma]" : " [cuBLASLt]"));
  const int64_t M = a.host.q.dim(0), N = b.host.q.dim(0), K = a.host.q.dim(1);
  Tensor bias_host, bias_cpu32;
  if (bias != nullptr) {
    bias_host = MakeMatrix(*bias, 1, N, *env.cpu.alloc, y_type).View({N});
    bias_cpu32 = MakeMatrix(*bias, 1, N, *env.cpu.alloc).View({N});
  }
  const float beta = beta_y0 != nullptr ? 1.0f : 0.0f;
  Tensor y_cpu =
      beta_y0 != nullptr ? MakeMatrix(*beta_y0, M, N, *env.cpu.alloc) : env.cpu.Empty({M, N});
  BlockScaledGemm(env.cpu, a.host, b.host, y_cpu, beta, bias_cpu32);
  const std::vector<float> cpu = Floats(y_cpu);
  const Fp8Matrix ga = env.Up(a.host), gb = env.Up(b.host);
  const Tensor gbias = bias != nullptr ? env.Up(bias_host) : Tensor();
  ByteVec first;
  std::vector<float> got;
  for (int run = 0; run < 2; ++run) {
    const Tensor y = beta_y0 != nullptr ? env.Up(MakeMatrix(*beta_y0, M, N, *env.cpu.alloc, y_type))
                                        : env.Poisoned({M, N}, y_type, run == 0 ? 0xff : 0x5a);
    if (wgmma_plan != nullptr) {
      cuda::WgmmaBlockScaledGemm(
          static_cast<const uint8_t*>(ga.q.raw_data()), ga.scales.data<float>(), ga.layout == kTile,
          static_cast<const uint8_t*>(gb.q.raw_data()), gb.scales.data<float>(), gb.layout == kTile,
          M, N, K, y.raw_data(), y_type == DType::kBF16, beta,
          gbias.defined() ? gbias.raw_data() : nullptr, *wgmma_plan, nullptr, env.gpu.stream);
    } else if (algo >= 0) {
      BlockScaledGemmPlan(env.gpu, ga, gb, y, algo + 1).Run(env.gpu, algo, ga, gb, y, beta);
    } else {
      BlockScaledGemm(env.gpu, ga, gb, y, beta, gbias, engine);
    }
    ByteVec bytes = env.Down(y);
    if (run == 0) {
      got = kernels::testing::LoadAs(bytes, y_type);
      first = std::move(bytes);
    } else {
      ASSERT_TRUE(bytes == first) << "the two runs differ";
    }
  }
  const double g_gpu = GemmRoundingGamma(K, kTensorCoreU), g_f32 = GemmRoundingGamma(K);
  const double rounding = y_type == DType::kBF16 ? 0x1p-8 : 0.0;
  double worst = 0, worst_f32 = 0;
  int64_t failures = 0;
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t n = 0; n < N; ++n) {
      double y_deq = 0, S = 0;
      for (int64_t k = 0; k < K; ++k) {
        const double p = a.deq[m * K + k] * b.deq[n * K + k];
        y_deq += p;
        S += std::fabs(p);
      }
      const double bv = bias != nullptr ? (*bias)[n] : 0.0;
      const double y0 = beta_y0 != nullptr ? (*beta_y0)[m * N + n] : 0.0;
      const double add = bias != nullptr || beta_y0 != nullptr
                             ? 0x1p-23 * (std::fabs(y_deq) + S + std::fabs(bv) + std::fabs(y0))
                             : 0.0;
      y_deq += bv + y0;
      const double v = got[m * N + n];
      const double bound = g_gpu * S + add + rounding * (std::fabs(y_deq) + g_gpu * S + add);
      const double err = std::fabs(v - y_deq);
      const double vs_cpu = std::fabs(v - cpu[m * N + n]);
      const double cpu_bound = bound + g_f32 * S;
      if (!(err <= bound) || !(vs_cpu <= cpu_bound)) {
        if (failures++ < 8)
          ADD_FAILURE() << "y[" << m << "][" << n << "] = " << v << ": dequantised reference "
                        << y_deq << " (|Δ| " << err << ", bound " << bound << "), CPU "
                        << cpu[m * N + n] << " (|Δ| " << vs_cpu << ", bound " << cpu_bound << ")";
        continue;
      }
      if (bound > 0) worst = std::max(worst, err / bound);
      const double f32_bound = g_f32 * S + rounding * (std::fabs(y_deq) + g_f32 * S);
      if (f32_bound > 0) worst_f32 = std::max(worst_f32, err / f32_bound);
    }
  }
  EXPECT_EQ(failures, 0);
  std::printf(
      "%-34s y %-4s M=%lld N=%lld K=%lld: worst |Δ|/bound %.3f; against the f32-accumulation "
      "bound %.3f\n",
      what.c_str(), DTypeName(y_type), static_cast<long long>(M), static_cast<long long>(N),
      static_cast<long long>(K), worst, worst_f32);
}

// A linear layer's three GEMMs, N tokens, in → out, built as the backward
// will build them (block_scale.h): forward x·Wᵀ, dgrad dy·W with Wᵀ from
// TransposeTiles, wgrad dyᵀ·x with both operands from QuantizeRowsTransposed
// (K = tokens); through `engine`, forward and dgrad into a `y_type` y, the
// wgrad into f32.
void ExpectALinearLayersGemms(Env& env, Fp8GemmEngine engine, DType y_type) {
  const Exec& cpu = env.cpu;
  const int64_t T = 208, in = 384, out = 304;
  const std::vector<float> x = BlockyMatrix(T, in, 3), w = BlockyMatrix(out, in, 4),
                           dy = BlockyMatrix(T, out, 5);
  const Operand xq = Quantized(cpu, x, T, in, kRow), dyq = Quantized(cpu, dy, T, out, kRow);
  const Operand wq = Quantized(cpu, w, out, in, kTile);
  Fp8Matrix wt{cpu.Empty({in, out}, DType::kF8E4M3), cpu.Empty(Fp8ScaleShape(in, out, kTile)),
               kTile};
  TransposeTiles(cpu, wq.host.q, wq.host.scales, wt.q, wt.scales);
  auto rows_transposed = [&](const std::vector<float>& v, int64_t R, int64_t C) {
    Fp8Matrix m{cpu.Empty({C, R}, DType::kF8E4M3), cpu.Empty(Fp8ScaleShape(C, R, kRow)), kRow};
    QuantizeRowsTransposed(cpu, MakeMatrix(v, R, C, *cpu.alloc), m.q, m.scales);
    return FromHost(m);
  };
  ExpectMatchesReference(env, "forward y = x·Wᵀ", xq, wq, y_type, nullptr, -1, engine);
  ExpectMatchesReference(env, "dgrad dx = dy·W", dyq, FromHost(wt), y_type, nullptr, -1, engine);
  ExpectMatchesReference(env, "wgrad dW = dyᵀ·x", rows_transposed(dy, T, out),
                         rows_transposed(x, T, in), DType::kF32, nullptr, -1, engine);
}

TEST(BlockGemmGpu, ALinearLayersForwardDgradAndWgrad) {
  SKIP_WITHOUT_GPU();
  Env env;
  ExpectALinearLayersGemms(env, Fp8GemmEngine::kCublasLt, DType::kF32);
}

// N bias values about the outputs' size (×1e3), as a y of `t` holds them.
std::vector<float> BiasValues(Env& env, int64_t N, uint64_t seed, DType t) {
  std::vector<float> raw = BlockyMatrix(1, N, seed);
  for (float& v : raw) v *= 1e3f;
  return Floats(MakeMatrix(raw, 1, N, *env.cpu.alloc, t));
}

// The BIAS epilogue (what an fp8 linear's forward uses): a bias per output
// column, bf16 y (the only one cuBLASLt has an algorithm for: with an f32 y
// it reported none on the H200, CUDA 13.0, and BlockScaledGemm refuses that
// case before asking), against the reference plus the bias; the bias values
// span magnitudes like the outputs', so one added to the wrong column (or
// not at all) breaks the bound.
TEST(BlockGemmGpu, TheBiasEpilogueAddsOneBiasPerColumn) {
  SKIP_WITHOUT_GPU();
  Env env;
  const int64_t M = 208, N = 304, K = 384;
  const Operand a = Quantized(env.cpu, BlockyMatrix(M, K, 31), M, K, kRow);
  const Operand b = Quantized(env.cpu, BlockyMatrix(N, K, 32), N, K, kTile);
  const std::vector<float> bias = BiasValues(env, N, 33, DType::kBF16);
  ExpectMatchesReference(env, "bias epilogue", a, b, DType::kBF16, &bias);
}

// Every algorithm cuBLASLt offers (up to 8) for a wgrad-like shape (long K:
// where split-K algorithms appear) is right within the same bound, so a
// faster one than the heuristic's first can be chosen (BlockScaledGemmPlan,
// fp8_linear_benchmark's BM_Fp8GemmAlgo).
TEST(BlockGemmGpu, EveryOfferedAlgorithmMatchesTheReference) {
  SKIP_WITHOUT_GPU();
  Env env;
  const int64_t M = 128, N = 256, K = 4096;
  const Operand a = Quantized(env.cpu, BlockyMatrix(M, K, 61), M, K, kRow);
  const Operand b = Quantized(env.cpu, BlockyMatrix(N, K, 62), N, K, kRow);
  const Fp8Matrix ga = env.Up(a.host), gb = env.Up(b.host);
  const Tensor y = env.Poisoned({M, N}, DType::kF32, 0);
  const BlockScaledGemmPlan plan(env.gpu, ga, gb, y, 8);
  ASSERT_GE(plan.num_algos(), 1);
  for (int k = 0; k < plan.num_algos(); ++k) {
    std::printf("algorithm %d of %d: %s\n", k, plan.num_algos(), plan.Describe(k).c_str());
    ExpectMatchesReference(env, "algorithm " + std::to_string(k) + " (" + plan.Describe(k) + ")", a,
                           b, DType::kF32, nullptr, k);
  }
}

struct GemmCase {
  int64_t M, N, K;
  Fp8Layout la, lb;
};

std::string GemmCaseName(const ::testing::TestParamInfo<GemmCase>& i) {
  const GemmCase& c = i.param;
  return std::to_string(c.M) + "x" + std::to_string(c.N) + "x" + std::to_string(c.K) + "_" +
         (c.la == kRow ? "row" : "tile") + "_" + (c.lb == kRow ? "row" : "tile");
}

class BlockGemmGpuTest : public ::testing::TestWithParam<GemmCase> {};

TEST_P(BlockGemmGpuTest, MatchesTheReferenceWithinTheDerivedBound) {
  SKIP_WITHOUT_GPU();
  const GemmCase c = GetParam();
  Env env;
  const Operand a = Quantized(env.cpu, BlockyMatrix(c.M, c.K, 100 + c.M), c.M, c.K, c.la);
  const Operand b = Quantized(env.cpu, BlockyMatrix(c.N, c.K, 200 + c.N), c.N, c.K, c.lb);
  const std::string what = std::string("a ") + Fp8LayoutName(c.la) + " b " + Fp8LayoutName(c.lb);
  ExpectMatchesReference(env, what, a, b, DType::kF32);
  ExpectMatchesReference(env, what, a, b, DType::kBF16);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, BlockGemmGpuTest,
    ::testing::Values(GemmCase{128, 128, 128, kRow, kTile}, GemmCase{256, 256, 256, kRow, kTile},
                      GemmCase{208, 304, 384, kRow, kTile}, GemmCase{208, 304, 1008, kRow, kTile},
                      GemmCase{128, 128, 128, kRow, kRow}, GemmCase{208, 304, 1008, kRow, kRow},
                      GemmCase{256, 208, 384, kTile, kRow}, GemmCase{304, 16, 1008, kTile, kRow}),
    GemmCaseName);

// ---------------------------------------------------------------- 5. our own kernel

// Fp8GemmEngine::kWgmma (wgmma_gemm.cu) against the same references and
// bounds as cuBLASLt: the same tensor-core products, promoted to f32 per K
// block on CUDA cores. Its own risks, each covered here: a tile's rows or
// columns past M or N (TMA's zero fill, the skipped stores), several tiles
// each way and more K blocks than pipeline stages (6; K up to 4096 is 32
// blocks, so each stage is reused and its barriers' phases turn), a K that
// ends in a short block, split-K (few tiles, long K: 384 × 512 × 4096 runs
// in 4 K ranges), every pairing of scale layouts including
// 128×128 · 128×128 (which cuBLASLt lacks), the bias in f32 and bf16 y, and
// beta 1 (y += a·bᵀ), and more tiles than multiprocessors (the persistent
// grid's CTAs each taking several).
#define SKIP_WITHOUT_WGMMA()                                                  \
  SKIP_WITHOUT_GPU();                                                         \
  if (!WgmmaSupported())                                                      \
  GTEST_SKIP() << "Fp8GemmEngine::kWgmma needs compute capability 9.0; this " \
                  "GPU has another"

bool WgmmaSupported() {
  const absl::StatusOr<int> cc = CudaComputeCapability(0);
  return cc.ok() && *cc == 90;
}

class WgmmaGemmGpuTest : public ::testing::TestWithParam<GemmCase> {};

TEST_P(WgmmaGemmGpuTest, MatchesTheReferenceWithinTheDerivedBound) {
  SKIP_WITHOUT_WGMMA();
  const GemmCase c = GetParam();
  Env env;
  const Operand a = Quantized(env.cpu, BlockyMatrix(c.M, c.K, 300 + c.M), c.M, c.K, c.la);
  const Operand b = Quantized(env.cpu, BlockyMatrix(c.N, c.K, 400 + c.N), c.N, c.K, c.lb);
  const std::string what = std::string("a ") + Fp8LayoutName(c.la) + " b " + Fp8LayoutName(c.lb);
  for (DType t : {DType::kF32, DType::kBF16}) {
    ExpectMatchesReference(env, what, a, b, t, nullptr, -1, Fp8GemmEngine::kWgmma);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, WgmmaGemmGpuTest,
    ::testing::Values(GemmCase{128, 128, 128, kRow, kTile}, GemmCase{16, 16, 16, kRow, kTile},
                      GemmCase{208, 304, 1008, kRow, kTile}, GemmCase{384, 512, 4096, kRow, kTile},
                      GemmCase{208, 304, 1008, kRow, kRow}, GemmCase{272, 144, 2064, kRow, kRow},
                      GemmCase{256, 208, 384, kTile, kRow}, GemmCase{304, 16, 1008, kTile, kRow},
                      GemmCase{336, 400, 912, kTile, kTile},
                      // 16 × 9 = 144 tiles: more than an H100's or H200's 132
                      // multiprocessors, so some CTAs of the persistent grid
                      // take a second tile (the stages' phases run on).
                      GemmCase{2048, 1152, 256, kRow, kTile}),
    GemmCaseName);

// A linear layer's three GEMMs through the wgmma kernel (forward and dgrad
// into bf16, as the fp8 linears call them).
TEST(WgmmaGemmGpu, ALinearLayersForwardDgradAndWgrad) {
  SKIP_WITHOUT_WGMMA();
  Env env;
  ExpectALinearLayersGemms(env, Fp8GemmEngine::kWgmma, DType::kBF16);
}

// The bias (f32 and bf16 y: the kernel adds it in its own epilogue) and
// beta 1 (the gradient accumulation's y += a·bᵀ); the bias and y0 span
// magnitudes like the outputs', so one added to the wrong column or row (or
// not at all) breaks the bound.
TEST(WgmmaGemmGpu, BiasAndBetaOne) {
  SKIP_WITHOUT_WGMMA();
  Env env;
  // 2 × 3 tiles and 16 K blocks: split-K (WgmmaGemmPlan picks 4 ranges on
  // a GPU of 132 multiprocessors), so the bias and beta go through the sum
  // of the ranges.
  const int64_t M = 208, N = 304, K = 2048;
  const Operand a = Quantized(env.cpu, BlockyMatrix(M, K, 41), M, K, kRow);
  const Operand b = Quantized(env.cpu, BlockyMatrix(N, K, 42), N, K, kTile);
  for (DType t : {DType::kF32, DType::kBF16}) {
    const std::vector<float> bias = BiasValues(env, N, 43, t);
    ExpectMatchesReference(env, "wgmma bias", a, b, t, &bias, -1, Fp8GemmEngine::kWgmma);
    std::vector<float> y0 = BlockyMatrix(M, N, 44);
    for (float& v : y0) v *= 1e3f;
    y0 = Floats(MakeMatrix(y0, M, N, *env.cpu.alloc, t));  // representable in y's dtype
    ExpectMatchesReference(env, "wgmma beta 1", a, b, t, nullptr, -1, Fp8GemmEngine::kWgmma, &y0);
  }
}

// The epilogue's bulk copies (WgmmaPlan::bulk_store) move the bytes the
// staged 16-byte stores move: the same bits, with a bias and beta 1 (the
// pairs are finished before they are staged), rows past M and a last tile
// of 16 columns (copies of 32 or 64 bytes), for both y dtypes, with and
// without ping-pong; so do 192-row tiles (tile_m; here two, the second
// partial), and with y prefetched into L2 (prefetch_y: beta 1 here, so the
// prefetches run, rows past M skipped). The staged stores themselves,
// unsplit, with the bias and beta 1, are held to the dequantised reference
// first (the default plan splits these few tiles, which the other bias and
// beta tests take). The cluster test compares both options on more shapes.
TEST(WgmmaGemmGpu, BulkStoresGiveTheBitsOfTheStagedStores) {
  SKIP_WITHOUT_WGMMA();
  Env env;
  const int64_t M = 336, N = 400, K = 912;  // 3 × 4 tiles, the last row and column partial
  const Operand a = Quantized(env.cpu, BlockyMatrix(M, K, 71), M, K, kRow);
  const Operand b = Quantized(env.cpu, BlockyMatrix(N, K, 72), N, K, kTile);
  const Fp8Matrix ga = env.Up(a.host), gb = env.Up(b.host);
  for (DType t : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(t == DType::kBF16 ? "y bf16" : "y f32");
    const std::vector<float> bias_values = BiasValues(env, N, 73, t);
    const std::vector<float> y0_values =
        Floats(MakeMatrix(BlockyMatrix(M, N, 74), M, N, *env.cpu.alloc, t));  // representable
    // The reference (BlockScaledGemm on the CPU) takes a bias or beta 1, not
    // both: one check each.
    const cuda::WgmmaPlan unsplit;
    ExpectMatchesReference(env, "wgmma staged epilogue", a, b, t, &bias_values, -1,
                           Fp8GemmEngine::kWgmma, nullptr, &unsplit);
    ExpectMatchesReference(env, "wgmma staged epilogue", a, b, t, nullptr, -1,
                           Fp8GemmEngine::kWgmma, &y0_values, &unsplit);
    const Tensor bias = env.Up(MakeMatrix(bias_values, 1, N, *env.cpu.alloc, t));
    const Tensor y0 = MakeMatrix(y0_values, M, N, *env.cpu.alloc, t);
    auto run = [&](bool ping_pong, bool bulk, int tile_m = 128, bool prefetch_y = false) {
      const Tensor y = env.Up(y0);
      cuda::WgmmaPlan plan;
      plan.ping_pong = ping_pong;
      plan.bulk_store = bulk;
      plan.tile_m = tile_m;
      plan.prefetch_y = prefetch_y;
      cuda::WgmmaBlockScaledGemm(
          static_cast<const uint8_t*>(ga.q.raw_data()), ga.scales.data<float>(), false,
          static_cast<const uint8_t*>(gb.q.raw_data()), gb.scales.data<float>(), true, M, N, K,
          y.raw_data(), t == DType::kBF16, 1.0f, bias.raw_data(), plan, nullptr, env.gpu.stream);
      return env.Down(y);
    };
    const ByteVec staged = run(false, false);
    EXPECT_TRUE(staged != env.Down(env.Up(y0))) << "the GEMM left y as it was";
    EXPECT_TRUE(run(false, true) == staged) << "bulk stores: not the staged stores' bits";
    EXPECT_TRUE(run(true, true) == staged) << "bulk stores, ping-pong: not the staged stores' bits";
    EXPECT_TRUE(run(false, false, 192) == staged) << "192-row tiles: not the 128-row tiles' bits";
    EXPECT_TRUE(run(true, true, 192) == staged)
        << "192-row tiles, bulk stores, ping-pong: not the 128-row tiles' bits";
    EXPECT_TRUE(run(false, false, 128, true) == staged) << "y prefetched: not the same bits";
    EXPECT_TRUE(run(false, false, 192, true) == staged)
        << "192-row tiles, y prefetched: not the 128-row tiles' bits";
  }
}

// WgmmaGemmPlan takes 192-row tiles where their waves cost less, and the
// default path (BlockScaledGemm) then runs them right: a 1536 × 1536 × 512
// forward-like GEMM (96 tiles of 192 rows, one wave; 72 pairs of 128-row
// tiles, two waves or 1.5 split) held to the dequantised reference, with
// the 128-row tiles' bits. The choices on the trainer's shapes are the
// measured winners (docs/PERFORMANCE.md, session 27, H100): 192 for the
// 1.3B and 350M forwards, 128 where the 192-row tiles round to a worse
// wave (350M's wgrad). These hold for 132 multiprocessors (H100 SXM,
// H200), the only count they were fitted on.
TEST(WgmmaGemmGpu, ThePlanTakes192RowTilesWhereTheirWavesCostLess) {
  SKIP_WITHOUT_WGMMA();
  Env env;
  int device = 0, sms = 0;
  ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), cudaSuccess);
  if (sms != 132)
    GTEST_SKIP() << "the plan's choices are fitted on 132 multiprocessors, not " << sms;
  struct Want {
    int64_t M, N, K;
    int tile_m, cluster_m, splits;
  };
  for (const Want& w : {Want{1536, 1536, 512, 192, 1, 1}, Want{8192, 8192, 2048, 192, 1, 1},
                        Want{8192, 4096, 1024, 192, 1, 1}, Want{4096, 1024, 8192, 128, 2, 1},
                        Want{512, 768, 1024, 128, 2, 4}}) {
    const cuda::WgmmaPlan p = cuda::WgmmaGemmPlan(w.M, w.N, w.K);
    EXPECT_EQ(p.tile_m, w.tile_m) << w.M << " x " << w.N << " x " << w.K;
    EXPECT_EQ(p.cluster_m, w.cluster_m) << w.M << " x " << w.N << " x " << w.K;
    EXPECT_EQ(p.cluster_n, 1) << w.M << " x " << w.N << " x " << w.K;
    EXPECT_EQ(p.splits, w.splits) << w.M << " x " << w.N << " x " << w.K;
  }
  const int64_t M = 1536, N = 1536, K = 512;
  const Operand a = Quantized(env.cpu, BlockyMatrix(M, K, 81), M, K, kRow);
  const Operand b = Quantized(env.cpu, BlockyMatrix(N, K, 82), N, K, kTile);
  ExpectMatchesReference(env, "wgmma default plan, 192-row tiles", a, b, DType::kBF16, nullptr, -1,
                         Fp8GemmEngine::kWgmma);
  const Fp8Matrix ga = env.Up(a.host), gb = env.Up(b.host);
  const Tensor y = env.Poisoned({M, N}, DType::kBF16, 0xff);
  BlockScaledGemm(env.gpu, ga, gb, y, 0.0f, Tensor(), Fp8GemmEngine::kWgmma);
  const Tensor y128 = env.Poisoned({M, N}, DType::kBF16, 0x5a);
  cuda::WgmmaPlan plan;  // 128-row tiles, no cluster, unsplit
  cuda::WgmmaBlockScaledGemm(static_cast<const uint8_t*>(ga.q.raw_data()), ga.scales.data<float>(),
                             false, static_cast<const uint8_t*>(gb.q.raw_data()),
                             gb.scales.data<float>(), true, M, N, K, y128.raw_data(), true, 0.0f,
                             nullptr, plan, nullptr, env.gpu.stream);
  EXPECT_TRUE(env.Down(y) == env.Down(y128)) << "192-row tiles: not the 128-row tiles' bits";
}

// The trainer's check before it trains with the kernel (wgmma_check.cc)
// passes on this GPU.
TEST(WgmmaGemmGpu, TheTrainersSelfCheckPasses) {
  SKIP_WITHOUT_WGMMA();
  Env env;
  const absl::Status s = CheckWgmmaGemm(env.gpu);
  EXPECT_TRUE(s.ok()) << s;
}

// The same operands through both engines: each within the bound of the
// reference (above); here also side by side, both deterministic, so a
// regression in either shows as the two drifting apart. Not bit for bit
// (the promotion's rounding and order are each kernel's own).
TEST(WgmmaGemmGpu, AgreesWithCublasLtWithinTwiceTheBound) {
  SKIP_WITHOUT_WGMMA();
  Env env;
  // 17 × 8 = 136 tiles: more than the 132 multiprocessors (a second tile for some CTAs).
  const int64_t M = 2176, N = 1024, K = 512;
  const Operand a = Quantized(env.cpu, BlockyMatrix(M, K, 51), M, K, kRow);
  const Operand b = Quantized(env.cpu, BlockyMatrix(N, K, 52), N, K, kTile);
  const Fp8Matrix ga = env.Up(a.host), gb = env.Up(b.host);
  const Tensor y_lt = env.Poisoned({M, N}, DType::kF32, 0xff);
  const Tensor y_wg = env.Poisoned({M, N}, DType::kF32, 0xff);
  BlockScaledGemm(env.gpu, ga, gb, y_lt, 0.0f, Tensor(), Fp8GemmEngine::kCublasLt);
  BlockScaledGemm(env.gpu, ga, gb, y_wg, 0.0f, Tensor(), Fp8GemmEngine::kWgmma);
  const std::vector<float> lt = kernels::testing::LoadAs(env.Down(y_lt), DType::kF32);
  const std::vector<float> wg = kernels::testing::LoadAs(env.Down(y_wg), DType::kF32);
  const double g = GemmRoundingGamma(K, kTensorCoreU);
  int64_t failures = 0;
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t n = 0; n < N; ++n) {
      double S = 0;
      for (int64_t k = 0; k < K; ++k) S += std::fabs(a.deq[m * K + k] * b.deq[n * K + k]);
      const double d = std::fabs(double{lt[m * N + n]} - wg[m * N + n]);
      if (!(d <= 2 * g * S) && failures++ < 8) {
        ADD_FAILURE() << "y[" << m << "][" << n << "]: cuBLASLt " << lt[m * N + n] << ", wgmma "
                      << wg[m * N + n] << " (|Δ| " << d << ", bound " << 2 * g * S << ")";
      }
    }
  }
  EXPECT_EQ(failures, 0);
}

// The kernel's cluster shapes (TMA multicast of a's or b's stage tiles
// between two CTAs) change where the codes come from, not what a CTA sums
// or in what order: every shape gives the bits of no cluster (1 × 1), with
// and without split-K; so does every shape with the other consumer modes
// (ping_pong: the warpgroups take turns — the same sums, issued in another
// order; bulk_store: the epilogue's rows leave by bulk copies — the same
// bytes, moved another way; overlap: each warpgroup's next block issued
// before this one's promotion — the same sums, promoted in the same
// order), with 192-row tiles (tile_m: three consumer
// warpgroups, each row summed as before by one of them; the last tile
// partial here), and a y that is not 16-byte aligned (the epilogue then
// stores straight from registers instead of through shared memory). The default
// plan for these shapes is the 2 × 1 cluster; it is held to the
// dequantised reference first.
TEST(WgmmaGemmGpu, EveryClusterShapeGivesTheBitsOfNoCluster) {
  SKIP_WITHOUT_WGMMA();
  Env env;
  struct Case {
    int64_t M, N, K;
    Fp8Layout la, lb;
    DType y;
  };
  // Forward-like (row · tile into bf16), wgrad-like (row · row into f32),
  // tile · tile; 4–12 tiles of 2–16 K blocks (the last K block partial in one).
  for (const Case& c : {Case{512, 768, 1024, kRow, kTile, DType::kBF16},
                        Case{768, 512, 2048, kRow, kRow, DType::kF32},
                        Case{512, 256, 656, kTile, kTile, DType::kF32}}) {
    const std::string what =
        "clusters " + std::to_string(c.M) + "x" + std::to_string(c.N) + "x" + std::to_string(c.K);
    SCOPED_TRACE(what);
    const Operand a = Quantized(env.cpu, BlockyMatrix(c.M, c.K, 61 + c.K), c.M, c.K, c.la);
    const Operand b = Quantized(env.cpu, BlockyMatrix(c.N, c.K, 62 + c.K), c.N, c.K, c.lb);
    const cuda::WgmmaPlan chosen = cuda::WgmmaGemmPlan(c.M, c.N, c.K);
    EXPECT_EQ(chosen.cluster_m, 2);
    EXPECT_EQ(chosen.cluster_n, 1);
    ExpectMatchesReference(env, what, a, b, c.y, nullptr, -1, Fp8GemmEngine::kWgmma);
    const Fp8Matrix ga = env.Up(a.host), gb = env.Up(b.host);
    // These shapes' few units get split-K by default (chosen.splits > 1).
    for (int splits : {1, chosen.splits}) {
      const Tensor partial = env.gpu.Empty({splits, c.M, c.N});
      // y at `offset` bytes into a poisoned buffer; its bytes.
      auto run = [&](int cm, int cn, int mode, size_t offset = 0) {
        const size_t bytes = static_cast<size_t>(c.M * c.N) * SizeOf(c.y);
        const Tensor buffer = env.Poisoned({c.M * c.N + 16}, c.y, 0xff);
        cuda::WgmmaPlan plan;
        plan.cluster_m = cm, plan.cluster_n = cn, plan.splits = splits;
        plan.ping_pong = (mode & 1) != 0;
        plan.bulk_store = (mode & 2) != 0;
        plan.tile_m = (mode & 4) != 0 ? 192 : 128;
        plan.overlap = (mode & 8) != 0;
        cuda::WgmmaBlockScaledGemm(
            static_cast<const uint8_t*>(ga.q.raw_data()), ga.scales.data<float>(), c.la == kTile,
            static_cast<const uint8_t*>(gb.q.raw_data()), gb.scales.data<float>(), c.lb == kTile,
            c.M, c.N, c.K, static_cast<uint8_t*>(buffer.raw_data()) + offset, c.y == DType::kBF16,
            0.0f, nullptr, plan, partial.data<float>(), env.gpu.stream);
        const ByteVec all = env.Down(buffer);
        return ByteVec(all.begin() + offset, all.begin() + offset + bytes);
      };
      const ByteVec plain = run(1, 1, 0);
      if (splits == chosen.splits) {
        // The reference-checked default's bits are the plain launch's.
        const Tensor y = env.Poisoned({c.M, c.N}, c.y, 0x5a);
        BlockScaledGemm(env.gpu, ga, gb, y, 0.0f, Tensor(), Fp8GemmEngine::kWgmma);
        EXPECT_TRUE(env.Down(y) == plain) << "the default plan differs from 1 x 1";
      }
      for (int mode : {0, 2, 8}) {
        EXPECT_TRUE(run(1, 1, mode, 8) == plain)
            << "y 8 bytes past 16-byte alignment"
            << (mode == 2   ? ", bulk stores, "
                : mode == 8 ? ", overlap, "
                            : ", ")
            << splits << " split(s): not the bits of an aligned y";
      }
      // Bits: 1 ping_pong, 2 bulk_store, 4 tile_m 192 (no cluster along M),
      // 8 overlap (alone).
      for (int mode : {0, 1, 2, 3, 4, 5, 6, 7, 8}) {
        for (auto [cm, cn] : {std::make_pair(1, 1), std::make_pair(2, 1), std::make_pair(1, 2),
                              std::make_pair(2, 2)}) {
          if (cm == 1 && cn == 1 && mode == 0) continue;  // plain itself
          if (cm == 2 && (mode & 4) != 0) continue;
          EXPECT_TRUE(run(cm, cn, mode) == plain)
              << "cluster " << cm << " x " << cn << ((mode & 1) != 0 ? ", ping-pong" : "")
              << ((mode & 2) != 0 ? ", bulk stores" : "")
              << ((mode & 4) != 0 ? ", 192-row tiles" : "") << ((mode & 8) != 0 ? ", overlap" : "")
              << ", " << splits << " split(s): not the bits of 1 x 1";
        }
      }
    }
  }
}

}  // namespace
}  // namespace gtp::kernels::fp8
