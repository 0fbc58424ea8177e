// comm/nccl/internal/nccl_calls.h — the NCCL backend's call helpers: dtype
// and reduction mapping, device-buffer checks, settling a non-blocking call, the f32-accumulating
// reductions of bf16/f16, and running a blocking call under a timeout.
// Private to comm/nccl.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "comm/communicator.h"
#include "core/dtype.h"

namespace gtp::comm::nccl_internal {

// Our dtypes as NCCL's (fp8 and raw bytes travel as bytes).
ncclDataType_t NcclType(DType d);
// kMax / kMin, else sum (kMean divides afterwards).
ncclRedOp_t NcclOp(ReduceOp op);
// Polls a non-blocking communicator until the last call settled (OK at once
// for blocking ones); DeadlineExceeded after `deadline`.
absl::Status Settle(ncclComm_t comm, ncclResult_t r, absl::Time deadline, const std::string& what);
absl::Status Cuda(cudaError_t e, const char* what);
// internal::CheckBuffer, and the memory must be the device's: NCCL reads and
// writes through the GPU, so a host pointer (a scalar on the stack, say) is
// refused by name instead of failing or hanging inside a kernel.
absl::Status CheckDeviceBuffer(int64_t count, const void* p, const char* what);
// Widen -> NCCL in f32 -> narrow, on `stream`; `settle` settles NCCL calls.
absl::Status F32Accumulate(bool reduce_scatter, ncclComm_t comm, int nranks, const void* send,
                           void* recv, int64_t count, DType dtype, ReduceOp op, cudaStream_t stream,
                           const std::function<absl::Status(ncclResult_t)>& settle);
// Runs `fn` on a helper thread and waits at most `timeout` for it. On
// timeout `on_timeout` runs (it should unblock fn, e.g. by aborting the
// communicator fn uses) and the helper is waited for another second, then
// left behind (detached) if still stuck.
absl::Status WithTimeout(const std::function<absl::Status()>& fn, absl::Duration timeout,
                         const std::function<void()>& on_timeout, const std::string& what);

}  // namespace gtp::comm::nccl_internal
