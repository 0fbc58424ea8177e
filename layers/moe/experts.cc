#include "layers/moe/experts.h"

#include "core/status.h"
#include "layers/linear.h"
#include "layers/moe/internal/dispatch_math.h"

namespace gtp::layers::moe {

namespace ops = kernels::ops;
namespace fp8 = kernels::fp8;

namespace {

// fp8: [0, r0', r0' + r1', …] with each expert's rows r rounded up to
// kFp8RowAlign.
std::vector<int64_t> PaddedOffsets(const std::vector<int64_t>& off) {
  std::vector<int64_t> poff(off.size(), 0);
  for (size_t g = 0; g + 1 < off.size(); ++g) {
    const int64_t r = off[g + 1] - off[g];
    poff[g + 1] = poff[g] + (r + kFp8RowAlign - 1) / kFp8RowAlign * kFp8RowAlign;
  }
  return poff;
}

// x [off.back(), c] → [poff.back(), c]: group g's rows at poff[g], zero rows
// after them. x itself when nothing needs padding.
Tensor PadRows(const kernels::Exec& e, const Tensor& x, const std::vector<int64_t>& off,
               const std::vector<int64_t>& poff) {
  if (off == poff) return x;
  Tensor xp = e.Empty({poff.back(), x.dim(1)}, x.dtype());
  for (size_t g = 0; g + 1 < off.size(); ++g) {
    const int64_t r = off[g + 1] - off[g], end = poff[g] + r;
    if (r > 0) ops::CopyInto(e, x.Slice(off[g], off[g + 1]), xp.Slice(poff[g], end));
    if (end < poff[g + 1]) ops::Fill(e, xp.Slice(end, poff[g + 1]), 0.0f);
  }
  return xp;
}

// The inverse: group g's first off[g+1] − off[g] rows of xp.
Tensor UnpadRows(const kernels::Exec& e, const Tensor& xp, const std::vector<int64_t>& off,
                 const std::vector<int64_t>& poff) {
  if (off == poff) return xp;
  Tensor x = e.Empty({off.back(), xp.dim(1)}, xp.dtype());
  for (size_t g = 0; g + 1 < off.size(); ++g) {
    const int64_t r = off[g + 1] - off[g];
    if (r > 0) ops::CopyInto(e, xp.Slice(poff[g], poff[g] + r), x.Slice(off[g], off[g + 1]));
  }
  return x;
}

void Activation(const kernels::Exec& e, bool swiglu, const Tensor& pre, const Tensor& act) {
  if (swiglu) {
    ops::SwiGluForward(e, pre, act);
  } else {
    ops::GeluForward(e, pre, act);
  }
}

void ActivationBackward(const kernels::Exec& e, bool swiglu, const Tensor& dact, const Tensor& pre,
                        const Tensor& dpre) {
  if (swiglu) {
    ops::SwiGluBackward(e, dact, pre, dpre);
  } else {
    ops::GeluBackward(e, dact, pre, dpre);
  }
}

}  // namespace

GroupedExperts::GroupedExperts(const std::string& name, const ExpertsConfig& c,
                               comm::Communicator* egtp, GtpChain* chain)
    : exec_(chain->exec()),
      chain_(chain),
      fp8_(c.fp8),
      fp8_wgrad_(c.fp8_wgrad),
      C_(c.C),
      swiglu_(c.swiglu),
      wgrad_scale_(c.wgrad_scale) {
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
  if (fp8_) {
    // The backward's dgrads read the forward's Wᵀ codes (Fp8BackwardWeight).
    fc1_->set_gathered_in_backward(false);
    fc2_->set_gathered_in_backward(false);
  }
}

absl::StatusOr<Tensor> GroupedExperts::Forward(const Tensor& xe, const std::vector<int64_t>& rows,
                                               Direction dir) {
  const kernels::Exec& e = exec_;
  off_ = dispatch_internal::Offsets(rows);
  if (fp8_) return ForwardFp8(xe, dir);
  xe_ = xe;
  const int64_t Me = xe_.dim(0);
  // fc1 → act → fc2, one grouped GEMM over the local experts each.
  GTP_ASSIGN_OR_RETURN(Tensor w1, fc1_->Materialize(dir));
  pre_ = e.Empty({Me, H1_}, xe.dtype());
  if (Me > 0) ops::GroupedLinear(e, xe_, w1, off_, pre_);
  fc1_->Release(dir);
  act_ = e.Empty({Me, H_loc_}, xe.dtype());
  if (Me > 0) Activation(e, swiglu_, pre_, act_);
  GTP_ASSIGN_OR_RETURN(Tensor w2, fc2_->Materialize(dir));
  Tensor ye = e.Empty({Me, C_}, xe.dtype());
  if (Me > 0) ops::GroupedLinear(e, act_, w2, off_, ye);
  fc2_->Release(dir);
  return ye;
}

absl::StatusOr<Tensor> GroupedExperts::Backward(const Tensor& dye) {
  if (fp8_) return BackwardFp8(dye);
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
  if (Me > 0) ActivationBackward(e, swiglu_, dact, pre_, dpre);
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

// ---- FP8 (experts.h) ----------------------------------------------------------------

absl::StatusOr<Tensor> GroupedExperts::ForwardFp8(const Tensor& xe, Direction dir) {
  const kernels::Exec& e = exec_;
  poff_ = PaddedOffsets(off_);
  const int64_t Mp = poff_.back();
  xe_ = PadRows(e, xe, off_, poff_);
  // Each stack quantised expert by expert; only the Wᵀ codes are kept.
  GTP_ASSIGN_OR_RETURN(Tensor w1, fc1_->Materialize(dir));
  w1q_ = fp8::QuantizeGroupedWeight(e, w1, e_loc_);
  fc1_->Release(dir);
  pre_ = e.Empty({Mp, H1_}, xe.dtype());
  // Fused: no act_ (its codes are act_q_). Without rows there is nothing to
  // fuse: an empty act_, as unfused, for the backward's wgrad.
  act_ = FuseActivation() && Mp > 0 ? Tensor() : e.Empty({Mp, H_loc_}, xe.dtype());
  act_q_.reset();
  if (Mp > 0) {
    fp8::Fp8GroupedInput xq(e, xe_, poff_);
    fp8::Fp8GroupedLinear(e, xq, w1q_, pre_);
    if (FuseActivation()) {
      // GELU(pre)'s codes in both layouts from one read of pre: the bits of
      // writing act with the GELU kernel and quantising it.
      act_q_ = std::make_unique<fp8::Fp8GroupedInput>(e, pre_, poff_);
      for (int g = 0; g < act_q_->groups(); ++g) {
        if (act_q_->rows(g) > 0) act_q_->BothOf(g, fp8::Fp8InputAct::kGelu, Tensor());
      }
    } else {
      Activation(e, swiglu_, pre_, act_);
    }
  }
  GTP_ASSIGN_OR_RETURN(Tensor w2, fc2_->Materialize(dir));
  w2q_ = fp8::QuantizeGroupedWeight(e, w2, e_loc_);
  fc2_->Release(dir);
  Tensor yp = e.Empty({Mp, C_}, xe.dtype());
  if (Mp > 0) {
    if (act_q_ != nullptr) {
      fp8::Fp8GroupedLinear(e, *act_q_, w2q_, yp);
    } else {
      fp8::Fp8GroupedInput aq(e, act_, poff_);
      fp8::Fp8GroupedLinear(e, aq, w2q_, yp);
    }
  }
  for (fp8::Fp8WeightPair& p : w1q_) p.w = fp8::Fp8Matrix();
  for (fp8::Fp8WeightPair& p : w2q_) p.w = fp8::Fp8Matrix();
  return UnpadRows(e, yp, off_, poff_);
}

absl::Status GroupedExperts::Fp8BackwardWeight(ShardedParam& p,
                                               std::vector<fp8::Fp8WeightPair>* kept,
                                               bool* gathered) {
  *gathered = false;
  if (!kept->empty()) {
    chain_->Freeze();  // as the first backward materialisation would
    return absl::OkStatus();
  }
  *gathered = true;
  GTP_ASSIGN_OR_RETURN(Tensor w, p.Materialize(Direction::kBackward));
  *kept = fp8::QuantizeGroupedWeight(exec_, w, e_loc_);
  return absl::OkStatus();
}

absl::StatusOr<Tensor> GroupedExperts::BackwardFp8(const Tensor& dye) {
  const kernels::Exec& e = exec_;
  const int64_t Mp = poff_.back();
  const DType dt = dye.dtype();
  const Tensor dyp = PadRows(e, dye, off_, poff_);
  // The stacked weight gradient of every local expert: an expert without
  // rows adds nothing, or zeroes a fresh buffer. dy's codes come with it.
  // xq: x's codes kept from the forward (the fused activation's), else none.
  auto wgrad = [&](ShardedParam& p, fp8::Fp8GroupedInput& dyq, const Tensor& dyv, const Tensor& xv,
                   fp8::Fp8GroupedInput* xq_kept) {
    bool fresh = false;
    // The stacked weight's rows: under an uneven EGTP split the buffer has
    // pad rows past them (zero, never written).
    Tensor g = p.Wgrad(&fresh).Slice(0, p.rows());
    const float beta = fresh ? 0.0f : 1.0f;
    if (xq_kept != nullptr) {
      fp8::Fp8GroupedLinearBackwardWeight(e, dyq, *xq_kept, wgrad_scale_, beta, g);
    } else if (fp8_wgrad_) {
      fp8::Fp8GroupedInput xq(e, xv, poff_);
      fp8::Fp8GroupedLinearBackwardWeight(e, dyq, xq, wgrad_scale_, beta, g);
    } else {
      ops::GroupedLinearBackwardWeight(e, dyv, xv, poff_, wgrad_scale_, beta, g);
    }
  };
  // dy's codes: the dgrad's rows, and with an fp8 wgrad its transpose too,
  // from one read.
  auto codes = [&](const Tensor& dy) {
    fp8::Fp8GroupedInput q(e, dy, poff_);
    for (int g = 0; g < q.groups(); ++g) {
      if (fp8_wgrad_ && q.rows(g) > 0) q.Both(g);
    }
    return q;
  };
  bool gathered = false;
  GTP_RETURN_IF_ERROR(Fp8BackwardWeight(*fc2_, &w2q_, &gathered));
  Tensor dact = e.Empty({Mp, H_loc_}, dt);
  fp8::Fp8GroupedInput dyq = codes(dyp);
  if (Mp > 0) fp8::Fp8GroupedLinearBackwardData(e, dyq, w2q_, dact);
  w2q_.clear();
  wgrad(*fc2_, dyq, dyp, act_, act_q_.get());
  if (gathered) fc2_->Release(Direction::kBackward);
  GTP_RETURN_IF_ERROR(fc2_->ReduceGrad());
  act_ = Tensor();
  act_q_.reset();
  // dpre's codes: with the fused activation quantised from dact and pre_ as
  // GELU's gradient is applied (dpre never written; the bits of writing it
  // and quantising it), else from dpre.
  Tensor dpre;
  std::unique_ptr<fp8::Fp8GroupedInput> fused_dpreq;
  if (FuseActivation()) {
    fused_dpreq = std::make_unique<fp8::Fp8GroupedInput>(e, dact, poff_);
    for (int g = 0; g < fused_dpreq->groups(); ++g) {
      if (fused_dpreq->rows(g) > 0) fused_dpreq->BothOf(g, fp8::Fp8InputAct::kGeluGrad, pre_);
    }
  } else {
    dpre = e.Empty({Mp, H1_}, dt);
    if (Mp > 0) ActivationBackward(e, swiglu_, dact, pre_, dpre);
  }
  pre_ = dact = Tensor();  // (the fused codes' input keeps dact's storage for its checks)
  GTP_RETURN_IF_ERROR(Fp8BackwardWeight(*fc1_, &w1q_, &gathered));
  Tensor dxp = e.Empty({Mp, C_}, dt);
  fp8::Fp8GroupedInput dpreq = fused_dpreq != nullptr ? std::move(*fused_dpreq) : codes(dpre);
  fused_dpreq.reset();
  if (Mp > 0) fp8::Fp8GroupedLinearBackwardData(e, dpreq, w1q_, dxp);
  w1q_.clear();
  wgrad(*fc1_, dpreq, dpre, xe_, nullptr);
  if (gathered) fc1_->Release(Direction::kBackward);
  GTP_RETURN_IF_ERROR(fc1_->ReduceGrad());
  xe_ = Tensor();
  return UnpadRows(e, dxp, off_, poff_);
}

void GroupedExperts::DropActivations() {
  xe_ = pre_ = act_ = Tensor();
  act_q_.reset();
  w1q_.clear();
  w2q_.clear();
}

}  // namespace gtp::layers::moe
