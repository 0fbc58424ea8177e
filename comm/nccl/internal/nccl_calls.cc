#include "comm/nccl/internal/nccl_calls.h"

#include <memory>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "comm/internal/ops.h"
#include "comm/nccl/accumulate_kernels.h"
#include "comm/nccl/nccl_communicator.h"
#include "core/cuda_runtime.h"
#include "core/status.h"

namespace gtp::comm {

absl::Status NcclStatus(ncclResult_t r, const std::string& what) {
  if (r == ncclSuccess) return absl::OkStatus();
  std::string msg =
      absl::StrCat(what, ": NCCL error ", static_cast<int>(r), " (", ncclGetErrorString(r), ")");
  // NCCL's own account of the failure ("Cuda failure 'out of memory'", the
  // call that failed): what "run with NCCL_DEBUG=INFO" would have printed.
  if (const char* last = ncclGetLastError(nullptr); last != nullptr && *last != '\0') {
    absl::StrAppend(&msg, ": ", last);
  }
  switch (r) {
    case ncclInvalidArgument:
    case ncclInvalidUsage:
      return absl::InvalidArgumentError(msg);
    case ncclRemoteError:
      return absl::UnavailableError(msg);
    case ncclInProgress:
      return absl::UnavailableError(msg + " still in progress");
    default:
      return absl::InternalError(msg);
  }
}

namespace nccl_internal {

// internal::CheckBuffer, and the memory must be the device's: NCCL reads and
// writes through the GPU, so a host pointer (a scalar on the stack, say) is
// refused here, by name, instead of failing or hanging inside a kernel.
absl::Status CheckDeviceBuffer(int64_t count, const void* p, const char* what) {
  GTP_RETURN_IF_ERROR(internal::CheckBuffer(count, p, what));
  if (count == 0 || p == nullptr) return absl::OkStatus();
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    cudaGetLastError();  // clear it: an unknown pointer is host memory
    a.type = cudaMemoryTypeUnregistered;
  }
  if (a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      what,
      " is host memory; the NCCL backend moves device memory (send host values through a "
      "host backend, e.g. the trainer's UCX world)"));
}

ncclDataType_t NcclType(DType d) {
  switch (d) {
    case DType::kF32:
      return ncclFloat32;
    case DType::kBF16:
      return ncclBfloat16;
    case DType::kF16:
      return ncclFloat16;
    case DType::kI32:
      return ncclInt32;
    case DType::kI64:
      return ncclInt64;
    default:
      return ncclUint8;  // fp8 and raw bytes travel as bytes
  }
}

ncclRedOp_t NcclOp(ReduceOp op) {
  switch (op) {
    case ReduceOp::kMax:
      return ncclMax;
    case ReduceOp::kMin:
      return ncclMin;
    default:
      return ncclSum;
  }
}

// Polls a non-blocking communicator until the last call settled.
absl::Status Settle(ncclComm_t comm, ncclResult_t r, absl::Time deadline, const std::string& what) {
  if (r == ncclSuccess) return absl::OkStatus();  // blocking communicators
  if (r != ncclInProgress) return NcclStatus(r, what);
  for (;;) {
    ncclResult_t state = ncclSuccess;
    ncclResult_t q = ncclCommGetAsyncError(comm, &state);
    if (q != ncclSuccess) return NcclStatus(q, what);
    if (state == ncclSuccess) return absl::OkStatus();
    if (state != ncclInProgress) return NcclStatus(state, what);
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(absl::StrCat(what, ": did not settle in time"));
    }
    std::this_thread::yield();
  }
}

absl::Status Cuda(cudaError_t e, const char* what) { return CudaStatus(e, what); }

absl::Status F32Accumulate(bool reduce_scatter, ncclComm_t comm, int nranks, const void* send,
                           void* recv, int64_t count, DType dtype, ReduceOp op, cudaStream_t stream,
                           const std::function<absl::Status(ncclResult_t)>& settle) {
  if (dtype != DType::kBF16 && dtype != DType::kF16) {
    return absl::InvalidArgumentError("f32 accumulation is for bf16 and f16");
  }
  if (op != ReduceOp::kSum && op != ReduceOp::kMean) {
    return absl::InvalidArgumentError("f32 accumulation is for sum and mean");
  }
  if (count == 0) return absl::OkStatus();
  const int64_t in = reduce_scatter ? nranks * count : count;
  float* scratch = nullptr;
  GTP_RETURN_IF_ERROR(Cuda(
      cudaMallocAsync(reinterpret_cast<void**>(&scratch), (in + count) * sizeof(float), stream),
      "cudaMallocAsync"));
  float* out = scratch + in;
  absl::Status st = Cuda(LaunchWiden(dtype, send, scratch, in, stream), "widen");
  if (st.ok()) {
    st = settle(reduce_scatter
                    ? ncclReduceScatter(scratch, out, count, ncclFloat32, ncclSum, comm, stream)
                    : ncclAllReduce(scratch, out, count, ncclFloat32, ncclSum, comm, stream));
  }
  if (st.ok()) {
    st = Cuda(LaunchNarrow(dtype, out, recv, count, op == ReduceOp::kMean ? nranks : 1, stream),
              "narrow");
  }
  absl::Status freed = Cuda(cudaFreeAsync(scratch, stream), "cudaFreeAsync");
  return st.ok() ? freed : st;
}

absl::Status WithTimeout(const std::function<absl::Status()>& fn, absl::Duration timeout,
                         const std::function<void()>& on_timeout, const std::string& what) {
  struct Shared {
    absl::Mutex mu;
    bool done = false;
    absl::Status status;
  };
  auto sh = std::make_shared<Shared>();
  std::thread t([sh, fn] {
    absl::Status st = fn();
    absl::MutexLock l(&sh->mu);
    sh->status = st;
    sh->done = true;
  });
  absl::MutexLock l(&sh->mu);
  if (sh->mu.AwaitWithTimeout(absl::Condition(&sh->done), timeout)) {
    t.join();
    return sh->status;
  }
  sh->mu.Unlock();
  if (on_timeout) on_timeout();
  sh->mu.Lock();
  if (sh->mu.AwaitWithTimeout(absl::Condition(&sh->done), absl::Seconds(1))) {
    t.join();
  } else {
    t.detach();
  }
  return absl::DeadlineExceededError(
      absl::StrCat(what, " did not complete within ", absl::FormatDuration(timeout)));
}

}  // namespace nccl_internal

absl::Status ReduceScatterF32Accumulate(ncclComm_t comm, int nranks, const void* send, void* recv,
                                        int64_t count, DType dtype, ReduceOp op,
                                        cudaStream_t stream) {
  return nccl_internal::F32Accumulate(
      true, comm, nranks, send, recv, count, dtype, op, stream, [&](ncclResult_t r) {
        return nccl_internal::Settle(comm, r, absl::Now() + absl::Seconds(60), "ncclReduceScatter");
      });
}

absl::Status AllReduceF32Accumulate(ncclComm_t comm, int nranks, const void* send, void* recv,
                                    int64_t count, DType dtype, ReduceOp op, cudaStream_t stream) {
  return nccl_internal::F32Accumulate(
      false, comm, nranks, send, recv, count, dtype, op, stream, [&](ncclResult_t r) {
        return nccl_internal::Settle(comm, r, absl::Now() + absl::Seconds(60), "ncclAllReduce");
      });
}

}  // namespace gtp::comm
