#include "optimizer/testing/train_harness.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "comm/local/local_communicator.h"
#include "core/philox.h"
#include "core/status.h"
#include "parallel/parallel_config.h"

namespace gtp::optimizer::testing {

namespace {
constexpr int64_t kVocab = 97;

int32_t Token(int step, int64_t sample, int64_t t, int64_t seq) {
  return static_cast<int32_t>(
      PhiloxRaw(MixKey(KeyFromName("optimizer.data"), step), sample * (seq + 1) + t).v[0] % kVocab);
}

bool Dropped(int step, int64_t sample, int64_t t, int64_t seq) {
  return PhiloxRaw(MixKey(KeyFromName("optimizer.drop"), step), sample * seq + t).v[0] % 3 == 0;
}
}  // namespace

std::vector<Layout> ParityLayouts() {
  return {Layout{"DP4", 1, 1, 4}, Layout{"DP2_GTP2", 1, 2, 2}, Layout{"GTP4", 1, 4, 1},
          Layout{"TP2_GTP2", 2, 2, 1}, Layout{"TP2_DP2", 2, 1, 2}};
}

layers::GptConfig SmallModel(bool llama) {
  layers::GptConfig c = layers::GptConfig::Gpt2(kVocab, /*seq=*/16, /*layers=*/2, /*embd=*/16,
                                                /*heads=*/4);
  c.block.seed = 7;
  c.block.init_std = 0.2f;
  if (llama) {
    c.block.norm = layers::NormKind::kRMSNorm;
    c.block.activation = layers::Activation::kSwiGlu;
    c.block.bias = false;
    c.block.n_kv_head = 2;
    c.block.ffn_hidden = 24;
    c.tied_embeddings = false;
    c.block.sequence_parallel = true;
  }
  return c;
}

RunResult Train(const RunConfig& config) {
  const Layout& l = config.layout;
  const int world = l.tp * l.gtp * l.dp;
  RunResult res;
  res.state_bytes.assign(world, 0);
  res.allocator_bytes.assign(world, 0);
  res.num_skipped.assign(world, 0);
  std::mutex mu;
  const bool per_token = config.normalization == LossNormalization::kPerToken;
  res.status = comm::RunRanks(world, [&](comm::Communicator& w) -> absl::Status {
    parallel::ParallelConfig pc;
    pc.tp = l.tp;
    pc.tp_num_weight_shards = l.tp * l.gtp;
    pc.sequence_parallel = config.model.block.sequence_parallel && l.tp > 1;
    GTP_ASSIGN_OR_RETURN(auto pgs, parallel::ProcessGroupCollection::Build(pc, w));
    GTP_ASSIGN_OR_RETURN(comm::Communicator * data, pgs.Get("data"));
    const int lanes = data->size(), lane = data->rank();
    const int M = config.microbatches;
    const int64_t per_lane = config.global_batch / lanes, B = per_lane / M, T = config.seq;
    if (B * M * lanes != config.global_batch || B == 0) {
      return absl::InvalidArgumentError(absl::StrCat("global batch ", config.global_batch,
                                                     " does not split over ", lanes, " lanes × ",
                                                     M, " micro-batches"));
    }
    // Declared before the model: it keeps views of the last batch.
    HeapAllocator model_alloc, opt_alloc, host;
    const kernels::Exec exec = kernels::Exec::Cpu(model_alloc);
    const kernels::Exec opt_exec = kernels::Exec::Cpu(opt_alloc);
    layers::GptConfig mc = config.model;
    mc.loss_reduction = per_token ? layers::LossReduction::kSum : layers::LossReduction::kMean;
    layers::GtpOptions g = config.gtp;
    g.grad_reduce = per_token ? comm::ReduceOp::kSum : comm::ReduceOp::kMean;
    GTP_ASSIGN_OR_RETURN(auto model, layers::GptModel::Create(mc, B, T, pgs, exec, g));
    GradBufferOptions bo = config.buffer;
    bo.normalization = config.normalization;
    GTP_ASSIGN_OR_RETURN(
        auto grads,
        GradBuffer::Create({model->sharded_params(), model->replicated_params()}, pgs, exec, bo));
    GTP_ASSIGN_OR_RETURN(auto opt,
                         DistributedOptimizer::Create(grads.get(), pgs, opt_exec, config.opt));
    res.state_bytes[w.rank()] = opt->state_bytes();
    res.allocator_bytes[w.rank()] = opt_alloc.stats().bytes_in_use;
    RankContext ctx{w.rank(), &pgs, model.get(), grads.get(), opt.get()};
    if (config.on_setup) config.on_setup(ctx);

    for (int step = 0; step < config.steps; ++step) {
      double loss_sum = 0, weight = 0;
      for (int m = 0; m < M; ++m) {
        Tensor tok = Tensor::Empty({B, T}, DType::kI32, host);
        Tensor tgt = Tensor::Empty({B, T}, DType::kI32, host);
        for (int64_t b = 0; b < B; ++b) {
          const int64_t s = lane * per_lane + m * B + b;
          for (int64_t t = 0; t < T; ++t) {
            tok.data<int32_t>()[b * T + t] = Token(step, s, t, T);
            const bool drop = config.drop_targets && Dropped(step, s, t, T);
            tgt.data<int32_t>()[b * T + t] = drop ? -1 : Token(step, s, t + 1, T);
          }
        }
        GTP_ASSIGN_OR_RETURN(float loss, model->Forward(tok, tgt));
        const int64_t n = model->num_valid_tokens();
        grads->StartMicrobatch(m == M - 1, n);
        GTP_RETURN_IF_ERROR(model->Backward());
        if (config.after_backward) config.after_backward(ctx, step, m);
        loss_sum += per_token ? static_cast<double>(loss) * n : loss;
        weight += per_token ? n : 1;
      }
      if (config.before_step) config.before_step(ctx, step);
      GTP_ASSIGN_OR_RETURN(StepStats stats, opt->Step());
      float v[2] = {static_cast<float>(loss_sum), static_cast<float>(weight)};
      GTP_RETURN_IF_ERROR(comm::Run(data->AllReduce(v, v, 2, DType::kF32, comm::ReduceOp::kSum)));
      if (w.rank() == 0) {
        res.losses.push_back(v[0] / v[1]);
        res.stats.push_back(stats);
      }
    }
    res.num_skipped[w.rank()] = opt->progress().num_skipped;

    // Replica consistency: a 64-bit FNV-1a hash of each copy's bytes, gathered
    // over the ranks that must agree.
    {
      auto hash = [](const Tensor& t) {
        uint64_t h = 1469598103934665603ull;
        const auto* b = static_cast<const unsigned char*>(t.raw_data());
        for (int64_t i = 0; i < t.nbytes(); ++i) h = (h ^ b[i]) * 1099511628211ull;
        return static_cast<int64_t>(h);
      };
      struct Check {
        std::string name;
        comm::Communicator* group;
        int64_t hash;
      };
      std::vector<Check> checks;
      GTP_ASSIGN_OR_RETURN(comm::Communicator * rep, pgs.Get("replicate"));
      GTP_ASSIGN_OR_RETURN(comm::Communicator * gtp_g, pgs.Get("gtp"));
      for (layers::ShardedParam* p : model->sharded_params()) checks.push_back({p->name(), rep, hash(p->shard())});
      for (layers::ReplicatedParam* p : model->replicated_params()) {
        if (p->tp_sharded) {
          checks.push_back({p->name, gtp_g, hash(p->value)});
          checks.push_back({p->name, rep, hash(p->value)});
        } else {
          checks.push_back({p->name, &w, hash(p->value)});
        }
      }
      for (const Check& c : checks) {
        std::vector<int64_t> all(c.group->size());
        GTP_RETURN_IF_ERROR(comm::Run(c.group->AllGather(&c.hash, all.data(), 1, DType::kI64)));
        for (int64_t h : all) {
          if (h == all[0]) continue;
          std::lock_guard<std::mutex> lock(mu);
          res.replica_mismatches.push_back(absl::StrCat(c.name, " over ", c.group->name()));
          break;
        }
      }
    }

    // Reassemble the global parameters from replicate rank 0's pieces.
    GTP_ASSIGN_OR_RETURN(int rep_rank, pgs.RankIn("replicate"));
    GTP_ASSIGN_OR_RETURN(int gtp_rank, pgs.RankIn("gtp"));
    GTP_ASSIGN_OR_RETURN(int tp_rank, pgs.RankIn("tp"));
    if (rep_rank != 0) return absl::OkStatus();
    std::lock_guard<std::mutex> lock(mu);
    for (layers::ShardedParam* p : model->sharded_params()) {
      const auto& L = p->global_layout();
      std::vector<float>& out = res.params[p->name()];
      out.resize(L.global_rows * L.global_cols);
      const float* d = p->shard().data<float>();
      for (int64_t r = 0; r < p->shard_rows(); ++r) {
        const int64_t local = p->shard_row_begin() + r;
        if (local >= p->rows()) break;
        std::copy(d + r * p->cols(), d + (r + 1) * p->cols(),
                  out.data() + L.row_map(local) * L.global_cols + L.col_offset);
      }
    }
    if (gtp_rank != 0) return absl::OkStatus();
    for (layers::ReplicatedParam* p : model->replicated_params()) {
      if (!p->tp_sharded && tp_rank != 0) continue;
      const int64_t rows = p->value.dim(0), inner = p->value.numel() / rows;
      const int64_t grows = p->layout.global_rows > 0 ? p->layout.global_rows : rows;
      std::vector<float>& out = res.params[p->name];
      out.resize(grows * inner);
      const float* d = p->value.data<float>();
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t gr = p->layout.row_map ? p->layout.row_map(r) : r;
        std::copy(d + r * inner, d + (r + 1) * inner, out.data() + gr * inner);
      }
    }
    return absl::OkStatus();
  });
  return res;
}

Diff CompareParams(const std::map<std::string, std::vector<float>>& got,
                   const std::map<std::string, std::vector<float>>& ref, double atol, double rtol) {
  Diff d;
  if (got.size() != ref.size()) {
    d.worst = INFINITY;
    d.where = absl::StrCat(got.size(), " params vs ", ref.size());
    return d;
  }
  for (const auto& [name, r] : ref) {
    auto it = got.find(name);
    if (it == got.end() || it->second.size() != r.size()) {
      d.worst = INFINITY;
      d.where = absl::StrCat(name, ": missing or resized");
      return d;
    }
    for (size_t i = 0; i < r.size(); ++i) {
      const double e = std::abs(static_cast<double>(it->second[i]) - r[i]) / (atol + rtol * std::abs(r[i]));
      if (!(e <= d.worst)) {
        d.worst = std::isnan(e) ? INFINITY : e;
        d.where = absl::StrCat(name, "[", i, "]: ", it->second[i], " vs ", r[i]);
        if (std::isnan(e)) return d;
      }
    }
  }
  return d;
}

}  // namespace gtp::optimizer::testing
