// Benchmark (tagged manual: `bazel test //optimizer:overlap_benchmark
// --test_output=all` on an idle machine; its bounds are timing, which a loaded
// 2-core CI machine breaks). Communication/compute overlap of a GTP4 model step, with every op slowed
// to at least kDelay by comm::DelayingCommunicator (a slow wire: the delay
// runs asynchronously, like a real transfer):
//   - with the prefetch chain on, a step (forward, backward, GradBuffer
//     sync) takes about max(compute, comm), not compute + comm;
//   - the exposed communication (ExposedComm of the chain + the GradBuffer)
//     with prefetch on is a small fraction of that with prefetch off;
//   - the timed waits appear as spans on a CPU timeline's "comm" track.
// One world runs two models (prefetch on / off) and interleaves the phases
// (compute only, on, off) round by round, so load drift on a busy 2-core
// machine hits all three alike; the margins compare ratios.
// The same body runs as 4 local threads and as 4 UCX processes under gtprun
// (the binary re-executes itself as each rank and prints its times).
#include <algorithm>
#include <cstdio>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "comm/delaying.h"
#include "comm/local/local_communicator.h"
#include "comm/testing/multiprocess.h"
#include "comm/ucx/ucx_communicator.h"
#include "core/philox.h"
#include "gtest/gtest.h"
#include "layers/gpt.h"
#include "optimizer/grad_buffer.h"
#include "parallel/parallel_config.h"

namespace gtp::optimizer {
namespace {

constexpr absl::Duration kDelay = absl::Milliseconds(20);
constexpr int kRounds = 3;
constexpr int64_t kB = 8, kT = 64, kC = 384, kHeads = 4, kLayers = 2, kVocab = 256;

enum Phase { kCompute = 0, kOn = 1, kOff = 2, kPhases = 3 };
const char* const kPhaseName[kPhases] = {"compute only (no delay)", "prefetch on", "prefetch off"};

struct PhaseResult {
  double step_ms = 1e30;  // fastest round (its slowest rank): load only slows
  double exposed_ms = 0;  // mean over rounds and ranks
  int64_t waits = 0;      // blocking waits per step, rank 0
};
struct Result {
  PhaseResult phase[kPhases];
  // Rank 0's "comm" track in one prefetch-off step: gathers, reductions
  // (reduce-scatters and the synchronous all-reduce of replicated grads).
  int gather_spans = 0, reduce_spans = 0;
};

// One rank's model + gradient buffer on `w`.
struct Replica {
  std::unique_ptr<layers::GptModel> model;
  std::unique_ptr<GradBuffer> grads;
};

absl::StatusOr<Replica> MakeReplica(const parallel::ProcessGroupCollection& pgs,
                                    const kernels::Exec& exec, bool prefetch) {
  layers::GptConfig cfg = layers::GptConfig::Gpt2(kVocab, kT, kLayers, kC, kHeads);
  layers::GtpOptions go;
  go.weight_prefetch = prefetch;
  Replica r;
  GTP_ASSIGN_OR_RETURN(r.model, layers::GptModel::Create(cfg, kB, kT, pgs, exec, go));
  GTP_ASSIGN_OR_RETURN(r.grads, GradBuffer::Create({r.model->sharded_params(),
                                                    r.model->replicated_params()},
                                                   pgs, exec));
  return r;
}

// Per-rank measurements: step ms and exposed ms of each phase and round.
struct RankTimes {
  double step_ms[kRounds][kPhases] = {};
  double exposed_ms[kRounds][kPhases] = {};
  int64_t waits[kPhases] = {};
  int gather_spans = 0, reduce_spans = 0;
};

absl::StatusOr<RankTimes> RankSteps(comm::Communicator& world) {
  HeapAllocator host;
  comm::DelayingCommunicator w(&world, kDelay);
  parallel::ParallelConfig pc;
  pc.tp_num_weight_shards = 4;  // GTP4
  GTP_ASSIGN_OR_RETURN(auto pgs, parallel::ProcessGroupCollection::Build(pc, w));
  const kernels::Exec exec = kernels::Exec::Cpu(host);
  GTP_ASSIGN_OR_RETURN(Replica on, MakeReplica(pgs, exec, /*prefetch=*/true));
  GTP_ASSIGN_OR_RETURN(Replica off, MakeReplica(pgs, exec, /*prefetch=*/false));
  Tensor tok = Tensor::Empty({kB, kT}, DType::kI32, host);
  Tensor tgt = Tensor::Empty({kB, kT}, DType::kI32, host);
  for (int64_t i = 0; i < kB * kT; ++i) {
    tok.data<int32_t>()[i] = PhiloxRaw(world.rank(), i).v[0] % kVocab;
    tgt.data<int32_t>()[i] = PhiloxRaw(world.rank(), i).v[1] % kVocab;
  }
  Timeline tl(/*cuda=*/false);
  auto step = [&](Replica& r, absl::Duration delay, Timeline* t, double* ms,
                  double* exposed, int64_t* waits) -> absl::Status {
    GTP_RETURN_IF_ERROR(comm::Run(world.Barrier()));  // steps start together, undelayed
    w.set_delay(delay);
    r.model->chain().exposed_comm().Reset();
    r.grads->exposed_comm().Reset();
    r.grads->ZeroGrad();
    r.model->set_timeline(t);
    r.grads->set_timeline(t);
    const absl::Time t0 = absl::Now();
    r.grads->StartMicrobatch(/*last=*/true, kB * kT);
    GTP_RETURN_IF_ERROR(r.model->Forward(tok, tgt).status());
    GTP_RETURN_IF_ERROR(r.model->Backward());
    GTP_RETURN_IF_ERROR(r.grads->FinishGradSync());
    *ms = absl::ToDoubleMilliseconds(absl::Now() - t0);
    *exposed = r.model->chain().exposed_comm().ms() + r.grads->exposed_comm().ms();
    *waits = r.model->chain().exposed_comm().waits() + r.grads->exposed_comm().waits();
    r.model->set_timeline(nullptr);
    r.grads->set_timeline(nullptr);
    if (t != nullptr) GTP_RETURN_IF_ERROR(t->Collect());
    return absl::OkStatus();
  };
  RankTimes out;
  double ms, exposed;
  int64_t waits;
  // Warm-up: the first step of each model records its prefetch chain.
  GTP_RETURN_IF_ERROR(step(on, kDelay, nullptr, &ms, &exposed, &waits));
  GTP_RETURN_IF_ERROR(step(off, kDelay, world.rank() == 0 ? &tl : nullptr, &ms, &exposed, &waits));
  for (const Timeline::Span& s : tl.spans()) {
    if (s.track != "comm") continue;
    out.gather_spans += s.name.rfind("gather ", 0) == 0;
    out.reduce_spans +=
        s.name.rfind("reduce-scatter ", 0) == 0 || s.name.rfind("all-reduce ", 0) == 0;
  }
  for (int round = 0; round < kRounds; ++round) {
    for (int p = 0; p < kPhases; ++p) {
      Replica& r = p == kOff ? off : on;
      GTP_RETURN_IF_ERROR(step(r, p == kCompute ? absl::ZeroDuration() : kDelay, nullptr,
                               &out.step_ms[round][p], &out.exposed_ms[round][p], &out.waits[p]));
    }
  }
  w.set_delay(absl::ZeroDuration());
  return out;
}

Result Combine(const std::vector<RankTimes>& ranks) {
  Result res;
  const int n = static_cast<int>(ranks.size());
  for (int p = 0; p < kPhases; ++p) {
    PhaseResult& pr = res.phase[p];
    for (int round = 0; round < kRounds; ++round) {
      double slowest = 0;
      for (const RankTimes& t : ranks) {
        slowest = std::max(slowest, t.step_ms[round][p]);
        pr.exposed_ms += t.exposed_ms[round][p] / (kRounds * n);
      }
      pr.step_ms = std::min(pr.step_ms, slowest);
    }
    pr.waits = ranks[0].waits[p];
  }
  res.gather_spans = ranks[0].gather_spans;
  res.reduce_spans = ranks[0].reduce_spans;
  return res;
}

void CheckOverlap(const Result& r, const char* backend) {
  const PhaseResult &compute = r.phase[kCompute], &on = r.phase[kOn], &off = r.phase[kOff];
  std::printf("%s, GTP4, delay %.0f ms per op:\n", backend, absl::ToDoubleMilliseconds(kDelay));
  for (int p = 0; p < kPhases; ++p) {
    std::printf("  %-24s step %7.1f ms  exposed comm %6.1f ms  (%lld blocking waits)\n",
                kPhaseName[p], r.phase[p].step_ms, r.phase[p].exposed_ms,
                static_cast<long long>(r.phase[p].waits));
  }
  // Even without delay, ranks sharing 2 cores wait for each other at every
  // collective (skew): compute-only "exposed" is that floor.
  const double floor = compute.exposed_ms;
  const double corrected = (on.exposed_ms - floor) / (off.exposed_ms - floor);
  std::printf("  exposed on/off %.2f (limit 0.7), above the compute-only floor %.2f (printed only); "
              "step_on - compute %.1f ms (limit 0.8 x exposed_off = %.1f ms); comm spans: %d "
              "gather, %d reduction\n",
              on.exposed_ms / off.exposed_ms, corrected, on.step_ms - compute.step_ms,
              0.8 * off.exposed_ms, r.gather_spans, r.reduce_spans);
  // Without prefetch every gather is waited for in full.
  EXPECT_GT(off.exposed_ms, 10 * absl::ToDoubleMilliseconds(kDelay));
  // With it only the cold starts (first gather of each direction), the chain
  // head's reduce-scatter and the replicated all-reduce stay exposed.
  EXPECT_LT(on.exposed_ms, 0.7 * off.exposed_ms);
  // `corrected` (the same ratio above the compute-only floor) is printed, not
  // asserted: the floor is the ranks' skew on a shared 2-core machine and
  // moves with its load (another machine measured 0.58 and 0.64 where an idle
  // one gives about 0.2); a timing figure, not a property of the code.
  // With prefetch a step costs about max(compute, comm) (here comm <
  // compute, and the cold-start gathers, the chain head's reduce-scatter and
  // the replicated all-reduce stay exposed): it adds well under the
  // serialised communication (what prefetch-off exposes) to compute. (Idle
  // machine: about 0.1×; 0.8 leaves room for a heavily loaded 2-core one,
  // where a CI run measured 0.62.)
  EXPECT_LT(on.step_ms - compute.step_ms, 0.8 * off.exposed_ms);
  // Timed waits show up on the CPU timeline's "comm" track.
  EXPECT_GT(r.gather_spans, 10);
  EXPECT_GT(r.reduce_spans, 0);
}

TEST(Overlap, Gtp4StepOnLocalThreadsTakesMaxOfComputeAndComm) {
  std::vector<RankTimes> ranks(4);
  absl::Status st = comm::RunRanks(4, [&](comm::Communicator& w) -> absl::Status {
    GTP_ASSIGN_OR_RETURN(ranks[w.rank()], RankSteps(w));
    return absl::OkStatus();
  });
  ASSERT_TRUE(st.ok()) << st;
  CheckOverlap(Combine(ranks), "local threads");
}

// ---- UCX processes -------------------------------------------------------------------

// One line per rank: "OVERLAP v0 v1 ..." (step ms, exposed ms, waits, spans).
std::string Serialize(const RankTimes& t) {
  std::string s = "OVERLAP";
  for (int r = 0; r < kRounds; ++r)
    for (int p = 0; p < kPhases; ++p) absl::StrAppend(&s, " ", t.step_ms[r][p], " ", t.exposed_ms[r][p]);
  for (int p = 0; p < kPhases; ++p) absl::StrAppend(&s, " ", t.waits[p]);
  absl::StrAppend(&s, " ", t.gather_spans, " ", t.reduce_spans);
  return s;
}

bool Parse(const std::string& line, RankTimes* t) {
  std::istringstream in(line);
  std::string tag;
  in >> tag;
  if (tag != "OVERLAP") return false;
  for (int r = 0; r < kRounds; ++r)
    for (int p = 0; p < kPhases; ++p) in >> t->step_ms[r][p] >> t->exposed_ms[r][p];
  for (int p = 0; p < kPhases; ++p) in >> t->waits[p];
  in >> t->gather_spans >> t->reduce_spans;
  return static_cast<bool>(in);
}

int RunUcxRank() {
  comm::UcxOptions o;
  o.timeout = absl::Seconds(60);
  auto world = comm::CreateUcxWorldFromEnv(o);
  absl::StatusOr<RankTimes> t = world.ok() ? RankSteps(**world) : world.status();
  if (!t.ok()) {
    std::printf("ERROR %s\n", t.status().ToString().c_str());
    return 1;
  }
  std::printf("%s\n", Serialize(*t).c_str());
  std::fflush(stdout);
  return 0;
}

TEST(Overlap, Gtp4StepOnUcxProcessesTakesMaxOfComputeAndComm) {
  comm::testing::CommandResult r = comm::testing::RunCommand(
      {comm::testing::GtprunPath(), "--nproc=4", "--", comm::testing::SelfPath()}, {},
      absl::Seconds(300));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::map<int, RankTimes> by_rank;
  for (absl::string_view line : absl::StrSplit(r.output, '\n')) {
    int k = -1, consumed = 0;
    std::string l(line);
    if (std::sscanf(l.c_str(), "[rank %d] %n", &k, &consumed) != 1 || consumed == 0) continue;
    RankTimes t;
    if (Parse(l.substr(consumed), &t)) by_rank[k] = t;
  }
  ASSERT_EQ(by_rank.size(), 4u) << r.output;
  std::vector<RankTimes> ranks;
  for (auto& [k, t] : by_rank) ranks.push_back(t);
  CheckOverlap(Combine(ranks), "UCX processes");
}

}  // namespace
}  // namespace gtp::optimizer

int main(int argc, char** argv) {
  if (gtp::comm::testing::IsRankProcess()) return gtp::optimizer::RunUcxRank();
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
