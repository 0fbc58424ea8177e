#include "core/cuda_runtime.h"

#include <atomic>

#include "absl/strings/str_cat.h"

namespace gtp {

absl::Status CudaStatus(cudaError_t err, const std::string& what) {
  if (err == cudaSuccess) return absl::OkStatus();
  std::string msg = absl::StrCat(what, ": CUDA error ", static_cast<int>(err), " (",
                                 cudaGetErrorName(err), "): ", cudaGetErrorString(err));
  switch (err) {
    case cudaErrorMemoryAllocation: return absl::ResourceExhaustedError(msg);
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorInvalidDevice: return absl::FailedPreconditionError(msg);
    default: return absl::InternalError(msg);
  }
}

int CudaDeviceCount() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky-free error state
    return 0;
  }
  return n;
}

absl::StatusOr<int> CudaComputeCapability(int device) {
  int major = 0, minor = 0;
  GTP_CUDA_RETURN_IF_ERROR(
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  GTP_CUDA_RETURN_IF_ERROR(
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  return 10 * major + minor;
}

std::string NoGpuReason() {
  int n = 0;
  cudaError_t err = cudaGetDeviceCount(&n);
  (void)cudaGetLastError();
  return absl::StrCat("no CUDA device visible (cudaGetDeviceCount: ", cudaGetErrorString(err),
                      "); run GPU tests on the GPU machine: tools/gpu.sh bundle here, bash tools/gpu.sh run there");
}

void CudaStreamDeleter::operator()(cudaStream_t s) const {
  if (s) cudaStreamDestroy(s);
}
void CudaEventDeleter::operator()(cudaEvent_t e) const {
  if (e) cudaEventDestroy(e);
}

absl::StatusOr<Stream> Stream::Create(int device, int priority) {
  GTP_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
  cudaStream_t s = nullptr;
  GTP_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, priority));
  Stream out;
  out.stream_.reset(s);
  out.device_ = device;
  return out;
}

namespace {
// Instrumentation only (a counter, never read by the library itself).
std::atomic<int64_t> g_host_syncs{0};
}  // namespace

int64_t HostSyncCount() { return g_host_syncs.load(std::memory_order_relaxed); }
void internal::CountHostSync() { g_host_syncs.fetch_add(1, std::memory_order_relaxed); }

absl::Status Stream::Synchronize() const {
  internal::CountHostSync();
  return CudaStatus(cudaStreamSynchronize(get()), "cudaStreamSynchronize");
}

absl::StatusOr<Event> Event::Create(bool timing) {
  cudaEvent_t e = nullptr;
  GTP_CUDA_RETURN_IF_ERROR(
      cudaEventCreateWithFlags(&e, timing ? cudaEventDefault : cudaEventDisableTiming));
  Event out;
  out.event_.reset(e);
  return out;
}

void Event::Record(cudaStream_t stream) const { GTP_CUDA_CHECK(cudaEventRecord(get(), stream)); }
void Event::WaitOn(cudaStream_t stream) const {
  GTP_CUDA_CHECK(cudaStreamWaitEvent(stream, get(), 0));
}
absl::Status Event::Synchronize() const {
  internal::CountHostSync();
  return CudaStatus(cudaEventSynchronize(get()), "cudaEventSynchronize");
}
float Event::ElapsedMs(const Event& start, const Event& stop) {
  float ms = 0;
  GTP_CUDA_CHECK(cudaEventElapsedTime(&ms, start.get(), stop.get()));
  return ms;
}

}  // namespace gtp
