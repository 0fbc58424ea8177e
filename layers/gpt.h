// layers/gpt.h — the GPT model: vocab-parallel embedding, transformer
// blocks, final norm, LM head with vocab-parallel cross-entropy.
//
//   x0 = wte[tokens] (+ wpe[positions])          wte: [V_pad, C], TP splits V
//   x_{l+1} = Block_l(x_l)                        (layers/transformer.h)
//   logits = Norm_f(x_L) · W_lmᵀ                  W_lm = wte when tied
//   loss = mean over this lane's tokens of CE(logits, targets)
//
// Vocabulary padding: V_pad = round_up(V, vocab_pad_multiple) (128 by
// default, so every TP degree up to 128 divides it and all layouts build the
// same global model). Pad rows are storage only: lookups never hit them and
// the LM head multiplies only the real rows, so logits have exactly V columns
// across the TP group and match an unpadded model.
//
// GPT-2 is: LayerNorm, GELU, learned positions, tied embeddings, biases.
// Llama-style is: RMSNorm, SwiGLU, RoPE (no learned positions), no biases,
// untied embeddings.
//
// Data layout: each data lane (a (DP, GTP) coordinate) feeds its own B×T
// tokens; all TP (and SP) ranks of a lane get the same tokens. Under context
// parallelism (CP) every CP rank of the lane is given the same [B, T] and
// keeps its two load-balanced chunks of T/(2·CP) tokens (layers/cp).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/kernels/ops.h"
#include "core/timeline.h"
#include "layers/linear.h"
#include "layers/sharded_param.h"
#include "layers/transformer.h"
#include "parallel/process_groups.h"

namespace gtp::layers {

// What Backward differentiates: kMean, this lane's mean loss over its valid
// targets (the default); kSum, the sum over them (per-token normalisation:
// the optimizer divides once by the global token count).
enum class LossReduction { kMean, kSum };

// Which part of the layer stack this model holds (pipeline parallelism):
// part `index` of `count` virtual stages (PP · VPP). Part 0 has the
// embedding, part count−1 the final norm and LM head; layers split evenly
// (n_layer divisible by count), or at `boundaries` (count first-layer
// indices, boundaries[0] = 0, increasing). Blocks keep their global names
// ("h.<layer>"). With tied embeddings the last part holds its own copy of
// "wte.weight" for the head (ShardedParam::tied_copy): its gradient is
// summed with the first part's over the "embd" group (SyncTiedEmbedding)
// and both copies take identical optimizer steps.
struct PipelinePart {
  int index = 0;
  int count = 1;
  std::vector<int> boundaries;
};

struct GptConfig {
  int64_t vocab_size = 0;
  int64_t max_seq_len = 0;
  int n_layer = 0;
  TransformerConfig block;  // n_layer, seed and init_std are copied from here
  bool tied_embeddings = true;
  bool learned_positions = true;
  int64_t vocab_pad_multiple = 128;
  LossReduction loss_reduction = LossReduction::kMean;
  PipelinePart pipeline;
  // Prefix embeddings (vision-language / MIMO models): the first prefix_len
  // positions of every sequence take their input rows from SetPrefix (e.g.
  // projected image features) instead of the token and position
  // embeddings; their token ids are not looked up and get no gradient. 0:
  // none. Not with context parallelism.
  int64_t prefix_len = 0;
  // Hybrid stacks (Megatron's hybrid layer pattern): one symbol per layer —
  // 'M' Mamba-2 mixer, '*' attention, '-' MLP, 'E' MoE (block.moe), each with
  // its own pre-norm and residual (LayerKindOf, layers/layer_kind.h) — and
  // '|' a pipeline boundary, e.g. "M-M*-ME|M-M*-ME". n_layer follows from
  // the pattern (0, or the count of layer symbols); with PP·VPP parts and no
  // explicit boundaries, the parts split at the '|'s. Empty: every layer
  // attention + MLP (or MoE, block.moe).
  std::string layer_pattern;
  // The head's logits in row chunks of at most this many bytes when a tied
  // LM head's loss gradient is known in the forward (one rank of TP and GTP
  // for the head, no SP, no re-run of the forward): each chunk's logits,
  // fused loss, and its share of the head's backward (dh rows, the tied
  // weight's gradient) before the next, so the [B·T, V] logits are never
  // held whole (GPT-2 124M at B·T = 8192: 824 MB → two chunks of 412 MB).
  // The weight gradient then adds the chunks in order; 0: never chunked
  // (negative: refused by name).
  int64_t head_chunk_bytes = int64_t{512} << 20;
  // With block.fp8: the first and the last this many layers (over the whole
  // stack, whichever pipeline part holds them) build their linears and
  // experts in block.dtype, not fp8 (Megatron-LM's first/last layers in
  // bf16). 0: every layer in fp8. Negative, or together above n_layer:
  // refused by name.
  int fp8_bf16_first_layers = 0;
  int fp8_bf16_last_layers = 0;

  // GPT-2 (124M shape by default): LayerNorm, GELU, learned positions, tied.
  static GptConfig Gpt2(int64_t vocab = 50257, int64_t seq = 1024, int layers = 12,
                        int64_t embd = 768, int64_t heads = 12);
  int64_t padded_vocab() const;
};

// Whether layer l (0 ≤ l < n_layer, over the whole stack) builds its
// linears and experts in fp8: block.fp8, and l is neither among the first
// fp8_bf16_first_layers nor the last fp8_bf16_last_layers.
bool Fp8Layer(const GptConfig& c, int l);

class GptModel {
 public:
  // Builds this rank's part of the model for micro-batches of B×T tokens.
  // InvalidArgument naming the field when the config does not fit the
  // layout (heads vs TP, T vs max_seq_len, rows vs SP...).
  static absl::StatusOr<std::unique_ptr<GptModel>> Create(
      const GptConfig& config, int64_t B, int64_t T, const parallel::ProcessGroupCollection& pgs,
      const kernels::Exec& exec, const GtpOptions& gtp_options = {});

  // tokens, targets: i32 [B, T] on the exec's device (targets < 0 are
  // ignored). Enqueues the forward and adds this lane's mean loss into a
  // device accumulator (TakeLossSum); keeps activations for Backward. No
  // host synchronisation on the GPU. With `backward_follows` (a training
  // step: Backward is called next) and TP = 1 the loss gradient is computed
  // with the loss, in one pass over the logits, which then hold it: logits()
  // is not valid afterwards.
  absl::Status ForwardAsync(const Tensor& tokens, const Tensor& targets,
                            bool backward_follows = false);
  // ForwardAsync, then waits and returns this micro-batch's mean loss (the
  // accumulator is left as it was). Blocks: for tests and evaluation.
  absl::StatusOr<float> Forward(const Tensor& tokens, const Tensor& targets);
  // The sum of the mean losses of every ForwardAsync since the last call;
  // resets it. Blocks (one device-to-host copy).
  absl::StatusOr<float> TakeLossSum();
  // Backward of the loss (mean or sum, config().loss_reduction): parameter gradients accumulate (+=) into the
  // sharded params' main grads (after the GTP reduce-scatter, which means
  // over the lanes of a GTP group) and the replicated params' grads (local to
  // this lane). Finishes every pending reduction before returning.
  absl::Status Backward();
  // Pipeline parts (config().pipeline): one micro-batch through this part.
  // The first part reads `tokens` (`input` ignored); the others read
  // `input`, the previous part's output [N or N_tp, C]. The last part reads
  // `targets` and accumulates the loss like ForwardAsync, returning an empty
  // tensor; the others return their output. `recompute`: a re-run of a
  // micro-batch whose activations were dropped (DropActivations) —
  // gathers on the recompute slot, nothing accumulated or counted again.
  // A single-part model is ForwardPart + BackwardPart = ForwardAsync + Backward.
  absl::StatusOr<Tensor> ForwardPart(const Tensor& tokens, const Tensor& input,
                                     const Tensor& targets, bool backward_follows = false,
                                     bool recompute = false);
  // Backward of the last ForwardPart: the last part differentiates its loss
  // (`dout` ignored), the others take the gradient of their output. Returns
  // the gradient of `input` (empty on the first part). Finishes the
  // pending GTP reductions like Backward.
  absl::StatusOr<Tensor> BackwardPart(const Tensor& dout = Tensor());
  // Prefix embeddings (GptConfig::prefix_len > 0, first pipeline part): the
  // next forward's prefix rows, [B·prefix_len, C] in the model dtype (f32 is
  // cast), sample b's positions 0..prefix_len−1 at rows b·prefix_len + t;
  // every TP rank of the lane passes the same tensor. Kept until the next
  // SetPrefix. InvalidArgument for a wrong shape, FailedPrecondition without
  // a prefix in the config.
  absl::Status SetPrefix(const Tensor& prefix);
  // After the backward: the loss's gradient with respect to the prefix, f32
  // [B·prefix_len, C], complete on every TP rank (summed over TP under SP).
  const Tensor& prefix_grad() const { return prefix_grad_; }
  // Forgets every saved activation (a pipeline stage keeps only inputs).
  void DropActivations();
  bool has_embedding() const { return wte_ != nullptr; }
  // Every layer of the model (not only this part's), as the layout plan decided them.
  const std::vector<LayerKind>& layer_kinds() const { return layers_; }
  bool has_head() const { return ln_f_ != nullptr; }
  // Rows of this rank's activations [rows, C] between parts.
  int64_t activation_rows() const { return rows_local_; }
  // Tied embeddings split over pipeline stages: sums wte.weight's main grad
  // (the embedding's part on the first stage, the head's on the last) over
  // `embd` (the first and last stage). Call after the last micro-batch's
  // backward, before the gradient buffer reduces (its overlap must be off).
  // No-op unless this part holds a wte that another part shares. Blocks.
  absl::Status SyncTiedEmbedding(comm::Communicator& embd);
  bool tied_across_stages() const {
    return config_.tied_embeddings && config_.pipeline.count > 1 && (has_embedding() || has_head());
  }

  // Logits of the last Forward: [B·T, V_pad/TP] on this TP rank; its first
  // vocab_local() columns are columns [vocab_start(), vocab_start() +
  // vocab_local()) of the vocabulary, the rest vocabulary padding.
  const Tensor& logits() const { return logits_; }
  int64_t vocab_start() const { return vocab_start_; }
  int64_t vocab_local() const { return v_real_; }
  // Valid targets (>= 0) of the last (synchronous) Forward on this lane;
  // -1 after ForwardAsync.
  int64_t num_valid_tokens() const { return n_valid_; }

  // Sets parameter `name` (e.g. "h.0.attn.q.weight") from its full global
  // value: host, row-major f32 of `shape`. The vocabulary tables accept
  // [V, C] or [V_pad, C] (pad rows become zero). NotFound for an unknown
  // name, InvalidArgument for a wrong shape. Host copies; blocks.
  absl::Status LoadGlobal(const std::string& name, const float* data, const Shape& shape);

  GtpChain& chain() { return *chain_; }
  // Records embedding / per-block / head spans of Forward and Backward on
  // `t` (null: none). Not owned.
  void set_timeline(Timeline* t) {
    timeline_ = t;
    chain_->set_timeline(t);
  }
  // Every parameter of this rank, in a fixed order. Expert weights (MoE
  // layers) are apart: they are reduced over the expert grid's groups.
  const std::vector<ShardedParam*>& sharded_params() const { return sharded_; }
  const std::vector<ReplicatedParam*>& replicated_params() const { return replicated_; }
  const std::vector<ShardedParam*>& expert_params() const { return experts_; }
  bool has_moe() const { return !moe_layers_.empty(); }

  // MoE bookkeeping at the end of an optimizer step (collective over
  // `world`, every rank; a no-op without MoE layers): sums every MoE layer's
  // token counts and loss parts over the world, updates the expert biases
  // (router.expert_bias), and returns the step's figures. `lanes`: the
  // number of data lanes; `micro_batches`: forwards per lane in the step.
  struct MoeStats {
    double tokens_min = 0, tokens_mean = 0, tokens_max = 0;  // per expert and layer, per step
    double dropped = 0;                                       // tokens dropped, per step
    double aux_loss = 0, z_loss = 0;  // per layer, mean over lanes and micro-batches
  };
  absl::StatusOr<MoeStats> FinishMoeStep(comm::Communicator& world, int lanes, int micro_batches);
  // The same over all of this rank's pipeline parts (every rank calls it,
  // whatever layers it holds).
  static absl::StatusOr<MoeStats> FinishMoeStep(const std::vector<GptModel*>& parts,
                                                comm::Communicator& world, int lanes,
                                                int micro_batches);
  // MoE state that is not a parameter but belongs in checkpoints: each MoE
  // layer's expert bias (when router.expert_bias), as a host f32 [E] view
  // named "<layer>.moe.router.expert_bias". Identical on every rank.
  std::vector<std::pair<std::string, Tensor>> moe_buffers();
  // Forgets the counts and losses gathered since the last FinishMoeStep
  // (e.g. of evaluation forwards). Local.
  void ResetMoeStats();
  const GptConfig& config() const { return config_; }

 private:
  GptModel() = default;
  absl::StatusOr<Tensor> EmbedForward(const Tensor& tokens, Direction dir);
  absl::Status EmbedBackward(const Tensor& dx);
  // The loss's backward through the head and ln_f: the last block's output gradient.
  absl::StatusOr<Tensor> HeadBackward();
  // dloss [B·T] for a loss gradient taken in the forward: 1 (sum) or
  // 1 / valid targets (mean; counts them into count_ first).
  Tensor ForwardLossGrad();
  // Rows a chunk of the head's logits when the forward takes the head's
  // backward too (GptConfig::head_chunk_bytes), else 0.
  int64_t HeadChunkRows(const ShardedParam& head, bool backward_follows, bool recompute) const;
  // The head in row chunks: logits, fused loss and gradient, dh rows into
  // head_dh_, the weight gradient added in; the loss into `acc`.
  absl::Status HeadChunked(const Tensor& w, ShardedParam& head, int64_t rows, const Tensor& acc);

  GptConfig config_;
  kernels::Exec exec_;
  int64_t B_ = 0, T_ = 0, rows_local_ = 0, row0_ = 0;
  int first_layer_ = 0;  // global index of blocks_[0]
  int64_t T_full_ = 0;   // tokens per sequence (T_ is this rank's share under CP)
  int cp_ = 1, cp_rank_ = 0;
  // Under CP, this rank's 2 chunks of full [B, T] tokens/targets (through
  // the host: one small copy each way); anything else as it is.
  Tensor LocalSequence(const Tensor& full) const;
  int64_t v_tp_ = 0, v_real_ = 0, vocab_start_ = 0;
  comm::Communicator* tp_ = nullptr;
  bool sp_ = false;
  std::unique_ptr<GtpChain> chain_;
  std::unique_ptr<ShardedParam> wte_, lm_head_;  // lm_head_ null when tied
  ReplicatedParam wpe_;
  std::vector<LayerKind> layers_;  // every layer of the model (the layout plan's)
  std::vector<std::unique_ptr<Block>> blocks_;
  std::unique_ptr<Norm> ln_f_;
  std::vector<ShardedParam*> sharded_;
  std::vector<ReplicatedParam*> replicated_;
  std::vector<ShardedParam*> experts_;
  std::vector<moe::MoeLayer*> moe_layers_;
  std::vector<int> moe_layer_index_;  // their global layer numbers
  // Prefix embeddings: each local row's row in [embeddings; prefix] (device
  // i32 [rows_local_]), the prefix of the next forward and its gradient.
  Tensor prefix_map_, prefix_, prefix_grad_;
  // Saved for backward.
  Tensor tokens_, targets_, pos_ids_, h_f_, logits_, row_max_, sumexp_;
  bool logits_are_grad_ = false;  // the fused loss already turned logits_ into dlogits
  Tensor head_dh_;                // HeadChunked's dh [B·T, C]: the head's backward is done
  Tensor loss_acc_;  // f32 [1]: Σ of micro-batch mean losses (device)
  Tensor count_;     // f32 [1]: valid targets of the last forward (device)
  int64_t n_valid_ = 0;
  Timeline* timeline_ = nullptr;
};

}  // namespace gtp::layers
