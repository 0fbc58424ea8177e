// plan/model.h — the planner's view of a recipe: the layout (every parallel
// degree), and each block's FLOPs, GEMM shapes, weights, communication
// volumes and saved activations per micro-batch on one rank.
//
// The layers come from recipes/trainer's LayerKindsOf (the one source of
// layer kinds); every layer is one or two blocks, each a half with its own
// pre-norm: '*' attention, '-' MLP, 'E' MoE, 'M' Mamba-2. The FLOPs of a
// block kind are the project's MFU count (recipes/trainer/mfu.h
// TrainingFlopPerToken) of a model with one such block minus that of a model
// with none, so the blocks plus the embedding/head sum to the MFU count
// exactly (model_test checks it).
//
// Kernel times: each kernel the layers launch is costed on its own from the
// CostModel (plan/calibration.h), with the work conventions there. The
// Mamba-2 block (layers/mamba/mamba_mixer.cc): five in_proj GEMMs, their
// casts to f32 and the ten f32 copies of the SSM params (bf16 runs), dt's
// softplus + bias, A = −exp(A_log), three causal conv1d, the scan (shape
// class P·N), the gated RMSNorm, its cast back, out_proj, and the mirror
// image backward. The MoE block (layers/moe): the router's f32 cast and gate
// GEMM, its routing ops, the dispatcher's host read of the counts (dropless),
// the permutation gather, fc1 / fc2 as grouped GEMMs (forward, data and f32
// weight gradients), the activation, the combine, and backward the combine's,
// the f32 scatter-add, the routing backward, the gate's two f32 GEMMs, the
// axpby of the two input gradients and the cast back.
//
// Saved activations (bytes per token of one micro-batch, bf16 activations
// b = 2, f32 statistics; t = TP, s = t under SP else 1; C, Ckv = kv heads ·
// head size, H = ffn hidden, NH heads) — what the layers/ Forward code keeps
// for Backward:
//   every block's pre-norm (Norm::Forward): x [N/s, C] (b) + rstd [N] f32
//     (+ mean f32 for LayerNorm)
//   attention (layers/transformer.cc Attention::Forward): the TP-region
//     input hin [N, C] (b; gathered under SP; q, k, v share it), q, k, v
//     outputs [N, (C + 2·Ckv)/t] (b), the flash output y [N, C/t] (b; also
//     o's saved input) and lse [N, NH/t] f32; f32 runs keep the
//     probabilities [N, NH/t, T] f32 instead of lse
//   MLP (Mlp::Forward): hin [N, C] (b), pre-activation [N, H/t] (·2 for
//     SwiGLU's gate|up) (b), the activation [N, H/t] (b; proj's saved input)
//   MoE (layers/moe): hin [N, C] (b) + router's f32 input copy [N, C] and
//     logits [N, E] f32; per routed row (N·k rows over the EP group) the
//     expert input [C] (b), pre-activation [He or 2·He] (b), activation [He]
//     (b); a shared expert as an MLP of its hidden
//   Mamba-2 (layers/mamba/mamba_mixer.h, all f32): z, x, conv(x), y
//     [N, Di/t] each, B, C, conv(B), conv(C) [N, G·Ns/t] each, dt raw and
//     softplus'd [N, Hm/t] each; in_proj's input hin [N, C] (b), out_proj's
//     input [N, Di/t] (b)
// With recompute (Block::Forward) a block keeps only its input x [N/s, C]
// (b); its backward re-runs the forward, so one block's full set is live.
// f32 runs: b = 4. Pure; thread-safe.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "plan/calibration.h"
#include "plan/cluster.h"
#include "plan/collectives.h"
#include "recipes/trainer/config.pb.h"
#include "recipes/trainer/mfu.h"

namespace gtp::plan {

struct Layout {
  int tp = 1, gtp = 1, pp = 1, vpp = 1, dp = 1, cp = 1, ep = 1, egtp = 1;
  bool sp = false;         // sequence parallelism (only meaningful with tp > 1)
  bool recompute = false;  // full activation recompute per block
  int64_t micro_batch = 1;
  int64_t global_batch = 0;  // sequences per step
  // f32 | bf16 | fp8: the plan's fp8 is a what-if (GEMMs at the fp8 peak, MXFP8 gathers), not
  // the trainer's train.precision=fp8, which gathers bf16 unless gtp_gather_dtype says otherwise.
  std::string precision = "bf16";
  bool fp8_gather = false;           // parallel.gtp_gather_dtype=fp8
  bool nvfp4_gather = false;         // parallel.gtp_gather_dtype=nvfp4 (0.5625 bytes an element)
  bool bf16_reduce_scatter = false;  // parallel.gtp_reduce_scatter_dtype=bf16
  // Attention that materialises the T × T scores (the project's f32 path;
  // Megatron-LM of 2021: batched GEMMs over the full square + a fused
  // scale-mask-softmax), with attention dropout's mask when `attention_dropout`
  // (2021 GPT recipes; gtp has no dropout). Not set from a recipe: f32 runs
  // get it anyway; reproductions of other stacks set it.
  bool unfused_attention = false;
  bool attention_dropout = false;

  int world() const { return tp * gtp * cp * dp * pp; }
  // Data lanes: DP × GTP (GTP peers read different samples; DESIGN.md §3).
  int lanes() const { return dp * gtp; }
  int64_t micro_batches() const { return global_batch / (micro_batch * lanes()); }
  int edp() const { return world() / (pp * ep * egtp); }
  // "tp2 gtp4 pp2 vpp1 dp4 cp1 ep1 egtp1 sp mb1 rc".
  std::string ToString() const;
};

// Where each group's members sit. Dense order tp-gtp-cp-ep-dp-pp (fastest
// first, parallel/parallel_config.h): TP adjacent ranks, GTP peers TP apart,
// the replicate group (CP × DP: what the optimizer shards over and DP
// reduces over) TP·GTP apart, PP neighbours TP·GTP·CP·DP apart. Expert
// order tp-cp-ep-gtp-dp-pp with ETP = CP = 1: EP adjacent, EGTP EP apart.
struct Groups {
  Placement tp, gtp, cp, replicate, pp, ep, egtp;
};
Groups GroupsOf(const Layout& l, const Cluster& c);

// The recipe's layout: parallel.* and train.micro_batch/global_batch/precision
// (a finalised recipe; world = parallel.world_size).
absl::StatusOr<Layout> LayoutFromRecipe(const recipes::proto::Recipe& r);

// One block, per micro-batch on one rank (see the file comment).
struct BlockCost {
  char kind = '*';  // '*', '-', 'E', 'M'
  double mfu_flops_per_token = 0;  // the MFU convention (whole model width, one token)
  double fwd_compute = 0, bwd_compute = 0;  // seconds of kernels
  double tp_fwd = 0, tp_bwd = 0;            // TP/SP collectives (exposed)
  double ep_fwd = 0, ep_bwd = 0;            // EP all-to-alls (exposed)
  double cp_fwd = 0, cp_bwd = 0;            // ring attention exchange left after overlap
  double gather = 0;         // GTP all-gather of the block's dense weights (one pass)
  double reduce_scatter = 0; // GTP reduce-scatter of their gradient
  double expert_gather = 0, expert_reduce_scatter = 0;  // EGTP
  double act_bytes = 0;    // saved for backward, no recompute
  double input_bytes = 0;  // the block input (kept under recompute)
  // Parameters (global counts, all TP ranks together): GTP-sharded dense
  // weights, replicated small ones (norms, biases, router, Mamba's per-head
  // params; TP-split where the layer splits them), routed experts (all E).
  double sharded_params = 0, replicated_params = 0, expert_params = 0;
};

// The embedding (stage 0) and the LM head with the loss (last stage).
struct EndsCost {
  double embed_fwd = 0, embed_bwd = 0;
  double head_fwd = 0, head_bwd = 0;  // includes the vocab-parallel loss
  double head_gather = 0, head_reduce_scatter = 0;
  double head_act_bytes = 0;  // logits kept for backward
  double sharded_params = 0, replicated_params = 0;  // embedding (+ head if untied), final norm
  double mfu_flops_per_token = 0;
};

struct ModelCost {
  recipes::ModelShape shape;
  std::vector<BlockCost> blocks;  // in model order
  std::vector<int> layer_first_block;  // layer l = blocks [first[l], first[l+1])
  EndsCost ends;
  double mfu_flops_per_token = 0;  // recipes::TrainingFlopPerToken(shape)
  int64_t tokens_per_microbatch = 0;  // b·T (one lane, before CP/SP splits)
  std::string gemm_dtype;             // what the GEMMs run in
  // Every (op, dtype) the costs above asked the CostModel for.
  std::set<std::pair<Op, std::string>> kernels;
};

// InvalidArgument naming the setting (parallel.tp, ...) and a value that
// works when the layout does not divide the model or the batch.
absl::Status CheckLayout(const recipes::proto::Recipe& r, const Layout& l, const Cluster& c);

// The blocks' costs under `l` on `cost`'s cluster (CheckLayout first).
absl::StatusOr<ModelCost> CostModelOf(const recipes::proto::Recipe& r, const Layout& l, const CostModel& cost);

}  // namespace gtp::plan
