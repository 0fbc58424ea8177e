// recipes/trainer/mfu.h — model FLOPs utilisation by the usual convention.
//
// Training FLOP per token (PaLM appendix B, nanoGPT's estimate_mfu):
//   6·N + 12·L_attn·C·T + 21·L_mamba·d_inner·d_state
// where N counts every parameter except position embeddings (a tied
// embedding once), 6·N is forward + backward of every weight GEMM,
// 12·L_attn·C·T is the attention score and value products (2·2·T·C per token
// and attention layer forward, ×3 with backward), counted as if not causal,
// and 21·d_inner·d_state per Mamba layer is its scan (Megatron's estimate:
// 7·d_inner·d_state forward, ×3). Without a layer pattern every layer is
// attention + MLP; with one (model.layer_pattern) each symbol is one block:
// 'M' Mamba-2, '*' attention, '-' MLP, 'E' MoE, each with its pre-norm.
// MFU is then, per GPU,
//   flop_per_token · tokens_per_s_per_gpu ÷ peak_flop_per_s.
//
//   ModelShape m = ShapeOf(recipe.model());
//   double mfu = Mfu(TrainingFlopPerToken(m), tokens_per_s / world, PeakFlops(recipe.train()));
//
// Pure functions; thread-safe.
#pragma once

#include <cstdint>

#include "recipes/trainer/config.pb.h"

namespace gtp::recipes {

// The transformer's shape as far as FLOPs and parameters go.
struct ModelShape {
  int64_t vocab_size = 0;  // V, the real vocabulary (not padded)
  int64_t seq_len = 0;     // T
  int64_t n_layer = 0;     // L
  int64_t n_embd = 0;      // C
  int64_t n_head = 0;      // NH
  int64_t n_kv_head = 0;   // NKV; 0: = NH
  int64_t ffn_hidden = 0;  // H; 0: 4·C
  bool swiglu = false;     // fc is [2H, C] (gate; up) instead of [H, C]
  bool rmsnorm = false;    // norms have a weight only
  bool bias = true;        // biases in the linears and LayerNorms
  bool tied_embeddings = true;
  // MoE: layers whose MLP is routed, each token through top_k experts of
  // hidden moe_hidden (no biases), plus a shared expert of shared_hidden
  // (0: none) and the router's [E, C] gate.
  int64_t moe_layers = 0;
  int64_t num_experts = 0, top_k = 0, moe_hidden = 0, shared_hidden = 0;
  // Hybrid stacks (layer_pattern set): blocks of each kind. Without a
  // pattern: n_layer attention blocks and n_layer MLP blocks (moe_layers of
  // them routed), two norms per layer.
  bool hybrid = false;
  int64_t attn_blocks = 0, mlp_blocks = 0, mamba_blocks = 0;  // moe_layers: 'E' blocks
  // Mamba-2 mixer: d_inner = expand·C, heads = d_inner / head_dim.
  int64_t mamba_d_state = 16, mamba_d_conv = 4, mamba_expand = 2, mamba_head_dim = 16,
          mamba_groups = 1;
};

// The shape of a (finalised) recipe's model.
ModelShape ShapeOf(const proto::Model& m);

// Parameters except position embeddings, the tied embedding counted once; in
// MoE layers the parameters a token passes through (its top_k experts).
// The embedding's share uses the real vocabulary V: pad rows
// (vocab_pad_multiple) are storage that no lookup or logit touches.
int64_t NonPositionParams(const ModelShape& m);
// The same count in double precision: never overflows (a memory estimate
// of any setting, however large, before anything is allocated).
double NonPositionParamsApprox(const ModelShape& m);

// 6·NonPositionParams + 12·L·C·T.
double TrainingFlopPerToken(const ModelShape& m);

// Peak FLOP/s per GPU for the MFU: train.peak_tflops when set; otherwise
// 989e12 (H200 dense bf16, the convention's reference whatever precision the
// run uses) on cuda; 0 (no MFU shown) on cpu.
double PeakFlops(const proto::Train& t);

// Fraction of `peak_flops` achieved; 0 when peak_flops <= 0.
double Mfu(double flop_per_token, double tokens_per_s_per_gpu, double peak_flops);

}  // namespace gtp::recipes
