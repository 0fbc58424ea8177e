#include "layers/moe/moe_layer.h"

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "layers/linear.h"
#include "layers/moe/all_gather_dispatcher.h"
#include "layers/moe/all_to_all_dispatcher.h"

namespace gtp::layers::moe {

namespace ops = kernels::ops;

absl::Status MoeConfig::Validate(int n_layer) const {
  if (!enabled()) return absl::OkStatus();
  GTP_RETURN_IF_ERROR(router.Validate());
  if (!pattern.empty()) {
    if (static_cast<int>(pattern.size()) != n_layer ||
        pattern.find_first_not_of("E-") != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat(
          "moe layer pattern \"", pattern, "\" must have one character per layer (", n_layer,
          "), 'E' for MoE and '-' for dense"));
    }
  } else if (every_n < 1) {
    return absl::InvalidArgumentError(absl::StrCat("moe every_n must be ≥ 1 (got ", every_n, ")"));
  }
  if (ffn_hidden < 0 || shared_ffn_hidden < 0) {
    return absl::InvalidArgumentError("moe ffn_hidden and shared_ffn_hidden must be ≥ 0");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<MoeLayer>> MoeLayer::Create(const std::string& name,
                                                           const MoeConfig& c, const MoeShape& s,
                                                           const parallel::ProcessGroupCollection& pgs,
                                                           GtpChain* chain) {
  GTP_RETURN_IF_ERROR(c.router.Validate());
  std::unique_ptr<MoeLayer> m(new MoeLayer());
  m->shape_ = s;
  m->exec_ = chain->exec();
  GTP_ASSIGN_OR_RETURN(m->tp_, pgs.Get(parallel::groups::kTp));
  GTP_ASSIGN_OR_RETURN(comm::Communicator * ep, pgs.Get(parallel::groups::kEp));
  GTP_ASSIGN_OR_RETURN(comm::Communicator * etp, pgs.Get(parallel::groups::kEtp));
  GTP_ASSIGN_OR_RETURN(comm::Communicator * egtp, pgs.Get(parallel::groups::kEgtp));
  if (s.H % etp->size() != 0) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": expert hidden size ", s.H,
                                                   " is not divisible by ETP = ", etp->size()));
  }
  if (s.fp8) {
    // cuBLASLt's FP8 GEMMs: 16-byte rows (block_gemm.h); the CPU refuses the same.
    const int64_t h_loc = s.H / etp->size();
    if (s.dtype != DType::kBF16 || s.C % 16 != 0 || h_loc % 16 != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          name, ": FP8 expert GEMMs need bf16 parameters and the width (", s.C,
          ") and each expert's hidden units per ETP rank (", s.H, " / ETP ", etp->size(), " = ",
          h_loc, ") to be multiples of 16 (got dtype ", DTypeName(s.dtype),
          "); set moe.ffn_hidden (or model.n_embd) to a multiple of 16·ETP, or "
          "train.precision=bf16"));
    }
  }
  const int E = c.router.num_experts;
  m->k_ = c.router.top_k;
  if (E % ep->size() != 0) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": ", E,
                                                   " experts are not divisible by EP = ",
                                                   ep->size()));
  }
  // Context parallelism: the block's T is this CP rank's share of each
  // sequence; the router sums its aux-loss counts over the lane's TP × CP
  // ranks (router.h).
  RouterCp rcp;
  if (pgs.Has(parallel::groups::kCp)) {
    GTP_ASSIGN_OR_RETURN(const parallel::ProcessGroup* cpg, pgs.Group(parallel::groups::kCp));
    if (cpg->is_member() && cpg->size() > 1) {
      rcp.size = cpg->size();
      GTP_ASSIGN_OR_RETURN(rcp.tp_cp, pgs.Get(parallel::groups::kTpCp));
    }
  }
  if (rcp.size > 1 && c.router.capacity_factor > 0) {
    // Dropping picks among a rank's own tokens: under CP those are 2 of each
    // sequence's 2·CP chunks, so the kept tokens would differ from CP = 1's.
    return absl::InvalidArgumentError(absl::StrCat(
        name, ": capacity dropping (moe.capacity_factor = ", c.router.capacity_factor,
        ") is not supported under context parallelism (CP = ", rcp.size,
        "): each rank would drop among its own chunks of the sequences, not among the whole "
        "sequences' tokens; use moe.capacity_factor=0 (dropless) with parallel.cp > 1"));
  }
  m->cp_ = rcp.size;
  const int tp = m->tp_->size(), t = m->tp_->rank();
  const int64_t N = s.B * s.T;
  if (N % tp != 0) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": the micro-batch's ", N,
                                                   " tokens are not divisible by TP = ", tp));
  }
  m->rows_ = tp > 1 ? N / tp : N;
  m->row0_ = tp > 1 ? t * m->rows_ : 0;
  m->slice_ = tp > 1 && !s.sequence_parallel;
  GTP_ASSIGN_OR_RETURN(m->router_,
                       Router::Create(name + ".router", c.router, s.C, m->rows_, s.T, m->row0_, N,
                                      s.init_std, s.seed, m->tp_, m->exec_, rcp));
  ExpertsConfig ec;
  ec.C = s.C;
  ec.H = s.H;
  ec.swiglu = s.swiglu;
  ec.dtype = s.dtype;
  ec.init_std = s.init_std;
  ec.out_std = s.out_std;
  ec.seed = s.seed;
  ec.num_experts = E;
  ec.ep_size = ep->size();
  ec.ep_rank = ep->rank();
  ec.etp_size = etp->size();
  ec.etp_rank = etp->rank();
  ec.fp8 = s.fp8;
  ec.fp8_wgrad = s.fp8_wgrad;
  // Expert wgrads: see the file comment.
  ec.wgrad_scale =
      s.loss_sum ? 1.0f : static_cast<float>(tp) / static_cast<float>(etp->size() * ep->size());
  m->experts_ = std::make_unique<GroupedExperts>(name + ".experts", ec, egtp, chain);
  DispatchSetup ds;
  ds.exec = m->exec_;
  ds.ep = ep;
  ds.etp = etp;
  ds.num_experts = E;
  ds.top_k = m->k_;
  ds.rows = m->rows_;
  ds.C = s.C;
  ds.capacity = m->router_->capacity();
  ds.pad_to_capacity = c.router.pad_to_capacity;
  if (c.dispatcher == Dispatcher::kAllGather) {
    m->dispatcher_ = std::make_unique<AllGatherDispatcher>(ds);
  } else {
    m->dispatcher_ = std::make_unique<AllToAllDispatcher>(ds);
  }
  return m;
}

absl::StatusOr<Tensor> MoeLayer::Forward(const Tensor& h, Direction dir) {
  Tensor x = slice_ ? h.Slice(row0_, row0_ + rows_) : h;
  GTP_ASSIGN_OR_RETURN(const RouterOutput* r, router_->Forward(x, dir != Direction::kRecompute));
  GTP_ASSIGN_OR_RETURN(Tensor xe, dispatcher_->Dispatch(x, *r));
  GTP_ASSIGN_OR_RETURN(Tensor ye, experts_->Forward(xe, dispatcher_->expert_rows(), dir));
  GTP_ASSIGN_OR_RETURN(Tensor y, dispatcher_->Combine(ye));
  if (slice_) return AllGatherRows(exec_, *tp_, y);
  return y;
}

absl::StatusOr<Tensor> MoeLayer::Backward(const Tensor& dout) {
  const kernels::Exec& e = exec_;
  Tensor dy = slice_ ? dout.Slice(row0_, row0_ + rows_) : dout;
  const DType dt = dy.dtype();
  Tensor dw = e.Empty({rows_ * k_}, DType::kF32);
  GTP_ASSIGN_OR_RETURN(Tensor dye, dispatcher_->CombineBackward(dy, dw));
  GTP_ASSIGN_OR_RETURN(Tensor dxe, experts_->Backward(dye));
  // The aux / z gradients' scale (Router::Backward): under CP the gradient
  // reduction averages the CP ranks' parts (mean) or divides by the tokens of
  // every CP rank (sum), so each part is scaled by CP or by the whole lane's tokens.
  const float loss_scale = shape_.loss_sum ? static_cast<float>(shape_.B * shape_.T * cp_)
                                           : static_cast<float>(cp_);
  GTP_ASSIGN_OR_RETURN(Tensor dxr, router_->Backward(dw, loss_scale));
  // dx = the dispatched rows' gradients summed into their tokens + the
  // router's, in f32, rounded once to dt.
  GTP_ASSIGN_OR_RETURN(Tensor dx, dispatcher_->DispatchBackward(dxe, dxr, dt));
  if (slice_) return AllGatherRows(e, *tp_, dx);
  return dx;
}

void MoeLayer::DropActivations() {
  router_->DropActivations();
  dispatcher_->DropActivations();
  experts_->DropActivations();
}

}  // namespace gtp::layers::moe
