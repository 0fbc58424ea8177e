#include "parallel/rng.h"

#include <initializer_list>
#include <string_view>
#include <utility>

#include "core/philox.h"
#include "core/status.h"

namespace gtp::parallel {
namespace {

// Mixes (axis tag, coordinate) pairs into a stream's base key in a fixed
// order; the tag keeps e.g. (tp=1, pp=0) apart from (tp=0, pp=1).
uint64_t StreamKey(uint64_t seed, std::string_view stream,
                   std::initializer_list<std::pair<Axis, int>> coords, bool expert = false) {
  uint64_t key = KeyFromName(stream, seed);
  for (const auto& [axis, c] : coords) {
    const uint64_t tag = static_cast<uint64_t>(axis) + (expert ? 16 : 0) + 1;
    key = MixKey(key, (tag << 32) | static_cast<uint32_t>(c));
  }
  return key;
}

}  // namespace

RngStreams MakeRngStreams(uint64_t seed, const AxisValues& d, const AxisValues& e) {
  RngStreams s;
  s.global = StreamKey(seed, "gtp.rng.global", {});
  s.model_parallel =
      StreamKey(seed, "gtp.rng.model_parallel", {{Axis::kTp, d.tp}, {Axis::kPp, d.pp}});
  s.expert_model_parallel = StreamKey(seed, "gtp.rng.expert_model_parallel",
                                      {{Axis::kTp, e.tp}, {Axis::kEp, e.ep}, {Axis::kPp, e.pp}},
                                      /*expert=*/true);
  s.data = StreamKey(seed, "gtp.rng.data", {{Axis::kDp, d.dp}, {Axis::kGtp, d.gtp}});
  s.activation =
      StreamKey(seed, "gtp.rng.activation",
                {{Axis::kDp, d.dp}, {Axis::kGtp, d.gtp}, {Axis::kCp, d.cp}, {Axis::kPp, d.pp}});
  s.tp_activation = StreamKey(seed, "gtp.rng.tp_activation",
                              {{Axis::kDp, d.dp},
                               {Axis::kGtp, d.gtp},
                               {Axis::kCp, d.cp},
                               {Axis::kPp, d.pp},
                               {Axis::kTp, d.tp}});
  return s;
}

absl::StatusOr<RngStreams> RngStreamsFromGroups(uint64_t seed, const ProcessGroupCollection& pgs) {
  AxisValues d, e;
  GTP_ASSIGN_OR_RETURN(d.tp, pgs.RankIn(groups::kTp));
  GTP_ASSIGN_OR_RETURN(d.gtp, pgs.RankIn(groups::kGtp));
  GTP_ASSIGN_OR_RETURN(d.cp, pgs.RankIn(groups::kCp));
  GTP_ASSIGN_OR_RETURN(d.dp, pgs.RankIn(groups::kDp));
  GTP_ASSIGN_OR_RETURN(d.pp, pgs.RankIn(groups::kPp));
  d.ep = 0;
  GTP_ASSIGN_OR_RETURN(e.tp, pgs.RankIn(groups::kEtp));
  GTP_ASSIGN_OR_RETURN(e.ep, pgs.RankIn(groups::kEp));
  e.pp = d.pp;
  e.gtp = e.cp = e.dp = 0;  // unused by the expert stream
  return MakeRngStreams(seed, d, e);
}

}  // namespace gtp::parallel
