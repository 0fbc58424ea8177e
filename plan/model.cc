#include "plan/model.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "layers/layer_kind.h"
#include "recipes/trainer/config.h"

namespace gtp::plan {

std::string Layout::ToString() const {
  return absl::StrCat("tp", tp, " gtp", gtp, " pp", pp, " vpp", vpp, " dp", dp, " cp", cp,
                      ep > 1 || egtp > 1 ? absl::StrCat(" ep", ep, " egtp", egtp) : "", sp && tp > 1 ? " sp" : "",
                      " mb", micro_batch, recompute ? " rc" : "");
}

absl::StatusOr<Layout> LayoutFromRecipe(const recipes::proto::Recipe& r) {
  const auto& p = r.parallel();
  Layout l;
  l.tp = std::max(1, p.tp());
  const int shards = p.tp_num_weight_shards() > 0 ? p.tp_num_weight_shards() : l.tp;
  if (shards % l.tp != 0) {
    return absl::InvalidArgumentError(absl::StrCat("parallel.tp_num_weight_shards = ", shards,
                                                   " is not a multiple of parallel.tp = ", l.tp,
                                                   " (it is TP × GTP; e.g. ", 2 * l.tp, ")"));
  }
  l.gtp = shards / l.tp;
  l.pp = std::max(1, p.pp());
  l.vpp = std::max(1, p.vpp());
  l.cp = std::max(1, p.cp());
  l.ep = std::max(1, p.ep());
  const int etp = std::max(1, p.etp());
  if (etp != 1) return absl::InvalidArgumentError("parallel.etp > 1 is not planned (only etp = 1 is built)");
  const int eshards = p.expert_tp_num_weight_shards() > 0 ? p.expert_tp_num_weight_shards() : 1;
  l.egtp = eshards;
  l.sp = p.sequence_parallel() && l.tp > 1;
  l.recompute = r.model().recompute();
  const int world = std::max(1, p.world_size());
  const int64_t fixed = int64_t{l.tp} * l.gtp * l.cp * l.pp;
  if (world % fixed != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "parallel.world_size = ", world, " is not divisible by tp × gtp × cp × pp = ", fixed,
        " (e.g. parallel.world_size=", fixed, ")"));
  }
  l.dp = static_cast<int>(world / fixed);
  l.micro_batch = std::max<int64_t>(1, r.train().micro_batch());
  l.global_batch = r.train().global_batch() > 0 ? r.train().global_batch() : l.micro_batch * l.lanes();
  l.precision = r.train().precision().empty() ? "bf16" : r.train().precision();
  l.fp8_gather = p.gtp_gather_dtype() == "fp8";
  l.nvfp4_gather = p.gtp_gather_dtype() == "nvfp4";
  l.bf16_reduce_scatter = p.gtp_reduce_scatter_dtype() == "bf16";
  return l;
}

Groups GroupsOf(const Layout& l, const Cluster& c) {
  const int g = c.gpus_per_node;
  Groups gr;
  gr.tp = Place(l.tp, 1, g);
  gr.gtp = Place(l.gtp, l.tp, g);
  gr.cp = Place(l.cp, l.tp * l.gtp, g);
  gr.replicate = Place(l.cp * l.dp, l.tp * l.gtp, g);
  gr.pp = Place(l.pp, l.tp * l.gtp * l.cp * l.dp, g);
  gr.ep = Place(l.ep, 1, g);
  gr.egtp = Place(l.egtp, l.ep, g);
  return gr;
}

namespace {

absl::Status Bad(const std::string& s) { return absl::InvalidArgumentError(s); }

// The MFU count of one block of `kind` (a model with one such block minus one with none).
double KindFlops(const recipes::ModelShape& base, char kind) {
  recipes::ModelShape s = base;
  s.hybrid = true;
  s.attn_blocks = s.mlp_blocks = s.mamba_blocks = s.moe_layers = 0;
  const double none = recipes::TrainingFlopPerToken(s);
  if (kind == '*') s.attn_blocks = 1;
  if (kind == '-') s.mlp_blocks = 1;
  if (kind == 'E') s.moe_layers = 1;
  if (kind == 'M') s.mamba_blocks = 1;
  return recipes::TrainingFlopPerToken(s) - none;
}

double EndsFlops(const recipes::ModelShape& base) {
  recipes::ModelShape s = base;
  s.hybrid = true;
  s.attn_blocks = s.mlp_blocks = s.mamba_blocks = s.moe_layers = 0;
  return recipes::TrainingFlopPerToken(s);
}

std::vector<char> BlockKinds(const std::vector<layers::LayerKind>& layers, std::vector<int>* first) {
  std::vector<char> out;
  for (const layers::LayerKind& k : layers) {
    first->push_back(static_cast<int>(out.size()));
    if (k.mixer == layers::MixerKind::kAttention) out.push_back('*');
    if (k.mixer == layers::MixerKind::kMamba) out.push_back('M');
    if (k.ffn == layers::FfnKind::kMlp) out.push_back('-');
    if (k.ffn == layers::FfnKind::kMoe) out.push_back('E');
  }
  first->push_back(static_cast<int>(out.size()));
  return out;
}

// Kernel-time helpers over one CostModel and dtype; every query is recorded
// in `used` (what the prediction's "calibrated" is judged on).
struct Kernels {
  const CostModel& cost;
  std::string gemm_dtype, act_dtype;
  double ab;  // activation bytes per element
  std::set<std::pair<Op, std::string>>* used;
  double Sec(Op op, const std::string& dtype, double flops, double bytes, double shape_class = 1) const {
    used->insert({op, dtype});
    return cost.Seconds(op, dtype, flops, bytes, shape_class);
  }
  // y[m, n] = x[m, k]·wᵀ: forward; backward = dgrad + wgrad (same FLOPs each).
  double GemmFwd(double m, double n, double k) const { return GemmFwdIn(gemm_dtype, ab, m, n, k); }
  double GemmBwd(double m, double n, double k) const { return GemmBwdIn(gemm_dtype, ab, m, n, k); }
  // The same in another dtype (`eb` bytes an element): the MoE router's f32 gate.
  double GemmFwdIn(const std::string& dt, double eb, double m, double n, double k) const {
    return Sec(Op::kGemm, dt, 2 * m * n * k, eb * (m * k + n * k + m * n));
  }
  double GemmBwdIn(const std::string& dt, double eb, double m, double n, double k) const {
    return Sec(Op::kGemm, dt, 2 * m * n * k, eb * (m * n + n * k + m * k)) +
           Sec(Op::kGemm, dt, 2 * m * n * k, eb * (m * n + m * k) + 4 * n * k);
  }
  double Elementwise(double bytes) const { return Sec(Op::kElementwise, act_dtype, 0, bytes); }
  double Norm(double bytes) const { return Sec(Op::kNorm, act_dtype, 0, bytes); }
  // A bf16 <-> f32 cast of n elements (none in f32 runs: nothing to cast).
  double Cast(double n) const { return act_dtype == "f32" ? 0.0 : Sec(Op::kCast, "bf16", 0, CastBytes(n)); }
};

}  // namespace

absl::Status CheckLayout(const recipes::proto::Recipe& r, const Layout& l, const Cluster& c) {
  const auto& m = r.model();
  auto divides = [](int64_t a, int64_t b) { return b > 0 && a % b == 0; };
  for (auto [name, v] : {std::pair<const char*, int>{"parallel.tp", l.tp}, {"gtp", l.gtp}, {"parallel.pp", l.pp},
                         {"parallel.vpp", l.vpp}, {"dp", l.dp}, {"parallel.cp", l.cp}, {"parallel.ep", l.ep},
                         {"egtp", l.egtp}}) {
    if (v < 1) return Bad(absl::StrCat(name, " = ", v, " must be >= 1"));
  }
  if (l.micro_batch < 1) return Bad("train.micro_batch must be >= 1 (e.g. 1)");
  const int64_t nkv = m.n_kv_head() > 0 ? m.n_kv_head() : m.n_head();
  if (!divides(m.n_head(), l.tp) || !divides(nkv, l.tp)) {
    return Bad(absl::StrCat("parallel.tp = ", l.tp, " must divide model.n_head = ", m.n_head(),
                            " and the kv heads = ", nkv, " (e.g. parallel.tp=1)"));
  }
  const int64_t H = m.ffn_hidden() > 0 ? m.ffn_hidden() : 4 * m.n_embd();
  if (!divides(H, l.tp)) {
    return Bad(absl::StrCat("parallel.tp = ", l.tp, " must divide the MLP hidden size ", H, " (e.g. parallel.tp=1)"));
  }
  if (l.tp > c.gpus_per_node) {
    return Bad(absl::StrCat("parallel.tp = ", l.tp, " spans nodes (gpus_per_node = ", c.gpus_per_node,
                            "); keep tp <= ", c.gpus_per_node));
  }
  const int64_t parts = int64_t{l.pp} * l.vpp;
  // Uneven splits are not modelled: refused rather than costed as even ones.
  if (r.parallel().pp_boundaries_size() > 0 || m.layer_pattern().find('|') != std::string::npos) {
    return Bad(absl::StrCat("the planner splits layers evenly over the pipeline parts; ",
                            r.parallel().pp_boundaries_size() > 0 ? "parallel.pp_boundaries"
                                                                  : "the '|' in model.layer_pattern",
                            " sets an uneven split (leave it unset to plan the even one)"));
  }
  if (!divides(m.n_layer(), parts)) {
    return Bad(absl::StrCat("model.n_layer = ", m.n_layer(), " does not split over parallel.pp × parallel.vpp = ",
                            parts, " (the planner splits layers evenly; e.g. parallel.pp=1, parallel.vpp=1)"));
  }
  if (l.global_batch % (l.micro_batch * l.lanes()) != 0 || l.global_batch <= 0) {
    return Bad(absl::StrCat("train.global_batch = ", l.global_batch, " is not a multiple of train.micro_batch × dp × gtp = ",
                            l.micro_batch * l.lanes(), " (e.g. train.global_batch=", l.micro_batch * l.lanes(), ")"));
  }
  if (l.vpp > 1 && (l.pp < 2 || l.micro_batches() % l.pp != 0)) {
    return Bad(absl::StrCat("parallel.vpp = ", l.vpp, " needs parallel.pp >= 2 and micro-batches per step (",
                            l.micro_batches(), ") divisible by parallel.pp = ", l.pp, " (e.g. parallel.vpp=1)"));
  }
  if (l.cp > 1 && !divides(m.seq_len(), 2 * l.cp)) {
    return Bad(absl::StrCat("model.seq_len = ", m.seq_len(), " is not divisible by 2 × parallel.cp = ", 2 * l.cp,
                            " (e.g. parallel.cp=1)"));
  }
  if (l.sp && !divides(l.micro_batch * m.seq_len() / l.cp, l.tp)) {
    return Bad(absl::StrCat("sequence parallelism needs micro_batch × seq_len / cp divisible by parallel.tp = ", l.tp));
  }
  const int experts = m.moe().num_experts();
  if (experts == 0 && (l.ep > 1 || l.egtp > 1)) {
    return Bad("parallel.ep and parallel.expert_tp_num_weight_shards need an MoE model (set both to 1)");
  }
  if (experts > 0 && !divides(experts, l.ep)) {
    return Bad(absl::StrCat("parallel.ep = ", l.ep, " must divide model.moe.num_experts = ", experts, " (e.g. parallel.ep=1)"));
  }
  if (!divides(l.world(), int64_t{l.pp} * l.ep * l.egtp)) {
    return Bad(absl::StrCat("the expert grid needs the world (", l.world(), ") divisible by pp × ep × egtp = ",
                            l.pp * l.ep * l.egtp, " (e.g. parallel.expert_tp_num_weight_shards=1)"));
  }
  if (l.precision != "f32" && l.precision != "bf16" && l.precision != "fp8") {
    return Bad(absl::StrCat("train.precision = '", l.precision, "' is not f32, bf16 or fp8"));
  }
  if (l.precision == "fp8" && c.peak_fp8_flops <= 0) {
    return Bad(absl::StrCat(c.name, " has no fp8 tensor cores (peak_fp8_tflops = 0): use train.precision=bf16"));
  }
  return absl::OkStatus();
}

absl::StatusOr<ModelCost> CostModelOf(const recipes::proto::Recipe& r, const Layout& l, const CostModel& cost) {
  const Cluster& cl = cost.cluster();
  if (auto s = CheckLayout(r, l, cl); !s.ok()) return s;
  absl::StatusOr<std::vector<layers::LayerKind>> kinds = recipes::LayerKindsOf(r.model());
  if (!kinds.ok()) return kinds.status();
  ModelCost mc;
  mc.shape = recipes::ShapeOf(r.model());
  const recipes::ModelShape& s = mc.shape;
  mc.mfu_flops_per_token = recipes::TrainingFlopPerToken(s);
  const std::vector<char> blocks = BlockKinds(*kinds, &mc.layer_first_block);
  const Groups g = GroupsOf(l, cl);

  const bool f32 = l.precision == "f32";
  const double ab = f32 ? 4 : 2;   // activations / params on the wire
  const double wire = l.nvfp4_gather                              ? 0.5 + 1.0 / 16
                      : l.fp8_gather || l.precision == "fp8" ? 1 + 1.0 / 32
                                                             : ab;
  const double rs_wire = l.bf16_reduce_scatter ? 2 : 4;
  mc.gemm_dtype = l.precision;
  const Kernels k{cost, l.precision, f32 ? "f32" : "bf16", ab, &mc.kernels};
  const std::string attn_dtype = f32 ? "f32" : "bf16";

  const double t = l.tp, sp = l.sp ? l.tp : 1;
  const double T = s.seq_len, C = s.n_embd, NH = s.n_head;
  const double NKV = s.n_kv_head > 0 ? s.n_kv_head : s.n_head;
  const double Ckv = NKV * (C / NH);
  const double H = s.ffn_hidden > 0 ? s.ffn_hidden : 4 * C;
  const double Hf = s.swiglu ? 2 * H : H;
  const double N = static_cast<double>(l.micro_batch) * T / l.cp;  // CP-local tokens
  mc.tokens_per_microbatch = l.micro_batch * s.seq_len;
  const double norm_params = s.rmsnorm || !s.bias ? C : 2 * C;
  const double norm_stats = s.rmsnorm ? 4 : 8;  // rstd (+ mean) f32 per row
  const double bias = s.bias ? 1 : 0;

  // TP-region collectives of one half (enter + exit), forward and backward alike.
  auto tp_comm = [&]() {
    if (l.tp == 1) return 0.0;
    const double bytes = N * C * ab;
    return l.sp ? CollectiveTime(Collective::kAllGather, bytes, g.tp, cl) +
                      CollectiveTime(Collective::kReduceScatter, bytes, g.tp, cl)
                : CollectiveTime(Collective::kAllReduce, bytes, g.tp, cl);
  };
  auto gtp_times = [&](double params, BlockCost* b) {
    b->gather = CollectiveTime(Collective::kAllGather, params / t * wire, g.gtp, cl);
    b->reduce_scatter = CollectiveTime(Collective::kReduceScatter, params / t * rs_wire, g.gtp, cl);
  };
  // Pre-norm + residual of one half: forward and backward seconds, saved bytes.
  auto norm_half = [&](BlockCost* b) {
    b->fwd_compute += k.Norm(2 * ab * N / sp * C) + k.Elementwise(3 * ab * N / sp * C);
    b->bwd_compute += k.Norm(4 * ab * N / sp * C);
    b->act_bytes += N / sp * (ab * C + norm_stats);
    b->input_bytes = ab * N / sp * C;
    b->replicated_params += norm_params;
  };
  auto mlp = [&](double hidden, BlockCost* b) {  // a dense MLP (or a shared expert)
    const double hf = s.swiglu ? 2 * hidden : hidden;
    b->fwd_compute += k.GemmFwd(N, hf / t, C) + k.GemmFwd(N, C, hidden / t) +
                      k.Elementwise(ab * N * (hf + hidden) / t);
    b->bwd_compute += k.GemmBwd(N, hf / t, C) + k.GemmBwd(N, C, hidden / t) +
                      k.Elementwise(2 * ab * N * (hf + hidden) / t);
    b->tp_fwd += tp_comm();
    b->tp_bwd += tp_comm();
    b->act_bytes += ab * N * (C + (hf + hidden) / t);
    b->sharded_params += C * hf + hidden * C;
    b->replicated_params += bias * (hf + C);
  };

  for (char kind : blocks) {
    BlockCost b;
    b.kind = kind;
    b.mfu_flops_per_token = KindFlops(s, kind);
    norm_half(&b);
    if (kind == '*') {
      const double qkv = C + 2 * Ckv;
      b.fwd_compute += k.GemmFwd(N, qkv / t, C) + k.GemmFwd(N, C, C / t);
      b.bwd_compute += k.GemmBwd(N, qkv / t, C) + k.GemmBwd(N, C, C / t);
      // Fused causal attention executes half the square: 2·N·T·C/t forward
      // FLOPs (QKᵀ and PV, 2·2·T·C/t per token, halved), 2.5× that backward.
      // Unfused: the whole square through GEMMs, plus the scores' traffic
      // (scores written, softmax read + written, PV read: 5 passes forward,
      // 8 backward; dropout adds a masked copy and a 1-byte mask each way).
      const bool unfused = f32 || l.unfused_attention;
      const double af = (unfused ? 2 : 1) * 2 * N * T * C / t, abytes = ab * N * (2 * C + 2 * Ckv) / t;
      const double scores = N * T * NH / t, drop = l.attention_dropout ? 2 * ab + 1 : 0;
      const double core_f = unfused ? k.GemmFwd(N * NH / t, T, C / NH) * 2 + k.Elementwise(scores * (5 * ab + drop))
                                    : k.Sec(Op::kAttentionFwd, attn_dtype, af, abytes);
      const double core_b = unfused ? k.GemmFwd(N * NH / t, T, C / NH) * 4 + k.Elementwise(scores * (8 * ab + drop))
                                    : k.Sec(Op::kAttentionBwd, attn_dtype, 2.5 * af, 2 * abytes);
      b.fwd_compute += core_f;
      b.bwd_compute += core_b;
      if (r.model().rope()) {  // RoPE, in place on q and k
        b.fwd_compute += k.Elementwise(2 * ab * N * (C + Ckv) / t);
        b.bwd_compute += k.Elementwise(2 * ab * N * (C + Ckv) / t);
      }
      if (l.cp > 1) {  // ring attention: K, V (f32) around the ring, dK, dV back in backward
        const double step = CollectiveTime(Collective::kSendRecv, 2 * N * Ckv / t * 4, g.cp, cl);
        b.cp_fwd = std::max(0.0, (l.cp - 1) * step - core_f);
        b.cp_bwd = std::max(0.0, 2 * (l.cp - 1) * step - core_b);
      }
      b.tp_fwd += tp_comm();
      b.tp_bwd += tp_comm();
      b.act_bytes += ab * N * (C + (qkv + C) / t) +
                     (unfused ? N * NH / t * T * (ab + (l.attention_dropout ? ab + 1 : 0)) : 4 * N * NH / t);
      b.sharded_params += 2 * C * C + 2 * C * Ckv;
      b.replicated_params += bias * (qkv + C);
    } else if (kind == '-') {
      mlp(H, &b);
    } else if (kind == 'E') {
      const double E = s.num_experts, topk = s.top_k, He = s.moe_hidden;
      const double Hfe = s.swiglu ? 2 * He : He;
      const double Nm = N / sp;          // tokens this rank routes
      const double rows = Nm * topk;     // rows its local experts see (balanced)
      const double El = E / l.ep;
      // What layers/moe launches (moe_layer.cc, router.cc, all_to_all_dispatcher.cc,
      // experts.cc), each kernel costed on its own:
      // forward: the router's f32 copy of x (a cast), its f32 gate GEMM, the
      // routing ops; the dispatcher's host read of the counts (not when padded
      // to capacity); the permutation (a row gather); fc1 as one grouped GEMM
      // over the local experts, the activation, fc2 grouped; the weighted combine.
      const bool padded = r.model().moe().pad_to_capacity();
      const double route_f = k.Cast(Nm * C) + k.GemmFwdIn("f32", 4, Nm, E, C) +
                             k.Sec(Op::kMoeRouteFwd, "f32", 0, RouteBytes(Nm, E, topk, false)) +
                             (padded ? 0.0 : k.Sec(Op::kHostSync, "f32", 0, 0));
      const double experts_f = k.Sec(Op::kGroupedGemm, k.gemm_dtype, 2 * rows * Hfe * C, ab * (rows * C + El * Hfe * C + rows * Hfe)) +
                               k.Elementwise(ab * rows * (Hfe + He)) +
                               k.Sec(Op::kGroupedGemm, k.gemm_dtype, 2 * rows * C * He, ab * (rows * He + El * C * He + rows * C));
      b.fwd_compute += route_f + k.Sec(Op::kMoePermute, k.act_dtype, 0, PermuteBytes(rows, C, ab)) + experts_f +
                       k.Sec(Op::kMoeCombineFwd, k.act_dtype, 0, CombineBytes(Nm, rows, C, ab, false));
      // backward: the combine's backward; fc2's data and weight gradients
      // (the latter into the f32 stacked gradient), the activation's
      // backward, fc1's; the permutation's scatter-add into a zeroed f32
      // buffer; the routing backward, the gate's two f32 GEMMs, the sum of
      // the two input gradients (f32 axpby) and its cast back.
      const double experts_b =
          k.Sec(Op::kGroupedGemm, k.gemm_dtype, 2 * rows * C * He, ab * (rows * C + El * C * He + rows * He)) +
          k.Sec(Op::kGroupedGemmWgrad, k.gemm_dtype, 2 * rows * C * He, ab * (rows * C + rows * He) + 4 * El * C * He) +
          k.Elementwise(2 * ab * rows * (Hfe + He)) +
          k.Sec(Op::kGroupedGemm, k.gemm_dtype, 2 * rows * Hfe * C, ab * (rows * Hfe + El * Hfe * C + rows * C)) +
          k.Sec(Op::kGroupedGemmWgrad, k.gemm_dtype, 2 * rows * Hfe * C, ab * (rows * Hfe + rows * C) + 4 * El * Hfe * C);
      b.bwd_compute += k.Sec(Op::kMoeCombineBwd, k.act_dtype, 0, CombineBytes(Nm, rows, C, ab, true)) + experts_b +
                       k.Sec(Op::kElementwise, "f32", 0, 4 * Nm * C) +
                       k.Sec(Op::kMoeScatterAdd, k.act_dtype, 0, ScatterAddBytes(rows, C, ab)) +
                       k.Sec(Op::kMoeRouteBwd, "f32", 0, RouteBytes(Nm, E, topk, true)) +
                       k.GemmBwdIn("f32", 4, Nm, E, C) + k.Sec(Op::kElementwise, "f32", 0, 12 * Nm * C) +
                       k.Cast(Nm * C);
      if (l.ep > 1) {  // dispatch and combine, forward and backward
        const double a2a = CollectiveTime(Collective::kAllToAll, rows * C * ab, g.ep, cl);
        b.ep_fwd = 2 * a2a;
        b.ep_bwd = 2 * a2a;
      }
      b.act_bytes += ab * Nm * C + 4 * Nm * (C + E) + ab * rows * (C + Hfe + He);
      b.expert_params = E * (C * Hfe + He * C);
      b.replicated_params += E * C;  // the router's gate
      const double local_expert = El * (C * Hfe + He * C);
      b.expert_gather = CollectiveTime(Collective::kAllGather, local_expert * wire, g.egtp, cl);
      b.expert_reduce_scatter = CollectiveTime(Collective::kReduceScatter, local_expert * rs_wire, g.egtp, cl);
      if (s.shared_hidden > 0) mlp(static_cast<double>(s.shared_hidden), &b);
    } else if (kind == 'M') {
      const double Di = s.mamba_expand * C, Hm = Di / s.mamba_head_dim, GN = s.mamba_groups * s.mamba_d_state;
      const double Kc = s.mamba_d_conv, in_out = 2 * Di + 2 * GN + Hm;
      const double di = Di / t, hm = Hm / t, gn = GN / t;  // this TP rank's channels
      const double P = s.mamba_head_dim, Ns = s.mamba_d_state;
      // What layers/mamba/mamba_mixer.cc launches, each kernel costed on its own:
      // in_proj as five GEMMs (z, x: d_inner; B, C: G·N; dt: heads), their
      // outputs cast to f32; the SSM params' f32 copies (ten small casts);
      // softplus + bias of dt and A = −exp(A_log) (one small elementwise);
      // three causal conv1d (x, B, C); the scan; the gated RMSNorm; its
      // output cast back; out_proj. The backward mirrors it.
      const double in_fwd = 2 * k.GemmFwd(N, di, C) + 2 * k.GemmFwd(N, gn, C) + k.GemmFwd(N, hm, C);
      const double in_bwd = 2 * k.GemmBwd(N, di, C) + 2 * k.GemmBwd(N, gn, C) + k.GemmBwd(N, hm, C);
      const double in_casts = 2 * k.Cast(N * di) + 2 * k.Cast(N * gn) + k.Cast(N * hm);
      const double param_casts = k.Cast(di * Kc) + 2 * k.Cast(gn * Kc) + k.Cast(di) + 2 * k.Cast(gn) +  // conv w, b
                                 3 * k.Cast(hm) + k.Cast(di);  // dt_bias, A_log, D; the norm weight
      const double negexp = k.Sec(Op::kElementwise, "f32", 0, 8 * hm);
      // The scan over this rank's heads (CP: whole sequences of 1/CP of
      // them, the same state-element-steps): shape class P·N (calibration.h).
      const double Bs = l.micro_batch;
      const double sf = ScanFlops(Bs, T, hm / l.cp, P, Ns), sb = ScanBytes(Bs, T, hm / l.cp, P, gn);
      b.fwd_compute += in_fwd + in_casts + param_casts +
                       k.Sec(Op::kSoftplusFwd, "f32", 0, SoftplusBytes(N, hm, false)) + negexp +
                       k.Sec(Op::kConv1dFwd, "f32", 0, Conv1dBytes(N, di, false)) +
                       2 * k.Sec(Op::kConv1dFwd, "f32", 0, Conv1dBytes(N, gn, false)) +
                       k.Sec(Op::kSsmFwd, "f32", sf, sb, P * Ns) +
                       k.Sec(Op::kGatedNormFwd, "f32", 0, GatedNormBytes(N, di, false)) + k.Cast(N * di) +
                       k.GemmFwd(N, C, di);
      b.bwd_compute += k.GemmBwd(N, C, di) + k.Cast(N * di) +
                       k.Sec(Op::kGatedNormBwd, "f32", 0, GatedNormBytes(N, di, true)) +
                       k.Sec(Op::kSsmBwd, "f32", 2 * sf, 2 * sb, P * Ns) + negexp +
                       k.Sec(Op::kConv1dBwd, "f32", 0, Conv1dBytes(N, di, true)) +
                       2 * k.Sec(Op::kConv1dBwd, "f32", 0, Conv1dBytes(N, gn, true)) +
                       k.Sec(Op::kSoftplusBwd, "f32", 0, SoftplusBytes(N, hm, true)) + in_casts + in_bwd;
      b.tp_fwd += tp_comm();
      b.tp_bwd += tp_comm();
      b.act_bytes += 4 * N / t * (4 * Di + 4 * GN + 2 * Hm) + ab * N * (C + Di / t);
      b.sharded_params += C * in_out + Di * C;
      b.replicated_params += (Di + 2 * GN) * (Kc + 1) + 3 * Hm + Di;
    }
    gtp_times(b.sharded_params, &b);
    mc.blocks.push_back(b);
  }

  // Ends: vocab-parallel embedding (stage 0), final norm + LM head + loss (last stage).
  EndsCost& e = mc.ends;
  const double V = s.vocab_size;
  e.mfu_flops_per_token = EndsFlops(s);
  e.embed_fwd = k.Elementwise(ab * N * C) + tp_comm() / 2;
  e.embed_bwd = k.Elementwise(4 * N * C * 2);
  e.head_fwd = k.Norm(2 * ab * N / sp * C) + k.GemmFwd(N, V / t, C) + k.Elementwise(3 * ab * N * V / t) +
               (l.tp > 1 ? 3 * CollectiveTime(Collective::kAllReduce, 4 * N, g.tp, cl) : 0.0) +
               (l.sp ? CollectiveTime(Collective::kAllGather, N * C * ab, g.tp, cl) : 0.0);
  e.head_bwd = k.Norm(4 * ab * N / sp * C) + k.GemmBwd(N, V / t, C) + k.Elementwise(2 * ab * N * V / t) +
               (l.tp > 1 ? (l.sp ? CollectiveTime(Collective::kReduceScatter, N * C * ab, g.tp, cl)
                                 : CollectiveTime(Collective::kAllReduce, N * C * ab, g.tp, cl))
                         : 0.0);
  e.head_act_bytes = ab * N * V / t + ab * N / sp * C + N / sp * norm_stats;
  e.sharded_params = (s.tied_embeddings ? 1 : 2) * V * C;
  e.replicated_params = norm_params;
  e.head_gather = CollectiveTime(Collective::kAllGather, V * C / t * wire, g.gtp, cl);
  e.head_reduce_scatter = CollectiveTime(Collective::kReduceScatter, V * C / t * rs_wire, g.gtp, cl);
  return mc;
}

}  // namespace gtp::plan
