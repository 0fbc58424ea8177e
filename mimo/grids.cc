#include "mimo/grids.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"

namespace gtp::mimo {
namespace {

std::string Range(const parallel::HyperCommGrid& g) {
  return absl::StrCat(g.name(), " [", g.offset(), ", ", g.offset() + g.size(), ")");
}

std::string Ranks(int first, int last) {
  return first == last ? absl::StrCat("rank ", first, " belongs")
                       : absl::StrCat("ranks ", first, "..", last, " belong");
}

}  // namespace

bool IsColocated(const std::vector<const parallel::HyperCommGrid*>& grids) {
  if (grids.size() < 2) return false;
  for (const parallel::HyperCommGrid* g : grids) {
    if (g == nullptr || g->offset() != grids[0]->offset() || g->size() != grids[0]->size()) {
      return false;
    }
  }
  return true;
}

absl::Status ValidateModuleGrids(const std::vector<const parallel::HyperCommGrid*>& grids,
                                 int world_size) {
  if (grids.empty()) return absl::InvalidArgumentError("no module grids given");
  for (size_t i = 0; i < grids.size(); ++i) {
    if (grids[i] == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("module grid ", i, " is null"));
    }
    if (grids[i]->offset() + grids[i]->size() > world_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "grid ", Range(*grids[i]), " extends past the world of ", world_size, " ranks"));
    }
  }
  std::vector<const parallel::HyperCommGrid*> sorted = grids;
  if (!IsColocated(grids)) {
    // Sorted by offset, any overlap shows up between neighbours.
    std::stable_sort(sorted.begin(), sorted.end(),
                     [](const auto* a, const auto* b) { return a->offset() < b->offset(); });
    for (size_t i = 1; i < sorted.size(); ++i) {
      const parallel::HyperCommGrid& a = *sorted[i - 1];
      const parallel::HyperCommGrid& b = *sorted[i];
      const int end = std::min(a.offset() + a.size(), b.offset() + b.size());
      if (b.offset() < a.offset() + a.size()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "grids ", Range(a), " and ", Range(b), " overlap on ranks ", b.offset(), "..", end - 1,
            " (module grids must be pairwise disjoint, or all identical to colocate)"));
      }
    }
  } else {
    sorted.resize(1);
  }
  int covered = 0;  // ranks [0, covered) belong to a grid
  for (const parallel::HyperCommGrid* g : sorted) {
    if (g->offset() > covered) {
      return absl::InvalidArgumentError(
          absl::StrCat(Ranks(covered, g->offset() - 1), " to no module grid"));
    }
    covered = g->offset() + g->size();
  }
  if (covered < world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat(Ranks(covered, world_size - 1), " to no module grid"));
  }
  return absl::OkStatus();
}

}  // namespace gtp::mimo
