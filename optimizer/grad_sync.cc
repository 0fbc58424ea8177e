#include "optimizer/grad_sync.h"

#include "absl/strings/str_cat.h"
#include "core/status.h"

namespace gtp::optimizer {

namespace ops = kernels::ops;

namespace {
absl::Status AllReduce(comm::Communicator* c, const Tensor& t, comm::ReduceOp op,
                       const std::string& what) {
  if (c == nullptr || c->size() == 1) return absl::OkStatus();
  absl::Status st = comm::Run(c->AllReduce(t.raw_data(), t.raw_data(), t.numel(), t.dtype(), op));
  if (!st.ok()) {
    return absl::Status(st.code(), absl::StrCat("finalising the gradient of ", what, " over ",
                                                c->name(), ": ", st.message()));
  }
  return absl::OkStatus();
}
}  // namespace

absl::Status FinalizeGrads(const ParamSet& params, const parallel::ProcessGroupCollection& pgs) {
  GTP_ASSIGN_OR_RETURN(comm::Communicator * replicate, pgs.Get(parallel::groups::kReplicate));
  GTP_ASSIGN_OR_RETURN(comm::Communicator * data_cp, pgs.Get(parallel::groups::kDataCp));
  GTP_ASSIGN_OR_RETURN(comm::Communicator * tp, pgs.Get(parallel::groups::kTp));
  for (layers::ShardedParam* p : params.sharded) {
    GTP_RETURN_IF_ERROR(AllReduce(replicate, p->main_grad(), comm::ReduceOp::kMean, p->name()));
  }
  for (layers::ReplicatedParam* p : params.replicated) {
    if (p->grad_needs_tp_sum) GTP_RETURN_IF_ERROR(AllReduce(tp, p->grad, comm::ReduceOp::kSum, p->name));
    GTP_RETURN_IF_ERROR(AllReduce(data_cp, p->grad, comm::ReduceOp::kMean, p->name));
  }
  return absl::OkStatus();
}

void ZeroGrads(const ParamSet& params, const kernels::Exec& exec) {
  for (layers::ShardedParam* p : params.sharded) ops::Fill(exec, p->main_grad(), 0.0f);
  for (layers::ReplicatedParam* p : params.replicated) ops::Fill(exec, p->grad, 0.0f);
}

void SgdStep(const ParamSet& params, const kernels::Exec& exec, float lr) {
  for (layers::ShardedParam* p : params.sharded) {
    ops::Axpby(exec, -lr, p->main_grad(), 1.0f, p->shard());
    p->MarkUpdated();
  }
  for (layers::ReplicatedParam* p : params.replicated) ops::Axpby(exec, -lr, p->grad, 1.0f, p->value);
}

}  // namespace gtp::optimizer
