#include "layers/moe_feed_forward.h"

#include <cmath>
#include <optional>

#include "core/status.h"
#include "core/timeline.h"

namespace gtp::layers {

namespace ops = kernels::ops;

absl::StatusOr<std::unique_ptr<MoeFeedForward>> MoeFeedForward::Create(
    const std::string& name, const TransformerConfig& c, int64_t B, int64_t T,
    const parallel::ProcessGroupCollection& pgs, GtpChain* chain) {
  std::unique_ptr<MoeFeedForward> f(new MoeFeedForward());
  f->chain_ = chain;
  moe::MoeShape s;
  s.C = c.n_embd;
  s.H = c.moe.ffn_hidden > 0 ? c.moe.ffn_hidden : c.hidden();
  s.B = B;
  s.T = T;
  s.swiglu = c.activation == Activation::kSwiGlu;
  s.sequence_parallel = c.sequence_parallel;
  s.loss_sum = c.loss_sum;
  s.dtype = c.dtype;
  s.init_std = c.init_std;
  s.out_std = c.init_std / std::sqrt(2.0f * c.n_layer);
  s.seed = c.seed;
  // FP8 experts (moe::GroupedExperts' fp8 path; layers/moe:experts_fp8_gpu_test
  // passed on the H200, 2026-12-05).
  s.fp8 = c.fp8;
  s.fp8_wgrad = c.fp8_wgrad;
  GTP_ASSIGN_OR_RETURN(f->moe_, moe::MoeLayer::Create(name, c.moe, s, pgs, chain));
  if (c.moe.shared_ffn_hidden > 0) {
    TransformerConfig shared = c;
    shared.ffn_hidden = c.moe.shared_ffn_hidden;
    GTP_ASSIGN_OR_RETURN(f->shared_, Mlp::Create(name + ".shared", shared, pgs, chain));
  }
  return f;
}

absl::StatusOr<Tensor> MoeFeedForward::Forward(const Tensor& h, const Tensor& residual,
                                               Direction dir) {
  const kernels::Exec& e = chain_->exec();
  std::optional<Timeline::Scope> span;
  span.emplace(chain_->timeline(), "moe", e.stream);
  GTP_ASSIGN_OR_RETURN(Tensor m, moe_->Forward(h, dir));
  span.reset();
  if (shared_) {  // + the shared expert (its GEMM adds m)
    GTP_ASSIGN_OR_RETURN(m, shared_->Forward(h, /*residual=*/m, dir));
  }
  if (residual.defined()) ops::Axpby(e, 1.0f, residual, 1.0f, m);
  return m;
}

absl::StatusOr<Tensor> MoeFeedForward::Backward(const Tensor& dout) {
  // The reverse of the forward's order (routed experts, then the shared
  // expert): the GTP chain gathers and reduce-scatters in that order.
  Tensor dsh;
  if (shared_) {
    GTP_ASSIGN_OR_RETURN(dsh, shared_->Backward(dout));
  }
  GTP_ASSIGN_OR_RETURN(Tensor dm, moe_->Backward(dout));
  if (shared_) ops::Axpby(chain_->exec(), 1.0f, dsh, 1.0f, dm);
  return dm;
}

void MoeFeedForward::DropActivations() {
  if (shared_) shared_->DropActivations();
  moe_->DropActivations();
}

void MoeFeedForward::CollectParams(std::vector<ShardedParam*>* sharded,
                                   std::vector<ReplicatedParam*>* repl,
                                   std::vector<ShardedParam*>* experts) {
  GTP_CHECK(experts != nullptr, "Block::CollectParams: an MoE block needs the experts list");
  repl->push_back(moe_->router().gate());
  experts->push_back(&moe_->fc1());
  experts->push_back(&moe_->fc2());
  if (shared_) shared_->CollectParams(sharded, repl, experts);
}

}  // namespace gtp::layers
