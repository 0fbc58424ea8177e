// tools/topology: prints a parallel config's rank grid and groups, or its problems.
//
//   bazel run //tools/topology -- --world=24 --tp=2 --gtp=4 --ep=4 --etp=1 --egtp=2
//
// Exit status: 0 valid, 1 invalid config (problems printed), 2 bad flags.
#include <cstdio>
#include <iostream>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "core/cli.h"
#include "tools/topology/topology.h"

ABSL_FLAG(int, world, 0, "world size (ranks in the grid); required");
ABSL_FLAG(int, tp, 1, "tensor-parallel size");
ABSL_FLAG(int, gtp, 0, "GTP size; 0 = from --tp_num_weight_shards (default 1)");
ABSL_FLAG(int, tp_num_weight_shards, 0, "TP x GTP; 0 = tp x gtp");
ABSL_FLAG(int, cp, 1, "context-parallel size");
ABSL_FLAG(int, dp, 0, "data-parallel size; 0 = derived from the world");
ABSL_FLAG(int, pp, 1, "pipeline-parallel size");
ABSL_FLAG(int, ep, 1, "expert-parallel size");
ABSL_FLAG(int, etp, 0, "expert tensor-parallel size; 0 = tp");
ABSL_FLAG(int, egtp, 0, "expert GTP size; 0 = from --expert_tp_num_weight_shards (default 1)");
ABSL_FLAG(int, expert_tp_num_weight_shards, 0, "ETP x EGTP; 0 = etp x egtp");
ABSL_FLAG(bool, sequence_parallel, false, "sequence parallelism in TP regions");
ABSL_FLAG(std::string, order, gtp::parallel::kDefaultOrder, "dense order, fastest axis first");
ABSL_FLAG(std::string, expert_order, gtp::parallel::kDefaultExpertOrder,
          "expert order (tp=ETP, gtp=EGTP, dp=EDP)");
ABSL_FLAG(int, offset, 0, "first world rank of the grid (MIMO module grids)");
ABSL_FLAG(int, num_experts, -1, "experts per MoE layer; -1 = not checked, 0 = dense model");
ABSL_FLAG(int64_t, seq_length, -1, "sequence length; -1 = not checked");
ABSL_FLAG(int, num_attention_heads, -1, "attention heads; -1 = not checked");

namespace {

// Combines a size flag and a shards flag: returns false on a conflict.
bool Shards(const char* what, const char* axes, int tp, int g, int shards, int* out) {
  if (g > 0 && shards > 0 && shards != tp * g) {
    std::fprintf(stderr, "conflicting flags: %s gives %d shards but %s = %d x %d\n", what, shards,
                 axes, tp, g);
    return false;
  }
  *out = shards > 0 ? shards : (g > 0 ? tp * g : 0);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  gtp::SetUsage("Prints a gtp parallel config's rank grid and process groups.");
  gtp::ParseCommandLine(argc, argv);
  gtp::parallel::ParallelConfig c;
  c.world_size = absl::GetFlag(FLAGS_world);
  if (c.world_size <= 0) {
    std::fprintf(stderr, "--world is required (the number of ranks)\n");
    return 2;
  }
  c.tp = absl::GetFlag(FLAGS_tp);
  c.cp = absl::GetFlag(FLAGS_cp);
  c.dp = absl::GetFlag(FLAGS_dp);
  c.pp = absl::GetFlag(FLAGS_pp);
  c.ep = absl::GetFlag(FLAGS_ep);
  c.etp = absl::GetFlag(FLAGS_etp);
  c.sequence_parallel = absl::GetFlag(FLAGS_sequence_parallel);
  c.order = absl::GetFlag(FLAGS_order);
  c.expert_order = absl::GetFlag(FLAGS_expert_order);
  if (!Shards("--tp_num_weight_shards", "tp x gtp", c.tp, absl::GetFlag(FLAGS_gtp),
              absl::GetFlag(FLAGS_tp_num_weight_shards), &c.tp_num_weight_shards) ||
      !Shards("--expert_tp_num_weight_shards", "etp x egtp", c.etp > 0 ? c.etp : c.tp,
              absl::GetFlag(FLAGS_egtp), absl::GetFlag(FLAGS_expert_tp_num_weight_shards),
              &c.expert_tp_num_weight_shards)) {
    return 2;
  }
  gtp::parallel::ModelFacts facts;
  if (absl::GetFlag(FLAGS_num_experts) >= 0) facts.num_experts = absl::GetFlag(FLAGS_num_experts);
  if (absl::GetFlag(FLAGS_seq_length) >= 0) facts.seq_length = absl::GetFlag(FLAGS_seq_length);
  if (absl::GetFlag(FLAGS_num_attention_heads) >= 0) {
    facts.num_attention_heads = absl::GetFlag(FLAGS_num_attention_heads);
  }
  return gtp::tools::PrintTopology(c, facts, absl::GetFlag(FLAGS_offset), std::cout) ? 0 : 1;
}
