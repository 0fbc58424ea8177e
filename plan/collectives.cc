#include "plan/collectives.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

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
  if (nodes == 1) {
    if (c == Collective::kAllReduce && cl.intra_allreduce.bandwidth > 0) {
      // NCCL's all-reduce is one ring kernel, not a reduce-scatter then an all-gather.
      return (a - 1) * cl.intra_allreduce.latency +
             2.0 * (a - 1) / a * bytes / cl.intra_allreduce.bandwidth;
    }
    return FlatTime(c, bytes, a, cl.intra);
  }
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

absl::StatusOr<AlphaBetaFit> FitAlphaBeta(const std::vector<double>& bytes, const std::vector<double>& seconds,
                                          int n, Collective c, FitError error) {
  if (bytes.size() != seconds.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("FitAlphaBeta: ", bytes.size(), " sizes but ", seconds.size(), " times"));
  }
  if (n < 2) return absl::InvalidArgumentError(absl::StrCat("FitAlphaBeta: n = ", n, " ranks; a ring needs n >= 2"));
  if (c == Collective::kSendRecv) return absl::InvalidArgumentError("FitAlphaBeta: a ring collective, not send/recv");
  for (size_t i = 0; i < bytes.size(); ++i) {
    if (!(bytes[i] > 0) || !(seconds[i] > 0) || !std::isfinite(bytes[i]) || !std::isfinite(seconds[i])) {
      return absl::InvalidArgumentError(absl::StrCat("FitAlphaBeta: point ", i, " (", bytes[i], " bytes, ", seconds[i],
                                                     " s) must be positive and finite"));
    }
  }
  const double share = (c == Collective::kAllReduce ? 2.0 : 1.0) * (n - 1) / n;
  // Weighted least squares of t on x: weight 1 (time) or 1/t² (relative error).
  auto w = [&](size_t i) { return error == FitError::kRelative ? 1 / (seconds[i] * seconds[i]) : 1.0; };
  double sw = 0, mx = 0, my = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    sw += w(i);
    mx += w(i) * share * bytes[i];
    my += w(i) * seconds[i];
  }
  mx /= sw;
  my /= sw;
  double sxx = 0, sxy = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    const double dx = share * bytes[i] - mx;
    sxx += w(i) * dx * dx;
    sxy += w(i) * dx * (seconds[i] - my);
  }
  if (bytes.size() < 2 || !(sxx > 0)) {
    return absl::InvalidArgumentError("FitAlphaBeta: needs at least two distinct sizes");
  }
  double slope = sxy / sxx, intercept = my - slope * mx;
  if (intercept < 0) {  // through the origin: slope = Σ w·x·t / Σ w·x²
    double xt = 0, xx = 0;
    for (size_t i = 0; i < bytes.size(); ++i) {
      xt += w(i) * share * bytes[i] * seconds[i];
      xx += w(i) * share * bytes[i] * share * bytes[i];
    }
    slope = xt / xx;
    intercept = 0;
  }
  if (!(slope > 0)) {
    return absl::InvalidArgumentError("FitAlphaBeta: the times do not grow with the size (no positive bandwidth)");
  }
  AlphaBetaFit fit;
  fit.link = {1 / slope, intercept / (n - 1)};
  double sq = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    const double e = (intercept + slope * share * bytes[i]) / seconds[i] - 1;
    fit.max_rel_error = std::max(fit.max_rel_error, std::abs(e));
    sq += e * e;
  }
  fit.rms_rel_error = std::sqrt(sq / static_cast<double>(bytes.size()));
  return fit;
}

}  // namespace gtp::plan
