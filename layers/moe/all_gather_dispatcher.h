// layers/moe/all_gather_dispatcher.h — the MoE token dispatcher that gathers
// every row of the ep × etp group on every rank (Megatron's
// MoEAllGatherTokenDispatcher); the TokenDispatcher contract is
// layers/moe/token_dispatcher.h.
//
// Dispatch: every rank all-gathers the rows and their routing (expert or −1
// where dropped, weight) of its EP group, then of its ETP group — the rows
// laid out [etp rank][ep rank][token] — and picks the slots of its local
// experts in the all-to-all's expert-major order (so the expert GEMMs see
// the same rows in the same order). Combine: its experts' weighted (partial,
// with ETP) outputs are combined into every gathered token (j ascending) and
// reduce-scattered over etp, then ep (f32 sums in rank order), so each rank
// gets its own tokens' outputs. The backward all-gathers dy the same way and
// reduce-scatters dx and the weights' gradient. More traffic than the
// all-to-all (every token to every rank) but no count exchange; the one host
// synchronisation (Dispatch) reads the local experts' row counts.
//
// Padding (pad_to_capacity): each local expert runs on exactly
// ETP·EP·capacity rows (zero rows after the kept ones): static sizes, no
// host synchronisation.
#pragma once

#include <vector>

#include "layers/moe/token_dispatcher.h"

namespace gtp::layers::moe {

class AllGatherDispatcher : public TokenDispatcher {
 public:
  explicit AllGatherDispatcher(const DispatchSetup& s);

  absl::StatusOr<Tensor> Dispatch(const Tensor& x, const RouterOutput& r) override;
  const std::vector<int64_t>& expert_rows() const override { return ne_; }
  absl::StatusOr<Tensor> Combine(const Tensor& ye) override;
  absl::StatusOr<Tensor> CombineBackward(const Tensor& dy, const Tensor& dw) override;
  absl::StatusOr<Tensor> DispatchBackward(const Tensor& dxe, const Tensor& add, DType dt) override;
  void DropActivations() override;

 private:
  // x [m, c] → [ETP·EP·m, c] as [etp rank][ep rank][m]; and its reverse,
  // x [ETP·EP·m, c] → f32 [m, c] summed over the group (over etp, then ep,
  // each in rank order).
  absl::StatusOr<Tensor> GatherGroup(const Tensor& x);
  absl::StatusOr<Tensor> ReduceScatterGroup(const Tensor& x);

  DispatchSetup s_;
  int e_loc_ = 0, ep_rank_ = 0;
  int64_t G_ = 1;  // ranks of the ep × etp group
  std::vector<int64_t> ne_;
  // Saved: perm_d_ the gathered row of each dispatched row (−1: a padding
  // row); pos_d_, w_d_ each gathered slot's row in yp_ and its weight; yp_
  // the experts' outputs the combine reads.
  Tensor perm_d_, pos_d_, w_d_, yp_;
};

}  // namespace gtp::layers::moe
