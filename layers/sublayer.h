// layers/sublayer.h — the two halves of a transformer / hybrid Block
// (layers/transformer.h) as small interfaces, and which of each a layer has.
//
//   x1 = x  + Mixer(Norm1(x))          attention or the Mamba-2 mixer (tokens mix)
//   x2 = x1 + FeedForward(Norm2(x1))   MLP or mixture of experts (per token)
//
// A layer has a mixer, a feed-forward, or both (LayerKind, layers/layer_kind.h:
// Megatron's hybrid pattern symbols each name one half alone: 'M', '*', '-',
// 'E'). The layout plan (PlanGptLayout, layers/gpt_layout.h) decides every
// layer's LayerKind once; Block::Create builds what it is given.
//
// Both interfaces work on [rows, C] in the model dtype, rows = N or N/TP
// under sequence parallelism; Forward saves what Backward needs (dropped by
// DropActivations), Backward returns the input gradient and accumulates the
// parameter gradients. `dir` kRecompute: the same forward again right before
// Backward (activation recompute), weights gathered on the chain's recompute
// slot and nothing counted twice. Collective over the groups the
// implementation uses; driven by one thread; not thread-safe.
#pragma once

#include <vector>

#include "absl/status/statusor.h"
#include "core/tensor.h"
#include "layers/layer_kind.h"
#include "layers/replicated_param.h"
#include "layers/sharded_param.h"

namespace gtp::layers {

namespace moe {
class MoeLayer;
}  // namespace moe

// The token-mixing half: attention (layers/transformer.h) or the Mamba-2
// mixer (layers/mamba/mamba_mixer.h).
class Mixer {
 public:
  virtual ~Mixer() = default;
  // h (normalised input) → residual + out (out like h), or out alone when
  // residual is undefined. The residual is added where it costs least (in
  // the last GEMM's epilogue where there is one: RowParallelLinear).
  virtual absl::StatusOr<Tensor> Forward(const Tensor& h, const Tensor& residual,
                                         Direction dir) = 0;
  // dout like Forward's output → dh like its input (=).
  virtual absl::StatusOr<Tensor> Backward(const Tensor& dout) = 0;
  virtual void DropActivations() = 0;
  // Appends the GTP-sharded and the replicated parameters, in a fixed order.
  virtual void CollectParams(std::vector<ShardedParam*>* sharded,
                             std::vector<ReplicatedParam*>* repl) = 0;
};

// The per-token half: the MLP (layers/transformer.h) or the routed experts
// with an optional shared expert (layers/moe_feed_forward.h).
class FeedForward {
 public:
  virtual ~FeedForward() = default;
  // h (normalised input) → residual + out (out like h), or out alone when
  // residual is undefined. The residual is added where it costs least (in
  // the last GEMM's epilogue where there is one: RowParallelLinear).
  virtual absl::StatusOr<Tensor> Forward(const Tensor& h, const Tensor& residual,
                                         Direction dir) = 0;
  // dout like Forward's output → dh like its input (=).
  virtual absl::StatusOr<Tensor> Backward(const Tensor& dout) = 0;
  virtual void DropActivations() = 0;
  // Appends the parameters in a fixed order; expert weights (reduced over
  // the expert grid) go to `experts`, which a feed-forward with experts
  // requires (aborts on null).
  virtual void CollectParams(std::vector<ShardedParam*>* sharded,
                             std::vector<ReplicatedParam*>* repl,
                             std::vector<ShardedParam*>* experts) = 0;
  // The routed experts (GptModel's MoE bookkeeping); null without.
  virtual moe::MoeLayer* moe() { return nullptr; }
};

}  // namespace gtp::layers
