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

namespace gtp {
namespace {

constexpr int64_t kGlobalBatch = 8, kSeq = 8, kVocab = 97;

struct Layout {
  int tp = 1, gtp = 1, ep = 1, egtp = 1, etp = 1, pp = 1, vpp = 1, cp = 1;
  int micro_batches = 1, layers = 2;
  bool sp = false, llama = false, moe = false;
  std::string pattern;
};

layers::GptConfig Model(const Layout& k) {
  const bool llama = k.llama, sp = k.sp && k.tp > 1;
  layers::GptConfig c = layers::GptConfig::Gpt2(kVocab, 16, k.layers, 16, 4);
  c.block.seed = 21;
  c.block.init_std = 0.2f;
  c.block.ffn_hidden = 24;
  if (llama) {
    c.block.norm = layers::NormKind::kRMSNorm;
    c.block.activation = layers::Activation::kSwiGlu;
    c.block.bias = false;
    c.block.rope = true;
    c.block.n_kv_head = 2;
    c.learned_positions = false;
    c.tied_embeddings = false;
  }
  c.block.sequence_parallel = sp;
  if (k.moe) {
    c.block.moe.router.num_experts = 8;
    c.block.moe.router.top_k = 2;
    c.block.moe.router.z_loss_coeff = 1e-3f;
    c.block.moe.ffn_hidden = 12;
    c.block.moe.every_n = 2;
  }
  if (!k.pattern.empty()) {  // hybrid: 4 Mamba heads of 8 in 2 groups, chunks of 8 (T = 16)
    c.layer_pattern = k.pattern;
    c.n_layer = 0;
    c.block.mamba.head_dim = 8;
    c.block.mamba.n_groups = 2;
    c.block.mamba.d_state = 8;
    c.block.mamba.chunk = 8;
  }
  return c;
}

int32_t Token(int step, int64_t s, int64_t t) {
  int32_t x = static_cast<int32_t>(PhiloxRaw(MixKey(KeyFromName("axes.data"), step), s).v[0] % kVocab);
  for (int64_t i = 0; i < t; ++i) x = (5 * x + 2) % kVocab;
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
    facts.num_experts = 8;
  }
  GTP_ASSIGN_OR_RETURN(auto pgs, parallel::ProcessGroupCollection::Build(pc, w, facts));
  GTP_ASSIGN_OR_RETURN(comm::Communicator * data, pgs.Get("data"));
  GTP_ASSIGN_OR_RETURN(comm::Communicator * pp, pgs.Get("pp"));
  HeapAllocator host;
  const int M = k.micro_batches;
  const int64_t B = kGlobalBatch / data->size() / M;  // per micro-batch
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
  for (int step = 0, steps = absl::GetFlag(FLAGS_steps); step < steps; ++step) {
    auto micro = [&](int m) -> absl::StatusOr<pipeline::MicroBatch> {
      pipeline::MicroBatch mb{Tensor::Empty({B, kSeq}, DType::kI32, host),
                              Tensor::Empty({B, kSeq}, DType::kI32, host)};
      for (int64_t b = 0; b < B; ++b)
        for (int64_t t = 0; t < kSeq; ++t) {
          const int64_t sample = (data->rank() * M + m) * B + b;
          mb.tokens.data<int32_t>()[b * kSeq + t] = Token(step, sample, t);
          mb.targets.data<int32_t>()[b * kSeq + t] = Token(step, sample, t + 1);
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
      if (pgs.Has("embd") && (*pgs.Group("embd"))->is_member()) {
        GTP_ASSIGN_OR_RETURN(comm::Communicator * embd, pgs.Get("embd"));
        for (auto& m : chunks) GTP_RETURN_IF_ERROR(m->SyncTiedEmbedding(*embd));
      }
    }
    GTP_RETURN_IF_ERROR(optimizer::FinalizeGrads(ps, pgs));
    if (k.moe) {
      // Expert grads: reduce-scattered over EGTP in backward; mean over EDP here.
      GTP_ASSIGN_OR_RETURN(comm::Communicator * edp, pgs.Get("edp"));
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
    GTP_ASSIGN_OR_RETURN(comm::Communicator * data_cp, pgs.Get("data_cp"));
    GTP_RETURN_IF_ERROR(
        comm::Run(data_cp->AllReduce(&loss, &loss, 1, DType::kF32, comm::ReduceOp::kMean)));
    result->losses.push_back(loss);
  }
  for (auto& m : chunks) StoreParams(*m, result);
  return absl::OkStatus();
}

// This rank's losses and held parameter elements against the single-rank
// run: a line per mismatch; true when everything agrees.
// With pipeline stages a rank holds only its parts' parameters (allow_missing).
bool Check(const std::string& name, int rank, const RankResult& got, const RankResult& ref,
           bool allow_missing = false) {
  bool ok = got.losses.size() == ref.losses.size();
  for (size_t s = 0; s < ref.losses.size(); ++s) {
    const float g = s < got.losses.size() ? got.losses[s] : NAN;
    const bool good = std::abs(g - ref.losses[s]) <= 1e-5 * std::abs(ref.losses[s]);
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
    if (!finite || rel > absl::GetFlag(FLAGS_param_tol)) {
      std::printf("%s rank %d: parameter %s after %zu steps: %lld elements held, rel. error %.3g%s\n",
                  name.c_str(), rank, pname.c_str(), ref.losses.size(),
                  static_cast<long long>(held), rel, finite ? "" : " (not finite)");
      ok = false;
    }
  }
  if (rank == 0) {
    std::printf("%s rank %d: %lld parameter elements checked after the steps\n", name.c_str(), rank,
                static_cast<long long>(held_total));
  }
  return ok;
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
  std::string name = "tp" + std::to_string(tp) + "_gtp" + std::to_string(gtp) + "_dp" +
                     std::to_string(dp) + (k.sp ? "_sp" : "") + (k.llama ? "_llama" : "_gpt2");
  if (k.pp > 1) name += "_pp" + std::to_string(k.pp) + "_vpp" + std::to_string(k.vpp);
  if (k.cp > 1) name += "_cp" + std::to_string(k.cp);
  if (k.moe) {
    name += "_moe_ep" + std::to_string(k.ep) + "_egtp" + std::to_string(k.egtp) + "_etp" +
            std::to_string(k.etp);
  }
  Layout one;
  one.llama = k.llama;
  one.moe = k.moe;
  one.micro_batches = k.micro_batches;
  one.layers = k.layers;
  one.pattern = k.pattern;
  RankResult ref;
  absl::Status st = comm::RunRanks(1, [&](comm::Communicator& w) { return Train(w, one, &ref); });
  if (!st.ok()) {
    std::fprintf(stderr, "%s: single rank: %s\n", name.c_str(), std::string(st.message()).c_str());
    return 1;
  }
  bool ok = true;
  if (std::getenv("RANK") != nullptr) {
    auto world = comm::CreateUcxWorldFromEnv({});
    st = world.status();
    RankResult got;
    if (st.ok()) st = Train(**world, k, &got);
    if (st.ok()) ok = Check(name, (*world)->rank(), got, ref, k.pp > 1);
  } else {
    const int world = tp * gtp * dp * k.pp * k.cp;
    std::vector<RankResult> got(world);
    comm::LocalOptions lo;
    lo.p2p_pair_by_order = absl::GetFlag(FLAGS_p2p_pair_by_order);
    st = comm::RunRanks(
        world, [&](comm::Communicator& w) { return Train(w, k, &got[w.rank()]); }, lo);
    if (st.ok()) {
      for (int r = 0; r < world; ++r) ok &= Check(name, r, got[r], ref, k.pp > 1);
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
