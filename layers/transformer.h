// layers/transformer.h — norms, self-attention (causal, or bidirectional for
// encoders), MLP and the pre-norm
// transformer block, tensor-parallel with GTP-sharded weights.
//
// Shapes (one data lane): B sequences of T tokens, N = B·T rows, C channels,
// NH query heads and NKV key/value heads of HS = C/NH channels, H = MLP hidden.
// TP splits heads and H: NH_tp = NH/TP, NKV_tp = NKV/TP, H_tp = H/TP. With
// sequence parallelism (SP) the residual stream is split along rows:
// x[N_tp, C], N_tp = N/TP; it is all-gathered once on entry to each TP region
// and reduce-scattered on exit.
//
//   Block:  x1 = x  + Wo·Attn(q, k, v of Norm1(x))        (q/k/v/o: TP linears)
//           x2 = x1 + W2·act(W1·Norm2(x1))                 (act: GELU or SwiGLU)
//
// A Block is a mixer half and a feed-forward half (layers/sublayer.h): the
// mixer attention (here) or Mamba-2 (layers/mamba), the feed-forward the MLP
// (here) or a mixture of experts (layers/moe_feed_forward.h); hybrid layers
// have one half only. Which is which comes in a LayerKind, decided by the
// layout plan (layers/gpt_layout.h).
//
// Every module has an explicit Forward (saving what its Backward needs) and
// Backward (returning the input gradient, accumulating parameter gradients).
// Groups come only from the ProcessGroupCollection passed to Create.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/kernels/ops.h"
#include "layers/cp/ring_attention.h"
#include "layers/linear.h"
#include "layers/mamba/mamba_mixer.h"
#include "layers/moe/moe_layer.h"
#include "layers/packed_linears.h"
#include "layers/sharded_param.h"
#include "layers/sublayer.h"
#include "parallel/process_groups.h"

namespace gtp::layers {

enum class NormKind { kLayerNorm, kRMSNorm };
enum class Activation { kGelu, kSwiGlu };
struct TransformerConfig {
  int64_t n_embd = 0;         // C
  int64_t n_head = 0;         // NH
  int64_t n_kv_head = 0;      // NKV (0: = NH, plain multi-head attention)
  int64_t ffn_hidden = 0;     // H (0: 4·C)
  NormKind norm = NormKind::kLayerNorm;
  Activation activation = Activation::kGelu;
  bool bias = true;           // biases in the linears (and LayerNorm)
  bool rope = false;          // rotary position embedding on q and k
  // Projections reading one input as one GEMM a pass (layers/packed_linears.h):
  // attention's q, k and v — in bf16 only (the fused attention and RoPE read
  // them in place), not with context parallelism (its ring wants them dense)
  // — and the Mamba mixer's B, C and dt (mamba.packing follows this). Never
  // with FP8 GEMMs. kAuto packs on CUDA only, where one GEMM is faster (0.98×
  // the 124M step: docs/PERFORMANCE.md, the twenty-second session).
  ProjectionPacking packing = ProjectionPacking::kAuto;
  // Causal self-attention (a decoder: token t sees tokens ≤ t); false for a
  // bidirectional encoder (e.g. a ViT), where every token sees every token.
  // Context parallelism (ring attention) supports causal only.
  bool causal = true;
  float rope_theta = 10000.0f;
  float norm_eps = 1e-5f;
  float init_std = 0.02f;
  // Output projections (attention o, MLP down) use init_std / √(2·n_layer).
  int n_layer = 1;
  bool sequence_parallel = false;
  // Activation recompute per block: keep only each block's input during
  // forward and re-run the block's forward (its own gather chain,
  // Direction::kRecompute) at the start of its backward.
  bool recompute = false;
  uint64_t seed = 0;
  // f32, or bf16 for mixed precision: weights (and their GTP gathers),
  // norm/bias values and activations in bf16; every gradient, norm
  // statistic and the optimizer's master weights in f32. bf16 attention is
  // the fused flash kernel (no T×T probabilities kept).
  DType dtype = DType::kF32;
  // train.precision=fp8 (needs dtype bf16): the attention, MLP and Mamba
  // projections' and the routed experts' GEMMs in block-scaled FP8
  // (LinearConfig::fp8, moe::MoeShape::fp8; the experts on the CPU only for
  // now: moe_feed_forward.cc). The router, the LM head and the embeddings
  // stay in dtype.
  bool fp8 = false;
  // With fp8: the linears' wgrad GEMM in fp8 too (else bf16; LinearConfig).
  bool fp8_wgrad = true;
  // Mixture of experts (layers/moe): in layers whose LayerKind has
  // FfnKind::kMoe (the layout plan applies moe.every_n / moe.pattern), the
  // MLP is a routed MoE (plus a shared expert of moe.shared_ffn_hidden).
  moe::MoeConfig moe;
  // The lane's loss is a sum over tokens (GptConfig::loss_reduction kSum;
  // set by GptModel): the MoE scales its aux/z gradients and expert wgrads.
  bool loss_sum = false;
  // The Mamba-2 mixer of hybrid stacks' 'M' layers (d_model, seed, init_std
  // and dtype are taken from here).
  mamba::MambaConfig mamba;

  int64_t kv_heads() const { return n_kv_head > 0 ? n_kv_head : n_head; }
  int64_t hidden() const { return ffn_hidden > 0 ? ffn_hidden : 4 * n_embd; }
};

// LayerNorm / RMSNorm over C with replicated weight (and bias for LayerNorm).
class Norm {
 public:
  Norm(const std::string& name, const TransformerConfig& c, int tp, const kernels::Exec& e);
  Tensor Forward(const Tensor& x);          // x[rows, C]
  // → dx[rows, C] (+ dresidual when given: the residual gradient, fused).
  Tensor Backward(const Tensor& dy, const Tensor& dresidual = Tensor());
  void DropActivations() { x_ = mean_ = rstd_ = Tensor(); }
  std::vector<ReplicatedParam*> params();

 private:
  NormKind kind_;
  float eps_;
  kernels::Exec exec_;
  ReplicatedParam w_, b_;
  Tensor x_, mean_, rstd_;
};

// Self-attention, a block's mixer ("<name>.q", ".k", ".v", ".o").
class Attention : public Mixer {
 public:
  static absl::StatusOr<std::unique_ptr<Attention>> Create(
      const std::string& name, const TransformerConfig& c, int64_t B, int64_t T,
      const parallel::ProcessGroupCollection& pgs, GtpChain* chain);
  // h[N or N_tp, C] (normalised input) → out[N or N_tp, C] (before residual).
  absl::StatusOr<Tensor> Forward(const Tensor& h, const Tensor& residual, Direction dir) override;
  absl::StatusOr<Tensor> Backward(const Tensor& dout) override;
  void DropActivations() override;
  void CollectParams(std::vector<ShardedParam*>* sharded,
                     std::vector<ReplicatedParam*>* repl) override;

 private:
  Attention() = default;
  TransformerConfig config_;
  int64_t B_ = 0, T_ = 0, nh_tp_ = 0, nkv_tp_ = 0, hs_ = 0;
  comm::Communicator* tp_ = nullptr;
  GtpChain* chain_ = nullptr;
  // rows[N, heads·HS] (dense, or a column block of the packed q/k/v) as
  // [B, T, heads, HS].
  Tensor Heads(const Tensor& rows, int64_t heads) const;
  // Packed: q's and k's heads side by side in the [N, R] matrix (RoPE
  // rotates them in one call), as [B, T, NH_tp + NKV_tp, HS].
  Tensor QkHeads(const Tensor& packed) const;
  std::unique_ptr<PackedLinears> qkv_;  // q, k, v
  std::unique_ptr<RowParallelLinear> o_;
  PackedLinears::Parts qkv_out_;
  Tensor att_;       // f32: probabilities [B, NH_tp, T, T]
  Tensor y_, lse_;   // bf16 (flash): output [B, T, NH_tp, HS], log-sum-exp [B, NH_tp, T]
  // Context parallelism (the "cp" group > 1): T_ is this rank's share of the
  // sequence and attention runs over the whole of it by ring exchange.
  std::unique_ptr<cp::RingAttention> ring_;
};

// The dense MLP, a block's feed-forward ("<name>.fc", ".proj"; hidden
// c.hidden()), also the MoE's shared expert.
class Mlp : public FeedForward {
 public:
  static absl::StatusOr<std::unique_ptr<Mlp>> Create(const std::string& name,
                                                     const TransformerConfig& c,
                                                     const parallel::ProcessGroupCollection& pgs,
                                                     GtpChain* chain);
  absl::StatusOr<Tensor> Forward(const Tensor& h, const Tensor& residual, Direction dir) override;
  absl::StatusOr<Tensor> Backward(const Tensor& dout) override;
  void DropActivations() override;
  // No experts: `experts` is not touched (may be null).
  void CollectParams(std::vector<ShardedParam*>* sharded, std::vector<ReplicatedParam*>* repl,
                     std::vector<ShardedParam*>* experts) override;

 private:
  Mlp() = default;
  TransformerConfig config_;
  comm::Communicator* tp_ = nullptr;
  GtpChain* chain_ = nullptr;
  // GELU: fc → gelu → proj. SwiGLU: fc = [gate; up] fused (a TP slice keeps
  // matching gate/up columns) → silu(gate)·up → proj.
  std::unique_ptr<ColumnParallelLinear> fc_;
  std::unique_ptr<RowParallelLinear> proj_;
  // GELU in the GEMM epilogues (fc forward, proj's input-gradient backward):
  // on the CPU, and on CUDA in bf16 where cuBLASLt can (H_tp % 8 == 0).
  bool fused_gelu_ = false;
  // fp8 both ways in fc and proj: GELU applied in proj's quantiser (forward)
  // and its derivative in fc's (backward); GELU's output never written.
  bool gelu_in_fp8_quant_ = false;
  Tensor pre_act_;  // GELU: fc out [N, H_tp]; SwiGLU: [N, 2·H_tp] = [gate | up]
};

// A pre-norm residual block: x1 = x + Mixer(Norm1(x)) when the layer has a
// mixer, x2 = x1 + FeedForward(Norm2(x1)) when it has a feed-forward
// (layers/sublayer.h). Parameter names: "<name>.ln1", "<name>.attn" (or
// "<name>.mixer" for Mamba-2), "<name>.ln2", "<name>.mlp" (or "<name>.moe",
// its shared expert "<name>.moe.shared").
class Block {
 public:
  // `kind`: which mixer and feed-forward this layer has (the layout plan's
  // LayerKind; default attention + MLP). InvalidArgument naming the problem
  // (heads vs TP, ...).
  static absl::StatusOr<std::unique_ptr<Block>> Create(const std::string& name,
                                                       const TransformerConfig& c, int64_t B,
                                                       int64_t T,
                                                       const parallel::ProcessGroupCollection& pgs,
                                                       GtpChain* chain, LayerKind kind = {});
  // dir kRecompute: a re-run whose gathers use the recompute slot (and MoE
  // routing statistics are not counted again).
  absl::StatusOr<Tensor> Forward(const Tensor& x, Direction dir = Direction::kForward);
  absl::StatusOr<Tensor> Backward(const Tensor& dx2);
  void DropActivations();
  // Expert weights go to `experts` (required for MoE blocks); the router
  // gate is a replicated param.
  void CollectParams(std::vector<ShardedParam*>* sharded, std::vector<ReplicatedParam*>* repl,
                     std::vector<ShardedParam*>* experts = nullptr);
  // The routed experts of an MoE block; null otherwise.
  moe::MoeLayer* moe() { return ffn_ ? ffn_->moe() : nullptr; }

 private:
  Block() = default;
  absl::StatusOr<Tensor> Run(const Tensor& x, Direction dir);
  kernels::Exec exec_;
  GtpChain* chain_ = nullptr;
  bool recompute_ = false;
  Tensor x_in_;  // recompute: the block input
  // Each half with its pre-norm; null where the layer has no such half.
  std::unique_ptr<Norm> ln1_;
  std::unique_ptr<Mixer> mixer_;
  std::unique_ptr<Norm> ln2_;
  std::unique_ptr<FeedForward> ffn_;
};

// The TP-region entry/exit used by Attention and Mlp (SP-aware):
// Enter: SP → all-gather rows over TP; else identity.
// Exit of the input gradient: SP → reduce-scatter rows; else all-reduce sum.
absl::StatusOr<Tensor> EnterTpRegion(const kernels::Exec& e, comm::Communicator& tp, bool sp,
                                     const Tensor& x);
absl::StatusOr<Tensor> ExitTpRegionGrad(const kernels::Exec& e, comm::Communicator& tp, bool sp,
                                        const Tensor& dx);

}  // namespace gtp::layers
