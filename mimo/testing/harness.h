// mimo/testing/harness.h — trains a MimoModel on the shapes task with every
// world rank a thread (comm/local), for the MIMO tests: per-step losses and
// grad norms, and every global tensor after the run.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "data/shapes/shapes.h"
#include "mimo/model.h"
#include "optimizer/optimizer.h"
#include "parallel/parallel_config.h"

namespace gtp::mimo::testing {

struct ModuleLayout {
  int offset = 0, size = 1;
  parallel::ParallelConfig config;
};
// A dense module grid: TP·GTP·PP, DP derived.
ModuleLayout Dense(int offset, int size, int tp = 1, int gtp = 1, int pp = 1);

struct Layout {
  std::string name;
  int world = 1;
  ModuleLayout encoder, language;
};

struct RunSpec {
  MimoConfig model;
  data::shapes::ShapesConfig data;
  int64_t global_batch = 4;  // samples per step
  int micro_batches = 1;     // global_batch / micro_batches samples each (MimoModel::Step)
  int steps = 3;
  optimizer::OptimizerConfig optimizer;
  // Save after step save_after (1-based) into save_root; or start from the
  // latest checkpoint in load_root and run the remaining steps.
  std::string save_root;
  int save_after = 0;
  std::string load_root;
  bool collect_params = true;
  // Drop caption targets (−1) where (sample id · 31 + position) % drop_every
  // == 0, so lanes hold different numbers of valid targets (0: none). With
  // model.language.loss_reduction kSum the run is per-token normalised.
  int drop_every = 0;
};

struct Outcome {
  absl::Status status;
  std::vector<double> losses;  // per step run, the mean over every valid target
  std::vector<double> norms;   // per step run, the global grad norm
  int skipped = 0;             // steps skipped (a non-finite norm)
  std::map<std::string, std::vector<float>> params;  // global tensors after the run
};

// The small model of the tests: a 1-layer encoder of width 16 and a 2-layer
// GPT of width 16 over the shapes vocabulary.
MimoConfig SmallModel(const data::shapes::ShapesTask& task);
// AdamW, constant lr 3e-3, clip 1, weight decay 0.01.
optimizer::OptimizerConfig Adam();

// Threads: every world rank of `layout` in this process (comm/local).
Outcome Train(const Layout& layout, const RunSpec& spec);

// One rank's view of a run: its language lane's loss per step (lane −1 on
// ranks outside the language grid), the global grad norm per step, and its
// pieces of every global tensor (NaN where it holds nothing).
struct RankLog {
  struct LaneLoss {
    int lane = -1;
    double loss = 0;      // the lane's mean
    int64_t tokens = 0;   // its valid targets
  };
  std::vector<LaneLoss> lane_losses;
  std::vector<double> norms;
  int skipped = 0;
  std::map<std::string, std::vector<float>> params;
};
// This rank's part of the run on `world` (any backend: threads or UCX
// processes). Collective over world.
absl::Status TrainRank(comm::Communicator& world, const Layout& layout, const RunSpec& spec,
                       RankLog* log);

}  // namespace gtp::mimo::testing
