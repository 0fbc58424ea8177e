#include "parallel/rank_generator.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/status.h"

namespace gtp::parallel {

const char* AxisName(Axis axis) {
  switch (axis) {
    case Axis::kTp: return "tp";
    case Axis::kGtp: return "gtp";
    case Axis::kCp: return "cp";
    case Axis::kEp: return "ep";
    case Axis::kDp: return "dp";
    case Axis::kPp: return "pp";
  }
  return "?";
}

absl::StatusOr<Axis> ParseAxis(absl::string_view name) {
  for (Axis a : kAllAxes) {
    if (name == AxisName(a)) return a;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown axis '", name, "' (known axes: tp, gtp, cp, ep, dp, pp)"));
}

int AxisValues::Get(Axis axis) const {
  switch (axis) {
    case Axis::kTp: return tp;
    case Axis::kGtp: return gtp;
    case Axis::kCp: return cp;
    case Axis::kEp: return ep;
    case Axis::kDp: return dp;
    case Axis::kPp: return pp;
  }
  GTP_CHECK(false, "bad axis");
  return 0;
}

void AxisValues::Set(Axis axis, int value) {
  switch (axis) {
    case Axis::kTp: tp = value; return;
    case Axis::kGtp: gtp = value; return;
    case Axis::kCp: cp = value; return;
    case Axis::kEp: ep = value; return;
    case Axis::kDp: dp = value; return;
    case Axis::kPp: pp = value; return;
  }
  GTP_CHECK(false, "bad axis");
}

int AxisValues::Product() const { return tp * gtp * cp * ep * dp * pp; }

std::string AxisValues::ToString() const {
  return absl::StrCat("tp=", tp, " gtp=", gtp, " cp=", cp, " ep=", ep, " dp=", dp, " pp=", pp);
}

bool operator==(const AxisValues& a, const AxisValues& b) {
  for (Axis x : kAllAxes) {
    if (a.Get(x) != b.Get(x)) return false;
  }
  return true;
}

absl::StatusOr<std::vector<Axis>> ParseAxisList(absl::string_view list, absl::string_view what) {
  std::vector<Axis> axes;
  if (list.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("empty ", what, " (expected axes joined by '-', e.g. \"tp-gtp\")"));
  }
  for (absl::string_view token : absl::StrSplit(list, '-')) {
    if (token.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("empty axis name in ", what, " '", list, "' (stray '-')"));
    }
    absl::StatusOr<Axis> axis = ParseAxis(token);
    if (!axis.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " '", list, "': ", axis.status().message()));
    }
    if (std::find(axes.begin(), axes.end(), *axis) != axes.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " '", list, "': axis '", token, "' appears more than once"));
    }
    axes.push_back(*axis);
  }
  return axes;
}

absl::StatusOr<RankGenerator> RankGenerator::Create(const AxisValues& sizes,
                                                    absl::string_view order, int offset) {
  for (Axis a : kAllAxes) {
    if (sizes.Get(a) < 1) {
      return absl::InvalidArgumentError(absl::StrCat("axis '", AxisName(a), "' has size ",
                                                     sizes.Get(a), " (sizes must be >= 1)"));
    }
  }
  if (offset < 0) {
    return absl::InvalidArgumentError(absl::StrCat("grid offset ", offset, " is negative"));
  }
  GTP_ASSIGN_OR_RETURN(std::vector<Axis> listed, ParseAxisList(order, "order"));
  RankGenerator g;
  g.sizes_ = sizes;
  g.offset_ = offset;
  g.order_ = listed;
  for (Axis a : kAllAxes) {
    if (std::find(listed.begin(), listed.end(), a) != listed.end()) continue;
    if (sizes.Get(a) > 1) {
      return absl::InvalidArgumentError(absl::StrCat("axis '", AxisName(a), "' has size ",
                                                     sizes.Get(a), " but is missing from order '",
                                                     order, "' (add it to the order string)"));
    }
    g.order_.push_back(a);  // size 1: position is irrelevant
  }
  int stride = 1;
  for (Axis a : g.order_) {
    g.strides_[static_cast<int>(a)] = stride;
    stride *= sizes.Get(a);
  }
  g.world_size_ = stride;
  return g;
}

std::string RankGenerator::OrderString() const {
  std::vector<std::string> names;
  for (Axis a : order_) names.push_back(AxisName(a));
  return absl::StrJoin(names, "-");
}

std::vector<std::vector<int>> RankGenerator::GetRanks(const std::vector<Axis>& axes) const {
  // Split the order into the group's axes (inner) and the rest (outer), both
  // keeping the order's fastest-first sequence.
  std::vector<Axis> inner, outer;
  for (Axis a : order_) {
    bool in = std::find(axes.begin(), axes.end(), a) != axes.end();
    (in ? inner : outer).push_back(a);
  }
  auto count = [&](const std::vector<Axis>& v) {
    int n = 1;
    for (Axis a : v) n *= sizes_.Get(a);
    return n;
  };
  // Base rank (offset excluded) of the index-th combination of `v`'s coordinates.
  auto base = [&](const std::vector<Axis>& v, int index) {
    int r = 0;
    for (Axis a : v) {
      int s = sizes_.Get(a);
      r += (index % s) * strides_[static_cast<int>(a)];
      index /= s;
    }
    return r;
  };
  const int group_size = count(inner), num_groups = count(outer);
  std::vector<std::vector<int>> groups(num_groups);
  for (int g = 0; g < num_groups; ++g) {
    const int outer_base = offset_ + base(outer, g);
    groups[g].reserve(group_size);
    for (int m = 0; m < group_size; ++m) groups[g].push_back(outer_base + base(inner, m));
  }
  return groups;
}

absl::StatusOr<std::vector<std::vector<int>>> RankGenerator::GetRanks(
    absl::string_view axes) const {
  GTP_ASSIGN_OR_RETURN(std::vector<Axis> parsed, ParseAxisList(axes, "group axes"));
  return GetRanks(parsed);
}

absl::StatusOr<std::vector<int>> RankGenerator::GroupOf(int rank, absl::string_view axes) const {
  GTP_ASSIGN_OR_RETURN(std::vector<Axis> parsed, ParseAxisList(axes, "group axes"));
  GTP_ASSIGN_OR_RETURN(AxisValues c, Coordinates(rank));
  // Zero the group's coordinates to get its first member, then walk its axes.
  std::vector<Axis> inner;
  for (Axis a : order_) {
    if (std::find(parsed.begin(), parsed.end(), a) != parsed.end()) {
      inner.push_back(a);
      c.Set(a, 0);
    }
  }
  int first = Rank(c).value();
  int n = 1;
  for (Axis a : inner) n *= sizes_.Get(a);
  std::vector<int> members;
  members.reserve(n);
  for (int m = 0; m < n; ++m) {
    int r = first, index = m;
    for (Axis a : inner) {
      int s = sizes_.Get(a);
      r += (index % s) * strides_[static_cast<int>(a)];
      index /= s;
    }
    members.push_back(r);
  }
  return members;
}

AxisValues RankGenerator::CoordinatesUnchecked(int rank) const {
  AxisValues c;
  const int local = rank - offset_;
  for (Axis a : kAllAxes) {
    c.Set(a, (local / strides_[static_cast<int>(a)]) % sizes_.Get(a));
  }
  return c;
}

absl::StatusOr<AxisValues> RankGenerator::Coordinates(int rank) const {
  if (!Contains(rank)) {
    return absl::OutOfRangeError(absl::StrCat("rank ", rank, " is outside the grid [", offset_,
                                              ", ", offset_ + world_size_, ")"));
  }
  return CoordinatesUnchecked(rank);
}

absl::StatusOr<int> RankGenerator::Rank(const AxisValues& coords) const {
  int r = offset_;
  for (Axis a : kAllAxes) {
    int c = coords.Get(a);
    if (c < 0 || c >= sizes_.Get(a)) {
      return absl::OutOfRangeError(
          absl::StrCat("coordinate ", AxisName(a), "=", c, " is outside [0, ", sizes_.Get(a), ")"));
    }
    r += c * strides_[static_cast<int>(a)];
  }
  return r;
}

}  // namespace gtp::parallel
