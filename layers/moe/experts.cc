#include "layers/moe/experts.h"

#include "core/status.h"
#include "layers/linear.h"
#include "layers/moe/internal/dispatch_math.h"

namespace gtp::layers::moe {

namespace ops = kernels::ops;

GroupedExperts::GroupedExperts(const std::string& name, const ExpertsConfig& c,
                               comm::Communicator* egtp, GtpChain* chain)
    : exec_(chain->exec()), C_(c.C), swiglu_(c.swiglu), wgrad_scale_(c.wgrad_scale) {
  // This ETP rank's slice of each expert: hidden units [etp_rank·Hl, (etp_rank+1)·Hl)
  // (of gate and of up for SwiGLU, stacked [gate_l; up_l] as the activation wants).
  const int etp_rank = c.etp_rank;
  const int64_t C = c.C, H = c.H, Hl = H / c.etp_size, H1 = c.swiglu ? 2 * H : H;
  const int64_t H1l = c.swiglu ? 2 * Hl : Hl;
  H_loc_ = Hl;
  H1_ = H1l;
  e_loc_ = c.num_experts / c.ep_size;
  const int e_loc = e_loc_, e0 = c.ep_rank * e_loc;
  fc1_ = std::make_unique<ShardedParam>(name + ".fc1.weight", e_loc * H1l, C, c.dtype, egtp, chain);
  fc2_ = std::make_unique<ShardedParam>(name + ".fc2.weight", e_loc * C, Hl, c.dtype, egtp, chain);
  InitShardFromGlobal(*fc1_,
                      {static_cast<int64_t>(c.num_experts) * H1, C,
                       [=](int64_t r) {
                         const int64_t e = e0 + r / H1l, j = r % H1l;
                         const int64_t part = j / Hl, i = j % Hl;  // 0 = gate (or GELU), 1 = up
                         return e * H1 + part * H + etp_rank * Hl + i;
                       },
                       0},
                      c.seed, c.init_std);
  InitShardFromGlobal(*fc2_,
                      {static_cast<int64_t>(c.num_experts) * C, H,
                       [C, e0](int64_t r) { return (e0 + r / C) * C + r % C; }, etp_rank * Hl},
                      c.seed, c.out_std);
  // Muon sees each local expert's matrices (the layout of this EP rank's experts only).
  fc1_->set_matrix_layout({static_cast<int64_t>(e_loc) * H1, C,
                           [=](int64_t r) {
                             const int64_t e = r / H1l, j = r % H1l;
                             return e * H1 + (j / Hl) * H + etp_rank * Hl + j % Hl;
                           },
                           0},
                          e_loc);
  fc2_->set_matrix_layout({static_cast<int64_t>(e_loc) * C, H, [](int64_t r) { return r; },
                           etp_rank * Hl},
                          e_loc);
}

absl::StatusOr<Tensor> GroupedExperts::Forward(const Tensor& xe, const std::vector<int64_t>& rows,
                                               Direction dir) {
  const kernels::Exec& e = exec_;
  xe_ = xe;
  const int64_t Me = xe_.dim(0);
  off_ = dispatch_internal::Offsets(rows);
  // fc1 → act → fc2, one grouped GEMM over the local experts each.
  GTP_ASSIGN_OR_RETURN(Tensor w1, fc1_->Materialize(dir));
  pre_ = e.Empty({Me, H1_}, xe.dtype());
  if (Me > 0) ops::GroupedLinear(e, xe_, w1, off_, pre_);
  fc1_->Release(dir);
  act_ = e.Empty({Me, H_loc_}, xe.dtype());
  if (Me > 0) {
    if (swiglu_) {
      ops::SwiGluForward(e, pre_, act_);
    } else {
      ops::GeluForward(e, pre_, act_);
    }
  }
  GTP_ASSIGN_OR_RETURN(Tensor w2, fc2_->Materialize(dir));
  Tensor ye = e.Empty({Me, C_}, xe.dtype());
  if (Me > 0) ops::GroupedLinear(e, act_, w2, off_, ye);
  fc2_->Release(dir);
  return ye;
}

absl::StatusOr<Tensor> GroupedExperts::Backward(const Tensor& dye) {
  const kernels::Exec& e = exec_;
  const int64_t Me = dye.dim(0);
  const std::vector<int64_t>& off = off_;
  const DType dt = dye.dtype();
  // The stacked weight gradient of every local expert (one grouped GEMM;
  // an expert without rows adds nothing, or zeroes a fresh buffer).
  auto wgrad = [&](ShardedParam& p, const Tensor& dyv, const Tensor& xv) {
    bool fresh = false;
    // The stacked weight's rows: under an uneven EGTP split the buffer has
    // pad rows past them (zero, never written).
    Tensor g = p.Wgrad(&fresh).Slice(0, p.rows());
    ops::GroupedLinearBackwardWeight(e, dyv, xv, off, wgrad_scale_, fresh ? 0.0f : 1.0f, g);
  };
  GTP_ASSIGN_OR_RETURN(Tensor w2, fc2_->Materialize(Direction::kBackward));
  Tensor dact = e.Empty({Me, H_loc_}, dt);
  if (Me > 0) ops::GroupedLinearBackwardData(e, dye, w2, off, dact);
  wgrad(*fc2_, dye, act_);
  fc2_->Release(Direction::kBackward);
  GTP_RETURN_IF_ERROR(fc2_->ReduceGrad());
  act_ = Tensor();
  Tensor dpre = e.Empty({Me, H1_}, dt);
  if (Me > 0) {
    if (swiglu_) {
      ops::SwiGluBackward(e, dact, pre_, dpre);
    } else {
      ops::GeluBackward(e, dact, pre_, dpre);
    }
  }
  pre_ = Tensor();
  GTP_ASSIGN_OR_RETURN(Tensor w1, fc1_->Materialize(Direction::kBackward));
  Tensor dxe = e.Empty({Me, C_}, dt);
  if (Me > 0) ops::GroupedLinearBackwardData(e, dpre, w1, off, dxe);
  wgrad(*fc1_, dpre, xe_);
  fc1_->Release(Direction::kBackward);
  GTP_RETURN_IF_ERROR(fc1_->ReduceGrad());
  xe_ = Tensor();
  return dxe;
}

void GroupedExperts::DropActivations() { xe_ = pre_ = act_ = Tensor(); }

}  // namespace gtp::layers::moe
