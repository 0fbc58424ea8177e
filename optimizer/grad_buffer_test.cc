// GradBuffer: layout, equivalence with the unbucketed reference reduction
// (grad_sync.h) in both reduce modes, and the ordering invariant: with async
// GTP reduction and overlap on, an instrumented bucket never reduces before
// every param in it has finished {reduce-scatter → add} on the last
// micro-batch, and earlier micro-batches reduce nothing.
#include "optimizer/grad_buffer.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "comm/local/local_communicator.h"
#include "core/kernels/ops.h"
#include "core/philox.h"
#include "gtest/gtest.h"
#include "layers/gpt.h"
#include "optimizer/grad_sync.h"
#include "optimizer/testing/train_harness.h"
#include "parallel/parallel_config.h"

namespace gtp::optimizer {
namespace {

constexpr int64_t kB = 2, kT = 8;

void FillBatch(Tensor& tok, Tensor& tgt, int lane) {
  for (int64_t i = 0; i < kB * kT; ++i) {
    const uint64_t k = static_cast<uint64_t>(lane * kB * kT + i);
    tok.data<int32_t>()[i] = PhiloxRaw(KeyFromName("gb.tok"), k).v[0] % 97;
    tgt.data<int32_t>()[i] = PhiloxRaw(KeyFromName("gb.tgt"), k).v[0] % 97;
  }
}

TEST(GradBuffer, LayoutBucketsWholeParamsPaddedToTheReplicateSize) {
  HeapAllocator host;
  absl::Status st = comm::RunRanks(4, [&](comm::Communicator& w) -> absl::Status {
    parallel::ParallelConfig pc;
    pc.tp_num_weight_shards = 2;  // GTP2 · DP2
    GTP_ASSIGN_OR_RETURN(auto pgs, parallel::ProcessGroupCollection::Build(pc, w));
    const kernels::Exec exec = kernels::Exec::Cpu(host);
    layers::GptConfig cfg = testing::SmallModel(/*llama=*/true);
    cfg.block.sequence_parallel = false;
    GTP_ASSIGN_OR_RETURN(auto model, layers::GptModel::Create(cfg, kB, kT, pgs, exec));
    GradBufferOptions o;
    o.bucket_elements = 700;
    GTP_ASSIGN_OR_RETURN(auto g, GradBuffer::Create({model->sharded_params(),
                                                     model->replicated_params()},
                                                    pgs, exec, o));
    const auto& b = g->buckets();
    EXPECT_GE(b.size(), 4u);
    int64_t at = 0;
    bool seen_replicated = false;
    for (const Bucket& k : b) {
      EXPECT_EQ(k.offset, at);
      EXPECT_EQ(k.numel % (2 * 16), 0) << "bucket " << k.index;
      EXPECT_FALSE(seen_replicated && !k.replicated) << "sharded after replicated";
      seen_replicated |= k.replicated;
      at += k.numel;
      int64_t used = 0;
      for (int i : k.params) {
        const GradParam& p = g->params()[i];
        EXPECT_EQ(p.bucket, k.index);
        EXPECT_EQ(p.offset, k.offset + used) << p.name;
        EXPECT_EQ(p.replicated != nullptr, k.replicated);
        used += p.numel;
        // The grads are views into the buffer.
        const void* grad = p.sharded ? p.sharded->main_grad().raw_data() : p.replicated->grad.raw_data();
        EXPECT_EQ(grad, g->data().data<float>() + p.offset) << p.name;
      }
      EXPECT_LE(k.numel - used, 2 * 16);
    }
    EXPECT_EQ(g->data().numel(), at);
    EXPECT_EQ(g->params().size(), model->sharded_params().size() + model->replicated_params().size());
    // Buffer order: sharded params reversed (≈ backward order).
    EXPECT_EQ(g->params().front().sharded, model->sharded_params().back());
    // Each replicate rank owns a different slice of each bucket.
    auto [lo, hi] = g->shard_range(0);
    EXPECT_EQ(hi - lo, b[0].numel / 2);
    EXPECT_EQ(lo, b[0].offset + pgs.RankIn("replicate").value() * (hi - lo));
    return absl::OkStatus();
  });
  EXPECT_TRUE(st.ok()) << st;
}

// A grad group (the parts of one fused GEMM: ShardedParam::set_grad_group)
// keeps its listed order, side by side, in one bucket — even where buckets
// smaller than the group would have split it.
TEST(GradBuffer, GradGroupKeepsListedOrderInOneBucket) {
  HeapAllocator host;
  absl::Status st = comm::RunRanks(1, [&](comm::Communicator& w) -> absl::Status {
    GTP_ASSIGN_OR_RETURN(auto pgs, parallel::ProcessGroupCollection::Build({}, w));
    const kernels::Exec exec = kernels::Exec::Cpu(host);
    GTP_ASSIGN_OR_RETURN(auto model,
                         layers::GptModel::Create(testing::SmallModel(false), kB, kT, pgs, exec));
    // Each layer's q, k, v (16×16 weights: 256 elements each) as one group.
    std::vector<std::vector<layers::ShardedParam*>> groups;
    for (layers::ShardedParam* p : model->sharded_params()) {
      const std::string& n = p->name();
      if (n.size() < 9 || n.compare(n.size() - 9, 9, ".q.weight") != 0) continue;
      groups.emplace_back();
      for (const char* part : {".q.weight", ".k.weight", ".v.weight"}) {
        const std::string want = n.substr(0, n.size() - 9) + part;
        for (layers::ShardedParam* q : model->sharded_params()) {
          if (q->name() == want) groups.back().push_back(q);
        }
      }
      for (layers::ShardedParam* q : groups.back()) q->set_grad_group(groups.back().data());
    }
    EXPECT_EQ(groups.size(), 2u);
    GradBufferOptions o;
    o.bucket_elements = 300;  // one weight a bucket, were it not for the groups
    GTP_ASSIGN_OR_RETURN(
        auto g,
        GradBuffer::Create({model->sharded_params(), model->replicated_params()}, pgs, exec, o));
    std::map<const layers::ShardedParam*, const GradParam*> where;
    for (const GradParam& p : g->params()) {
      if (p.sharded != nullptr) where[p.sharded] = &p;
    }
    for (const auto& group : groups) {
      if (group.size() != 3u) return absl::InternalError("a q without its k and v");
      for (int i = 1; i < 3; ++i) {
        const GradParam& a = *where.at(group[i - 1]);
        const GradParam& b = *where.at(group[i]);
        EXPECT_EQ(b.offset, a.offset + a.numel) << b.name;
        EXPECT_EQ(b.bucket, a.bucket) << b.name;
        EXPECT_EQ(group[i]->main_grad().raw_data(),
                  group[i - 1]->main_grad().data<float>() + a.numel)
            << b.name;
      }
    }
    // Everything else still one param a bucket (300 < 2 × 256), backward order.
    EXPECT_EQ(g->params().front().sharded, model->sharded_params().back());
    return absl::OkStatus();
  });
  EXPECT_TRUE(st.ok()) << st;
}

// The bucketed reduction gives the same gradients as the simple per-param
// FinalizeGrads on a twin model, on the elements each mode makes final.
// With `poison`: the buffer is first filled with NaN (a previous
// iteration's values, at their worst) and ZeroGrad starts the iteration, so
// a deferred grad (GTP 1) that its first wgrad did not overwrite, or an
// element ZeroGrad should have filled and did not, reads NaN and fails.
// With `packed`: a bf16 model with q/k/v as one GEMM (layers/packed_linears.h);
// with GTP 1 its weight gradients are written in place as one matrix — the
// buffer's grad groups — while the twin, without a buffer, goes through
// scratch.
void CheckAgainstReference(int tp, int gtp, int dp, bool llama, ReduceMode mode,
                           bool overlap = true, bool poison = false, bool packed = false) {
  HeapAllocator host;
  absl::Status st = comm::RunRanks(tp * gtp * dp, [&](comm::Communicator& w) -> absl::Status {
    parallel::ParallelConfig pc;
    pc.tp = tp;
    pc.tp_num_weight_shards = tp * gtp;
    pc.sequence_parallel = llama && tp > 1;
    GTP_ASSIGN_OR_RETURN(auto pgs, parallel::ProcessGroupCollection::Build(pc, w));
    GTP_ASSIGN_OR_RETURN(int lane, pgs.RankIn("data"));
    const kernels::Exec exec = kernels::Exec::Cpu(host);
    layers::GptConfig cfg = testing::SmallModel(llama);
    if (packed) {
      cfg.block.dtype = DType::kBF16;
      cfg.block.packing = layers::ProjectionPacking::kOn;
    }
    GTP_ASSIGN_OR_RETURN(auto a, layers::GptModel::Create(cfg, kB, kT, pgs, exec));
    GTP_ASSIGN_OR_RETURN(auto b, layers::GptModel::Create(cfg, kB, kT, pgs, exec));
    GradBufferOptions o;
    o.reduce = mode;
    o.overlap = overlap;
    o.bucket_elements = 500;
    GTP_ASSIGN_OR_RETURN(auto g, GradBuffer::Create({a->sharded_params(), a->replicated_params()},
                                                    pgs, exec, o));
    if (packed) {  // the buffer keeps each layer's q, k, v grads side by side
      int groups = 0;
      for (layers::ShardedParam* q : a->sharded_params()) {
        const size_t at = q->name().find(".q.weight");
        if (at == std::string::npos) continue;
        for (layers::ShardedParam* k : a->sharded_params()) {
          if (k->name() == q->name().substr(0, at) + ".k.weight") {
            EXPECT_EQ(k->main_grad().raw_data(),
                      q->main_grad().data<float>() + q->main_grad().numel())
                << k->name();
            ++groups;
          }
        }
      }
      EXPECT_EQ(groups, cfg.n_layer);
    }
    if (poison) {
      kernels::ops::Fill(exec, g->data(), std::nanf(""));
      g->ZeroGrad();
    }
    Tensor tok = Tensor::Empty({kB, kT}, DType::kI32, host);
    Tensor tgt = Tensor::Empty({kB, kT}, DType::kI32, host);
    FillBatch(tok, tgt, lane);
    for (layers::GptModel* m : {a.get(), b.get()}) {
      GTP_RETURN_IF_ERROR(m->Forward(tok, tgt).status());
      GTP_RETURN_IF_ERROR(m->Backward());
    }
    GTP_RETURN_IF_ERROR(g->FinishGradSync());
    GTP_RETURN_IF_ERROR(FinalizeGrads({b->sharded_params(), b->replicated_params()}, pgs));
    // Map the twin's grads by name.
    std::map<std::string, Tensor> ref;
    for (layers::ShardedParam* p : b->sharded_params()) ref[p->name()] = p->main_grad();
    for (layers::ReplicatedParam* p : b->replicated_params()) ref[p->name] = p->grad;
    int64_t compared = 0;
    for (const Bucket& k : g->buckets()) {
      auto [lo, hi] = g->valid_range(k.index);
      for (int i : k.params) {
        const GradParam& p = g->params()[i];
        const float* want = ref.at(p.name).data<float>();
        const float* got = g->data().data<float>();
        for (int64_t e = std::max(lo, p.offset); e < std::min(hi, p.offset + p.numel); ++e) {
          const float r = want[e - p.offset];
          EXPECT_NEAR(got[e], r, 1e-6f + 1e-5f * std::abs(r)) << p.name << "[" << e - p.offset << "]";
          ++compared;
        }
      }
    }
    EXPECT_GT(compared, 0);
    return absl::OkStatus();
  });
  EXPECT_TRUE(st.ok()) << st;
}

TEST(GradBuffer, ReduceScatterMatchesUnbucketedFinalize) {
  CheckAgainstReference(1, 2, 2, false, ReduceMode::kReduceScatter);
  CheckAgainstReference(2, 1, 2, true, ReduceMode::kReduceScatter);  // SP: TP-summed norms
}

TEST(GradBuffer, WithoutOverlapEverythingReducesInFinish) {
  CheckAgainstReference(2, 2, 1, false, ReduceMode::kReduceScatter, /*overlap=*/false);
  CheckAgainstReference(1, 2, 2, true, ReduceMode::kAllReduce, /*overlap=*/false);
}

TEST(GradBuffer, AllReduceMatchesUnbucketedFinalize) {
  CheckAgainstReference(1, 2, 2, false, ReduceMode::kAllReduce);
  CheckAgainstReference(2, 2, 1, true, ReduceMode::kAllReduce);
}

// ZeroGrad defers the GTP-1 sharded grads (their first wgrad GEMM writes with
// beta = 0) and fills the rest; the gradients are those of a zeroed buffer.
// Layouts: DP2 (every weight deferred), GTP2 (none: the reduced shard is
// added into the main grad), TP2 with SP.
TEST(GradBuffer, ZeroGradDefersGtp1GradsToTheirFirstWgrad) {
  CheckAgainstReference(1, 1, 2, false, ReduceMode::kReduceScatter, true, /*poison=*/true);
  CheckAgainstReference(1, 2, 1, true, ReduceMode::kAllReduce, true, /*poison=*/true);
  CheckAgainstReference(2, 1, 1, true, ReduceMode::kReduceScatter, false, /*poison=*/true);
}

// q, k and v packed (bf16): the in-place packed wgrad into the buffer's grad
// groups (GTP 1; NaN-poisoned, deferred zero) and the gathered GTP-2 path
// give the unbucketed reference's gradients; DP2 reduces them.
TEST(GradBuffer, PackedQkvMatchesUnbucketedFinalize) {
  CheckAgainstReference(1, 1, 2, false, ReduceMode::kReduceScatter, true, /*poison=*/true,
                        /*packed=*/true);
  CheckAgainstReference(1, 2, 2, true, ReduceMode::kAllReduce, true, /*poison=*/true,
                        /*packed=*/true);
}

// What ZeroGrad fills and what it leaves: every replicated grad is filled,
// no GTP-1 weight's grad is; a deferred grad no backward wrote reads zero
// after FinishGradSync (the NaN of before is gone), and one micro-batch's
// wgrad overwrites while the next accumulates (two micro-batches against a
// zeroed twin, halved: the mean over micro-batches).
TEST(GradBuffer, ZeroGradUnwrittenGradsReadZeroAndMicroBatchesAccumulate) {
  HeapAllocator host;
  const kernels::Exec exec = kernels::Exec::Cpu(host);
  absl::Status st = comm::RunRanks(1, [&](comm::Communicator& w) -> absl::Status {
    parallel::ParallelConfig pc;
    GTP_ASSIGN_OR_RETURN(auto pgs, parallel::ProcessGroupCollection::Build(pc, w));
    const layers::GptConfig cfg = testing::SmallModel(false);
    GTP_ASSIGN_OR_RETURN(auto a, layers::GptModel::Create(cfg, kB, kT, pgs, exec));
    GTP_ASSIGN_OR_RETURN(auto b, layers::GptModel::Create(cfg, kB, kT, pgs, exec));
    GTP_ASSIGN_OR_RETURN(
        auto g, GradBuffer::Create({a->sharded_params(), a->replicated_params()}, pgs, exec));
    // The ranges: replicated params inside, deferred ones outside.
    auto filled = [&](const GradParam& p) {
      for (auto [lo, hi] : g->zero_ranges()) {
        if (p.offset >= lo && p.offset + p.numel <= hi) return 1;
        if (p.offset < hi && p.offset + p.numel > lo) return -1;  // partly: wrong either way
      }
      return 0;
    };
    int deferred = 0;
    for (const GradParam& p : g->params()) {
      if (p.sharded != nullptr) {
        EXPECT_EQ(filled(p), 0) << p.name;
        ++deferred;
      } else {
        EXPECT_EQ(filled(p), 1) << p.name;
      }
    }
    EXPECT_GT(deferred, 0);

    // No backward: every grad reads zero after FinishGradSync.
    EXPECT_FALSE(g->zeroed());
    kernels::ops::Fill(exec, g->data(), std::nanf(""));
    g->ZeroGrad();
    EXPECT_TRUE(g->zeroed());
    GTP_RETURN_IF_ERROR(g->FinishGradSync());
    int64_t nonzero = 0;
    for (int64_t i = 0; i < g->data().numel(); ++i) nonzero += g->data().data<float>()[i] != 0.0f;
    EXPECT_EQ(nonzero, 0) << "of " << g->data().numel();

    // Two micro-batches.
    kernels::ops::Fill(exec, g->data(), std::nanf(""));
    g->ZeroGrad();
    ZeroGrads({b->sharded_params(), b->replicated_params()}, exec);
    Tensor tok = Tensor::Empty({kB, kT}, DType::kI32, host);
    Tensor tgt = Tensor::Empty({kB, kT}, DType::kI32, host);
    for (int micro = 0; micro < 2; ++micro) {
      FillBatch(tok, tgt, micro);
      g->StartMicrobatch(/*last=*/micro == 1);
      for (layers::GptModel* m : {a.get(), b.get()}) {
        GTP_RETURN_IF_ERROR(m->Forward(tok, tgt).status());
        GTP_RETURN_IF_ERROR(m->Backward());
      }
    }
    GTP_RETURN_IF_ERROR(g->FinishGradSync());
    int64_t compared = 0;
    for (const GradParam& p : g->params()) {
      const Tensor& want_t = [&]() -> const Tensor& {
        if (p.sharded == nullptr) {
          for (layers::ReplicatedParam* q : b->replicated_params())
            if (q->name == p.name) return q->grad;
        }
        for (layers::ShardedParam* q : b->sharded_params())
          if (q->name() == p.name) return q->main_grad();
        GTP_CHECK(false, "no twin for ", p.name);
        return g->data();
      }();
      const float* want = want_t.data<float>();
      const float* got = g->data().data<float>() + p.offset;
      for (int64_t e = 0; e < p.numel; ++e, ++compared) {
        // The same sums in the same order, then both halved: equal.
        EXPECT_EQ(got[e], 0.5f * want[e]) << p.name << "[" << e << "]";
      }
    }
    EXPECT_GT(compared, 0);
    return absl::OkStatus();
  });
  EXPECT_TRUE(st.ok()) << st;
}

// Per-rank instrumentation for the ordering test (each rank is one thread).
struct OrderProbe {
  testing::RankContext* ctx = nullptr;
  int micro = 0;                 // micro-batch whose backward runs now
  int issued_this_backward = 0;  // bucket issues since the last backward ended
  int violations = 0;
  int issued_total = 0;
  int issued_in_backward = 0;
};
thread_local OrderProbe probe;  // fresh for every rank thread

TEST(GradBuffer, OrderingBucketNeverReducesBeforeAllItsParamsAreReady) {
  constexpr int kMicro = 2;
  testing::RunConfig c;
  c.model = testing::SmallModel(false);
  c.layout = {"DP2_GTP2", 1, 2, 2};
  c.steps = 2;
  c.microbatches = kMicro;
  c.gtp.async_reduction = true;  // finalisation deferred one param: the racy case
  c.buffer.bucket_elements = 600;
  std::mutex mu;
  std::vector<OrderProbe> results;
  c.buffer.on_bucket_issue = [&](const Bucket& b) {
    OrderProbe& p = probe;
    ++p.issued_total;
    if (!b.replicated) ++p.issued_this_backward;  // replicated ones go in Step
    const std::vector<layers::GtpTraceEvent>& trace = p.ctx->model->chain().trace();
    for (int i : b.params) {
      const GradParam& gp = p.ctx->grads->params()[i];
      if (gp.sharded == nullptr) continue;
      // One {reduce-scatter → add} per micro-batch of this step so far,
      // the last one included, and nothing pending.
      const int64_t done = std::count_if(trace.begin(), trace.end(), [&](const auto& e) {
        return e.kind == layers::GtpTraceEvent::kReduceFinalized && e.param == gp.name;
      });
      if (done != p.micro + 1 || gp.sharded->reduce_state() != layers::CommState::kNone) {
        ++p.violations;
        ADD_FAILURE() << "bucket " << b.index << " issued with " << gp.name << " finalised "
                      << done << " times in micro-batch " << p.micro;
      }
    }
  };
  c.on_setup = [&](testing::RankContext& ctx) {
    probe.ctx = &ctx;  // lives as long as the rank's training loop
    ctx.model->chain().set_tracing(true);
  };
  c.after_backward = [&](testing::RankContext& ctx, int step, int micro) {
    if (micro < kMicro - 1) {
      EXPECT_EQ(probe.issued_this_backward, 0) << "a bucket reduced during accumulation";
    } else {
      probe.issued_in_backward += probe.issued_this_backward;
    }
    probe.issued_this_backward = 0;
    probe.micro = micro + 1;
  };
  c.before_step = [&](testing::RankContext& ctx, int step) {
    // Buckets still pending (replicated ones) are issued inside Step.
    probe.micro = 0;
    ctx.model->chain().ClearTrace();
    std::lock_guard<std::mutex> lock(mu);
    if (step == c.steps - 1) {
      results.push_back(probe);
    }
  };
  const testing::RunResult r = testing::Train(c);
  ASSERT_TRUE(r.status.ok()) << r.status;
  ASSERT_EQ(results.size(), 4u);
  for (const OrderProbe& p : results) {
    EXPECT_EQ(p.violations, 0);
    EXPECT_GE(p.issued_in_backward, 3) << "sharded buckets should overlap backward";
  }
}

TEST(GradBuffer, TwoSynchronisingBackwardsAreAnError) {
  HeapAllocator host;
  absl::Status st = comm::RunRanks(2, [&](comm::Communicator& w) -> absl::Status {
    parallel::ParallelConfig pc;
    GTP_ASSIGN_OR_RETURN(auto pgs, parallel::ProcessGroupCollection::Build(pc, w));
    const kernels::Exec exec = kernels::Exec::Cpu(host);
    GTP_ASSIGN_OR_RETURN(auto m, layers::GptModel::Create(testing::SmallModel(false), kB, kT, pgs, exec));
    GTP_ASSIGN_OR_RETURN(auto g, GradBuffer::Create({m->sharded_params(), m->replicated_params()}, pgs, exec));
    Tensor tok = Tensor::Empty({kB, kT}, DType::kI32, host);
    Tensor tgt = Tensor::Empty({kB, kT}, DType::kI32, host);
    FillBatch(tok, tgt, w.rank());
    for (int i = 0; i < 2; ++i) {  // no StartMicrobatch(false) for the first
      GTP_RETURN_IF_ERROR(m->Forward(tok, tgt).status());
      GTP_RETURN_IF_ERROR(m->Backward());
    }
    absl::Status s = g->FinishGradSync();
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    // The first backward's reductions may still wait for the peer.
    return comm::Run(w.Barrier());
  });
  EXPECT_TRUE(st.ok()) << st;
}

}  // namespace
}  // namespace gtp::optimizer
