#include "recipes/trainer/typed_config.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/status.h"

namespace gtp::recipes {

// The recipe's layout as the process-group builder takes it (the one
// translation: start-up checks and the run use it alike).
parallel::ParallelConfig ParallelConfigOf(const proto::Recipe& r) {
  parallel::ParallelConfig pc;
  pc.tp = r.parallel().tp();
  pc.tp_num_weight_shards = r.parallel().tp_num_weight_shards();
  pc.sequence_parallel = r.parallel().sequence_parallel();
  pc.ep = r.parallel().ep();
  pc.etp = r.parallel().etp();
  pc.expert_tp_num_weight_shards = r.parallel().expert_tp_num_weight_shards();
  pc.pp = r.parallel().pp();
  pc.cp = r.parallel().cp();
  if (!r.parallel().order().empty()) pc.order = r.parallel().order();
  if (!r.parallel().expert_order().empty()) pc.expert_order = r.parallel().expert_order();
  return pc;
}

parallel::ModelFacts ModelFactsOf(const proto::Recipe& r) {
  parallel::ModelFacts facts;
  facts.seq_length = r.model().seq_len();
  facts.num_attention_heads = r.model().n_head();
  if (r.model().moe().num_experts() > 0) facts.num_experts = r.model().moe().num_experts();
  return facts;
}

// The whole layout on `world` ranks, checked before anything is written.
// FinalizeRecipe has checked each order string alone; an error that only
// the orders cause (their pipeline stages disagree, say: the defaults would
// resolve) names both settings and the defaults.
namespace {

// The commonest layout mistakes, in the recipe's own setting names and with
// a value that works (the parallel/ and data/ checks that follow speak of
// TP·GTP·CP·PP and samplers).
absl::Status CheckWorldAndBatch(const proto::Recipe& r, int world) {
  const auto& p = r.parallel();
  const int64_t tp = std::max(1, p.tp()), shards = std::max(1, p.tp_num_weight_shards());
  const int64_t cp = std::max(1, p.cp()), pp = std::max(1, p.pp());
  if (shards % tp != 0) return absl::OkStatus();  // parallel/ names this one
  const int64_t fixed = shards * cp * pp;
  if (world % fixed != 0) {
    std::string fewer;
    if (world % (tp * cp * pp) == 0 && shards > tp) {
      fewer = absl::StrCat(", or fewer weight shards: parallel.tp_num_weight_shards=", tp);
    }
    return absl::InvalidArgumentError(absl::StrCat(
        "parallel.world_size ", world, " is not divisible by parallel.tp_num_weight_shards × parallel.cp × "
        "parallel.pp = ", shards, " × ", cp, " × ", pp, " = ", fixed,
        " (TP·GTP·CP·PP; the rest of the world is DP): set parallel.world_size=",
        (world + fixed - 1) / fixed * fixed, " (under gtprun: --nproc)", fewer));
  }
  // Data lanes: the GTP·DP ranks, each with its own micro-batches.
  const int64_t lanes = world / (tp * cp * pp);
  const int64_t micro = r.train().micro_batch();
  const int64_t global = r.train().global_batch() > 0 ? r.train().global_batch() : micro * lanes;
  if (micro < 1) return absl::OkStatus();  // FinalizeRecipe names it
  const std::string lanes_are =
      absl::StrCat(" (data lanes = world / (TP·CP·PP) = ", world, " / (", tp, "·", cp, "·", pp, ") = ", lanes,
                   ", the GTP·DP ranks)");
  if (global % (micro * lanes) != 0) {
    std::string fix;
    if (global % lanes == 0) {
      int64_t m = micro;
      while (m > 1 && (global / lanes) % m != 0) --m;
      fix = absl::StrCat("set train.micro_batch=", m, ", or ");
    }
    return absl::InvalidArgumentError(absl::StrCat(
        "train.global_batch ", global, " is not a multiple of train.micro_batch × data lanes = ", micro,
        " × ", lanes, " = ", micro * lanes, lanes_are, ": ", fix, "set train.global_batch=",
        (global + micro * lanes - 1) / (micro * lanes) * (micro * lanes)));
  }
  const int64_t M = global / (micro * lanes);
  if (pp > 1 && M < pp) {
    std::string fix;
    if (global / lanes >= pp && (global / lanes) % pp == 0) {
      fix = absl::StrCat("set train.micro_batch=", global / lanes / pp, ", or ");
    }
    return absl::InvalidArgumentError(absl::StrCat(
        "parallel.pp=", pp, " needs at least ", pp, " micro-batches per step, got ", M,
        " (train.global_batch / (train.micro_batch × data lanes) = ", global, " / (", micro, " × ", lanes, "))",
        lanes_are, ": ", fix, "set train.global_batch=", pp * micro * lanes));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckLayout(const proto::Recipe& r, int world) {
  GTP_RETURN_IF_ERROR(CheckWorldAndBatch(r, world));
  const parallel::ParallelConfig pc = ParallelConfigOf(r);
  const absl::Status st = pc.Resolve(world, ModelFactsOf(r)).status();
  parallel::ParallelConfig defaults = pc;
  defaults.order = parallel::kDefaultOrder;
  defaults.expert_order = parallel::kDefaultExpertOrder;
  if (st.ok() || (pc.order == defaults.order && pc.expert_order == defaults.expert_order) ||
      !defaults.Resolve(world, ModelFactsOf(r)).ok()) {
    return st;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("parallel.order '", pc.order, "' with parallel.expert_order '", pc.expert_order,
                   "' does not fit this layout: ", st.message(),
                   " (the defaults parallel.order=", parallel::kDefaultOrder,
                   " and parallel.expert_order=", parallel::kDefaultExpertOrder, " work)"));
}

layers::GptConfig ModelConfig(const proto::Recipe& r) {
  const auto& m = r.model();
  layers::GptConfig c = layers::GptConfig::Gpt2(m.vocab_size(), m.seq_len(), m.n_layer(),
                                                m.n_embd(), m.n_head());
  c.block.n_kv_head = m.n_kv_head();
  c.block.ffn_hidden = m.ffn_hidden();
  c.block.norm = m.norm() == "rmsnorm" ? layers::NormKind::kRMSNorm : layers::NormKind::kLayerNorm;
  c.block.activation =
      m.activation() == "swiglu" ? layers::Activation::kSwiGlu : layers::Activation::kGelu;
  c.block.bias = !m.no_bias();
  c.block.init_std = m.init_std();
  c.block.recompute = m.recompute();
  c.block.rope = m.rope();
  c.block.rope_theta = m.rope_theta() > 0 ? m.rope_theta() : 10000.0f;
  c.block.norm_eps = m.norm_eps() > 0 ? m.norm_eps() : 1e-5f;
  c.learned_positions = !m.rope();
  c.block.sequence_parallel = r.parallel().sequence_parallel();
  c.block.seed = r.train().seed();
  c.tied_embeddings = !m.untied_embeddings();
  c.vocab_pad_multiple = m.vocab_pad_multiple();
  c.block.dtype = r.train().precision() == "f32" ? DType::kF32 : DType::kBF16;
  c.block.fp8 = r.train().precision() == "fp8";
  c.block.fp8_wgrad = r.train().fp8_wgrad() != "bf16";
  c.fp8_bf16_first_layers = r.train().fp8_bf16_first_layers();
  c.fp8_bf16_last_layers = r.train().fp8_bf16_last_layers();
  const std::string& packing = r.train().pack_projections();
  c.block.packing = packing == "on"     ? layers::ProjectionPacking::kOn
                    : packing == "auto" ? layers::ProjectionPacking::kAuto
                                        : layers::ProjectionPacking::kOff;
  const auto& e = m.moe();
  if (e.num_experts() > 0) {
    layers::moe::MoeConfig& mc = c.block.moe;
    layers::moe::RouterConfig& rc = mc.router;
    rc.num_experts = e.num_experts();
    rc.top_k = e.top_k();
    rc.score = e.score() == "sigmoid" ? layers::moe::ScoreFunction::kSigmoid
                                      : layers::moe::ScoreFunction::kSoftmax;
    rc.pre_softmax = !e.post_softmax();
    rc.topk_scaling = e.topk_scaling();
    rc.num_groups = e.num_groups();
    rc.group_topk = e.group_topk();
    rc.aux_loss_coeff = e.aux_loss_coeff();
    rc.aux_loss_type =
        e.aux_loss_type() == "seq" ? layers::moe::AuxLossType::kSequence : layers::moe::AuxLossType::kLane;
    rc.z_loss_coeff = e.z_loss_coeff();
    rc.expert_bias = e.expert_bias();
    rc.bias_update_rate = e.bias_update_rate();
    rc.capacity_factor = e.capacity_factor();
    rc.drop_policy = e.drop_policy() == "position" ? layers::moe::DropPolicy::kPosition
                                                   : layers::moe::DropPolicy::kProbability;
    rc.pad_to_capacity = e.pad_to_capacity();
    mc.dispatcher = e.dispatcher() == "allgather" ? layers::moe::Dispatcher::kAllGather
                                                  : layers::moe::Dispatcher::kAllToAll;
    mc.ffn_hidden = e.ffn_hidden();
    mc.shared_ffn_hidden = e.shared_ffn_hidden();
    mc.every_n = e.every_n();
    mc.pattern = e.pattern();
  }
  if (!m.layer_pattern().empty()) {
    c.layer_pattern = m.layer_pattern();
    const auto& mb = m.mamba();
    c.block.mamba.d_state = mb.d_state();
    c.block.mamba.d_conv = mb.d_conv();
    c.block.mamba.expand = mb.expand();
    c.block.mamba.head_dim = mb.head_dim();
    c.block.mamba.n_groups = mb.n_groups();
    c.block.mamba.chunk = mb.chunk();
    c.block.mamba.norm_eps = c.block.norm_eps;
  }
  return c;
}

optimizer::OptimizerConfig OptimConfig(const proto::Recipe& r) {
  const auto& o = r.optim();
  optimizer::OptimizerConfig c;
  c.matrices = o.matrices() == "muon" ? optimizer::MatrixOptimizer::kMuon
                                      : optimizer::MatrixOptimizer::kAdamW;
  c.adamw.beta1 = o.beta1();
  c.adamw.beta2 = o.beta2();
  c.adamw.weight_decay = o.weight_decay();
  c.muon.weight_decay = o.weight_decay();
  c.lr.max_lr = o.lr();
  c.lr.min_lr = o.min_lr();
  c.lr.decay_steps = o.decay_steps() > 0 ? o.decay_steps() : r.train().steps();
  c.lr.warmup_steps = std::min<int64_t>(o.warmup_steps(), c.lr.decay_steps);
  c.lr.decay = o.decay() == "cosine"   ? optimizer::LrDecay::kCosine
               : o.decay() == "linear" ? optimizer::LrDecay::kLinear
                                       : optimizer::LrDecay::kConstant;
  c.clip_grad = o.clip_grad();
  return c;
}

layers::GtpOptions GtpOptionsOf(const proto::Recipe& r) {
  layers::GtpOptions g;
  g.fp8_gather = r.parallel().gtp_gather_dtype() == "fp8";
  g.nvfp4_gather = r.parallel().gtp_gather_dtype() == "nvfp4";
  g.fp8_tile_gather = r.parallel().gtp_gather_dtype() == "fp8_tiles";
  g.bf16_reduce_scatter = r.parallel().gtp_reduce_scatter_dtype() == "bf16";
  return g;
}

absl::Duration CommTimeout(const proto::Recipe& r) {
  return absl::Seconds(r.parallel().comm_timeout_s());
}

}  // namespace gtp::recipes
