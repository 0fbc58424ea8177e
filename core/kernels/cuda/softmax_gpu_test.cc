// GPU tests of cuda::SoftmaxForward/Backward against the CPU versions.
#include <cuda_runtime_api.h>

#include <cstring>
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

TEST(SoftmaxGpu, ForwardAndBackwardMatchCpu) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << NoGpuReason();
  Stream stream = TestStream();
  Rng rng(41);
  for (int64_t N : {1, 3, 257}) {
    for (int64_t C : {1, 3, 32, 257, 5000}) {
      SCOPED_TRACE(absl::StrCat("N=", N, " C=", C));
      // Large logits: the max subtraction must happen.
      const std::vector<float> x = rng.Normal(N * C, 50.0f, 10.0f), dy = rng.Normal(N * C);
      std::vector<float> y(N * C), dx(N * C);
      cpu::SoftmaxForward(x.data(), y.data(), N, C);
      cpu::SoftmaxBackward(dy.data(), y.data(), dx.data(), N, C);
      DeviceBuffer<float> d_x(x), d_dy(dy), d_y(N * C), d_yc(y), d_dx(N * C);
      cuda::SoftmaxForward(d_x.get(), d_y.get(), N, C, stream.get());
      // The backward gets the CPU's y, so it is tested on its own.
      cuda::SoftmaxBackward(d_dy.get(), d_yc.get(), d_dx.get(), N, C, stream.get());
      EXPECT_TRUE(RelClose(d_y.Download(), ToDouble(y), 1e-5));
      EXPECT_TRUE(RelClose(d_dx.Download(), ToDouble(dx), 1e-5));
    }
  }
}

}  // namespace
}  // namespace gtp::kernels::testing
