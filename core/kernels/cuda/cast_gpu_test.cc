// GPU tests of the casts and blockwise fp8 (MXFP8) (de)quantization: the GPU
// must produce the CPU's bits exactly (both use core/dtype.h's encoders,
// kernels.h's E8M0 exponent and exact division and multiplication by a power
// of two).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "core/cuda_runtime.h"
#include "core/kernels/cpu.h"
#include "core/kernels/cuda.h"
#include "core/kernels/testing/gpu.h"
#include "core/kernels/testing/harness.h"
#include "core/status.h"
#include "gtest/gtest.h"

namespace gtp::kernels::testing {
namespace {

const int64_t kSizes[] = {1, 3, 31, 32, 33, 257, 100003};

// BitEqual on f32 or bf16 data held as bytes.
::testing::AssertionResult SameData(const std::vector<uint8_t>& got,
                                    const std::vector<uint8_t>& want, DType t) {
  if (t == DType::kF32) {
    std::vector<float> g(got.size() / 4), w(want.size() / 4);
    std::memcpy(g.data(), got.data(), 4 * g.size());
    std::memcpy(w.data(), want.data(), 4 * w.size());
    return BitEqualNaNsMatch(g, w);
  }
  std::vector<bf16> g(got.size() / 2), w(want.size() / 2);
  std::memcpy(g.data(), got.data(), 2 * g.size());
  std::memcpy(w.data(), want.data(), 2 * w.size());
  return BitEqualNaNsMatch(g, w);
}

// Random values over many binades, with special values sprinkled in: zeros,
// bf16 rounding ties, subnormals, huge values, ±inf and NaN.
std::vector<float> Values(Rng& rng, int64_t n, bool specials) {
  std::vector<float> x = rng.Normal(n);
  const std::vector<float> e = rng.Uniform(n, -30.0f, 30.0f);
  for (int64_t i = 0; i < n; ++i) x[i] = std::ldexp(x[i], static_cast<int>(e[i]));
  if (!specials) return x;
  const float kSpecial[] = {0.0f,
                            -0.0f,
                            1.0f + 1.0f / 256,  // bf16 tie, rounds to even
                            1.0f + 3.0f / 256,  // bf16 tie, rounds up
                            1e-40f,
                            -3e38f,
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN()};
  for (int64_t i = 0; i < n; i += 13) x[i] = kSpecial[(i / 13) % 9];
  return x;
}

std::vector<bf16> BF16Values(Rng& rng, int64_t n) {
  std::vector<float> x = Values(rng, n, true);
  std::vector<bf16> out(n);
  for (int64_t i = 0; i < n; ++i) out[i].bits = F32ToBF16Bits(x[i]);
  return out;
}

TEST(CastGpu, BitIdenticalToCpu) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << NoGpuReason();
  Stream stream = TestStream();
  Rng rng(71);
  for (int64_t n : kSizes) {
    SCOPED_TRACE(absl::StrCat("n=", n));
    const std::vector<float> x = Values(rng, n, true);
    std::vector<bf16> y(n);
    cpu::CastF32ToBF16(x.data(), y.data(), n);
    DeviceBuffer<float> d_x(x);
    DeviceBuffer<bf16> d_y(n);
    cuda::CastF32ToBF16(d_x.get(), d_y.get(), n, stream.get());
    EXPECT_TRUE(BitEqualNaNsMatch(d_y.Download(), y));

    const std::vector<bf16> b = BF16Values(rng, n);
    std::vector<float> z(n);
    cpu::CastBF16ToF32(b.data(), z.data(), n);
    DeviceBuffer<bf16> d_b(b);
    DeviceBuffer<float> d_z(n);
    cuda::CastBF16ToF32(d_b.get(), d_z.get(), n, stream.get());
    EXPECT_TRUE(BitEqualNaNsMatch(d_z.Download(), z));
  }
}

// CastMany: 37 pairs (three launches of at most 16) of the four kinds
// (f32 → bf16, bf16 → f32, f32 and bf16 copies) interleaved, contiguous
// ones from 0 elements up past one block's grid stride and column blocks
// with pitches wider than their rows: every output element must be the CPU
// cast's bits (the one-pair kernels'), or the source's for a copy, and
// every element between the rows must keep its poison.
TEST(CastGpu, ManyPairsBitIdenticalToCpu) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << NoGpuReason();
  Stream stream = TestStream();
  Rng rng(72);
  const int kPairs = 37;
  std::vector<std::unique_ptr<DeviceBuffer<uint8_t>>> src, dst;  // not movable
  std::vector<std::vector<uint8_t>> want;
  std::vector<cuda::CastPair> pairs;
  for (int i = 0; i < kPairs; ++i) {
    const DType st = i % 4 == 0 || i % 4 == 2 ? DType::kF32 : DType::kBF16;
    const DType dt = i % 4 == 1 || i % 4 == 2 ? DType::kF32 : DType::kBF16;
    cuda::CastPair p{};
    if (i % 5 == 2) {  // a column block
      p.rows = 3 + i, p.width = 1 + i % 17;
      p.src_pitch = p.width + i % 3, p.dst_pitch = p.width + (i + 1) % 3;
    } else {
      p.rows = 1, p.width = p.src_pitch = p.dst_pitch = i == 5 ? 0 : kSizes[i % 7] + i;
    }
    p.src_type = st, p.dst_type = dt;
    const int64_t n_in = p.rows * p.src_pitch, n_out = p.rows * p.dst_pitch;
    const size_t ss = SizeOf(st), ds = SizeOf(dt);
    std::vector<uint8_t> in(n_in * ss), out(n_out * ds, 0xff);  // poison between the rows
    if (st == DType::kF32) {
      const std::vector<float> x = Values(rng, n_in, true);
      std::memcpy(in.data(), x.data(), in.size());
    } else {
      const std::vector<bf16> x = BF16Values(rng, n_in);
      std::memcpy(in.data(), x.data(), in.size());
    }
    for (int64_t r = 0; r < p.rows; ++r) {
      const uint8_t* from = in.data() + r * p.src_pitch * ss;
      uint8_t* to = out.data() + r * p.dst_pitch * ds;
      if (st == dt) {
        std::memcpy(to, from, p.width * ss);
      } else if (st == DType::kF32) {
        std::vector<float> x(p.width);
        std::vector<bf16> y(p.width);
        std::memcpy(x.data(), from, 4 * p.width);
        cpu::CastF32ToBF16(x.data(), y.data(), p.width);
        std::memcpy(to, y.data(), 2 * p.width);
      } else {
        std::vector<bf16> x(p.width);
        std::vector<float> y(p.width);
        std::memcpy(x.data(), from, 2 * p.width);
        cpu::CastBF16ToF32(x.data(), y.data(), p.width);
        std::memcpy(to, y.data(), 4 * p.width);
      }
    }
    src.push_back(std::make_unique<DeviceBuffer<uint8_t>>(in));
    dst.push_back(std::make_unique<DeviceBuffer<uint8_t>>(out.size()));  // poisoned
    p.src = src.back()->get(), p.dst = dst.back()->get();
    pairs.push_back(p);
    want.push_back(out);
  }
  for (int i = 0; i < kPairs; i += cuda::kCastManyMax) {
    cuda::CastMany(pairs.data() + i, std::min(cuda::kCastManyMax, kPairs - i), stream.get());
  }
  for (int i = 0; i < kPairs; ++i) {
    SCOPED_TRACE(absl::StrCat("pair ", i, ": ", pairs[i].rows, " x ", pairs[i].width));
    EXPECT_TRUE(SameData(dst[i]->Download(), want[i], pairs[i].dst_type));
  }
}

// Blocks that stress the exponent choice: each block's amax sits exactly on,
// one f32 ulp below or one above fmt_max·2^k for k over the whole range, the
// other elements spread below it; plus FLT_MAX and subnormal-only blocks.
std::vector<float> BoundaryValues(Rng& rng, float fmt_max) {
  std::vector<float> x;
  for (int k = -140; k <= 112; k += 9) {
    const float edge = std::ldexp(fmt_max, k);
    if (edge == 0 || !std::isfinite(edge)) continue;
    for (float amax : {edge, std::nextafter(edge, 0.0f), std::nextafter(edge, 2 * edge)}) {
      const std::vector<float> u = rng.Uniform(kFp8BlockSize, -1.0f, 1.0f);
      for (int i = 0; i < kFp8BlockSize; ++i) x.push_back(i == 7 ? -amax : amax * u[i]);
    }
  }
  const float kMax = std::numeric_limits<float>::max();
  for (int i = 0; i < kFp8BlockSize; ++i) x.push_back(i % 3 == 0 ? kMax : -kMax / (i + 1));
  for (int i = 0; i < kFp8BlockSize; ++i) x.push_back(std::ldexp(1.0f + i, -140 - i % 5));
  return x;
}

// CPU quantize/dequantize of x (given as f32, stored as data_type), then the
// GPU's: codes, scales and outputs must be the CPU's bits.
void ExpectGpuMatchesCpu(const std::vector<float>& xf, DType data_type, DType fmt,
                         cudaStream_t stream) {
  const int64_t n = xf.size(), blocks = (n + kFp8BlockSize - 1) / kFp8BlockSize;
  std::vector<uint8_t> x(n * SizeOf(data_type));
  if (data_type == DType::kF32) {
    std::memcpy(x.data(), xf.data(), x.size());
  } else {
    for (int64_t i = 0; i < n; ++i) {
      const uint16_t bits = F32ToBF16Bits(xf[i]);
      std::memcpy(x.data() + 2 * i, &bits, 2);
    }
  }
  std::vector<uint8_t> q(n), scales(blocks);
  cpu::QuantizeFp8Blockwise(x.data(), data_type, q.data(), scales.data(), n, fmt);
  std::vector<uint8_t> y(n * SizeOf(data_type));
  cpu::DequantizeFp8Blockwise(q.data(), scales.data(), y.data(), data_type, n, fmt);

  DeviceBuffer<uint8_t> d_x(x), d_q(n), d_scales(blocks), d_y(y.size());
  cuda::QuantizeFp8Blockwise(d_x.get(), data_type, d_q.get(), d_scales.get(), n, fmt, stream);
  EXPECT_TRUE(BitEqualNaNsMatch(d_q.Download(), q));
  EXPECT_TRUE(BitEqualNaNsMatch(d_scales.Download(), scales));
  // Dequantize from the CPU's codes, so this is tested on its own.
  DeviceBuffer<uint8_t> c_q(q), c_scales(scales);
  cuda::DequantizeFp8Blockwise(c_q.get(), c_scales.get(), d_y.get(), data_type, n, fmt, stream);
  EXPECT_TRUE(SameData(d_y.Download(), y, data_type));
}

TEST(Fp8Gpu, QuantizeAndDequantizeBitIdenticalToCpu) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << NoGpuReason();
  Stream stream = TestStream();
  Rng rng(72);
  for (DType fmt : {DType::kF8E4M3, DType::kF8E5M2}) {
    for (DType data_type : {DType::kF32, DType::kBF16}) {
      for (int64_t n : kSizes) {
        for (bool specials : {false, true}) {
          SCOPED_TRACE(absl::StrCat("fmt=", DTypeName(fmt), " data=", DTypeName(data_type),
                                    " n=", n, " specials=", specials));
          // One all-zero block when there are several; partial last blocks
          // from the odd sizes; with specials, NaN/inf blocks (NaN scale).
          std::vector<float> xf = Values(rng, n, specials);
          const int64_t blocks = (n + kFp8BlockSize - 1) / kFp8BlockSize;
          if (blocks > 2)
            std::fill(xf.begin() + kFp8BlockSize, xf.begin() + 2 * kFp8BlockSize, 0.0f);
          ExpectGpuMatchesCpu(xf, data_type, fmt, stream.get());
        }
      }
    }
  }
}

TEST(Fp8Gpu, SaturationBoundaryAndExtremeScalesBitIdenticalToCpu) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << NoGpuReason();
  Stream stream = TestStream();
  Rng rng(73);
  for (DType fmt : {DType::kF8E4M3, DType::kF8E5M2}) {
    for (DType data_type : {DType::kF32, DType::kBF16}) {
      for (int64_t tail : {0, 5}) {  // whole blocks, then a partial last block
        SCOPED_TRACE(
            absl::StrCat("fmt=", DTypeName(fmt), " data=", DTypeName(data_type), " tail=", tail));
        std::vector<float> xf = BoundaryValues(rng, fmt == DType::kF8E4M3 ? kE4M3Max : kE5M2Max);
        xf.resize(xf.size() + kFp8BlockSize, 0.0f);  // an all-zero block
        for (int64_t i = 0; i < tail; ++i) xf.push_back(std::ldexp(1.0f, -3 * static_cast<int>(i)));
        ExpectGpuMatchesCpu(xf, data_type, fmt, stream.get());
      }
    }
  }
}

}  // namespace
}  // namespace gtp::kernels::testing
