// GPU tests of the casts and blockwise fp8 (de)quantization: the GPU must
// produce the CPU's bits exactly (both use core/dtype.h's encoders and
// correctly rounded f32 division and multiplication).
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "core/cuda_runtime.h"
#include "core/kernels/cpu.h"
#include "core/kernels/cuda.h"
#include "core/kernels/testing/harness.h"
#include "core/status.h"
#include "gtest/gtest.h"

namespace gtp::kernels::testing {
namespace {

// ---- GPU test helpers (repeated in each cuda/*_gpu_test.cc: a cc_test sees
// only its own source, so a shared header would need a BUILD target) --------

// Device memory for n elements of T, freed on scope exit. Every call
// synchronises the device, so tests may use any stream in between.
template <typename T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t n) : n_(n) {
    if (n_ > 0) GTP_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&ptr_), bytes()));
    Poison();
  }
  explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size()) { Upload(host); }
  ~DeviceBuffer() {
    if (ptr_ != nullptr) cudaFree(ptr_);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  T* get() const { return ptr_; }
  size_t size() const { return n_; }
  size_t bytes() const { return n_ * sizeof(T); }
  // All-ones bytes: NaN as f32 and bf16, NaN as fp8, -1 as an integer. An op
  // that leaves an output element unwritten fails the comparison.
  void Poison() {
    if (n_ == 0) return;
    GTP_CUDA_CHECK(cudaMemset(ptr_, 0xff, bytes()));
    GTP_CUDA_CHECK(cudaDeviceSynchronize());
  }
  void Upload(const std::vector<T>& host) {
    GTP_CHECK(host.size() == n_, "DeviceBuffer::Upload: size ", host.size(), " != ", n_);
    if (n_ == 0) return;
    GTP_CUDA_CHECK(cudaMemcpy(ptr_, host.data(), bytes(), cudaMemcpyHostToDevice));
    GTP_CUDA_CHECK(cudaDeviceSynchronize());
  }
  std::vector<T> Download() const {
    GTP_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<T> host(n_);
    if (n_ > 0) GTP_CUDA_CHECK(cudaMemcpy(host.data(), ptr_, bytes(), cudaMemcpyDeviceToHost));
    return host;
  }

 private:
  size_t n_;
  T* ptr_ = nullptr;
};

// A non-blocking stream on device 0 (kernels must not rely on the legacy
// default stream's implicit ordering).
Stream TestStream() {
  absl::StatusOr<Stream> s = Stream::Create(0);
  GTP_CHECK_OK(s.status());
  return std::move(*s);
}

// Same bits, except that NaNs of any payload match (x86 and the GPU produce
// different default NaNs).
template <typename T>
bool SameBits(const T& a, const T& b) {
  if constexpr (std::is_same_v<T, float>) {
    if (a != a && b != b) return true;
  }
  if constexpr (std::is_same_v<T, bf16>) {
    const auto nan = [](uint16_t u) { return (u & 0x7f80u) == 0x7f80u && (u & 0x7fu) != 0; };
    if (nan(a.bits) && nan(b.bits)) return true;
  }
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

// Passes when the two vectors hold the same bits (SameBits).
template <typename T>
::testing::AssertionResult BitEqual(const std::vector<T>& got, const std::vector<T>& want) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure() << "size " << got.size() << " != " << want.size();
  }
  for (size_t i = 0; i < got.size(); ++i) {
    if (!SameBits(got[i], want[i])) {
      auto failure = ::testing::AssertionFailure()
                     << "first difference at element " << i << " of " << got.size();
      if constexpr (std::is_same_v<T, float>) failure << ": got " << got[i] << ", want " << want[i];
      if constexpr (std::is_integral_v<T>) failure << ": got " << +got[i] << ", want " << +want[i];
      if constexpr (std::is_same_v<T, bf16>) {
        failure << ": got bits " << got[i].bits << ", want " << want[i].bits;
      }
      return failure;
    }
  }
  return ::testing::AssertionSuccess();
}
// ---- end of GPU test helpers -------------------------------------------------

const int64_t kSizes[] = {1, 3, 31, 32, 33, 257, 100003};

// BitEqual on f32 or bf16 data held as bytes.
::testing::AssertionResult SameData(const std::vector<uint8_t>& got,
                                    const std::vector<uint8_t>& want, DType t) {
  if (t == DType::kF32) {
    std::vector<float> g(got.size() / 4), w(want.size() / 4);
    std::memcpy(g.data(), got.data(), 4 * g.size());
    std::memcpy(w.data(), want.data(), 4 * w.size());
    return BitEqual(g, w);
  }
  std::vector<bf16> g(got.size() / 2), w(want.size() / 2);
  std::memcpy(g.data(), got.data(), 2 * g.size());
  std::memcpy(w.data(), want.data(), 2 * w.size());
  return BitEqual(g, w);
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
    EXPECT_TRUE(BitEqual(d_y.Download(), y));

    const std::vector<bf16> b = BF16Values(rng, n);
    std::vector<float> z(n);
    cpu::CastBF16ToF32(b.data(), z.data(), n);
    DeviceBuffer<bf16> d_b(b);
    DeviceBuffer<float> d_z(n);
    cuda::CastBF16ToF32(d_b.get(), d_z.get(), n, stream.get());
    EXPECT_TRUE(BitEqual(d_z.Download(), z));
  }
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
          const int64_t blocks = (n + kFp8BlockSize - 1) / kFp8BlockSize;
          // Input bytes in data_type; one all-zero block when there are several.
          std::vector<float> xf = Values(rng, n, specials);
          if (blocks > 2)
            std::fill(xf.begin() + kFp8BlockSize, xf.begin() + 2 * kFp8BlockSize, 0.0f);
          std::vector<uint8_t> x(n * SizeOf(data_type));
          if (data_type == DType::kF32) {
            std::memcpy(x.data(), xf.data(), x.size());
          } else {
            for (int64_t i = 0; i < n; ++i) {
              const uint16_t bits = F32ToBF16Bits(xf[i]);
              std::memcpy(x.data() + 2 * i, &bits, 2);
            }
          }
          std::vector<uint8_t> q(n);
          std::vector<float> scales(blocks);
          cpu::QuantizeFp8Blockwise(x.data(), data_type, q.data(), scales.data(), n, fmt);
          std::vector<uint8_t> y(n * SizeOf(data_type));
          cpu::DequantizeFp8Blockwise(q.data(), scales.data(), y.data(), data_type, n, fmt);

          DeviceBuffer<uint8_t> d_x(x), d_q(n), d_y(y.size());
          DeviceBuffer<float> d_scales(blocks);
          cuda::QuantizeFp8Blockwise(d_x.get(), data_type, d_q.get(), d_scales.get(), n, fmt,
                                     stream.get());
          EXPECT_TRUE(BitEqual(d_q.Download(), q));
          EXPECT_TRUE(BitEqual(d_scales.Download(), scales));
          // Dequantize from the CPU's codes, so this is tested on its own.
          DeviceBuffer<uint8_t> c_q(q);
          DeviceBuffer<float> c_scales(scales);
          cuda::DequantizeFp8Blockwise(c_q.get(), c_scales.get(), d_y.get(), data_type, n, fmt,
                                       stream.get());
          EXPECT_TRUE(SameData(d_y.Download(), y, data_type));
        }
      }
    }
  }
}

}  // namespace
}  // namespace gtp::kernels::testing
