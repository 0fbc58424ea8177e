// plan/collectives.h — latency-bandwidth (alpha-beta) times of collectives.
//
// A flat ring of n ranks over one link (bandwidth β bytes/s per direction,
// latency α per step), S = the full buffer (gathered / reduced bytes):
//   all-gather      (n−1)·α + (n−1)/n · S/β
//   reduce-scatter  (n−1)·α + (n−1)/n · S/β
//   all-reduce      reduce-scatter + all-gather = 2(n−1)·α + 2(n−1)/n · S/β,
//                   or, inside a node whose cluster file gives NCCL's own
//                   all-reduce link (nvlink_allreduce_*), (n−1)·α' + 2(n−1)/n · S/β'
//   all-to-all      (n−1)·α + (n−1)/n · S/β    (S = the bytes one rank holds)
//   send/recv       α + S/β
// A group that spans nodes (`per_node` members on each of n/per_node nodes)
// runs hierarchically, each level on its own link — all-gather: first over
// the nodes (per_node rings in parallel, one per NIC rail, each moving S/per_node),
// then inside each node (the whole S); reduce-scatter the mirror image;
// all-to-all sends the share for other nodes over the network and the rest
// over NVLink at the same time (the slower bounds it). A group with one
// member per node is a flat ring on the network.
// Pure; thread-safe.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "plan/cluster.h"

namespace gtp::plan {

enum class Collective { kAllGather, kReduceScatter, kAllReduce, kAllToAll, kSendRecv };
const char* CollectiveName(Collective c);

// Flat ring over one link. n = 1 (or S = 0 for the bandwidth term) costs 0.
double FlatTime(Collective c, double bytes, int n, const Link& link);

// Where a group's members sit.
struct Placement {
  int size = 1;      // members
  int per_node = 1;  // members on each node (size when the group fits one node)
};

// The placement of a group of `size` ranks whose neighbours are `stride`
// world ranks apart (the product of the faster axes' sizes in the rank
// order, parallel/rank_generator.h) on nodes of `gpus_per_node`.
Placement Place(int size, int stride, int gpus_per_node);

// Hierarchical time on `cluster` (see the file comment).
double CollectiveTime(Collective c, double bytes, const Placement& p, const Cluster& cluster);

// A link fitted to measured times of a flat-ring collective of `n` ranks:
//   t_i = (n−1)·α + k·(n−1)/n · S_i/β      (S_i = the full buffer, bytes;
//                                           k = 2 for an all-reduce, else 1)
// — linear regression of t on x = k·(n−1)/n · S with intercept (n−1)·α and
// slope 1/β, least squares in time (kTime: unweighted, the large sizes
// dominate) or in relative error (kRelative: Σ (predicted/measured − 1)²,
// every size alike). A negative intercept (the data say "no latency") is
// refitted through the origin (α = 0). The fitted times' residuals are
// reported as relative errors (predicted / measured − 1).
// InvalidArgument: sizes and times of different lengths, fewer than two
// distinct sizes, n < 2, a non-positive or non-finite size or time, or a
// fit with no positive slope (times that do not grow with size).
struct AlphaBetaFit {
  Link link;                   // bandwidth β (bytes/s), latency α (seconds per ring step)
  double max_rel_error = 0;    // max |predicted / measured − 1| over the points
  double rms_rel_error = 0;
};
enum class FitError { kTime, kRelative };
absl::StatusOr<AlphaBetaFit> FitAlphaBeta(const std::vector<double>& bytes, const std::vector<double>& seconds,
                                          int n = 2, Collective c = Collective::kAllGather,
                                          FitError error = FitError::kTime);

}  // namespace gtp::plan
