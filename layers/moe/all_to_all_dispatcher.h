// layers/moe/all_to_all_dispatcher.h — the MoE token dispatcher that sends
// each routed row to the rank of its expert by all-to-all over "ep"
// (Megatron's MoEAlltoAllTokenDispatcher); the TokenDispatcher contract is
// layers/moe/token_dispatcher.h.
//
// Dispatch (dropless or capacity-dropped): this rank's kept (token, slot)
// pairs sorted by global expert, then token; rows gathered in that order;
// per-(rank, expert) counts exchanged by all-to-all over "ep", the rows by
// all-to-all(v); with ETP the ETP group's received rows all-gathered (as
// Megatron's all-to-all dispatcher does over its tensor-parallel group);
// rows reordered expert-major. Combine: the results travel back the same way
// — the ETP ranks' partial fc2 outputs summed (reduce-scatter, f32 sums in
// rank order) — and are combined with the routing weights
// (layers/moe/combine.h). The backward runs the same path in reverse.
//
// Routing stays on the device; only the per-expert counts come to the host
// (the all-to-all sizes and the per-expert GEMMs need them), after their
// exchange over ep / etp on the device: one host synchronisation per
// Dispatch, none in the backward.
//
// Padding (pad_to_capacity): each (source rank, expert) block holds exactly
// the capacity rows (zero rows after the kept ones), so every exchange and
// GEMM has a static size — an expert runs on ETP·EP·capacity rows — the
// reorder is built once and no counts reach the host. The padding rows are
// zeros, no slot names them (the combine skips them, their gradient is 0).
#pragma once

#include <vector>

#include "layers/moe/token_dispatcher.h"

namespace gtp::layers::moe {

class AllToAllDispatcher : public TokenDispatcher {
 public:
  explicit AllToAllDispatcher(const DispatchSetup& s);

  absl::StatusOr<Tensor> Dispatch(const Tensor& x, const RouterOutput& r) override;
  const std::vector<int64_t>& expert_rows() const override { return ne_; }
  absl::StatusOr<Tensor> Combine(const Tensor& ye) override;
  absl::StatusOr<Tensor> CombineBackward(const Tensor& dy, const Tensor& dw) override;
  absl::StatusOr<Tensor> DispatchBackward(const Tensor& dxe, const Tensor& add, DType dt) override;
  void DropActivations() override;

 private:
  // The rows' counts and orders of one forward (perm_d_, pos_d_, M_, the
  // exchange sizes, ne_, the reorder).
  absl::Status Plan(const RouterOutput& r);
  // Rows exchange over ep: x [Σ send, C] → [Σ recv, C].
  absl::StatusOr<Tensor> Exchange(const Tensor& x, const std::vector<int64_t>& send_rows,
                                  const std::vector<int64_t>& recv_rows);
  // out[i] = x[idx[i]] (i32 on the device); x itself when idx is undefined.
  Tensor GatherRows(const Tensor& x, const Tensor& idx);
  // ETP: the group's received rows [r][…] from every ETP rank (all-gather-v),
  // and its reverse — each rank's rows summed over the ETP ranks' partial
  // results (reduce-scatter-v, f32 sums in rank order).
  absl::StatusOr<Tensor> EtpGather(const Tensor& x);
  absl::StatusOr<Tensor> EtpReduceScatter(const Tensor& y);

  DispatchSetup s_;
  int E_ = 0, e_loc_ = 0, ep_size_ = 1, etp_size_ = 1;
  bool static_plan_ = false;  // padded: reorder_ built once
  // Plan of the last forward: M_ kept slots of this rank's tokens (padded:
  // E·capacity); the received rows' order for the experts and back (device;
  // undefined when EP = ETP = 1 or no rows).
  int64_t M_ = 0;
  Tensor reorder_, inv_reorder_;
  std::vector<int64_t> send_rows_, recv_rows_, etp_rows_, ne_;
  // Saved: perm_d_ the token of each dispatched row (−1: a padding row);
  // pos_d_, w_d_ each slot's row in yp_ and its weight; yp_ the returned
  // rows the combine reads.
  Tensor perm_d_, pos_d_, w_d_, yp_;
};

}  // namespace gtp::layers::moe
