// plan/search.h — enumerate layouts for a model, a cluster, a GPU count and a
// memory cap; rank them by predicted tokens/s and say why each loser loses.
//
//   SearchSpace space = DefaultSpace(recipe, cluster, 64);
//   GTP_ASSIGN_OR_RETURN(SearchResult res, Search(recipe, 64, 141e9, cost, space));
//   res.ranked[0]  // the recommendation; ranked[1] the runner-up
//
// A layout that does not divide the model or the batch is skipped (counted
// in `skipped`); one that does not fit the memory cap is ranked after every
// one that does. Pure; thread-safe.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "plan/step.h"
#include "recipes/trainer/config.pb.h"

namespace gtp::plan {

struct SearchSpace {
  std::vector<int> tp, gtp, pp, vpp, cp, ep, egtp;
  std::vector<int64_t> micro_batch;
  std::vector<bool> recompute;
  // Copied into every layout (plan/model.h Layout).
  bool unfused_attention = false, attention_dropout = false;
  // Sequence parallelism on every layout with tp > 1 (false: TP without SP —
  // norms and residual adds replicated on the TP ranks, the TP collectives
  // all-reduces — as Megatron-LM before Korthikanti et al. 2022).
  bool sequence_parallel = true;
};

// tp 1..gpus_per_node, gtp and pp powers of two, vpp 1/2/4, cp 1/2, micro
// batches 1/2/4, recompute off/on; ep/egtp for MoE models. The recipe's
// precision and GTP wire settings are kept.
SearchSpace DefaultSpace(const recipes::proto::Recipe& r, const Cluster& c, int world);

struct Candidate {
  Prediction pred;
  bool fits = false;
  std::string why;  // vs the winner: "memory 160.2 GB > 141.0 GB", "exposed comm +120 ms (tp/sp)", ...
};

struct SearchResult {
  std::vector<Candidate> ranked;  // fitting ones by tokens/s, then the rest by memory
  int evaluated = 0, skipped = 0;
};

absl::StatusOr<SearchResult> Search(const recipes::proto::Recipe& r, int world, double memory_cap,
                                    const CostModel& cost, const SearchSpace& space);

// The scaling families of docs/SCALING.md: "gtp" (TP × GTP with DP/PP),
// "fsdp" (ZeRO-3-style: every weight, gradient and optimizer state sharded
// over all data ranks — modelled as TP 1, GTP = world / CP, no PP), "tpdp"
// (TP + PP + DP with the distributed optimizer, GTP 1).
SearchSpace FamilySpace(const std::string& family, const recipes::proto::Recipe& r, const Cluster& c, int world);

// Exposed communication of a prediction (seconds per step).
double ExposedComm(const Prediction& p);

}  // namespace gtp::plan
