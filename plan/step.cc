#include "plan/step.h"

#include <algorithm>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "plan/collectives.h"
#include "plan/pipeline_sim.h"
#include "recipes/trainer/mfu.h"

namespace gtp::plan {

namespace {

const char* KindName(char kind) {
  switch (kind) {
    case '*': return "attention";
    case '-': return "mlp";
    case 'E': return "moe";
    case 'M': return "mamba";
  }
  return "?";
}

// One pass (forward or backward) of one chunk for one micro-batch.
struct Pass {
  double time = 0;
  std::map<std::string, double> compute;
  CommCost tp, ep, cp, gather, rs, egtp;
};

void AddComm(CommCost* c, double total, double exposed) {
  c->total += total;
  c->exposed += exposed;
}

// Splits `exposed` chain time between dense (GTP) and expert (EGTP) shares.
void AddChain(Pass* p, double dense, double expert, double exposed, bool reduce) {
  const double total = dense + expert;
  const double fd = total > 0 ? dense / total : 0, fe = total > 0 ? expert / total : 0;
  AddComm(reduce ? &p->rs : &p->gather, dense, exposed * fd);
  AddComm(&p->egtp, expert, exposed * fe);
}

// The blocks [first, last) of the model as one chunk; `embed`/`head` when the
// chunk holds the model's ends.
Pass Forward(const ModelCost& mc, int first, int last, bool embed, bool head) {
  Pass p;
  double prev = 0;  // the compute a prefetch hides behind (0: cold start)
  if (embed) {  // the chain starts at the (GTP-sharded) embedding table: a cold gather
    const double g = mc.ends.head_gather;
    AddChain(&p, g, 0, g, false);
    p.time += mc.ends.embed_fwd + g;
    p.compute["embedding+head"] += mc.ends.embed_fwd;
    prev = mc.ends.embed_fwd;
  }
  for (int i = first; i < last; ++i) {
    const BlockCost& b = mc.blocks[i];
    const double chain = b.gather + b.expert_gather, exposed = std::max(0.0, chain - prev);
    AddChain(&p, b.gather, b.expert_gather, exposed, false);
    p.time += b.fwd_compute + b.tp_fwd + b.ep_fwd + b.cp_fwd + exposed;
    p.compute[KindName(b.kind)] += b.fwd_compute;
    AddComm(&p.tp, b.tp_fwd, b.tp_fwd);
    AddComm(&p.ep, b.ep_fwd, b.ep_fwd);
    AddComm(&p.cp, b.cp_fwd, b.cp_fwd);
    prev = b.fwd_compute;
  }
  if (head) {
    const double exposed = std::max(0.0, mc.ends.head_gather - prev);
    AddChain(&p, mc.ends.head_gather, 0, exposed, false);
    p.time += mc.ends.head_fwd + exposed;
    p.compute["embedding+head"] += mc.ends.head_fwd;
  }
  return p;
}

Pass Backward(const ModelCost& mc, int first, int last, bool embed, bool head, bool recompute) {
  struct Item {
    double compute = 0, critical = 0;  // kernels; + what cannot overlap (TP, EP, CP, recompute cold gathers)
    double gather = 0, egather = 0, rs = 0, ers = 0;
    std::string kind;
  };
  std::vector<Item> items;
  Pass p;
  // The head's gradient (its table's reduce-scatter) is deferred like any
  // other; a tied table shared with an embedding in this chunk reduces once,
  // at the end.
  if (head) {
    const double rs = embed && mc.shape.tied_embeddings ? 0.0 : mc.ends.head_reduce_scatter;
    items.push_back({mc.ends.head_bwd, 0, mc.ends.head_gather, 0, rs, 0, "embedding+head"});
  }
  for (int i = last - 1; i >= first; --i) {
    const BlockCost& b = mc.blocks[i];
    Item it{b.bwd_compute, b.tp_bwd + b.ep_bwd + b.cp_bwd, b.gather, b.expert_gather, b.reduce_scatter,
            b.expert_reduce_scatter, KindName(b.kind)};
    AddComm(&p.tp, b.tp_bwd, b.tp_bwd);
    AddComm(&p.ep, b.ep_bwd, b.ep_bwd);
    AddComm(&p.cp, b.cp_bwd, b.cp_bwd);
    if (recompute) {
      // The forward re-run: its own gather slot, prefetching only inside the
      // block, so its first weight's gather is cold (taken as a third of the
      // block's) and the rest hides behind the re-run's compute.
      const double g = b.gather + b.expert_gather;
      const double cold = std::max(g / 3, g - b.fwd_compute);
      AddChain(&p, b.gather, b.expert_gather, cold, false);
      it.critical += b.tp_fwd + b.ep_fwd + b.cp_fwd + cold;
      p.compute["recompute"] += b.fwd_compute;
      AddComm(&p.tp, b.tp_fwd, b.tp_fwd);
      AddComm(&p.ep, b.ep_fwd, b.ep_fwd);
      AddComm(&p.cp, b.cp_fwd, b.cp_fwd);
      it.compute += b.fwd_compute;
    }
    items.push_back(it);
  }
  // The embedding's backward (a scatter-add, no weights needed) ends the
  // chain: its table's reduce-scatter is the chain head's, waited for.
  if (embed) items.push_back({mc.ends.embed_bwd, 0, 0, 0, mc.ends.head_reduce_scatter, 0, "embedding+head"});
  for (size_t j = 0; j < items.size(); ++j) {
    const Item& it = items[j];
    if (j == 0) AddChain(&p, it.gather, it.egather, it.gather + it.egather, false);  // cold
    // During item j: the next item's gather and the previous one's reduce-scatter.
    const Item* nx = j + 1 < items.size() ? &items[j + 1] : nullptr;
    const Item* pv = j > 0 ? &items[j - 1] : nullptr;
    const double g = nx ? nx->gather + nx->egather : 0, rs = pv ? pv->rs + pv->ers : 0;
    const double exposed = std::max(0.0, g + rs - it.compute);
    const double fg = g + rs > 0 ? g / (g + rs) : 0;
    if (nx) AddChain(&p, nx->gather, nx->egather, exposed * fg, false);
    if (pv) AddChain(&p, pv->rs, pv->ers, exposed * (1 - fg), true);
    p.time += it.compute + it.critical + exposed + (j == 0 ? it.gather + it.egather : 0);
    p.compute[it.kind] += it.compute;
  }
  if (!items.empty()) {  // the chain head's reduce-scatter is waited for
    const Item& lastit = items.back();
    AddChain(&p, lastit.rs, lastit.ers, lastit.rs + lastit.ers, true);
    p.time += lastit.rs + lastit.ers;
  }
  // The per-kind compute above counted recompute inside the kind too: take it out.
  if (recompute) {
    for (int i = first; i < last; ++i) p.compute[KindName(mc.blocks[i].kind)] -= mc.blocks[i].fwd_compute;
  }
  return p;
}

void Accumulate(const Pass& src, double times, Breakdown* br) {
  for (const auto& [k, v] : src.compute) br->compute[k] += v * times;
  auto add = [&](CommCost* d, const CommCost& s) {
    d->total += s.total * times;
    d->exposed += s.exposed * times;
  };
  add(&br->tp, src.tp);
  add(&br->ep, src.ep);
  add(&br->cp, src.cp);
  add(&br->gtp_gather, src.gather);
  add(&br->gtp_reduce_scatter, src.rs);
  add(&br->egtp, src.egtp);
}

}  // namespace

absl::StatusOr<Prediction> Predict(const recipes::proto::Recipe& r, const Layout& l, const CostModel& cost) {
  absl::StatusOr<ModelCost> mcs = CostModelOf(r, l, cost);
  if (!mcs.ok()) return mcs.status();
  const ModelCost& mc = *mcs;
  const Cluster& cl = cost.cluster();
  const Groups g = GroupsOf(l, cl);
  const int P = l.pp, VPP = l.vpp, V = P * VPP;
  const int M = static_cast<int>(l.micro_batches());
  const int n_layers = static_cast<int>(mc.layer_first_block.size()) - 1;
  const int per_chunk = n_layers / V;
  const bool f32 = l.precision == "f32";
  const double ab = f32 ? 4 : 2;

  // Passes per (stage, chunk).
  PipelineTimes times;
  times.fwd.assign(P, std::vector<double>(VPP));
  times.bwd.assign(P, std::vector<double>(VPP));
  std::vector<std::vector<Pass>> fwd(P, std::vector<Pass>(VPP)), bwd(P, std::vector<Pass>(VPP));
  std::vector<double> act(P, 0), act_rc(P, 0), act_peak_block(P, 0), head_act(P, 0);
  std::vector<double> dense_local(P, 0), expert_local(P, 0), max_gather_elems(P, 0), max_expert_elems(P, 0);
  for (int s = 0; s < P; ++s) {
    for (int c = 0; c < VPP; ++c) {
      const int v = c * P + s;
      const int first = mc.layer_first_block[v * per_chunk], last = mc.layer_first_block[(v + 1) * per_chunk];
      const bool embed = v == 0, head = v == V - 1;
      fwd[s][c] = Forward(mc, first, last, embed, head);
      bwd[s][c] = Backward(mc, first, last, embed, head, l.recompute);
      times.fwd[s][c] = fwd[s][c].time;
      times.bwd[s][c] = bwd[s][c].time;
      for (int i = first; i < last; ++i) {
        const BlockCost& b = mc.blocks[i];
        act[s] += b.act_bytes / VPP;
        act_rc[s] += b.input_bytes / VPP;
        act_peak_block[s] = std::max(act_peak_block[s], b.act_bytes);
        dense_local[s] += b.sharded_params / (l.tp * l.gtp) + b.replicated_params;
        expert_local[s] += b.expert_params / (l.ep * l.egtp);
        max_gather_elems[s] = std::max(max_gather_elems[s], b.sharded_params / l.tp);
        max_expert_elems[s] = std::max(max_expert_elems[s], b.expert_params / l.ep);
      }
      const double table = static_cast<double>(mc.shape.vocab_size) * mc.shape.n_embd;  // one V × C table
      if (embed && head) {
        dense_local[s] += mc.ends.sharded_params / (l.tp * l.gtp);
      } else if (embed || head) {  // a tied table lives on both ends (its gradients all-reduced between them)
        dense_local[s] += table / (l.tp * l.gtp);
      }
      if (head) {
        head_act[s] = mc.ends.head_act_bytes;
        dense_local[s] += mc.ends.replicated_params;
        max_gather_elems[s] = std::max(max_gather_elems[s], table / l.tp);
      }
    }
  }
  const double p2p_bytes = static_cast<double>(l.micro_batch) * mc.shape.seq_len / l.cp / (l.sp ? l.tp : 1) *
                           mc.shape.n_embd * ab;
  times.p2p = P > 1 ? CollectiveTime(Collective::kSendRecv, p2p_bytes, g.pp, cl) : 0.0;
  absl::StatusOr<PipelineResult> pr = SimulatePipeline(P, VPP, M, times);
  if (!pr.ok()) return pr.status();

  // Data parallelism, optimizer, parameter all-gather per stage; the step ends
  // when the slowest stage is done.
  const Placement edp = Place(l.edp(), l.ep * l.egtp, cl.gpus_per_node);
  const double R = static_cast<double>(l.cp) * l.dp, EDP = l.edp();
  const double bucket = 4.0 * (int64_t{1} << 22);  // bytes: 4M f32 elements
  Prediction pred;
  pred.layout = l;
  pred.micro_batches = M;
  double worst_end = -1;
  for (int s = 0; s < P; ++s) {
    double window = 0;  // the last micro-batch's backward on this stage
    for (int c = 0; c < VPP; ++c) window += times.bwd[s][c];
    auto dp_exposed = [&](double bytes, const Placement& grp, double* total) {
      if (grp.size <= 1 || bytes <= 0) return 0.0;
      const double last = std::min(bytes, bucket);
      const double t_last = CollectiveTime(Collective::kReduceScatter, last, grp, cl);
      const double t_rest = CollectiveTime(Collective::kReduceScatter, bytes - last, grp, cl);
      *total += t_last + t_rest;
      return t_last + std::max(0.0, t_rest - window);
    };
    double dp_total = 0;
    const double dp_exp = dp_exposed(4 * dense_local[s], g.replicate, &dp_total) +
                          dp_exposed(4 * expert_local[s], edp, &dp_total);
    const double wbytes = f32 ? 4 : 2;
    const double pg = CollectiveTime(Collective::kAllGather, dense_local[s] * wbytes, g.replicate, cl) +
                      (expert_local[s] > 0 ? CollectiveTime(Collective::kAllGather, expert_local[s] * wbytes, edp, cl) : 0.0);
    const double shard = dense_local[s] / R + expert_local[s] / EDP;
    const double opt = cost.Seconds(Op::kAdamW, "f32", 0, shard * (f32 ? 28 : 30)) +
                       cost.Seconds(Op::kElementwise, "f32", 0, 4 * (dense_local[s] + expert_local[s]));
    const double end = pr->finish[s] + dp_exp + opt + pg;
    if (end > worst_end) {
      worst_end = end;
      pred.reported_stage = s;
      Breakdown br;
      for (int c = 0; c < VPP; ++c) {
        Accumulate(fwd[s][c], M, &br);
        Accumulate(bwd[s][c], M, &br);
      }
      br.dp_reduce = {dp_total, dp_exp};
      br.dp_param_gather = {pg, pg};
      br.optimizer = opt;
      br.bubble = pr->finish[s] - pr->busy[s];
      br.pp_p2p = {P > 1 ? 2.0 * M * VPP * times.p2p : 0.0, 0.0};  // on the dependency edges: inside the bubble
      pred.breakdown = br;
    }
  }
  pred.step_time = worst_end;
  const double tokens = static_cast<double>(l.global_batch) * mc.shape.seq_len;
  pred.tokens_per_s = tokens / pred.step_time;
  pred.model_tflops_per_gpu = mc.mfu_flops_per_token * pred.tokens_per_s / l.world() / 1e12;
  pred.mfu = recipes::Mfu(mc.mfu_flops_per_token, pred.tokens_per_s / l.world(), cl.peak_bf16_flops);
  // Calibrated: every kernel the blocks and the optimizer asked for was measured.
  std::set<std::pair<Op, std::string>> used = mc.kernels;
  used.insert({Op::kAdamW, "f32"});
  used.insert({Op::kElementwise, "f32"});
  for (const auto& [op, dtype] : used) {
    if (!cost.Calibrated(op, dtype)) pred.uncalibrated.push_back(absl::StrCat(OpName(op), " ", dtype));
  }
  pred.calibrated = pred.uncalibrated.empty();

  // Memory: the busiest stage.
  Memory best;
  for (int s = 0; s < P; ++s) {
    Memory m;
    const double local = dense_local[s] + expert_local[s];
    const double pbytes = f32 ? 4 : 2;
    m.weights = local * pbytes + (l.nvfp4_gather                          ? local * (0.5 + 1.0 / 16)
                                  : l.fp8_gather || l.precision == "fp8" ? local * (1 + 1.0 / 32)
                                                                         : 0.0);
    m.grads = 4 * local;
    m.optimizer = (dense_local[s] / R + expert_local[s] / EDP) * (f32 ? 8 : 12);
    const double flight = std::max(1, pr->max_in_flight[s]);
    m.activations_no_recompute = flight * act[s] + head_act[s];
    m.activations_recompute = flight * act_rc[s] + act_peak_block[s] + head_act[s];
    m.activations = l.recompute ? m.activations_recompute : m.activations_no_recompute;
    if (l.gtp > 1) m.gather_buffers += 2 * max_gather_elems[s] * (pbytes + (l.bf16_reduce_scatter ? 2 : 4));
    if (l.egtp > 1) m.gather_buffers += 2 * max_expert_elems[s] * (pbytes + (l.bf16_reduce_scatter ? 2 : 4));
    m.comm_buffers = l.world() > 1 ? cl.nccl_buffer_bytes : 0.0;  // one GPU: no communicator (local backend)
    m.context = cl.context_bytes;
    m.total = m.weights + m.grads + m.optimizer + m.activations + m.gather_buffers + m.comm_buffers + m.context;
    if (m.total > best.total) best = m;
  }
  pred.memory = best;
  return pred;
}

}  // namespace gtp::plan
