#include "layers/tp_comm.h"

#include "absl/strings/str_cat.h"
#include "core/status.h"

namespace gtp::layers {

absl::StatusOr<Tensor> AllGatherRows(const kernels::Exec& e, comm::Communicator& group,
                                     const Tensor& x) {
  if (group.size() == 1) return x;
  Shape s = x.shape();
  s[0] *= group.size();
  Tensor out = e.Empty(s, x.dtype());
  GTP_RETURN_IF_ERROR(comm::Run(group.AllGather(x.raw_data(), out.raw_data(), x.numel(), x.dtype())));
  return out;
}

absl::StatusOr<Tensor> ReduceScatterRows(const kernels::Exec& e, comm::Communicator& group,
                                         const Tensor& x) {
  if (group.size() == 1) return x;
  Shape s = x.shape();
  if (s[0] % group.size() != 0) {
    return absl::InvalidArgumentError(absl::StrCat("sequence-parallel reduce-scatter of ",
                                                   x.ToString(), " over ", group.name(),
                                                   ": rows not divisible by ", group.size()));
  }
  s[0] /= group.size();
  Tensor out = e.Empty(s, x.dtype());
  GTP_RETURN_IF_ERROR(comm::Run(group.ReduceScatter(x.raw_data(), out.raw_data(), out.numel(),
                                                    x.dtype(), comm::ReduceOp::kSum)));
  return out;
}

absl::Status AllReduceSum(comm::Communicator& group, const Tensor& x) {
  if (group.size() == 1) return absl::OkStatus();
  return comm::Run(
      group.AllReduce(x.raw_data(), x.raw_data(), x.numel(), x.dtype(), comm::ReduceOp::kSum));
}

}  // namespace gtp::layers
