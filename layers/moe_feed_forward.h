// layers/moe_feed_forward.h — a Block's feed-forward half when the layer is a
// mixture of experts: the routed experts (layers/moe/moe_layer.h,
// "<name>") plus, when c.moe.shared_ffn_hidden > 0, a shared expert beside
// them (a dense Mlp of that hidden size, "<name>.shared"):
//
//   out = MoE(h) + SharedMlp(h)
//
// Its backward runs the reverse of the forward's order (shared expert, then
// the routed experts), so the GTP chain gathers and reduce-scatters in that
// order. The FeedForward contract is layers/sublayer.h.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "layers/moe/moe_layer.h"
#include "layers/sublayer.h"
#include "layers/transformer.h"
#include "parallel/process_groups.h"

namespace gtp::layers {

class MoeFeedForward : public FeedForward {
 public:
  // B sequences of T tokens (this CP rank's T). The experts' hidden size is
  // c.moe.ffn_hidden, or c.hidden(). InvalidArgument from MoeLayer::Create
  // or Mlp::Create.
  static absl::StatusOr<std::unique_ptr<MoeFeedForward>> Create(
      const std::string& name, const TransformerConfig& c, int64_t B, int64_t T,
      const parallel::ProcessGroupCollection& pgs, GtpChain* chain);

  absl::StatusOr<Tensor> Forward(const Tensor& h, const Tensor& residual, Direction dir) override;
  absl::StatusOr<Tensor> Backward(const Tensor& dout) override;
  void DropActivations() override;
  // The router gate to `repl`, fc1 and fc2 to `experts` (required), then the
  // shared expert's params.
  void CollectParams(std::vector<ShardedParam*>* sharded, std::vector<ReplicatedParam*>* repl,
                     std::vector<ShardedParam*>* experts) override;
  moe::MoeLayer* moe() override { return moe_.get(); }

 private:
  MoeFeedForward() = default;
  GtpChain* chain_ = nullptr;
  std::unique_ptr<moe::MoeLayer> moe_;
  std::unique_ptr<Mlp> shared_;  // null without a shared expert
};

}  // namespace gtp::layers
