// One cell of the axis-combination matrix (DESIGN.md §1 tests/): trains a
// small GPT for 4 SGD steps (--steps; the MoE cells take 10) under the
// layout given by the flags and checks,
// on every rank, every step's loss and — after the steps — every parameter
// element the rank holds against a single-rank run of the same model and
// data (computed in this process), within 1e-5 relative. Ranks are threads
// (comm/local) unless started by a launcher (gtprun → UCX processes).
//   axes_check --tp=2 --gtp=2 --dp=1 [--sp] [--llama] [--moe --ep=2 --egtp=2 --etp=1]
// With --moe every second layer is a mixture of 8 experts (top-2, dropless,
// z-loss on) whose experts live on the expert grid ETP·EP·EGTP·EDP; their
// gradients are averaged over EDP like the dense ones over the replicas.
// --moe_aux=lane|seq adds the load-balancing loss (coefficient 0.1): over each
// data lane's tokens (lane; one rank's only where the layout keeps its lanes,
// as TP and CP do) or per sequence (seq; any layout).
// The model's sizes (heads, FFN, batch, sequence, vocabulary, experts, Mamba
// heads) are flags too (--heads=3 --ffn=9 ...; defaults: the matrix's model).
// Exit 0 on agreement; 1 with a line naming the layout and step otherwise.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "comm/local/local_communicator.h"
#include "comm/ucx/ucx_communicator.h"
#include "core/philox.h"
#include "layers/gpt.h"
#include "optimizer/grad_sync.h"
#include "pipeline/runner.h"
#include "parallel/parallel_config.h"
#include "parallel/process_groups.h"

ABSL_FLAG(int, tp, 1, "tensor-parallel size");
ABSL_FLAG(int, gtp, 1, "GTP size (weight shards per TP slice)");
ABSL_FLAG(int, dp, 1, "data-parallel size");
ABSL_FLAG(bool, sp, false, "sequence parallelism");
ABSL_FLAG(bool, llama, false, "RMSNorm, SwiGLU, RoPE, GQA, untied, no bias (else GPT-2 style)");
ABSL_FLAG(bool, moe, false, "MoE MLP in layer 0 (8 experts, top-2)");
ABSL_FLAG(std::string, moe_aux, "",
          "--moe: load-balancing loss, lane (Switch, per data lane) or seq (per sequence); "
          "empty: none");
ABSL_FLAG(int, ep, 1, "expert-parallel size (--moe)");
ABSL_FLAG(int, egtp, 1, "expert GTP size (--moe)");
ABSL_FLAG(int, etp, 1, "expert tensor-parallel size (--moe)");
ABSL_FLAG(int, steps, 4, "SGD steps");
ABSL_FLAG(int, pp, 1, "pipeline stages");
ABSL_FLAG(int, cp, 1, "context-parallel size (sequences split over CP ranks)");
ABSL_FLAG(int, vpp, 1, "virtual stages (model chunks) per pipeline rank");
ABSL_FLAG(int, micro_batches, 1, "micro-batches per step (the single-rank run takes the same)");
ABSL_FLAG(bool, p2p_pair_by_order, false,
          "threads only: pair point-to-point messages by order, not tag, as NCCL does "
          "(comm/local LocalOptions::p2p_pair_by_order)");
ABSL_FLAG(int, layers, 2, "transformer layers");
ABSL_FLAG(double, param_tol, 1e-5, "relative tolerance of the parameters after the steps");
ABSL_FLAG(std::string, pattern, "",
          "hybrid layer pattern (M Mamba, * attention, - MLP, E MoE with --moe, | pipeline "
          "boundary); sets the layer count");

// ---- The model's dimensions (issue 28) --------------------------------------
// The defaults are the matrix cells' model; the layout fuzzer
// (fuzz_layouts.py) draws them to fit a layout with sizes 3, 5, 7 (heads a
// multiple of TP, a batch that GTP·DP·micro-batches split, ...). A size the
// library cannot split is refused by the library when the model is built; one
// only this program would get wrong (--batch, --dp under a launcher) by
// CheckSettings() below, before anything runs.
ABSL_FLAG(int, heads, 4, "attention heads (n_head); TP shards them");
ABSL_FLAG(int, kv_heads, 2, "--llama: key/value heads (GQA; must divide --heads); GPT-2 style: = --heads");
ABSL_FLAG(int, head_dim, 4, "channels per attention head: n_embd = heads · head_dim (--llama: even, RoPE)");
ABSL_FLAG(int, ffn, 24, "dense MLP hidden size (SwiGLU: per part)");
ABSL_FLAG(int, batch, 8, "sequences per step, split over the GTP·DP data lanes and the micro-batches");
ABSL_FLAG(int, seq, 8, "tokens per sequence (CP splits it into 2·CP chunks)");
ABSL_FLAG(int, vocab, 97, "vocabulary size");
ABSL_FLAG(int, vocab_pad, 128, "vocab_pad_multiple: the vocabulary is padded to a multiple of it");
ABSL_FLAG(int, experts, 8, "--moe: routed experts (EP splits them)");
ABSL_FLAG(int, top_k, 2, "--moe: experts per token");
ABSL_FLAG(int, expert_ffn, 12, "--moe: expert hidden size (ETP splits it)");
ABSL_FLAG(int, shared_ffn, 0,
          "--moe: a shared expert beside the routed ones of this hidden size (TP splits it); 0: none");
ABSL_FLAG(int, mamba_head_dim, 8, "--pattern with M: Mamba head size (d_inner = 2·n_embd)");
ABSL_FLAG(int, mamba_groups, 2, "--pattern with M: Mamba B/C groups (must divide its heads)");
ABSL_FLAG(int, noise_probe, 0,
          "derive the tolerances from N more single-rank runs with every initial weight moved by "
          "one f32 ulp (see NoiseTolerance); 0: the fixed 1e-5 (losses) and --param_tol");

namespace gtp {
namespace {

// The model and data, the same for a layout and its single-rank run (the
// flags of the block above; defaults: 4 heads of 4, FFN 24, 8 sequences of 8
// tokens, vocabulary 97 padded to 128, 8 experts top-2 of hidden 12, Mamba
// heads of 8 in 2 groups).
struct Dims {
  int64_t heads = 4, kv_heads = 2, head_dim = 4, ffn = 24, batch = 8, seq = 8, vocab = 97,
          vocab_pad = 128, experts = 8, top_k = 2, expert_ffn = 12, mamba_head_dim = 8,
          mamba_groups = 2, shared_ffn = 0;
};

struct Layout {
  int tp = 1, gtp = 1, ep = 1, egtp = 1, etp = 1, pp = 1, vpp = 1, cp = 1;
  int micro_batches = 1, layers = 2;
  bool sp = false, llama = false, moe = false;
  std::string pattern;
  std::string moe_aux;  // --moe_aux
  Dims d;
  uint64_t perturb = 0;  // > 0: the noise probe's draw (initial weights moved by one ulp)
};

layers::GptConfig Model(const Layout& k) {
  const bool llama = k.llama, sp = k.sp && k.tp > 1;
  const Dims& d = k.d;
  layers::GptConfig c =
      layers::GptConfig::Gpt2(d.vocab, d.seq, k.layers, d.heads * d.head_dim, d.heads);
  c.vocab_pad_multiple = d.vocab_pad;
  c.block.seed = 21;
  c.block.init_std = 0.2f;
  c.block.ffn_hidden = d.ffn;
  if (llama) {
    c.block.norm = layers::NormKind::kRMSNorm;
    c.block.activation = layers::Activation::kSwiGlu;
    c.block.bias = false;
    c.block.rope = true;
    c.block.n_kv_head = d.kv_heads;
    c.learned_positions = false;
    c.tied_embeddings = false;
  }
  c.block.sequence_parallel = sp;
  if (k.moe) {
    c.block.moe.router.num_experts = static_cast<int>(d.experts);
    c.block.moe.router.top_k = static_cast<int>(d.top_k);
    c.block.moe.router.z_loss_coeff = 1e-3f;
    c.block.moe.ffn_hidden = d.expert_ffn;
    c.block.moe.shared_ffn_hidden = d.shared_ffn;
    c.block.moe.every_n = 2;
    if (!k.moe_aux.empty()) {
      c.block.moe.router.aux_loss_coeff = 0.1f;
      c.block.moe.router.aux_loss_type = k.moe_aux == "seq" ? layers::moe::AuxLossType::kSequence
                                                            : layers::moe::AuxLossType::kLane;
    }
  }
  if (!k.pattern.empty()) {  // hybrid: Mamba heads of --mamba_head_dim, chunks of 8
    c.layer_pattern = k.pattern;
    c.n_layer = 0;
    c.block.mamba.head_dim = d.mamba_head_dim;
    c.block.mamba.n_groups = d.mamba_groups;
    c.block.mamba.d_state = 8;
    c.block.mamba.chunk = 8;
  }
  return c;
}

int32_t Token(const Dims& d, int step, int64_t s, int64_t t) {
  const int64_t V = d.vocab;
  int32_t x = static_cast<int32_t>(PhiloxRaw(MixKey(KeyFromName("axes.data"), step), s).v[0] % V);
  for (int64_t i = 0; i < t; ++i) x = static_cast<int32_t>((5 * x + 2) % V);
  return x;
}

// What one rank saw: the global loss of every step, and every parameter as
// a global tensor with the elements this rank holds (others NaN in `values`
// and 0 in `probe`: an element is held where they differ or both are NaN).
struct RankResult {
  std::vector<float> losses;
  std::map<std::string, std::vector<float>> values, probe;
};

void StoreParams(const layers::GptModel& model, RankResult* out) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<layers::ShardedParam*> sharded = model.sharded_params();
  sharded.insert(sharded.end(), model.expert_params().begin(), model.expert_params().end());
  for (layers::ShardedParam* p : sharded) {
    const auto& L = p->global_layout();
    const size_t n = L.global_rows * L.global_cols;
    auto& v = out->values[p->name()];
    auto& z = out->probe[p->name()];
    v.assign(n, nan);
    z.assign(n, 0.0f);
    layers::StoreShardToGlobal(*p, p->shard(), v.data());
    layers::StoreShardToGlobal(*p, p->shard(), z.data());
  }
  for (layers::ReplicatedParam* p : model.replicated_params()) {
    const int64_t cols = p->value.rank() >= 2 ? p->value.dim(1) : 1;
    const size_t n = p->layout.global_rows * cols;
    auto& v = out->values[p->name];
    auto& z = out->probe[p->name];
    v.assign(n, nan);
    z.assign(n, 0.0f);
    const float* d = p->value.data<float>();
    for (int64_t r = 0; r < p->value.dim(0); ++r) {
      const int64_t gr = p->layout.row_map ? p->layout.row_map(r) : r;
      for (int64_t c = 0; c < cols; ++c) v[gr * cols + c] = z[gr * cols + c] = d[r * cols + c];
    }
  }
}

// The noise probe's perturbation (single rank: every shard is the whole
// weight): every element moved by one f32 ulp, up or down by a sign drawn
// from `draw` and the parameter's name.
void PerturbByOneUlp(layers::GptModel& model, uint64_t draw) {
  auto perturb = [draw](const std::string& name, Tensor t) {
    float* x = t.data<float>();
    for (int64_t i = 0; i < t.numel(); ++i) {
      const bool up = PhiloxRaw(MixKey(KeyFromName("axes.ulp." + name), draw), i).v[0] & 1;
      x[i] = std::nextafter(x[i], up ? INFINITY : -INFINITY);
    }
  };
  std::vector<layers::ShardedParam*> sharded = model.sharded_params();
  sharded.insert(sharded.end(), model.expert_params().begin(), model.expert_params().end());
  for (layers::ShardedParam* p : sharded) {
    perturb(p->name(), p->shard());
    p->MarkUpdated();
  }
  for (layers::ReplicatedParam* p : model.replicated_params()) perturb(p->name, p->value);
}

// Trains under layout k on `w`; fills this rank's result.
absl::Status Train(comm::Communicator& w, const Layout& k, RankResult* result) {
  parallel::ParallelConfig pc;
  pc.tp = k.tp;
  pc.tp_num_weight_shards = k.tp * k.gtp;
  pc.sequence_parallel = k.sp;
  pc.pp = k.pp;
  pc.cp = k.cp;
  parallel::ModelFacts facts;
  if (k.moe) {
    pc.ep = k.ep;
    pc.etp = k.etp;
    pc.expert_tp_num_weight_shards = k.etp * k.egtp;
    facts.num_experts = static_cast<int>(k.d.experts);
  }
  GTP_ASSIGN_OR_RETURN(auto pgs, parallel::ProcessGroupCollection::Build(pc, w, facts));
  GTP_ASSIGN_OR_RETURN(comm::Communicator * data, pgs.Get(parallel::groups::kData));
  GTP_ASSIGN_OR_RETURN(comm::Communicator * pp, pgs.Get(parallel::groups::kPp));
  HeapAllocator host;
  const int M = k.micro_batches;
  const int64_t B = k.d.batch / data->size() / M;  // per micro-batch (whole: CheckSettings)
  const int64_t kSeq = k.d.seq;
  kernels::Exec exec = kernels::Exec::Cpu(host);
  // Pipeline: this rank's model chunks, virtual stages c·PP + stage.
  std::vector<std::unique_ptr<layers::GptModel>> chunks;
  for (int c = 0; c < k.vpp; ++c) {
    layers::GptConfig cfg = Model(k);
    cfg.pipeline.index = c * k.pp + pp->rank();
    cfg.pipeline.count = k.pp * k.vpp;
    GTP_ASSIGN_OR_RETURN(auto m, layers::GptModel::Create(cfg, B, kSeq, pgs, exec));
    chunks.push_back(std::move(m));
  }
  optimizer::ParamSet ps, experts;
  std::vector<layers::GptModel*> parts;
  for (auto& m : chunks) {
    parts.push_back(m.get());
    ps.sharded.insert(ps.sharded.end(), m->sharded_params().begin(), m->sharded_params().end());
    ps.replicated.insert(ps.replicated.end(), m->replicated_params().begin(),
                         m->replicated_params().end());
    experts.sharded.insert(experts.sharded.end(), m->expert_params().begin(), m->expert_params().end());
  }
  GTP_ASSIGN_OR_RETURN(std::unique_ptr<pipeline::PipelineRunner> runner,
                       pipeline::PipelineRunner::Create(parts, pp, exec));
  if (k.perturb > 0) {  // the noise probe (NoiseTolerance)
    for (auto& m : chunks) PerturbByOneUlp(*m, k.perturb);
  }
  for (int step = 0, steps = absl::GetFlag(FLAGS_steps); step < steps; ++step) {
    auto micro = [&](int m) -> absl::StatusOr<pipeline::MicroBatch> {
      pipeline::MicroBatch mb{Tensor::Empty({B, kSeq}, DType::kI32, host),
                              Tensor::Empty({B, kSeq}, DType::kI32, host)};
      for (int64_t b = 0; b < B; ++b)
        for (int64_t t = 0; t < kSeq; ++t) {
          const int64_t sample = (data->rank() * M + m) * B + b;
          mb.tokens.data<int32_t>()[b * kSeq + t] = Token(k.d, step, sample, t);
          mb.targets.data<int32_t>()[b * kSeq + t] = Token(k.d, step, sample, t + 1);
        }
      return mb;
    };
    GTP_RETURN_IF_ERROR(runner->Step(M, micro).status());
    layers::GptModel& last = *chunks.back();
    float loss = 0;
    if (last.has_head()) {
      GTP_ASSIGN_OR_RETURN(loss, last.TakeLossSum());
      loss /= M;
    }
    if (pp->size() > 1) {
      GTP_RETURN_IF_ERROR(comm::Run(pp->Broadcast(&loss, 1, DType::kF32, pp->size() - 1)));
      if (pgs.Has(parallel::groups::kEmbd) && (*pgs.Group(parallel::groups::kEmbd))->is_member()) {
        GTP_ASSIGN_OR_RETURN(comm::Communicator * embd, pgs.Get(parallel::groups::kEmbd));
        for (auto& m : chunks) GTP_RETURN_IF_ERROR(m->SyncTiedEmbedding(*embd));
      }
    }
    GTP_RETURN_IF_ERROR(optimizer::FinalizeGrads(ps, pgs));
    if (k.moe) {
      // Expert grads: reduce-scattered over EGTP in backward; mean over EDP here.
      GTP_ASSIGN_OR_RETURN(comm::Communicator * edp, pgs.Get(parallel::groups::kEdp));
      for (layers::ShardedParam* p : experts.sharded) {
        const Tensor& g = p->main_grad();
        GTP_RETURN_IF_ERROR(comm::Run(edp->AllReduce(g.raw_data(), g.raw_data(), g.numel(),
                                                     DType::kF32, comm::ReduceOp::kMean)));
      }
      optimizer::SgdStep(experts, exec, 0.5f);
      optimizer::ZeroGrads(experts, exec);
    }
    optimizer::SgdStep(ps, exec, 0.5f);
    optimizer::ZeroGrads(ps, exec);
      // The mean over the lanes and, under CP, over the sequence's CP shares.
    GTP_ASSIGN_OR_RETURN(comm::Communicator * data_cp, pgs.Get(parallel::groups::kDataCp));
    GTP_RETURN_IF_ERROR(
        comm::Run(data_cp->AllReduce(&loss, &loss, 1, DType::kF32, comm::ReduceOp::kMean)));
    result->losses.push_back(loss);
  }
  for (auto& m : chunks) StoreParams(*m, result);
  return absl::OkStatus();
}

// Relative tolerances: per step for the losses, per parameter (absent: --param_tol).
struct Tolerance {
  std::vector<double> loss;
  std::map<std::string, double> param;
  double Param(const std::string& name) const {
    auto it = param.find(name);
    return it == param.end() ? absl::GetFlag(FLAGS_param_tol) : it->second;
  }
};

// Relative difference of two values of a parameter, over all its elements.
double RelDiff(const std::vector<float>& a, const std::vector<float>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    num += (static_cast<double>(a[i]) - want[i]) * (static_cast<double>(a[i]) - want[i]);
    den += static_cast<double>(want[i]) * want[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

// The tolerances (issue 28). Fixed by default: 1e-5 of each loss, --param_tol
// for every parameter (the matrix's model; see the cells' comments). With
// --noise_probe=N they are derived for the model at hand, as
// tests/gpt_parity_test.cc does: a layout cuts the same f32 sums into other
// pieces, and the SGD steps (lr 0.5) amplify those rounding differences by a
// factor that depends on the model (on the layout fuzzer's drawn models
// from a few per step to about 100 where a step overshoots and the loss
// rises: a TP5 hybrid's largest parameter error was 1.9e-6 after 1 step,
// 2e-4 after 2, 1e-3 after 3). N single-rank runs with every initial weight
// moved by one f32 ulp (another rounding-sized difference) show how far
// rounding alone carries: d_s per step's loss, d_p per parameter, the
// largest over the draws. A layout must stay within kNoiseFactor times that,
// and never below the fixed floors. Measured over 180 drawn layouts (2
// steps, N = 3, threads): a layout's own difference was at most 3.6 times
// the probe's for a parameter and 2.1 times for a loss, so kNoiseFactor = 8
// leaves a margin of 2. Three draws can all fall low for one parameter: in
// 5400 more layouts one (a TP3 hybrid) moved a Mamba conv bias by 9.4 times
// its three-draw drift (2.1 times its ten-draw drift). The steps couple
// every parameter to every other, so no parameter's drift is taken below
// kShared (0.1) of the largest one's (that bias: 4.8 times). A real defect
// (a missing reduction, a wrong shard, a dropped sequence) moves an updated
// parameter by 1e-2 or more; where rounding alone moves one by more than
// kTooNoisy (1e-3) such a defect could hide in the tolerance, so the run
// says so and exits 3 (the fuzzer's NOISY: 19 of those 5400 models, all
// with Mamba layers).
constexpr double kNoiseFactor = 8, kShared = 0.1, kTooNoisy = 1e-3;

absl::StatusOr<Tolerance> NoiseTolerance(const Layout& one, const RankResult& ref) {
  Tolerance tol;
  for (float l : ref.losses) tol.loss.push_back(1e-5 * std::abs(l));
  const int draws = absl::GetFlag(FLAGS_noise_probe);
  if (draws <= 0) return tol;
  std::vector<double> dloss(ref.losses.size(), 0);
  std::map<std::string, double> dparam;
  for (int draw = 1; draw <= draws; ++draw) {
    Layout noisy = one;
    noisy.perturb = static_cast<uint64_t>(draw);
    RankResult got;
    GTP_RETURN_IF_ERROR(
        comm::RunRanks(1, [&](comm::Communicator& w) { return Train(w, noisy, &got); }));
    for (size_t s = 0; s < ref.losses.size(); ++s) {
      dloss[s] = std::max(dloss[s], std::abs(static_cast<double>(got.losses[s]) - ref.losses[s]));
    }
    for (const auto& [pname, want] : ref.values) {
      dparam[pname] = std::max(dparam[pname], RelDiff(got.values.at(pname), want));
    }
  }
  double worst = 0, worst_loss = 0;
  std::string worst_name;
  for (size_t s = 0; s < dloss.size(); ++s) {
    tol.loss[s] = std::max(tol.loss[s], kNoiseFactor * dloss[s]);
    worst_loss = std::max(worst_loss, dloss[s] / std::abs(ref.losses[s]));
  }
  for (const auto& [pname, d] : dparam) {
    if (pname.find("attn.k.bias") == std::string::npos && d > worst) worst = d, worst_name = pname;
  }
  for (const auto& [pname, d] : dparam) {
    tol.param[pname] =
        std::max(absl::GetFlag(FLAGS_param_tol), kNoiseFactor * std::max(d, kShared * worst));
  }
  std::printf("noise probe (%d one-ulp draws): rounding alone moves the losses by up to %.2g and "
              "parameter %s by %.2g (relative); tolerances %g times that (a parameter's: at least "
              "%g of it), at least 1e-5 and %g\n",
              draws, worst_loss, worst_name.c_str(), worst, kNoiseFactor, kShared,
              absl::GetFlag(FLAGS_param_tol));
  if (worst > kTooNoisy) {
    return absl::FailedPreconditionError(absl::StrCat(
        "too noisy to compare: rounding alone moves parameter ", worst_name, " by ", worst,
        " (relative) after ", ref.losses.size(), " steps, more than ", kTooNoisy,
        " (noise probe; a calmer model or fewer --steps)"));
  }
  return tol;
}

// This rank's losses and held parameter elements against the single-rank
// run: a line per mismatch; true when everything agrees.
// With pipeline stages a rank holds only its parts' parameters (allow_missing).
bool Check(const std::string& name, int rank, const RankResult& got, const RankResult& ref,
           const Tolerance& tol, bool allow_missing = false) {
  bool ok = got.losses.size() == ref.losses.size();
  for (size_t s = 0; s < ref.losses.size(); ++s) {
    const float g = s < got.losses.size() ? got.losses[s] : NAN;
    const bool good = std::abs(g - ref.losses[s]) <= tol.loss[s];
    if (rank == 0 || !good) {
      std::printf("%s rank %d step %zu: loss %.7f, single rank %.7f%s\n", name.c_str(), rank, s, g,
                  ref.losses[s], good ? "" : "  MISMATCH");
    }
    ok &= good;
  }
  int64_t held_total = 0;
  for (const auto& [pname, want] : ref.values) {
    // The key bias has an exactly-zero true gradient (softmax is shift-
    // invariant), so its value after SGD is rounding noise, different per
    // layout by nature; the loss does not depend on it.
    if (pname.find("attn.k.bias") != std::string::npos) continue;
    auto it = got.values.find(pname);
    if (it == got.values.end() && allow_missing) continue;
    if (it == got.values.end()) {
      std::printf("%s rank %d: parameter %s missing\n", name.c_str(), rank, pname.c_str());
      ok = false;
      continue;
    }
    const std::vector<float>& v = it->second;
    const std::vector<float>& z = got.probe.at(pname);
    double num = 0, den = 0;
    int64_t held = 0;
    bool finite = true;
    for (size_t i = 0; i < want.size(); ++i) {
      const bool is_held = (std::isnan(v[i]) && std::isnan(z[i])) || !std::isnan(v[i]);
      if (!is_held) continue;
      ++held;
      finite &= std::isfinite(v[i]);
      num += (static_cast<double>(v[i]) - want[i]) * (static_cast<double>(v[i]) - want[i]);
      den += static_cast<double>(want[i]) * want[i];
    }
    held_total += held;
    const double rel = std::sqrt(num / std::max(den, 1e-30));
    // A rank may hold none of a small tensor (its GTP shard is all padding:
    // a 4-row dt projection over TP2·GTP4); that every element is held by
    // some rank is checked across ranks below ("held by no rank").
    if (!finite || rel > tol.Param(pname)) {
      std::printf(
          "%s rank %d: parameter %s after %zu steps: %lld elements held, rel. error %.3g "
          "(tolerance %.3g)%s\n",
          name.c_str(), rank, pname.c_str(), ref.losses.size(), static_cast<long long>(held), rel,
          tol.Param(pname), finite ? "" : " (not finite)");
      ok = false;
    }
  }
  if (rank == 0) {
    std::printf("%s rank %d: %lld parameter elements checked after the steps\n", name.c_str(), rank,
                static_cast<long long>(held_total));
  }
  return ok;
}

// The settings only this program would get wrong, refused by flag before
// anything runs (the library refuses, by name, what it cannot split: heads,
// vocabulary, FFN, experts, sequence vs CP, layers vs PP·VPP, ...).
absl::Status CheckSettings(const Layout& k, int dp) {
  std::vector<std::string> bad;
  auto positive = [&](const char* flag, int64_t v) {
    if (v < 1) bad.push_back(absl::StrCat("--", flag, " must be >= 1 (got ", v, ")"));
  };
  positive("tp", k.tp);
  positive("gtp", k.gtp);
  positive("dp", dp);
  positive("pp", k.pp);
  positive("vpp", k.vpp);
  positive("cp", k.cp);
  positive("micro_batches", k.micro_batches);
  positive("steps", absl::GetFlag(FLAGS_steps));
  if (k.pattern.empty()) positive("layers", k.layers);
  positive("heads", k.d.heads);
  positive("head_dim", k.d.head_dim);
  positive("ffn", k.d.ffn);
  positive("batch", k.d.batch);
  positive("seq", k.d.seq);
  positive("vocab", k.d.vocab);
  positive("vocab_pad", k.d.vocab_pad);
  if (k.llama) positive("kv_heads", k.d.kv_heads);
  if (k.moe) {
    positive("ep", k.ep);
    positive("egtp", k.egtp);
    positive("etp", k.etp);
    positive("experts", k.d.experts);
    positive("top_k", k.d.top_k);
    positive("expert_ffn", k.d.expert_ffn);
  }
  if (!k.pattern.empty()) {
    positive("mamba_head_dim", k.d.mamba_head_dim);
    positive("mamba_groups", k.d.mamba_groups);
  }
  if (!bad.empty()) return absl::InvalidArgumentError(absl::StrJoin(bad, "; "));
  // Train() gives every data lane (GTP·DP of them) M micro-batches of
  // batch / (GTP·DP·M) sequences; a remainder would be dropped silently and
  // the run compared with a single-rank run that read more sequences.
  const int64_t lanes = int64_t{k.gtp} * dp * k.micro_batches;
  if (k.d.batch % lanes != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--batch ", k.d.batch, " is not divisible by --gtp·--dp·--micro_batches = ", k.gtp, "·", dp,
        "·", k.micro_batches, " = ", lanes,
        " (every data lane must read whole micro-batches of equal size)"));
  }
  return absl::OkStatus();
}

int Main() {
  const int tp = absl::GetFlag(FLAGS_tp), gtp = absl::GetFlag(FLAGS_gtp), dp = absl::GetFlag(FLAGS_dp);
  Layout k;
  k.tp = tp;
  k.gtp = gtp;
  k.sp = absl::GetFlag(FLAGS_sp);
  k.llama = absl::GetFlag(FLAGS_llama);
  k.moe = absl::GetFlag(FLAGS_moe);
  k.ep = absl::GetFlag(FLAGS_ep);
  k.egtp = absl::GetFlag(FLAGS_egtp);
  k.etp = absl::GetFlag(FLAGS_etp);
  k.pp = absl::GetFlag(FLAGS_pp);
  k.cp = absl::GetFlag(FLAGS_cp);
  k.vpp = absl::GetFlag(FLAGS_vpp);
  k.micro_batches = absl::GetFlag(FLAGS_micro_batches);
  k.layers = absl::GetFlag(FLAGS_layers);
  k.pattern = absl::GetFlag(FLAGS_pattern);
  k.moe_aux = absl::GetFlag(FLAGS_moe_aux);
  k.d.heads = absl::GetFlag(FLAGS_heads);
  k.d.kv_heads = absl::GetFlag(FLAGS_kv_heads);
  k.d.head_dim = absl::GetFlag(FLAGS_head_dim);
  k.d.ffn = absl::GetFlag(FLAGS_ffn);
  k.d.batch = absl::GetFlag(FLAGS_batch);
  k.d.seq = absl::GetFlag(FLAGS_seq);
  k.d.vocab = absl::GetFlag(FLAGS_vocab);
  k.d.vocab_pad = absl::GetFlag(FLAGS_vocab_pad);
  k.d.experts = absl::GetFlag(FLAGS_experts);
  k.d.top_k = absl::GetFlag(FLAGS_top_k);
  k.d.expert_ffn = absl::GetFlag(FLAGS_expert_ffn);
  k.d.shared_ffn = absl::GetFlag(FLAGS_shared_ffn);
  k.d.mamba_head_dim = absl::GetFlag(FLAGS_mamba_head_dim);
  k.d.mamba_groups = absl::GetFlag(FLAGS_mamba_groups);
  std::string name = "tp" + std::to_string(tp) + "_gtp" + std::to_string(gtp) + "_dp" +
                     std::to_string(dp) + (k.sp ? "_sp" : "") + (k.llama ? "_llama" : "_gpt2");
  if (k.pp > 1) name += "_pp" + std::to_string(k.pp) + "_vpp" + std::to_string(k.vpp);
  if (k.cp > 1) name += "_cp" + std::to_string(k.cp);
  if (k.moe) {
    name += "_moe_ep" + std::to_string(k.ep) + "_egtp" + std::to_string(k.egtp) + "_etp" +
            std::to_string(k.etp);
    if (!k.moe_aux.empty()) name += "_aux_" + k.moe_aux;
  }
  if (!k.moe_aux.empty() && (!k.moe || (k.moe_aux != "lane" && k.moe_aux != "seq"))) {
    std::fprintf(stderr, "%s: --moe_aux must be lane or seq, with --moe (got '%s')\n", name.c_str(),
                 k.moe_aux.c_str());
    return 1;
  }
  if (absl::Status s = CheckSettings(k, dp); !s.ok()) {
    std::fprintf(stderr, "%s: %s\n", name.c_str(), std::string(s.message()).c_str());
    return 1;
  }
  Layout one;
  one.d = k.d;
  one.llama = k.llama;
  one.moe = k.moe;
  one.micro_batches = k.micro_batches;
  one.layers = k.layers;
  one.pattern = k.pattern;
  one.moe_aux = k.moe_aux;
  RankResult ref;
  absl::Status st = comm::RunRanks(1, [&](comm::Communicator& w) { return Train(w, one, &ref); });
  if (!st.ok()) {
    std::fprintf(stderr, "%s: single rank: %s\n", name.c_str(), std::string(st.message()).c_str());
    return 1;
  }
  // The tolerances, once the layout has run (a refusal comes first).
  absl::StatusOr<Tolerance> tol;
  auto tolerate = [&]() {
    tol = NoiseTolerance(one, ref);
    if (!tol.ok()) {
      std::fprintf(stderr, "%s: %s\n", name.c_str(), std::string(tol.status().message()).c_str());
    }
    return tol.ok();
  };
  bool ok = true;
  if (std::getenv("RANK") != nullptr) {
    auto world = comm::CreateUcxWorldFromEnv({});
    st = world.status();
    // The launcher's world must be the layout's (else DP would be derived
    // from it silently, unlike the threads' world below).
    if (st.ok() && (*world)->size() != tp * gtp * dp * k.pp * k.cp) {
      st = absl::InvalidArgumentError(absl::StrCat(
          "the launcher's world size ", (*world)->size(), " is not --tp·--gtp·--dp·--pp·--cp = ",
          tp * gtp * dp * k.pp * k.cp));
    }
    RankResult got;
    if (st.ok()) st = Train(**world, k, &got);
    if (!st.ok() && world.ok()) {
      // Exit at once (issue 28): a rank that refused a layout alone (a layer
      // kind on one pipeline stage) would otherwise wait ~30 s in its UCX
      // engine's goodbye for peers that are blocked waiting for it
      // (comm/ucx/ucx_engine.cc ~Engine); gtprun stops them when it exits.
      std::fprintf(stderr, "%s: %s\n", name.c_str(), std::string(st.message()).c_str());
      std::fflush(nullptr);
      std::_Exit(1);
    }
    if (st.ok() && !tolerate()) return 3;
    if (st.ok()) ok = Check(name, (*world)->rank(), got, ref, *tol, k.pp > 1);
  } else {
    const int world = tp * gtp * dp * k.pp * k.cp;
    std::vector<RankResult> got(world);
    comm::LocalOptions lo;
    lo.p2p_pair_by_order = absl::GetFlag(FLAGS_p2p_pair_by_order);
    st = comm::RunRanks(
        world, [&](comm::Communicator& w) { return Train(w, k, &got[w.rank()]); }, lo);
    if (st.ok() && !tolerate()) return 3;
    if (st.ok()) {
      for (int r = 0; r < world; ++r) ok &= Check(name, r, got[r], ref, *tol, k.pp > 1);
      // Every parameter is held (and so checked) somewhere.
      for (const auto& [pname, want] : ref.values) {
        bool held = false;
        for (const RankResult& g : got) held |= g.values.count(pname) > 0;
        if (!held) {
          std::printf("%s: parameter %s held by no rank\n", name.c_str(), pname.c_str());
          ok = false;
        }
      }
    }
  }
  if (!st.ok()) {
    std::fprintf(stderr, "%s: %s\n", name.c_str(), std::string(st.message()).c_str());
    return 1;
  }
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace gtp

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return gtp::Main();
}
