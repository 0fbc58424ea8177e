// layers/vision/vision_encoder.h — a ViT-style image encoder with a
// projector into a language model's width (the vision module of a MIMO
// vision-language model, mimo/).
//
//   x0 = patches·W_pᵀ + b_p + pos[t]          W_p [C, patch_dim], pos [Np, C]
//   x_{l+1} = Block_l(x_l)                   bidirectional attention (causal = false)
//   h = Norm_post(x_L)
//   out = W_2·gelu(W_1·h + b_1) + b_2         the projector, C → H_proj → out_dim
//
// B images of Np patches each: rows [B·Np, ·], image b's patch t at row
// b·Np + t. The blocks and the projector are tensor-parallel with
// GTP-sharded weights like the language model's (Megatron keeps encoders
// replicated over GTP; here they shard when the grid has GTP > 1). The
// patch embedding and positions are small replicated params (every TP rank
// computes them whole; their gradients reduce over the data lanes like any
// replicated param). No sequence parallelism, no CP.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/kernels/ops.h"
#include "layers/linear.h"
#include "layers/sharded_param.h"
#include "layers/transformer.h"
#include "parallel/process_groups.h"

namespace gtp::layers::vision {

struct VisionEncoderConfig {
  int64_t patch_dim = 0;    // values per patch (patch·patch·channels)
  int64_t num_patches = 0;  // Np, patches per image
  int n_layer = 0;
  // width (n_embd), heads, MLP hidden, norm, dtype, seed, init_std of the
  // blocks; causal and sequence_parallel are forced off, n_layer copied.
  TransformerConfig block;
  int64_t projector_hidden = 0;  // 0: out_dim
  int64_t out_dim = 0;           // the language model's width
  // Parameter names start with this ("vision." → "vision.h.0.attn.q.weight").
  std::string prefix = "vision.";
};

class VisionEncoder {
 public:
  // For micro-batches of B images. InvalidArgument naming the field.
  static absl::StatusOr<std::unique_ptr<VisionEncoder>> Create(
      const VisionEncoderConfig& config, int64_t B, const parallel::ProcessGroupCollection& pgs,
      const kernels::Exec& exec, const GtpOptions& gtp_options = {});

  // patches [B·Np, patch_dim] (f32 or the model dtype) → [B·Np, out_dim] in
  // the model dtype, replicated over TP. Keeps activations for Backward.
  absl::StatusOr<Tensor> Forward(const Tensor& patches);
  // dout [B·Np, out_dim] (f32 or the model dtype): accumulates every
  // parameter gradient (+=; the sharded ones through their GTP
  // reduce-scatter, finished before returning).
  absl::Status Backward(const Tensor& dout);
  void DropActivations();

  const VisionEncoderConfig& config() const { return config_; }
  GtpChain& chain() { return *chain_; }
  const std::vector<ShardedParam*>& sharded_params() const { return sharded_; }
  const std::vector<ReplicatedParam*>& replicated_params() const { return replicated_; }

 private:
  VisionEncoder() = default;
  VisionEncoderConfig config_;
  kernels::Exec exec_;
  int64_t B_ = 0;
  std::unique_ptr<GtpChain> chain_;
  ReplicatedParam patch_w_, patch_b_, pos_;
  Tensor pos_ids_;  // i32 [B·Np]: row r → r % Np
  std::vector<std::unique_ptr<Block>> blocks_;
  std::unique_ptr<Norm> ln_post_;
  std::unique_ptr<ColumnParallelLinear> fc_;
  std::unique_ptr<RowParallelLinear> out_;
  std::vector<ShardedParam*> sharded_;
  std::vector<ReplicatedParam*> replicated_;
  Tensor patches_, pre_;  // saved: the input (model dtype), the projector's pre-activation
};

}  // namespace gtp::layers::vision
