// core/cuda_runtime.h — CUDA runtime wrappers: error conversion, device
// discovery, owned streams and events.
//
// Functions returning absl::Status do so for failures outside the program
// (no driver, no device, out of memory). GTP_CUDA_CHECK aborts with file:line;
// use it for calls that cannot fail in a correct program (launch checks).
// Everything here is safe to call on a machine without a GPU:
// CudaDeviceCount() then returns 0.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/status.h"

namespace gtp {

// Converts a CUDA error into a Status naming `what`. cudaSuccess -> OkStatus.
absl::Status CudaStatus(cudaError_t err, const std::string& what);

#define GTP_CUDA_CHECK(expr)                                                  \
  do {                                                                        \
    cudaError_t gtp_cuda_err_ = (expr);                                       \
    GTP_CHECK(gtp_cuda_err_ == cudaSuccess, #expr, ": ",                      \
              cudaGetErrorString(gtp_cuda_err_));                             \
  } while (0)

#define GTP_CUDA_RETURN_IF_ERROR(expr) GTP_RETURN_IF_ERROR(::gtp::CudaStatus((expr), #expr))

// Number of visible CUDA devices; 0 when there is no driver or no device.
// Never fails; thread-safe.
int CudaDeviceCount();

// Device `device`'s compute capability as 10·major + minor (90: Hopper), or
// an error naming the device.
absl::StatusOr<int> CudaComputeCapability(int device);

// Reason string for tests to GTEST_SKIP with when CudaDeviceCount() == 0.
std::string NoGpuReason();

struct CudaStreamDeleter {
  void operator()(cudaStream_t s) const;
};
struct CudaEventDeleter {
  void operator()(cudaEvent_t e) const;
};
using CudaStreamPtr = std::unique_ptr<std::remove_pointer_t<cudaStream_t>, CudaStreamDeleter>;
using CudaEventPtr = std::unique_ptr<std::remove_pointer_t<cudaEvent_t>, CudaEventDeleter>;

// How many times this process has made the host wait for the GPU through
// core (Stream/Event::Synchronize, Copy with sync): tests use it to prove
// that a training step is enqueued without waiting. Thread-safe.
int64_t HostSyncCount();
namespace internal {
void CountHostSync();
}  // namespace internal

// An owned, non-blocking CUDA stream on one device.
class Stream {
 public:
  // Creates a stream on `device` (makes it current on this thread).
  static absl::StatusOr<Stream> Create(int device, int priority = 0);
  cudaStream_t get() const { return stream_.get(); }
  int device() const { return device_; }
  // Blocks the host until all work queued so far has finished.
  absl::Status Synchronize() const;

 private:
  CudaStreamPtr stream_;
  int device_ = 0;
};

// An owned CUDA event (timing enabled when asked).
class Event {
 public:
  static absl::StatusOr<Event> Create(bool timing = false);
  cudaEvent_t get() const { return event_.get(); }
  // Records on `stream`; never blocks.
  void Record(cudaStream_t stream) const;
  // Makes `stream` wait for this event; never blocks the host.
  void WaitOn(cudaStream_t stream) const;
  absl::Status Synchronize() const;
  // Milliseconds between two recorded, completed timing events.
  static float ElapsedMs(const Event& start, const Event& stop);

 private:
  CudaEventPtr event_;
};

}  // namespace gtp
