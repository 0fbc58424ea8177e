// GPU tests of the NVFP4 wire codec (kernels.h): ops::EncodeNvfp4 on a CUDA
// Exec must write the CPU's wire byte for byte (every byte: poisoned device
// buffers, and a guard zone past the wire that must stay untouched), and
// ops::DecodeNvfp4 must write the CPU's values bit for bit, for f32 and bf16
// on both sides, odd and large sizes, and inputs holding NaN or ±inf. The
// error bound itself is checked on the CPU (cpu/nvfp4_test.cc): equal bits
// carry it over.
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/allocator.h"
#include "core/cuda_runtime.h"
#include "core/kernels/ops.h"
#include "core/kernels/testing/gpu.h"
#include "core/kernels/testing/harness.h"
#include "core/status.h"
#include "core/tensor.h"
#include "gtest/gtest.h"

namespace gtp::kernels::testing {
namespace {

constexpr int64_t kGuard = 64;
// A size with many waves of the kernels' grid and a short last block.
constexpr int64_t kLarge = 3 * (int64_t{1} << 20) + 7;

// Values over many binades (whole blocks scaled together, so most blocks
// keep normal scale codes), an all-zero block, blocks far below the rest,
// subnormals; with `special`, one NaN or ±inf.
std::vector<float> Values(Rng& rng, int64_t n, float special) {
  std::vector<float> x = rng.Normal(n);
  const std::vector<float> mag = rng.Uniform((n + 15) / 16 + 1, -12.0f, 4.0f);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t b = i / 16;
    x[i] = std::ldexp(x[i], static_cast<int>(mag[b]));
    if (b % 9 == 2) x[i] = 0.0f;
    if (b % 9 == 4) x[i] = std::ldexp(x[i], -40);
    if (b % 9 == 7 && i % 5 == 0) x[i] = 1e-40f;
  }
  if (n > 0 && special != 0) x[n / 2] = special;
  return x;
}

class Nvfp4Gpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (CudaDeviceCount() == 0) GTEST_SKIP() << NoGpuReason();
    stream_ = std::make_unique<Stream>(TestStream());
    gpu_alloc_ = std::make_unique<CudaCachingAllocator>(0);
    gpu_ = Exec{Device::Cuda(0), gpu_alloc_.get(), stream_->get(), nullptr, nullptr};
  }

  // A device buffer of `bytes` + kGuard bytes, every byte `fill`.
  Tensor Guarded(int64_t bytes, uint8_t fill) {
    Tensor t = gpu_.Empty({bytes + kGuard}, DType::kU8);
    GTP_CUDA_CHECK(cudaMemsetAsync(t.raw_data(), fill, t.nbytes(), stream_->get()));
    return t;
  }
  std::vector<uint8_t> Down(const Tensor& t) {
    GTP_CUDA_CHECK(cudaStreamSynchronize(stream_->get()));
    std::vector<uint8_t> v(t.nbytes());
    if (!v.empty()) {
      GTP_CUDA_CHECK(cudaMemcpy(v.data(), t.raw_data(), v.size(), cudaMemcpyDeviceToHost));
    }
    return v;
  }
  void Up(const std::vector<uint8_t>& host, const Tensor& t) {
    if (host.empty()) return;
    GTP_CUDA_CHECK(cudaMemcpyAsync(t.raw_data(), host.data(), host.size(), cudaMemcpyHostToDevice,
                                   stream_->get()));
    GTP_CUDA_CHECK(cudaStreamSynchronize(stream_->get()));
  }
  // The first `bytes` of a guarded buffer as a u8 tensor, or as n elements of t.
  static Tensor View(const Tensor& buf, int64_t n, DType t) {
    return Tensor::Wrap(buf.raw_data(), {n}, t, buf.device());
  }

  // CPU and GPU encode of x (as x_type), then CPU and GPU decode of the
  // CPU's wire as y_type: the same bytes.
  void ExpectSameBits(const std::vector<float>& xf, DType x_type, DType y_type) {
    const int64_t n = xf.size(), wire_bytes = Nvfp4WireBytes(n);
    std::vector<uint8_t> x = StoreAs(xf, x_type);
    std::vector<uint8_t> cpu_wire(wire_bytes, 0xff);
    ops::EncodeNvfp4(cpu_, Tensor::Wrap(x.data(), {n}, x_type, Device::Cpu()),
                     Tensor::Wrap(cpu_wire.data(), {wire_bytes}, DType::kU8, Device::Cpu()));

    Tensor d_x = gpu_.Empty({static_cast<int64_t>(x.size())}, DType::kU8);
    Up(x, d_x);
    Tensor d_wire = Guarded(wire_bytes, 0xff);
    ops::EncodeNvfp4(gpu_, View(d_x, n, x_type), View(d_wire, wire_bytes, DType::kU8));
    const std::vector<uint8_t> got = Down(d_wire);
    for (int64_t i = wire_bytes; i < wire_bytes + kGuard; ++i) {
      ASSERT_EQ(got[i], 0xff) << "GPU encode wrote past the wire at byte " << i;
    }
    for (int64_t i = 0; i < wire_bytes; ++i) {
      ASSERT_EQ(got[i], cpu_wire[i]) << "wire byte " << i << " of " << wire_bytes;
    }

    const int64_t y_bytes = n * SizeOf(y_type);
    std::vector<uint8_t> cpu_y(y_bytes, 0xff);
    ops::DecodeNvfp4(cpu_, Tensor::Wrap(cpu_wire.data(), {wire_bytes}, DType::kU8, Device::Cpu()),
                     Tensor::Wrap(cpu_y.data(), {n}, y_type, Device::Cpu()));
    Tensor c_wire = gpu_.Empty({wire_bytes}, DType::kU8);
    Up(cpu_wire, c_wire);
    Tensor d_y = Guarded(y_bytes, 0xff);
    ops::DecodeNvfp4(gpu_, c_wire, View(d_y, n, y_type));
    const std::vector<uint8_t> y = Down(d_y);
    for (int64_t i = y_bytes; i < y_bytes + kGuard; ++i) {
      ASSERT_EQ(y[i], 0xff) << "GPU decode wrote past y at byte " << i;
    }
    // Bit for bit, NaNs included (both write 0x7FC00000 / bf16 0x7FC0).
    for (int64_t i = 0; i < y_bytes; ++i) {
      ASSERT_EQ(y[i], cpu_y[i]) << "y byte " << i << " (element " << i / SizeOf(y_type) << ")";
    }
  }

  HeapAllocator heap_;
  Exec cpu_ = Exec::Cpu(heap_);
  std::unique_ptr<Stream> stream_;
  std::unique_ptr<CudaCachingAllocator> gpu_alloc_;
  Exec gpu_;
};

TEST_F(Nvfp4Gpu, EncodeAndDecodeBitIdenticalToCpu) {
  Rng rng(31);
  for (DType x_type : {DType::kF32, DType::kBF16}) {
    for (DType y_type : {DType::kF32, DType::kBF16}) {
      for (int64_t n :
           {int64_t{0}, int64_t{1}, int64_t{2}, int64_t{15}, int64_t{16}, int64_t{17}, int64_t{33},
            int64_t{63}, int64_t{64}, int64_t{65}, int64_t{1000}, int64_t{65536 + 9}, kLarge}) {
        SCOPED_TRACE(absl::StrCat("x=", DTypeName(x_type), " y=", DTypeName(y_type), " n=", n));
        ExpectSameBits(Values(rng, n, 0.0f), x_type, y_type);
      }
    }
  }
}

TEST_F(Nvfp4Gpu, NonFiniteInputsBitIdenticalToCpu) {
  Rng rng(32);
  const float kInf = std::numeric_limits<float>::infinity();
  for (float special : {std::numeric_limits<float>::quiet_NaN(), kInf, -kInf}) {
    for (DType t : {DType::kF32, DType::kBF16}) {
      for (int64_t n : {int64_t{1}, int64_t{35}, kLarge}) {
        SCOPED_TRACE(absl::StrCat("special=", special, " dtype=", DTypeName(t), " n=", n));
        ExpectSameBits(Values(rng, n, special), t, t);
      }
    }
  }
}

TEST_F(Nvfp4Gpu, ExtremeTensorScalesBitIdenticalToCpu) {
  // Tensor amax near FLT_MAX and far below FLT_MIN·2688 (g clamped), and a
  // tensor of subnormals only.
  Rng rng(33);
  for (float top : {std::numeric_limits<float>::max(), 1e-36f, 1e-44f}) {
    SCOPED_TRACE(absl::StrCat("amax ", top));
    std::vector<float> x = rng.Uniform(1001, -1.0f, 1.0f);
    for (float& v : x) v *= top;
    x[500] = -top;
    ExpectSameBits(x, DType::kF32, DType::kF32);
  }
}

TEST_F(Nvfp4Gpu, EncodeIsRepeatable) {
  // The amax goes through atomics: the wire must not depend on their order.
  Rng rng(34);
  const int64_t n = kLarge, wire_bytes = Nvfp4WireBytes(n);
  std::vector<uint8_t> x = StoreAs(Values(rng, n, 0.0f), DType::kF32);
  Tensor d_x = gpu_.Empty({n}, DType::kF32);
  Up(x, View(d_x, 4 * n, DType::kU8));
  std::vector<uint8_t> first;
  for (int rep = 0; rep < 3; ++rep) {
    Tensor d_wire = Guarded(wire_bytes, static_cast<uint8_t>(rep));
    ops::EncodeNvfp4(gpu_, d_x, View(d_wire, wire_bytes, DType::kU8));
    std::vector<uint8_t> w = Down(d_wire);
    w.resize(wire_bytes);
    if (rep == 0) first = w;
    EXPECT_TRUE(first == w) << "run " << rep;
  }
}

}  // namespace
}  // namespace gtp::kernels::testing
