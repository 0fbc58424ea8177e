// mimo/testing/ucx_check — the MIMO model as UCX processes (one per rank,
// under tools/gtprun) against threads and one rank. Each process:
//   1. runs the one-rank reference and the same layout as threads, in process;
//   2. runs its own rank over UCX;
//   3. checks its global grad norms against the reference's, its language
//      lane's losses against the threads run's same rank, and every element
//      of every tensor it holds against the reference's.
//   gtprun --nproc 8 -- ucx_check --layout=fan-in
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "comm/local/local_communicator.h"
#include "comm/ucx/ucx_communicator.h"
#include "mimo/testing/harness.h"

ABSL_FLAG(std::string, layout, "fan-in", "fan-in | fan-out | encoder-gtp | colocated");

namespace gtp::mimo::testing {
namespace {

int Main() {
  RunSpec spec;
  spec.data = {.image_size = 8, .patch = 4, .seed = 3};
  spec.model = SmallModel(*data::shapes::ShapesTask::Create(spec.data));
  spec.optimizer = Adam();
  const std::string name = absl::GetFlag(FLAGS_layout);
  Layout l;
  if (name == "fan-in") {
    l = {name, 8, Dense(0, 4), Dense(4, 4, 2, 2)};
  } else if (name == "fan-out") {
    l = {name, 4, Dense(0, 2, 2), Dense(2, 2)};
  } else if (name == "encoder-gtp") {
    l = {name, 4, Dense(0, 2, 1, 2), Dense(2, 2, 2)};
  } else if (name == "colocated") {
    l = {name, 4, Dense(0, 4), Dense(0, 4, 2)};
  } else if (name == "language-pp") {
    // encoder DP2 | language PP2 (1F1B over 4 micro-batches of a 4-layer model).
    l = {name, 4, Dense(0, 2), Dense(2, 2, 1, 1, 2)};
    spec.model.language.n_layer = 4;
    spec.global_batch = 8;
    spec.micro_batches = 4;
  } else {
    std::fprintf(stderr, "unknown --layout %s\n", name.c_str());
    return 2;
  }
  const Outcome one = Train({"one rank", 1, Dense(0, 1), Dense(0, 1)}, spec);
  if (!one.status.ok()) {
    std::fprintf(stderr, "one rank: %s\n", std::string(one.status.message()).c_str());
    return 1;
  }
  std::vector<RankLog> threads(l.world);
  absl::Status st = comm::RunRanks(l.world, [&](comm::Communicator& w) {
    return TrainRank(w, l, spec, &threads[w.rank()]);
  });
  if (!st.ok()) {
    std::fprintf(stderr, "threads: %s\n", std::string(st.message()).c_str());
    return 1;
  }
  auto world = comm::CreateUcxWorldFromEnv({});
  if (!world.ok()) {
    std::fprintf(stderr, "ucx world: %s\n", std::string(world.status().message()).c_str());
    return 1;
  }
  const int rank = (*world)->rank();
  if ((*world)->size() != l.world) {
    std::fprintf(stderr, "layout %s needs %d processes, got %d\n", name.c_str(), l.world,
                 (*world)->size());
    return 2;
  }
  RankLog mine;
  st = TrainRank(**world, l, spec, &mine);
  if (!st.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", rank, std::string(st.message()).c_str());
    return 1;
  }
  int bad = 0;
  const RankLog& same = threads[rank];
  for (size_t s = 0; s < one.norms.size(); ++s) {
    if (std::fabs(mine.norms[s] - one.norms[s]) > 1e-5 * one.norms[s]) {
      std::printf("rank %d step %zu: grad norm %.9g, one rank %.9g\n", rank, s, mine.norms[s],
                  one.norms[s]);
      ++bad;
    }
    const RankLog::LaneLoss& a = mine.lane_losses[s];
    const RankLog::LaneLoss& b = same.lane_losses[s];
    if (a.lane != b.lane || std::fabs(a.loss - b.loss) > 1e-6 * std::fabs(a.loss)) {
      std::printf("rank %d step %zu: lane %d loss %.9g, threads lane %d %.9g\n", rank, s, a.lane,
                  a.loss, b.lane, b.loss);
      ++bad;
    }
  }
  int64_t held = 0;
  for (const auto& [key, v] : mine.params) {
    const auto& ref = one.params.at(key);
    for (size_t i = 0; i < v.size(); ++i) {
      if (std::isnan(v[i])) continue;
      ++held;
      if (std::fabs(v[i] - ref[i]) > 2e-5) {
        if (bad < 20) std::printf("rank %d %s[%zu]: %.9g, one rank %.9g\n", rank, key.c_str(), i, v[i], ref[i]);
        ++bad;
      }
    }
  }
  if (held == 0) {
    std::printf("rank %d holds no parameter\n", rank);
    ++bad;
  }
  std::printf("%s rank %d: %zu steps, %lld parameter elements checked: %s\n", name.c_str(), rank,
              mine.norms.size(), static_cast<long long>(held), bad == 0 ? "ok" : "FAILED");
  return bad == 0 ? 0 : 1;
}

}  // namespace
}  // namespace gtp::mimo::testing

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return gtp::mimo::testing::Main();
}
