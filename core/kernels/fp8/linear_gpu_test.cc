// A linear layer's three FP8 GEMMs (linear.h) on CUDA — block_quant.cu's
// quantisers, TransposeTiles and cuBLASLt — against the CPU path of the same
// functions, bf16 inputs at trainer-like shapes (N tokens, in → out):
// 256 × 768 → 2304, 1024 × 768 → 3072, 1024 × 3072 → 768, and
// 208 × 304 → 1008 (multiples of 16, none of 128: each GEMM's K — in, out
// or N — ends in a short block). Written in a session without a GPU: it
// compiles, it has not run yet. Skips without a GPU.
//
// Bound. The quantisers write the same bits on both devices
// (block_quant_gpu_test.cc), so both GEMMs see the same operands; their
// sums differ in order and precision, so the outputs are not expected to
// agree bit for bit. With S = Σ_k |a_deq·b_deq| over those operands,
// dequantised exactly (block_testing.h's reference quantiser in linear.h's
// layouts; linear_test.cc shows they are the CPU path's):
//     CPU  |c − y_deq| ≤ γ_cpu·S,  γ_cpu = GemmRoundingGamma(K)         (f32 sums)
//     CUDA |g − y_deq| ≤ γ_gpu·S,  γ_gpu = GemmRoundingGamma(K, 2⁻¹³)
// (tensor-core partial sums within a 128 K block keep about 14 bits,
// promoted to f32 per block: block_gemm_gpu_test.cc's header), so
//     |g − c| ≤ (γ_gpu + γ_cpu)·S,
// and a bf16 output rounds g once more (nearest: ≤ 2⁻⁸·|g|):
//     |ĝ − c| ≤ (γ_gpu + γ_cpu)·S + 2⁻⁸·(|c| + (γ_gpu + γ_cpu)·S).
// Each output is checked against c (the CPU path, f32 output) and against
// y_deq (γ_gpu·S, + 2⁻⁸·(|y_deq| + γ_gpu·S) for bf16), and prints its worst
// error against the f32-accumulation bound (γ_cpu) as information. The
// inputs are BlockyMatrix's (each 128 block its own power of two), so a
// quantiser or scale layout that differs from the CPU's is off by orders of
// magnitude, not by a hair.
//
// The CPU reference on sampled rows. The CPU GEMM is naive O(M·N·K): a
// whole 1024 × 3072 × 768 product is 2.4e9 multiply-adds. But a row of
// y = x·Wᵀ or dx = dy·W depends only on its row of x or dy (1×128 blocks
// along in or out stay within the row) and all of W; a row o of
// dW = dyᵀ·x only on column o of dy (1×128 blocks along N stay within the
// column) and all of x. So the CPU path runs the same function on the
// sampled rows (columns of dy for wgrad) — bit for bit the rows the full
// call would give — three per 128 block of that dimension (its first row,
// one inside, its last), so every block of the sampled operand meets all
// of the other: about 7.5e8 multiply-adds in all, CPU path and reference.
// The CUDA output is complete: poisoned (0xff bytes: NaN) before the first
// run, every element must be finite, and a second run into 0x5a bytes must
// give the same bits (the algorithm is cached per shape).
//
// beta = 1 (the weight gradient accumulated over micro-batches): dw f32
// holding P (|P| of the order of S), Fp8LinearBackwardWeight(…, 1) gives
// cuBLASLt's epilogue alpha·acc + beta·C in f32. Against c + P:
//     |d − (c + P)| ≤ (γ_gpu + γ_cpu)·S + 2⁻²⁰·(|P| + S),
// the last term allowing up to 16 f32 roundings of sums of P and partials
// (an epilogue that folds C into a split-K reduction rounds more than
// once). Ignoring beta, adding P twice or overwriting it errs by |P|, about
// S/2: far outside. The fraction of outputs equal to fl(g₀ + P) bit for
// bit (g₀: the beta 0 output of the same shape) is printed as information.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/cuda_runtime.h"
#include "core/dtype.h"
#include "core/kernels/fp8/block_quant.h"
#include "core/kernels/fp8/block_testing.h"
#include "core/kernels/fp8/gpu_env.h"
#include "core/kernels/fp8/linear.h"
#include "core/kernels/ops.h"
#include "core/kernels/testing/harness.h"
#include "core/tensor.h"
#include "gtest/gtest.h"

namespace gtp::kernels::fp8 {
namespace {

using testing::BlockyMatrix;
using testing::Floats;
using testing::GemmRoundingGamma;
using testing::MakeMatrix;
using testing::RefDequantize;
using testing::RefQuantize;
using testing::RefQuantized;
using testing::RefRoundTrip;
using testing::Transpose;
using Env = testing::GpuEnv;

#define SKIP_WITHOUT_GPU() \
  if (CudaDeviceCount() == 0) GTEST_SKIP() << NoGpuReason()

constexpr Fp8Layout kRow = Fp8Layout::kRow1x128, kTile = Fp8Layout::kTile128x128;
// The tensor cores' partial sums within a K block (block_gemm_gpu_test.cc).
constexpr double kTensorCoreU = 0x1p-13;

using LinearFn = void (*)(const Exec&, const Tensor&, const Tensor&, const Tensor&, float);

struct Dims {
  int64_t N, in, out;
};



// The rows idx of v [R, C], and its columns idx.
std::vector<float> Rows(const std::vector<float>& v, int64_t C, const std::vector<int64_t>& idx) {
  std::vector<float> s;
  for (const int64_t r : idx) s.insert(s.end(), v.begin() + r * C, v.begin() + (r + 1) * C);
  return s;
}
std::vector<float> Cols(const std::vector<float>& v, int64_t R, int64_t C,
                        const std::vector<int64_t>& idx) {
  std::vector<float> s;
  for (int64_t r = 0; r < R; ++r)
    for (const int64_t c : idx) s.push_back(v[r * C + c]);
  return s;
}

// Three rows of every 128 block of [0, R): first, one inside, last.
std::vector<int64_t> Sampled(int64_t R) {
  std::vector<int64_t> idx;
  for (int64_t b = 0; b < R; b += kFp8Block) {
    const int64_t last = std::min(R, b + kFp8Block) - 1;
    for (const int64_t r : {b, std::min(b + 61, last), last})
      if (idx.empty() || r > idx.back()) idx.push_back(r);
  }
  return idx;
}

// One function at one shape: its device inputs, and the CPU path and the
// double reference on the sampled rows of its output [M, N].
struct Case {
  std::string name;
  LinearFn fn;
  Tensor first, second;  // on the GPU
  int64_t M = 0, N = 0, K = 0;
  std::vector<int64_t> rows;   // sampled output rows
  std::vector<float> cpu;      // the CPU path's f32 output on them [rows, N]
  std::vector<double> deq, S;  // y_deq and S on them
};

// The double product a [R, K]·b [N, K]ᵀ and Σ_k |a_k·b_k|, into c.deq, c.S.
void Reference(Case* c, const std::vector<double>& a, const std::vector<double>& b) {
  const int64_t R = static_cast<int64_t>(c->rows.size()), N = c->N, K = c->K;
  c->deq.assign(static_cast<size_t>(R * N), 0.0);
  c->S.assign(static_cast<size_t>(R * N), 0.0);
  for (int64_t m = 0; m < R; ++m) {
    for (int64_t n = 0; n < N; ++n) {
      double y = 0, S = 0;
      for (int64_t k = 0; k < K; ++k) {
        const double p = a[m * K + k] * b[n * K + k];
        y += p;
        S += std::fabs(p);
      }
      c->deq[m * N + n] = y;
      c->S[m * N + n] = S;
    }
  }
}

// The CPU path of fn on host inputs into an f32 [rows, N].
std::vector<float> RunCpu(const Exec& cpu, LinearFn fn, const Tensor& first, const Tensor& second,
                          int64_t rows, int64_t N) {
  Tensor y = MakeMatrix(kernels::testing::NaNs(static_cast<size_t>(rows * N)), rows, N, *cpu.alloc);
  fn(cpu, first, second, y, 0.0f);
  return Floats(y);
}

// The layer's three cases: x [N, in], w [out, in], dy [N, out], bf16.
std::vector<Case> MakeCases(Env& env, Dims d) {
  const Exec& cpu = env.cpu;
  Allocator& host = *cpu.alloc;
  const Tensor x = MakeMatrix(BlockyMatrix(d.N, d.in, 1), d.N, d.in, host, DType::kBF16);
  const Tensor w = MakeMatrix(BlockyMatrix(d.out, d.in, 2), d.out, d.in, host, DType::kBF16);
  const Tensor dy = MakeMatrix(BlockyMatrix(d.N, d.out, 3), d.N, d.out, host, DType::kBF16);
  const std::vector<float> xv = Floats(x), wv = Floats(w), dyv = Floats(dy);
  const Tensor gx = env.Up(x), gw = env.Up(w), gdy = env.Up(dy);
  auto as_bf16 = [&](const std::vector<float>& v, int64_t R, int64_t C) {
    return MakeMatrix(v, R, C, host, DType::kBF16);  // exact: v holds bf16 values
  };
  const std::vector<double> w_tiles = RefRoundTrip(wv, d.out, d.in, kTile);
  std::vector<Case> cases(3);

  Case& fwd = cases[0];  // y [N, out] = x·Wᵀ, K = in
  fwd = {"forward y = x·Wᵀ", Fp8Linear, gx, gw, d.N, d.out, d.in, Sampled(d.N)};
  const int64_t rf = static_cast<int64_t>(fwd.rows.size());
  const std::vector<float> x_rows = Rows(xv, d.in, fwd.rows);
  fwd.cpu = RunCpu(cpu, Fp8Linear, as_bf16(x_rows, rf, d.in), w, rf, d.out);
  Reference(&fwd, RefRoundTrip(x_rows, rf, d.in, kRow), w_tiles);

  Case& dgrad = cases[1];  // dx [N, in] = dy·W, K = out
  dgrad = {"dgrad dx = dy·W", Fp8LinearBackwardData, gdy, gw, d.N, d.in, d.out, Sampled(d.N)};
  const int64_t rd = static_cast<int64_t>(dgrad.rows.size());
  const std::vector<float> dy_rows = Rows(dyv, d.out, dgrad.rows);
  dgrad.cpu = RunCpu(cpu, Fp8LinearBackwardData, as_bf16(dy_rows, rd, d.out), w, rd, d.in);
  Reference(&dgrad, RefRoundTrip(dy_rows, rd, d.out, kRow), Transpose(w_tiles, d.out, d.in));

  Case& wgrad = cases[2];  // dW [out, in] = dyᵀ·x, K = N
  wgrad = {"wgrad dW = dyᵀ·x", Fp8LinearBackwardWeight, gdy, gx, d.out, d.in, d.N, Sampled(d.out)};
  const int64_t rw = static_cast<int64_t>(wgrad.rows.size());
  const std::vector<float> dy_cols = Cols(dyv, d.N, d.out, wgrad.rows);  // [N, rw]
  wgrad.cpu = RunCpu(cpu, Fp8LinearBackwardWeight, as_bf16(dy_cols, d.N, rw), x, rw, d.in);
  Reference(&wgrad, RefRoundTrip(Transpose(dy_cols, d.N, rw), rw, d.N, kRow),
            RefRoundTrip(Transpose(xv, d.N, d.in), d.in, d.N, kRow));
  return cases;
}

struct Worst {
  double vs_cpu = 0, vs_deq = 0, vs_deq_f32 = 0;  // max |Δ|/bound
};

// The GPU output got [M, N] on the sampled rows against the CPU path and
// y_deq, as in the header; P (full [M, N], f32 y only) is what y held
// before a beta 1 call, empty for beta 0.
Worst ExpectWithinBounds(const Case& c, const std::vector<float>& got, DType y_type,
                         const std::vector<float>& P = {}) {
  const double g_gpu = GemmRoundingGamma(c.K, kTensorCoreU), g_cpu = GemmRoundingGamma(c.K);
  const double u_out = y_type == DType::kBF16 ? 0x1p-8 : 0.0;
  Worst w;
  int64_t failures = 0;
  for (size_t j = 0; j < c.rows.size(); ++j) {
    const int64_t m = c.rows[j];
    for (int64_t n = 0; n < c.N; ++n) {
      const size_t i = j * c.N + n, gi = static_cast<size_t>(m * c.N + n);
      const double S = c.S[i], p = P.empty() ? 0.0 : P[gi];
      const double beta_term = P.empty() ? 0.0 : 0x1p-20 * (std::fabs(p) + S);
      const double cpu = c.cpu[i] + p, deq = c.deq[i] + p, v = got[gi];
      const double b_cpu =
          (g_gpu + g_cpu) * S + u_out * (std::fabs(cpu) + (g_gpu + g_cpu) * S) + beta_term;
      const double b_deq = g_gpu * S + u_out * (std::fabs(deq) + g_gpu * S) + beta_term;
      const double b_f32 = g_cpu * S + u_out * (std::fabs(deq) + g_cpu * S) + beta_term;
      const double e_cpu = std::fabs(v - cpu), e_deq = std::fabs(v - deq);
      if (!(e_cpu <= b_cpu && e_deq <= b_deq)) {
        if (failures++ < 8)
          ADD_FAILURE() << c.name << " y[" << m << "][" << n << "] = " << v << ": CPU path " << cpu
                        << " (|Δ| " << e_cpu << ", bound " << b_cpu << "), dequantised " << deq
                        << " (|Δ| " << e_deq << ", bound " << b_deq << ")";
        continue;
      }
      if (b_cpu > 0) w.vs_cpu = std::max(w.vs_cpu, e_cpu / b_cpu);
      if (b_deq > 0) w.vs_deq = std::max(w.vs_deq, e_deq / b_deq);
      if (b_f32 > 0) w.vs_deq_f32 = std::max(w.vs_deq_f32, e_deq / b_f32);
    }
  }
  EXPECT_EQ(failures, 0) << c.name << ": outputs outside the bound (first 8 above)";
  return w;
}

class Fp8LinearGpuTest : public ::testing::TestWithParam<Dims> {};

// Each function, bf16 and f32 outputs, beta 0; then beta 1 into an f32 dW.
TEST_P(Fp8LinearGpuTest, MatchesTheCpuPathWithinTheDerivedBound) {
  SKIP_WITHOUT_GPU();
  const Dims d = GetParam();
  Env env;
  std::vector<Case> cases = MakeCases(env, d);
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    for (const DType y_type : {DType::kBF16, DType::kF32}) {
      SCOPED_TRACE(std::string("y ") + DTypeName(y_type));
      std::vector<uint8_t> first;
      for (const uint8_t poison : {uint8_t{0xff}, uint8_t{0x5a}}) {
        const Tensor y = env.Poisoned({c.M, c.N}, y_type, poison);
        c.fn(env.gpu, c.first, c.second, y, 0.0f);
        std::vector<uint8_t> bytes = env.Down(y);
        if (!first.empty()) {
          ASSERT_TRUE(bytes == first) << "two runs differ";
          continue;
        }
        first = std::move(bytes);
      }
      const std::vector<float> got = kernels::testing::LoadAs(first, y_type);
      for (size_t i = 0; i < got.size(); ++i)
        ASSERT_TRUE(std::isfinite(got[i]))
            << "y[" << i / c.N << "][" << i % c.N << "] = " << got[i];
      const Worst w = ExpectWithinBounds(c, got, y_type);
      std::printf(
          "%-18s N=%-4lld in=%-4lld out=%-4lld y %-4s (%zu rows checked): worst |Δ|/bound vs CPU "
          "%.3f, vs dequantised %.3f; vs the f32-accumulation bound %.3f\n",
          c.name.c_str(), static_cast<long long>(d.N), static_cast<long long>(d.in),
          static_cast<long long>(d.out), DTypeName(y_type), c.rows.size(), w.vs_cpu, w.vs_deq,
          w.vs_deq_f32);
    }
  }

  // beta = 1 into an f32 dW holding P.
  const Case& c = cases[2];
  SCOPED_TRACE(c.name + ", beta 1");
  const Tensor g0_t = env.Poisoned({c.M, c.N}, DType::kF32, 0xff);
  c.fn(env.gpu, c.first, c.second, g0_t, 0.0f);
  const std::vector<float> g0 = env.DownFloats(g0_t);
  // P ≈ S on the sampled rows (so a lost or doubled P is far outside the
  // bound), ≈ the output elsewhere.
  const std::vector<float> u = kernels::testing::Rng(7).Uniform(g0.size(), -1.0f, 1.0f);
  std::vector<float> P(g0.size());
  for (size_t i = 0; i < P.size(); ++i) P[i] = u[i] * std::fabs(g0[i]);
  for (size_t j = 0; j < c.rows.size(); ++j)
    for (int64_t n = 0; n < c.N; ++n) {
      const size_t gi = static_cast<size_t>(c.rows[j] * c.N + n);
      P[gi] = static_cast<float>(u[gi] * c.S[j * c.N + n]);
    }
  const Tensor dw = env.Up(MakeMatrix(P, c.M, c.N, *env.cpu.alloc));
  c.fn(env.gpu, c.first, c.second, dw, 1.0f);
  const std::vector<float> got = env.DownFloats(dw);
  int64_t exact = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_TRUE(std::isfinite(got[i])) << "dw[" << i / c.N << "][" << i % c.N << "] = " << got[i];
    exact += got[i] == g0[i] + P[i];
  }
  const Worst w = ExpectWithinBounds(c, got, DType::kF32, P);
  std::printf(
      "%-18s N=%-4lld in=%-4lld out=%-4lld dw f32 += (beta 1): worst |Δ|/bound vs CPU %.3f; "
      "%lld of %zu outputs are fl(g0 + P) bit for bit\n",
      c.name.c_str(), static_cast<long long>(d.N), static_cast<long long>(d.in),
      static_cast<long long>(d.out), w.vs_cpu, static_cast<long long>(exact), got.size());
}

INSTANTIATE_TEST_SUITE_P(Shapes, Fp8LinearGpuTest,
                         ::testing::Values(Dims{256, 768, 2304}, Dims{1024, 768, 3072},
                                           Dims{1024, 3072, 768}, Dims{208, 304, 1008}),
                         [](const ::testing::TestParamInfo<Dims>& i) {
                           return "N" + std::to_string(i.param.N) + "_in" +
                                  std::to_string(i.param.in) + "_out" + std::to_string(i.param.out);
                         });

}  // namespace
}  // namespace gtp::kernels::fp8
