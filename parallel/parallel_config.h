// parallel/parallel_config.h — parallel degrees of a run and their validation.
//
// The user gives TP, CP, PP, EP, ETP and the number of weight shards
// (tp_num_weight_shards = TP × GTP, expert_tp_num_weight_shards = ETP × EGTP,
// as Megatron's --tensor-parallel-num-weight-shards does); DP and EDP follow
// from the world size (DESIGN.md §3):
//
//   dense grid:  world = TP · GTP · CP · DP · PP           order "tp-gtp-cp-ep-dp-pp"
//   expert grid: world = ETP · EP · EGTP · EDP · PP (CP=1)  order "tp-cp-ep-gtp-dp-pp"
//
// In the expert order "tp" names ETP, "gtp" EGTP and "dp" EDP. Both grids
// must put every rank on the same pipeline stage.
//
//   ParallelConfig c;
//   c.tp = 2;
//   c.tp_num_weight_shards = 4;              // GTP = 2
//   GTP_ASSIGN_OR_RETURN(ParallelConfig r, c.Resolve(world.size(), facts));
//   r.dp, r.gtp(), r.edp() ...               // all filled in
//
// Zero-valued fields mean "derive": dp from the world, etp = tp (Megatron's
// default), tp_num_weight_shards = tp (GTP = 1), expert_tp_num_weight_shards
// = etp (EGTP = 1), world_size from Resolve's argument.
//
// sequence_parallel with tp == 1 is accepted and is a no-op: the sequence-
// parallel region over a TP group of one rank is the whole sequence, so
// Resolve() clears the flag rather than failing a config that is correct.
//
// Resolve and Validate return InvalidArgument listing every problem found,
// each naming the values involved and what to change: the message is
// "invalid parallel config: " then the problems joined by "; " (no problem
// text contains "; ", so tools may split on it). ParallelConfig is a
// plain value: no method blocks; const methods are thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "parallel/rank_generator.h"

namespace gtp::parallel {

inline constexpr char kDefaultOrder[] = "tp-gtp-cp-ep-dp-pp";
inline constexpr char kDefaultExpertOrder[] = "tp-cp-ep-gtp-dp-pp";

// Facts about the model that constrain the degrees; unset ones are not checked.
struct ModelFacts {
  // Experts per MoE layer; 0 for a dense model (then EP must be 1).
  std::optional<int> num_experts;
  // Tokens per sequence (for CP and sequence-parallel divisibility).
  std::optional<int64_t> seq_length;
  // Attention heads (TP shards heads, so TP must divide it).
  std::optional<int> num_attention_heads;
};

struct ParallelConfig {
  // Ranks in the grid; 0 = the world size passed to Resolve/Validate.
  int world_size = 0;
  // Tensor parallelism (weights sharded and kept sharded through the GEMM).
  int tp = 1;
  // TP × GTP; 0 = tp (GTP = 1, plain TP).
  int tp_num_weight_shards = 0;
  // Context parallelism (sequence split across ranks for attention).
  int cp = 1;
  // Data parallelism (replicas); 0 = derived, world / (TP·GTP·CP·PP).
  int dp = 0;
  // Pipeline parallelism.
  int pp = 1;
  // Expert parallelism (experts distributed over EP ranks).
  int ep = 1;
  // Expert tensor parallelism; 0 = tp.
  int etp = 0;
  // ETP × EGTP; 0 = etp (EGTP = 1).
  int expert_tp_num_weight_shards = 0;
  // Megatron-style sequence parallelism in the TP regions (no-op if tp == 1).
  bool sequence_parallel = false;
  // Dense grid order, fastest-varying axis first.
  std::string order = kDefaultOrder;
  // Expert grid order ("tp" = ETP, "gtp" = EGTP, "dp" = EDP, cp must be 1).
  std::string expert_order = kDefaultExpertOrder;

  // Returns a copy with every derived field filled in, or InvalidArgument
  // listing all problems. `world_size` (0 = use this->world_size) must agree
  // with this->world_size when both are set.
  absl::StatusOr<ParallelConfig> Resolve(int world_size = 0, const ModelFacts& facts = {}) const;
  // Resolve(...).status().
  absl::Status Validate(int world_size = 0, const ModelFacts& facts = {}) const;

  // True when every derived field is filled in (the result of Resolve).
  bool resolved() const;
  // The accessors below require resolved() (abort otherwise).
  int gtp() const;
  int egtp() const;
  int edp() const;
  // Axis sizes of the dense grid (ep = 1) and of the expert grid (tp = ETP,
  // gtp = EGTP, cp = 1, dp = EDP).
  AxisValues DenseSizes() const;
  AxisValues ExpertSizes() const;
  // The two grids, starting at world rank `offset` (MIMO module grids).
  absl::StatusOr<RankGenerator> DenseGrid(int offset = 0) const;
  absl::StatusOr<RankGenerator> ExpertGrid(int offset = 0) const;

  // One line for start-up logs, e.g.
  // "world=8 tp=2 gtp=2 cp=1 dp=2 pp=1 sp=0 order=tp-gtp-cp-ep-dp-pp | expert etp=2 ..."
  std::string ToString() const;
};

}  // namespace gtp::parallel
