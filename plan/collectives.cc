#include "plan/collectives.h"

#include <algorithm>

namespace gtp::plan {

const char* CollectiveName(Collective c) {
  switch (c) {
    case Collective::kAllGather: return "all-gather";
    case Collective::kReduceScatter: return "reduce-scatter";
    case Collective::kAllReduce: return "all-reduce";
    case Collective::kAllToAll: return "all-to-all";
    case Collective::kSendRecv: return "send/recv";
  }
  return "?";
}

double FlatTime(Collective c, double bytes, int n, const Link& link) {
  if (c == Collective::kSendRecv) return link.latency + bytes / link.bandwidth;
  if (n <= 1) return 0.0;
  const double steps = n - 1, share = static_cast<double>(n - 1) / n;
  const double one = steps * link.latency + share * bytes / link.bandwidth;
  return c == Collective::kAllReduce ? 2 * one : one;
}

Placement Place(int size, int stride, int gpus_per_node) {
  Placement p;
  p.size = std::max(1, size);
  stride = std::max(1, stride);
  p.per_node = stride >= gpus_per_node ? 1 : std::max(1, std::min(p.size, gpus_per_node / stride));
  return p;
}

double CollectiveTime(Collective c, double bytes, const Placement& p, const Cluster& cl) {
  const int a = std::max(1, p.per_node), nodes = std::max(1, p.size / a);
  if (c == Collective::kSendRecv) return FlatTime(c, bytes, 2, nodes > 1 ? cl.inter : cl.intra);
  if (nodes == 1) return FlatTime(c, bytes, a, cl.intra);
  if (a == 1) return FlatTime(c, bytes, nodes, cl.inter);
  switch (c) {
    case Collective::kAllGather:
    case Collective::kReduceScatter:
      // Between nodes: `a` parallel rings (one per rail), each over S/a; inside: the whole S.
      return FlatTime(c, bytes / a, nodes, cl.inter) + FlatTime(c, bytes, a, cl.intra);
    case Collective::kAllReduce:
      return CollectiveTime(Collective::kReduceScatter, bytes, p, cl) +
             CollectiveTime(Collective::kAllGather, bytes, p, cl);
    case Collective::kAllToAll: {
      // Of S, (n − a)/n leaves the node (network), (a − 1)/n stays (NVLink), at once.
      const double n = p.size;
      const double net = (nodes - 1) * cl.inter.latency + bytes * (n - a) / n / cl.inter.bandwidth;
      const double nvl = (a - 1) * cl.intra.latency + bytes * (a - 1) / n / cl.intra.bandwidth;
      return std::max(net, nvl);
    }
    case Collective::kSendRecv:
      break;
  }
  return 0.0;
}

}  // namespace gtp::plan
