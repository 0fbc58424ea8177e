// The CUDA quantisers (block_quant.cu, behind block_quant.h) against the CPU
// ones, which block_quant_test.cc checks against a reference in double.
// Every function, both layouts, f32 and bf16 data, shapes from 0×0 and 1×1
// to 1024×4096 with edge blocks: codes byte for byte, scales bit for bit
// (a NaN scale is the constant 0x7fc00000 on both sides), dequantised values
// bit for bit except that a NaN matches any NaN (x86 and the GPU propagate
// different payloads through e4m3⁻¹(0x7f)·NaN). The data run from f32
// subnormals to ~1e34: rows scaled by 1e30, 1e-30 and 1e-39 (f32
// subnormals; the scale clamp at FLT_MIN), zero blocks and a zero tile (with −0), and in a second
// variant NaN, +inf and −inf at random places. Each call runs twice, its
// outputs poisoned first with 0xff bytes (NaN / code 0xff, which the CPU
// never writes), then with 0x5a bytes (finite); both runs must match the CPU
// and each other bit for bit, so an unwritten element fails. Skips without a
// GPU.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/cuda_runtime.h"
#include "core/dtype.h"
#include "core/kernels/fp8/block_quant.h"
#include "core/kernels/fp8/block_testing.h"
#include "core/kernels/fp8/gpu_env.h"
#include "core/kernels/fp8/lt_scale_layout.h"
#include "core/kernels/ops.h"
#include "core/kernels/testing/gpu.h"
#include "core/kernels/testing/harness.h"
#include "core/tensor.h"
#include "gtest/gtest.h"

namespace gtp::kernels::fp8 {
namespace {

using testing::Bytes;
using testing::MakeMatrix;
using ByteVec = std::vector<uint8_t>;

#define SKIP_WITHOUT_GPU() \
  if (CudaDeviceCount() == 0) GTEST_SKIP() << NoGpuReason()

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// R × C normal values times a power of two in [2⁻¹⁰, 2¹⁰] per 1×128 block;
// rows r ≡ 3 (mod 7) times 1e30, r ≡ 5 (mod 7) times 1e-30, r ≡ 8 (mod 13)
// times 1e-39 (subnormal and tiny normal f32: amax < 448·FLT_MIN, so the
// scale clamps); rows r ≡ 1 (mod 5) have one zero block (−0 in its odd
// columns); rows [0, 128) × columns [128, 256) (a whole tile when R ≥ 128
// and C ≥ 256) are zero. With nonfinite, 1 + R·C/50000 each of NaN, +inf,
// −inf at random elements.
std::vector<float> TestMatrix(int64_t R, int64_t C, uint64_t seed, bool nonfinite) {
  const int64_t n = R * C, cb = Fp8NumBlocks(C);
  kernels::testing::Rng rng(seed);
  std::vector<float> x = rng.Normal(static_cast<size_t>(n));
  const std::vector<int32_t> e = rng.Ints(static_cast<size_t>(R * cb), -10, 10);
  for (int64_t r = 0; r < R; ++r) {
    const float row = r % 13 == 8 ? 1e-39f : r % 7 == 3 ? 1e30f : r % 7 == 5 ? 1e-30f : 1.0f;
    for (int64_t c = 0; c < C; ++c) {
      float& v = x[r * C + c];
      v = std::ldexp(v, e[r * cb + c / 128]) * row;
      if (r % 5 == 1 && c / 128 == (r / 5) % cb) v = c % 2 ? -0.0f : 0.0f;
      if (r < 128 && c >= 128 && c < 256) v = c % 2 ? -0.0f : 0.0f;
    }
  }
  if (nonfinite && n > 0) {
    const int32_t k = static_cast<int32_t>(1 + n / 50000);
    const std::vector<int32_t> at =
        rng.Ints(static_cast<size_t>(3 * k), 0, static_cast<int32_t>(n - 1));
    for (int32_t i = 0; i < 3 * k; ++i) x[at[i]] = i < k ? kNaN : i < 2 * k ? kInf : -kInf;
  }
  return x;
}

using Env = testing::GpuEnv;

// Element i of a byte vector of dtype t as f32 (f32 or bf16), and its bits.
float ValueAt(const ByteVec& b, DType t, size_t i) {
  if (t == DType::kF32) {
    float f;
    std::memcpy(&f, b.data() + 4 * i, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, b.data() + 2 * i, 2);
  return BF16BitsToF32(h);
}
std::string HexAt(const ByteVec& b, size_t size, size_t i) {
  std::ostringstream s;
  s << "0x" << std::hex;
  for (size_t k = size; k-- > 0;) s << (b[i * size + k] >> 4) << (b[i * size + k] & 15);
  return s.str();
}

// got == want element by element (elements of `t`, rows of `cols` for the
// message); with nans_match, floats that are NaN on both sides match.
::testing::AssertionResult SameElements(const ByteVec& got, const ByteVec& want, DType t,
                                        int64_t cols, bool nans_match) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << "size " << got.size() << " != " << want.size();
  const size_t size = SizeOf(t), n = got.size() / size;
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < n; ++i) {
    if (std::memcmp(got.data() + i * size, want.data() + i * size, size) == 0) continue;
    if (nans_match && std::isnan(ValueAt(got, t, i)) && std::isnan(ValueAt(want, t, i))) continue;
    if (bad++ == 0) first = i;
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  auto f = ::testing::AssertionFailure();
  f << bad << " of " << n << " elements differ; the first at [" << first / cols << ", "
    << first % cols << "]: got " << HexAt(got, size, first) << ", want "
    << HexAt(want, size, first);
  if (size > 1) f << " (" << ValueAt(got, t, first) << " vs " << ValueAt(want, t, first) << ")";
  return f;
}

// One output of an op: the CPU's result; `values` for dequantised data
// (NaNs match by NaN-ness), else codes or scales (bit for bit).
struct Out {
  const char* name;
  Tensor cpu;
  bool values = false;
};

// Runs op(device outputs) twice, the outputs shaped like the CPU's and
// poisoned with 0xff then 0x5a bytes; each run must equal the CPU and the
// second run the first, bit for bit.
template <typename Op>
void ExpectGpuMatchesCpu(Env& env, const std::string& what, const std::vector<Out>& outs, Op op) {
  std::vector<ByteVec> first;
  for (int run = 0; run < 2; ++run) {
    std::vector<Tensor> dev;
    for (const Out& o : outs)
      dev.push_back(env.Poisoned(o.cpu.shape(), o.cpu.dtype(), run == 0 ? 0xff : 0x5a));
    op(dev);
    for (size_t k = 0; k < outs.size(); ++k) {
      const Tensor& c = outs[k].cpu;
      const int64_t cols = c.rank() == 2 && c.dim(1) > 0 ? c.dim(1) : 1;
      ByteVec got = env.Down(dev[k]);
      EXPECT_TRUE(SameElements(got, Bytes(c), c.dtype(), cols, outs[k].values))
          << what << ": " << outs[k].name << " " << c.shape().ToString() << ", run " << run;
      if (run == 0) {
        first.push_back(std::move(got));
      } else {
        EXPECT_TRUE(SameElements(got, first[k], c.dtype(), cols, /*nans_match=*/false))
            << what << ": " << outs[k].name << ": the two runs differ";
      }
    }
  }
}

struct Case {
  int64_t R, C;
};

class BlockQuantGpuTest : public ::testing::TestWithParam<Case> {};

TEST_P(BlockQuantGpuTest, EveryFunctionMatchesCpuBitForBit) {
  SKIP_WITHOUT_GPU();
  const auto [R, C] = GetParam();
  Env env;
  const Exec& cpu = env.cpu;
  const Exec& gpu = env.gpu;
  constexpr Fp8Layout kRow = Fp8Layout::kRow1x128, kTile = Fp8Layout::kTile128x128;
  for (const bool nonfinite : {false, true}) {
    const std::vector<float> data = TestMatrix(R, C, 1000 * R + C, nonfinite);
    for (const DType t : {DType::kF32, DType::kBF16}) {
      const std::string tag = std::string(DTypeName(t)) + (nonfinite ? ", with NaN/inf" : "");
      SCOPED_TRACE(tag);
      const Tensor x = MakeMatrix(data, R, C, *cpu.alloc, t);
      const Tensor gx = env.Up(x);

      for (const Fp8Layout l : {kRow, kTile}) {
        const std::string lt = std::string(Fp8LayoutName(l)) + ", " + tag;
        // QuantizeBlocks, with the scales' cuBLASLt copy (whose layout the
        // CPU takes from lt_scale_layout.h; block_gemm_gpu_test's probe
        // checks that against cuBLASLt).
        const bool tiles = l == kTile;
        const Tensor q = env.HostOut({R, C}, DType::kF8E4M3);
        const Tensor s = env.HostOut(Fp8ScaleShape(R, C, l), DType::kF32);
        const Tensor ls = env.HostOut({LtScaleCount(tiles, R, C)}, DType::kF32);
        QuantizeBlocks(cpu, x, l, q, s, ls);
        ExpectGpuMatchesCpu(env, "QuantizeBlocks(" + lt + ")",
                            {{"q", q}, {"scales", s}, {"lt_scales", ls}},
                            [&](const std::vector<Tensor>& o) {
                              QuantizeBlocks(gpu, gx, l, o[0], o[1], o[2]);
                            });
        // DequantizeBlocks of the CPU's codes, into f32 and bf16.
        const Tensor gq = env.Up(q), gs = env.Up(s);
        for (const DType yt : {DType::kF32, DType::kBF16}) {
          const Tensor y = env.HostOut({R, C}, yt);
          DequantizeBlocks(cpu, q, s, l, y);
          ExpectGpuMatchesCpu(env, "DequantizeBlocks(" + lt + ") into " + DTypeName(yt),
                              {{"y", y, /*values=*/true}}, [&](const std::vector<Tensor>& o) {
                                DequantizeBlocks(gpu, gq, gs, l, o[0]);
                              });
        }
        if (l == kRow) {
          // RequantizeRowsTransposed of the CPU's 1×128 codes.
          const Tensor qt = env.HostOut({C, R}, DType::kF8E4M3);
          const Tensor st = env.HostOut(Fp8ScaleShape(C, R, kRow), DType::kF32);
          RequantizeRowsTransposed(cpu, q, s, qt, st);
          ExpectGpuMatchesCpu(env, "RequantizeRowsTransposed(" + tag + ")",
                              {{"qt", qt}, {"scales_t", st}}, [&](const std::vector<Tensor>& o) {
                                RequantizeRowsTransposed(gpu, gq, gs, o[0], o[1]);
                              });
        } else {
          // TransposeTiles of the CPU's 128×128 codes (u8 outputs: either
          // code dtype is accepted).
          const Tensor qt = env.HostOut({C, R}, DType::kU8);
          const Tensor st = env.HostOut(Fp8ScaleShape(C, R, kTile), DType::kF32);
          const Tensor lst = env.HostOut({LtScaleCount(true, C, R)}, DType::kF32);
          TransposeTiles(cpu, q, s, qt, st, lst);
          ExpectGpuMatchesCpu(env, "TransposeTiles(" + tag + ")",
                              {{"qt", qt}, {"scales_t", st}, {"lt_scales", lst}},
                              [&](const std::vector<Tensor>& o) {
                                TransposeTiles(gpu, gq, gs, o[0], o[1], o[2]);
                              });
          // Both from one pass over x (the fused kernel).
          ExpectGpuMatchesCpu(env, "QuantizeTilesAndTransposed(" + tag + ")",
                              {{"q", q},
                               {"scales", s},
                               {"qt", qt},
                               {"scales_t", st},
                               {"lt_scales", ls},
                               {"lt_scales_t", lst}},
                              [&](const std::vector<Tensor>& o) {
                                QuantizeTilesAndTransposed(gpu, gx, o[0], o[1], o[2], o[3], o[4],
                                                           o[5]);
                              });
        }
        if (R >= 128 && C >= 256) {
          // The data reach what they are meant to (not a comparison with the GPU).
          const std::vector<float> sv = testing::Floats(s);
          int nan = 0, one = 0, clamped = 0;
          for (float v : sv) {
            nan += std::isnan(v);
            one += v == 1.0f;
            clamped += v == kMinBlockScale;
          }
          EXPECT_EQ(nan > 0, nonfinite) << lt;
          if (!nonfinite) {
            EXPECT_GT(one, 0) << lt << ": no zero block";
            if (l == kRow) {
              EXPECT_GT(clamped, 0) << lt << ": no clamped scale";
            }
          }
        }
      }

      // QuantizeRowsTransposed (u8 codes).
      const Tensor qt = env.HostOut({C, R}, DType::kU8);
      const Tensor st = env.HostOut(Fp8ScaleShape(C, R, kRow), DType::kF32);
      const Tensor lst = env.HostOut({LtScaleCount(false, C, R)}, DType::kF32);
      QuantizeRowsTransposed(cpu, x, qt, st, lst);
      ExpectGpuMatchesCpu(env, "QuantizeRowsTransposed(" + tag + ")",
                          {{"qt", qt}, {"scales_t", st}, {"lt_scales", lst}},
                          [&](const std::vector<Tensor>& o) {
                            QuantizeRowsTransposed(gpu, gx, o[0], o[1], o[2]);
                          });
      // Both 1×128 quantisations from one read (the fused kernel for bf16).
      const Tensor q = env.HostOut({R, C}, DType::kF8E4M3);
      const Tensor s = env.HostOut(Fp8ScaleShape(R, C, kRow), DType::kF32);
      const Tensor ls = env.HostOut({LtScaleCount(false, R, C)}, DType::kF32);
      QuantizeRowsAndTransposed(cpu, x, q, s, qt, st, ls, lst);
      ExpectGpuMatchesCpu(env, "QuantizeRowsAndTransposed(" + tag + ")",
                          {{"q", q},
                           {"scales", s},
                           {"qt", qt},
                           {"scales_t", st},
                           {"lt_scales", ls},
                           {"lt_scales_t", lst}},
                          [&](const std::vector<Tensor>& o) {
                            QuantizeRowsAndTransposed(gpu, gx, o[0], o[1], o[2], o[3], o[4], o[5]);
                          });
      // With column sums (+=, into f32 and bf16 sums from the same start):
      // the CPU's fixed order, bit for bit (NaN columns match by NaN-ness).
      for (const DType sum_t : {DType::kF32, DType::kBF16}) {
        std::vector<float> s0(static_cast<size_t>(C));
        for (int64_t c = 0; c < C; ++c) s0[c] = 0.25f * static_cast<float>(c % 5) - 0.5f;
        const Tensor sums = MakeMatrix(s0, 1, C, *cpu.alloc, sum_t).View({C});
        const Tensor gsums = env.Up(sums);
        QuantizeRowsAndTransposed(cpu, x, q, s, qt, st, Tensor(), Tensor(), sums);
        const Tensor gq = env.Up(q), gs = env.Up(s), gqt = env.Up(qt), gst = env.Up(st);
        QuantizeRowsAndTransposed(gpu, gx, gq, gs, gqt, gst, Tensor(), Tensor(), gsums);
        EXPECT_TRUE(SameElements(env.Down(gsums), Bytes(sums), sum_t, C, /*nans_match=*/true))
            << "column sums into " << DTypeName(sum_t) << ", " << tag;
      }
    }
  }
}

// QuantizeActRowsAndTransposed on the GPU (the fused kernel where C % 8 ==
// 0; the composition else) against that composition on the GPU — the GELU
// kernel (ops::GeluForward, or GeluBackward from dy and pre) into bf16, then
// QuantizeRowsAndTransposed — bit for bit: codes, scales, their cuBLASLt
// copies and the column sums (into f32, from a nonzero start). Not against
// the CPU: its tanh is not the GPU's, so a few GELU values round to another
// bf16 (activation_gpu_test holds both GELU kernels to a double reference).
TEST_P(BlockQuantGpuTest, GeluInputsMatchTheGeluKernelThenTheQuantiser) {
  SKIP_WITHOUT_GPU();
  const auto [R, C] = GetParam();
  Env env;
  const Exec& gpu = env.gpu;
  constexpr Fp8Layout kRow = Fp8Layout::kRow1x128;
  // A host tensor with a device tensor's bytes (the reference outputs).
  auto host_copy = [&](const Tensor& d) {
    Tensor h = env.HostOut(d.shape(), d.dtype());
    const ByteVec b = env.Down(d);
    if (!b.empty()) std::memcpy(h.raw_data(), b.data(), b.size());
    return h;
  };
  for (const bool nonfinite : {false, true}) {
    const Tensor gx = env.Up(
        MakeMatrix(TestMatrix(R, C, 7000 * R + C, nonfinite), R, C, *env.cpu.alloc, DType::kBF16));
    const Tensor gpre = env.Up(
        MakeMatrix(TestMatrix(R, C, 9000 * R + C, false), R, C, *env.cpu.alloc, DType::kBF16));
    for (const Fp8InputAct act : {Fp8InputAct::kGelu, Fp8InputAct::kGeluGrad}) {
      const bool grad = act == Fp8InputAct::kGeluGrad;
      const std::string tag = std::string(grad ? "GeluGrad" : "Gelu") +
                              (nonfinite ? ", with NaN/inf" : "") + ", " + std::to_string(R) + "x" +
                              std::to_string(C);
      const Tensor pre = grad ? gpre : Tensor();
      std::vector<float> s0(static_cast<size_t>(C));
      for (int64_t c = 0; c < C; ++c) s0[c] = 0.25f * static_cast<float>(c % 5) - 0.5f;
      const Tensor sums0 = MakeMatrix(s0, 1, C, *env.cpu.alloc, DType::kF32).View({C});
      // The composition.
      const Tensor a = env.Poisoned({R, C}, DType::kBF16, 0x5a);
      if (grad) {
        ops::GeluBackward(gpu, gx, gpre, a);
      } else {
        ops::GeluForward(gpu, gx, a);
      }
      std::vector<Tensor> want{env.Poisoned({R, C}, DType::kF8E4M3, 0xff),
                               env.Poisoned(Fp8ScaleShape(R, C, kRow), DType::kF32, 0xff),
                               env.Poisoned({C, R}, DType::kF8E4M3, 0xff),
                               env.Poisoned(Fp8ScaleShape(C, R, kRow), DType::kF32, 0xff),
                               env.Poisoned({LtScaleCount(false, R, C)}, DType::kF32, 0xff),
                               env.Poisoned({LtScaleCount(false, C, R)}, DType::kF32, 0xff),
                               env.Up(sums0)};
      QuantizeRowsAndTransposed(gpu, a, want[0], want[1], want[2], want[3], want[4], want[5],
                                want[6]);
      std::vector<Out> outs{{"q", host_copy(want[0])},
                            {"scales", host_copy(want[1])},
                            {"qt", host_copy(want[2])},
                            {"scales_t", host_copy(want[3])},
                            {"lt_scales", host_copy(want[4])},
                            {"lt_scales_t", host_copy(want[5])},
                            {"column sums", host_copy(want[6]), /*values=*/true}};
      ExpectGpuMatchesCpu(env, "QuantizeActRowsAndTransposed(" + tag + ")", outs,
                          [&](const std::vector<Tensor>& o) {
                            // The sums accumulate: start them as the composition's did.
                            const Tensor start = env.Up(sums0);
                            QuantizeActRowsAndTransposed(gpu, act, gx, pre, o[0], o[1], o[2], o[3],
                                                         o[4], o[5], start);
                            ops::CopyInto(gpu, start, o[6]);
                          });
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, BlockQuantGpuTest,
                         ::testing::Values(Case{1, 1}, Case{3, 5}, Case{1, 300}, Case{300, 1},
                                           Case{128, 128}, Case{129, 257}, Case{300, 1000},
                                           Case{1024, 4096}, Case{0, 0}, Case{0, 200},
                                           Case{200, 0}),
                         [](const ::testing::TestParamInfo<Case>& i) {
                           return std::to_string(i.param.R) + "x" + std::to_string(i.param.C);
                         });

}  // namespace
}  // namespace gtp::kernels::fp8
