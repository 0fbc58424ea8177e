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
#include "layers/sharded_param.h"
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
  // Mixture of experts (layers/moe): in the layers moe.IsMoeLayer(l) picks,
  // the MLP is a routed MoE (plus a shared expert of moe.shared_ffn_hidden).
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

class Attention {
 public:
  static absl::StatusOr<std::unique_ptr<Attention>> Create(
      const std::string& name, const TransformerConfig& c, int64_t B, int64_t T,
      const parallel::ProcessGroupCollection& pgs, GtpChain* chain);
  // h[N or N_tp, C] (normalised input) → out[N or N_tp, C] (before residual).
  absl::StatusOr<Tensor> Forward(const Tensor& h, Direction dir = Direction::kForward);
  absl::StatusOr<Tensor> Backward(const Tensor& dout);
  void DropActivations();
  void CollectParams(std::vector<ShardedParam*>* sharded, std::vector<ReplicatedParam*>* repl);

 private:
  Attention() = default;
  TransformerConfig config_;
  int64_t B_ = 0, T_ = 0, nh_tp_ = 0, nkv_tp_ = 0, hs_ = 0;
  comm::Communicator* tp_ = nullptr;
  GtpChain* chain_ = nullptr;
  std::unique_ptr<ColumnParallelLinear> q_, k_, v_;
  std::unique_ptr<RowParallelLinear> o_;
  Tensor q_out_, k_out_, v_out_;
  Tensor att_;       // f32: probabilities [B, NH_tp, T, T]
  Tensor y_, lse_;   // bf16 (flash): output [B, T, NH_tp, HS], log-sum-exp [B, NH_tp, T]
  // Context parallelism (the "cp" group > 1): T_ is this rank's share of the
  // sequence and attention runs over the whole of it by ring exchange.
  std::unique_ptr<cp::RingAttention> ring_;
};

class Mlp {
 public:
  static absl::StatusOr<std::unique_ptr<Mlp>> Create(const std::string& name,
                                                     const TransformerConfig& c,
                                                     const parallel::ProcessGroupCollection& pgs,
                                                     GtpChain* chain);
  absl::StatusOr<Tensor> Forward(const Tensor& h, Direction dir = Direction::kForward);
  absl::StatusOr<Tensor> Backward(const Tensor& dout);
  void DropActivations();
  void CollectParams(std::vector<ShardedParam*>* sharded, std::vector<ReplicatedParam*>* repl);

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
  Tensor pre_act_;  // GELU: fc out [N, H_tp]; SwiGLU: [N, 2·H_tp] = [gate | up]
};

// What a block holds. kTransformer: x1 = x + Attn(Norm1(x)), x2 = x1 +
// MLP(Norm2(x1)) (the MLP a MoE when the block is a MoE layer). Hybrid
// stacks (Megatron's layer pattern symbols) have one sublayer per block,
// each with its own pre-norm and residual: kMamba 'M' (x + Mamba(Norm1(x))),
// kAttention '*', kMlp '-', kMoe 'E'.
enum class BlockKind { kTransformer, kMamba, kAttention, kMlp, kMoe };
// The kind of a pattern symbol ('M', '*', '-', 'E'); InvalidArgument otherwise.
absl::StatusOr<BlockKind> BlockKindOf(char symbol);

class Block {
 public:
  // `moe_layer`: the MLP is c.moe's mixture of experts ("<name>.moe"), with
  // the shared expert "<name>.moe.shared" when c.moe.shared_ffn_hidden > 0.
  static absl::StatusOr<std::unique_ptr<Block>> Create(const std::string& name,
                                                       const TransformerConfig& c, int64_t B,
                                                       int64_t T,
                                                       const parallel::ProcessGroupCollection& pgs,
                                                       GtpChain* chain, bool moe_layer = false,
                                                       BlockKind kind = BlockKind::kTransformer);
  // dir kRecompute: a re-run whose gathers use the recompute slot (and MoE
  // routing statistics are not counted again).
  absl::StatusOr<Tensor> Forward(const Tensor& x, Direction dir = Direction::kForward);
  absl::StatusOr<Tensor> Backward(const Tensor& dx2);
  void DropActivations();
  // Expert weights go to `experts` (required for MoE blocks); the router
  // gate is a replicated param.
  void CollectParams(std::vector<ShardedParam*>* sharded, std::vector<ReplicatedParam*>* repl,
                     std::vector<ShardedParam*>* experts = nullptr);
  moe::MoeLayer* moe() { return moe_.get(); }

 private:
  Block() = default;
  absl::StatusOr<Tensor> Run(const Tensor& x, Direction dir);
  kernels::Exec exec_;
  GtpChain* chain_ = nullptr;
  bool recompute_ = false;
  Tensor x_in_;  // recompute: the block input
  std::unique_ptr<Norm> ln1_, ln2_;      // ln1_: before the mixer; ln2_: before the MLP / MoE
  std::unique_ptr<Attention> attn_;       // null in Mamba / MLP / MoE blocks
  std::unique_ptr<mamba::MambaMixer> mamba_;
  std::unique_ptr<Mlp> mlp_;            // the dense MLP, or the MoE's shared expert (may be null)
  std::unique_ptr<moe::MoeLayer> moe_;  // MoE blocks only
};

// The TP-region entry/exit used by Attention and Mlp (SP-aware):
// Enter: SP → all-gather rows over TP; else identity.
// Exit of the input gradient: SP → reduce-scatter rows; else all-reduce sum.
absl::StatusOr<Tensor> EnterTpRegion(const kernels::Exec& e, comm::Communicator& tp, bool sp,
                                     const Tensor& x);
absl::StatusOr<Tensor> ExitTpRegionGrad(const kernels::Exec& e, comm::Communicator& tp, bool sp,
                                        const Tensor& dx);

}  // namespace gtp::layers
