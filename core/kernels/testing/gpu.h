// core/kernels/testing/gpu.h — helpers shared by the CUDA kernel tests:
// device buffers poisoned with NaN bytes, a non-blocking test stream, and
// bitwise comparisons (BitEqual fails on any NaN; BitEqualNaNsMatch lets
// NaNs of any payload match, for inputs that hold NaN on purpose).
#pragma once

#include <cuda_runtime_api.h>

#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "core/cuda_runtime.h"
#include "core/dtype.h"
#include "core/status.h"
#include "gtest/gtest.h"

namespace gtp::kernels::testing {

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
inline Stream TestStream() {
  absl::StatusOr<Stream> s = Stream::Create(0);
  GTP_CHECK_OK(s.status());
  return std::move(*s);
}

template <typename T>
bool IsNaN(const T& a) {
  if constexpr (std::is_same_v<T, float>) return a != a;
  if constexpr (std::is_same_v<T, bf16>) return (a.bits & 0x7f80u) == 0x7f80u && (a.bits & 0x7fu) != 0;
  return false;
}

// Same bits; with nans_match, NaNs of any payload match each other (x86 and
// the GPU produce different default NaNs).
template <typename T>
bool SameBits(const T& a, const T& b, bool nans_match) {
  if (nans_match && IsNaN(a) && IsNaN(b)) return true;
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

template <typename T>
::testing::AssertionResult CompareBits(const std::vector<T>& got, const std::vector<T>& want,
                                       bool nans_match) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure() << "size " << got.size() << " != " << want.size();
  }
  for (size_t i = 0; i < got.size(); ++i) {
    if (!nans_match && IsNaN(got[i])) {
      return ::testing::AssertionFailure() << "NaN at element " << i << " of " << got.size();
    }
    if (!SameBits(got[i], want[i], nans_match)) {
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

// Passes when the two vectors hold the same bits and `got` holds no NaN
// (a NaN in both is a bug in both, never a match).
template <typename T>
::testing::AssertionResult BitEqual(const std::vector<T>& got, const std::vector<T>& want) {
  return CompareBits(got, want, /*nans_match=*/false);
}

// The same bits, NaNs of any payload matching: for tests whose inputs hold
// NaN on purpose (casts of NaN, NaN-poisoned gradients).
template <typename T>
::testing::AssertionResult BitEqualNaNsMatch(const std::vector<T>& got,
                                             const std::vector<T>& want) {
  return CompareBits(got, want, /*nans_match=*/true);
}

}  // namespace gtp::kernels::testing
