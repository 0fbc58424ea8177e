#include "comm/host_values.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status.h"

namespace gtp::comm {
namespace {

Tensor HostView(const void* values, int64_t n, DType dtype) {
  return Tensor::Wrap(const_cast<void*>(values), {n}, dtype, Device::Cpu());
}

absl::Status NeedsDevice(const Communicator& c, const Staging& stage) {
  if (stage.device != nullptr && stage.device->device().is_cuda()) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "host values over ", c.name(), " (", c.backend(),
      ") need a GPU allocator to stage through (comm::Staging::device)"));
}

// A device buffer of n elements, holding `values` when upload.
absl::StatusOr<Tensor> ToDevice(const void* values, int64_t n, DType dtype, const Staging& stage,
                                bool upload) {
  GTP_ASSIGN_OR_RETURN(Tensor t, Tensor::TryEmpty({n}, dtype, *stage.device));
  if (upload) GTP_RETURN_IF_ERROR(Copy(HostView(values, n, dtype), t, stage.stream, /*sync=*/true));
  return t;
}

}  // namespace

bool MovesDeviceMemory(const Communicator& c) { return c.backend() == "nccl"; }

absl::Status AllReduceHost(Communicator& c, void* values, int64_t n, DType dtype, ReduceOp op,
                           const Staging& stage) {
  if (c.size() == 1 || n == 0) return absl::OkStatus();
  if (!MovesDeviceMemory(c)) return Run(c.AllReduce(values, values, n, dtype, op));
  GTP_RETURN_IF_ERROR(NeedsDevice(c, stage));
  GTP_ASSIGN_OR_RETURN(Tensor d, ToDevice(values, n, dtype, stage, /*upload=*/true));
  GTP_ASSIGN_OR_RETURN(WorkPtr w, c.AllReduce(d.raw_data(), d.raw_data(), n, dtype, op));
  GTP_RETURN_IF_ERROR(w->Synchronize());
  return Copy(d, HostView(values, n, dtype), stage.stream, /*sync=*/true);
}

absl::Status AllGatherHost(Communicator& c, const void* send, void* recv, int64_t n, DType dtype,
                           const Staging& stage) {
  if (n == 0) return absl::OkStatus();
  const int64_t total = n * c.size();
  if (!MovesDeviceMemory(c)) return Run(c.AllGather(send, recv, n, dtype));
  GTP_RETURN_IF_ERROR(NeedsDevice(c, stage));
  GTP_ASSIGN_OR_RETURN(Tensor s, ToDevice(send, n, dtype, stage, /*upload=*/true));
  GTP_ASSIGN_OR_RETURN(Tensor r, ToDevice(nullptr, total, dtype, stage, /*upload=*/false));
  GTP_ASSIGN_OR_RETURN(WorkPtr w, c.AllGather(s.raw_data(), r.raw_data(), n, dtype));
  GTP_RETURN_IF_ERROR(w->Synchronize());
  return Copy(r, HostView(recv, total, dtype), stage.stream, /*sync=*/true);
}

absl::Status BroadcastHost(Communicator& c, void* values, int64_t n, DType dtype, int root,
                           const Staging& stage) {
  if (n == 0) return absl::OkStatus();
  if (!MovesDeviceMemory(c)) return Run(c.Broadcast(values, n, dtype, root));
  GTP_RETURN_IF_ERROR(NeedsDevice(c, stage));
  GTP_ASSIGN_OR_RETURN(Tensor d, ToDevice(values, n, dtype, stage, /*upload=*/c.rank() == root));
  GTP_ASSIGN_OR_RETURN(WorkPtr w, c.Broadcast(d.raw_data(), n, dtype, root));
  GTP_RETURN_IF_ERROR(w->Synchronize());
  return Copy(d, HostView(values, n, dtype), stage.stream, /*sync=*/true);
}

absl::Status HostExchange::Send(const void* values, int64_t n, DType dtype, int peer, int tag) {
  Pending p;
  const void* buf = values;
  if (MovesDeviceMemory(c_)) {
    GTP_RETURN_IF_ERROR(NeedsDevice(c_, stage_));
    GTP_ASSIGN_OR_RETURN(p.staged, ToDevice(values, n, dtype, stage_, /*upload=*/true));
    buf = p.staged.raw_data();
  }
  GTP_ASSIGN_OR_RETURN(p.work, c_.Send(buf, n, dtype, peer, tag));
  pending_.push_back(std::move(p));
  return absl::OkStatus();
}

absl::Status HostExchange::Recv(void* values, int64_t n, DType dtype, int peer, int tag) {
  Pending p;
  void* buf = values;
  if (MovesDeviceMemory(c_)) {
    GTP_RETURN_IF_ERROR(NeedsDevice(c_, stage_));
    GTP_ASSIGN_OR_RETURN(p.staged, ToDevice(nullptr, n, dtype, stage_, /*upload=*/false));
    p.host = values;
    buf = p.staged.raw_data();
  }
  GTP_ASSIGN_OR_RETURN(p.work, c_.Recv(buf, n, dtype, peer, tag));
  pending_.push_back(std::move(p));
  return absl::OkStatus();
}

absl::Status HostExchange::Wait() {
  std::vector<Pending> pending = std::move(pending_);
  pending_.clear();
  absl::Status st;
  for (Pending& p : pending) st.Update(p.work->Synchronize());
  GTP_RETURN_IF_ERROR(st);
  for (Pending& p : pending) {
    if (p.host == nullptr) continue;
    GTP_RETURN_IF_ERROR(Copy(p.staged, HostView(p.host, p.staged.numel(), p.staged.dtype()),
                             stage_.stream, /*sync=*/true));
  }
  return absl::OkStatus();
}

}  // namespace gtp::comm
