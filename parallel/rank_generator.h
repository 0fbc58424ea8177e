// parallel/rank_generator.h — rank grids from degrees and an order string.
//
// A grid has six named axes (tp, gtp, cp, ep, dp, pp) with sizes whose
// product is the grid's world. The order string lists axes fastest-varying
// first (Megatron-LM's convention, DESIGN.md §3): with sizes s_0, s_1, … in
// that order and coordinates c_i,
//
//   rank = offset + Σ c_i · Π_{j<i} s_j
//
// A group over a subset of axes holds the ranks that agree on every other
// coordinate; its members are ordered by the subset's coordinates, the axis
// listed first in the order string varying fastest. Groups are listed in the
// same way over the remaining coordinates, so the group of rank `offset`
// comes first.
//
//   AxisValues sizes;
//   sizes.tp = 2; sizes.gtp = 2; sizes.dp = 2;
//   GTP_ASSIGN_OR_RETURN(RankGenerator g, RankGenerator::Create(sizes, "tp-gtp-cp-ep-dp-pp"));
//   g.GetRanks("tp")      -> {{0,1},{2,3},{4,5},{6,7}}
//   g.GetRanks("gtp-dp")  -> {{0,2,4,6},{1,3,5,7}}
//
// The same class serves the expert grid, whose axes are named like the dense
// ones: there "tp" is ETP, "gtp" is EGTP, "dp" is EDP and cp is 1
// (ParallelConfig::ExpertGrid builds it).
//
// Axes of size 1 may be left out of the order string (they are appended);
// an axis of size > 1 may not. A RankGenerator is immutable: all methods are
// const, non-blocking and thread-safe. Functions that can fail on user input
// (order strings, axis lists, ranks) return Status.
#pragma once

#include <array>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace gtp::parallel {

// The axes of a grid. On the expert grid kTp is ETP, kGtp is EGTP and kDp EDP.
enum class Axis { kTp = 0, kGtp = 1, kCp = 2, kEp = 3, kDp = 4, kPp = 5 };
inline constexpr int kNumAxes = 6;

// Every axis in enum order.
inline constexpr std::array<Axis, kNumAxes> kAllAxes = {Axis::kTp, Axis::kGtp, Axis::kCp,
                                                        Axis::kEp, Axis::kDp,  Axis::kPp};

// "tp", "gtp", "cp", "ep", "dp", "pp".
const char* AxisName(Axis axis);

// Parses one axis name; InvalidArgument naming the known axes otherwise.
absl::StatusOr<Axis> ParseAxis(absl::string_view name);

// One integer per axis: the sizes of a grid, or the coordinates of a rank.
struct AxisValues {
  int tp = 1;
  int gtp = 1;
  int cp = 1;
  int ep = 1;
  int dp = 1;
  int pp = 1;

  int Get(Axis axis) const;
  void Set(Axis axis, int value);
  // tp·gtp·cp·ep·dp·pp.
  int Product() const;
  // "tp=2 gtp=2 cp=1 ep=1 dp=2 pp=1".
  std::string ToString() const;
  friend bool operator==(const AxisValues& a, const AxisValues& b);
  friend bool operator!=(const AxisValues& a, const AxisValues& b) { return !(a == b); }
};

// Parses a '-'-separated list of distinct axis names ("tp-gtp"). Errors name
// the offending token and `what` (e.g. "order", "group axes").
absl::StatusOr<std::vector<Axis>> ParseAxisList(absl::string_view list, absl::string_view what);

class RankGenerator {
 public:
  // Builds a grid of `sizes` (each >= 1) laid out by `order` starting at
  // world rank `offset` (>= 0). InvalidArgument on a size < 1, an unknown or
  // repeated axis, or an axis of size > 1 missing from `order`.
  static absl::StatusOr<RankGenerator> Create(const AxisValues& sizes, absl::string_view order,
                                              int offset = 0);

  // Number of ranks in the grid (product of the sizes).
  int world_size() const { return world_size_; }
  // First world rank of the grid.
  int offset() const { return offset_; }
  const AxisValues& sizes() const { return sizes_; }
  // The full order, fastest first, including appended size-1 axes.
  const std::vector<Axis>& order() const { return order_; }
  // The full order as a string, e.g. "tp-gtp-cp-ep-dp-pp".
  std::string OrderString() const;
  // Distance in ranks between neighbours along `axis`.
  int Stride(Axis axis) const { return strides_[static_cast<int>(axis)]; }

  // True when offset <= rank < offset + world_size.
  bool Contains(int rank) const { return rank >= offset_ && rank < offset_ + world_size_; }

  // Every group over the axes of `axes` ("tp-gtp"; token order does not
  // matter), as lists of world ranks. The groups partition the grid.
  absl::StatusOr<std::vector<std::vector<int>>> GetRanks(absl::string_view axes) const;
  // Same for an already parsed axis set (duplicates are ignored).
  std::vector<std::vector<int>> GetRanks(const std::vector<Axis>& axes) const;

  // The group over `axes` that holds `rank`; OutOfRange when the grid does
  // not contain `rank`.
  absl::StatusOr<std::vector<int>> GroupOf(int rank, absl::string_view axes) const;

  // Coordinates of `rank`; OutOfRange when the grid does not contain it.
  absl::StatusOr<AxisValues> Coordinates(int rank) const;
  // The world rank at `coords`; OutOfRange when a coordinate is outside its axis.
  absl::StatusOr<int> Rank(const AxisValues& coords) const;

 private:
  RankGenerator() = default;
  AxisValues CoordinatesUnchecked(int rank) const;

  AxisValues sizes_;
  std::vector<Axis> order_;
  std::array<int, kNumAxes> strides_{};
  int offset_ = 0;
  int world_size_ = 1;
};

}  // namespace gtp::parallel
