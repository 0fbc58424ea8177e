#include "layers/moe/all_gather_dispatcher.h"

#include "core/status.h"
#include "layers/linear.h"
#include "layers/moe/combine.h"
#include "layers/moe/internal/dispatch_math.h"
#include "layers/moe/routing.h"

namespace gtp::layers::moe {

namespace ops = kernels::ops;
using dispatch_internal::Offsets;
using dispatch_internal::SumInRankOrder;

AllGatherDispatcher::AllGatherDispatcher(const DispatchSetup& s)
    : s_(s),
      e_loc_(s.num_experts / s.ep->size()),
      ep_rank_(s.ep->rank()),
      G_(static_cast<int64_t>(s.ep->size()) * s.etp->size()) {}

absl::StatusOr<Tensor> AllGatherDispatcher::GatherGroup(const Tensor& x) {
  Tensor cur = x;
  for (comm::Communicator* g : {s_.ep, s_.etp}) {
    if (g->size() == 1) continue;
    Tensor out = s_.exec.Empty({g->size() * cur.dim(0), cur.dim(1)}, cur.dtype());
    GTP_RETURN_IF_ERROR(
        comm::Run(g->AllGather(cur.raw_data(), out.raw_data(), cur.numel(), cur.dtype())));
    cur = out;
  }
  return cur;
}

absl::StatusOr<Tensor> AllGatherDispatcher::ReduceScatterGroup(const Tensor& x) {
  const kernels::Exec& exec = s_.exec;
  Tensor cur = x;
  for (comm::Communicator* g : {s_.etp, s_.ep}) {
    if (g->size() == 1) continue;
    const int R = g->size();
    const int64_t m = cur.dim(0) / R, C = cur.dim(1);
    Tensor parts = exec.Empty({R * m, C}, cur.dtype());
    if (m > 0) {
      GTP_RETURN_IF_ERROR(
          comm::Run(g->AllToAll(cur.raw_data(), parts.raw_data(), m * C, cur.dtype())));
    }
    cur = SumInRankOrder(exec, parts, R);
  }
  if (cur.dtype() == DType::kF32) return cur;
  Tensor out = exec.Empty(cur.shape(), DType::kF32);
  ops::Cast(exec, cur, out);
  return out;
}

absl::StatusOr<Tensor> AllGatherDispatcher::Dispatch(const Tensor& x, const RouterOutput& r) {
  const kernels::Exec& e = s_.exec;
  const int64_t S = s_.rows * s_.top_k, GS = G_ * S;
  GTP_ASSIGN_OR_RETURN(Tensor xg, GatherGroup(x));  // [G·rows, C]
  GTP_ASSIGN_OR_RETURN(Tensor eg, GatherGroup(r.expert.View({S, 1})));
  GTP_ASSIGN_OR_RETURN(Tensor wg, GatherGroup(r.weight.View({S, 1})));
  w_d_ = wg.View({GS});
  // The gathered slots of this rank's experts, in the all-to-all's order:
  // local expert, then (etp rank, ep rank, token, j).
  Tensor local = e.Empty({GS}, DType::kI32), cnt = e.Empty({e_loc_}, DType::kI32);
  Tensor pos = e.Empty({GS}, DType::kI32), row_slot = e.Empty({GS}, DType::kI32),
         tok = e.Empty({GS}, DType::kI32);
  SelectLocalExperts(e, ep_rank_ * e_loc_, e_loc_, eg.View({GS}), local);
  moe::Dispatch(e, e_loc_, s_.top_k, local, cnt, pos, row_slot, tok);
  if (s_.pad_to_capacity) {
    // Each expert gets at most capacity rows from each of the G ranks.
    const int64_t cap = G_ * s_.capacity;
    pos_d_ = e.Empty({GS}, DType::kI32);
    perm_d_ = e.Empty({e_loc_ * cap}, DType::kI32);
    PadToCapacity(e, e_loc_, cap, local, cnt, pos, tok, pos_d_, perm_d_);
    ne_.assign(e_loc_, cap);
  } else {
    const std::vector<int32_t> hc = DeviceToHost<int32_t>(e, cnt);  // the layer's one host sync
    ne_.assign(hc.begin(), hc.end());
    pos_d_ = pos;
    perm_d_ = tok.Slice(0, Offsets(ne_).back());
  }
  const int64_t Me = Offsets(ne_).back();
  Tensor xe = e.Empty({Me, s_.C}, x.dtype());
  if (Me > 0) ops::EmbeddingForward(e, perm_d_, xg, xe, 0);
  return xe;
}

absl::StatusOr<Tensor> AllGatherDispatcher::Combine(const Tensor& ye) {
  const kernels::Exec& e = s_.exec;
  yp_ = ye;
  Tensor yg = e.Empty({G_ * s_.rows, s_.C}, ye.dtype());
  CombineForward(e, yp_, pos_d_, w_d_, yg);
  // One rank in the group: nothing to sum, yg is y (the f32 round trip below
  // would give it back bit for bit, in two more passes over it).
  if (G_ == 1) return yg;
  GTP_ASSIGN_OR_RETURN(Tensor y32, ReduceScatterGroup(yg));
  if (ye.dtype() == DType::kF32) return y32;
  Tensor y = e.Empty({s_.rows, s_.C}, ye.dtype());
  ops::Cast(e, y32, y);
  return y;
}

absl::StatusOr<Tensor> AllGatherDispatcher::CombineBackward(const Tensor& dy, const Tensor& dw) {
  const kernels::Exec& e = s_.exec;
  const int64_t S = s_.rows * s_.top_k;
  GTP_ASSIGN_OR_RETURN(Tensor dyg, GatherGroup(dy));  // [G·rows, C]
  const int64_t Me = yp_.dim(0);
  Tensor dye = e.Empty({Me, s_.C}, dy.dtype());
  Tensor dwg = e.Empty({G_ * S, 1}, DType::kF32);  // 0 on the slots of others' experts
  moe::CombineBackward(e, dyg, yp_, pos_d_, w_d_, dye, dwg.View({G_ * S}));
  yp_ = Tensor();
  GTP_ASSIGN_OR_RETURN(Tensor dw_own, ReduceScatterGroup(dwg));
  ops::CopyInto(e, dw_own.View({S}), dw);
  return dye;
}

absl::StatusOr<Tensor> AllGatherDispatcher::DispatchBackward(const Tensor& dxe, const Tensor& add,
                                                             DType dt) {
  const kernels::Exec& e = s_.exec;
  if (G_ == 1) {
    // One rank: each token gathers its slots' rows (pos_d_, the inverse of
    // perm_d_), adds `add` and rounds, in one pass (the same bits as the
    // zero fill, row-ordered sum, add and cast below).
    Tensor dx = e.Empty({s_.rows, s_.C}, dt);
    GatherAdd(e, dxe, pos_d_, add, dx);
    return dx;
  }
  const int64_t Me = dxe.dim(0);
  Tensor dxg = e.Zeros({G_ * s_.rows, s_.C}, DType::kF32);
  if (Me > 0) ops::EmbeddingBackward(e, perm_d_, dxe, dxg, 0);
  GTP_ASSIGN_OR_RETURN(Tensor dx32, ReduceScatterGroup(dxg));
  return dispatch_internal::AddThenCast(e, dx32, add, dt);
}

void AllGatherDispatcher::DropActivations() { perm_d_ = pos_d_ = w_d_ = yp_ = Tensor(); }

}  // namespace gtp::layers::moe
