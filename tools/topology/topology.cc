#include "tools/topology/topology.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "parallel/process_groups.h"
#include "parallel/rank_generator.h"

namespace gtp::tools {

using parallel::AxisValues;
using parallel::GridKind;
using parallel::GroupSpec;
using parallel::ParallelConfig;

bool PrintTopology(const ParallelConfig& config, const parallel::ModelFacts& facts, int offset,
                   std::ostream& out) {
  absl::StatusOr<ParallelConfig> r = config.Resolve(0, facts);
  if (!r.ok()) {
    out << "config: " << config.ToString() << "\n";
    std::string msg(r.status().message());
    const std::string prefix = "invalid parallel config: ";
    if (msg.rfind(prefix, 0) == 0) msg = msg.substr(prefix.size());
    for (absl::string_view problem : absl::StrSplit(msg, "; ")) {
      out << "PROBLEM: " << problem << "\n";
    }
    return false;
  }
  out << "config: " << r->ToString() << "\n";
  if (offset != 0)
    out << "grid on world ranks [" << offset << ", " << offset + r->world_size << ")\n";
  auto dense = r->DenseGrid(offset);
  auto expert = r->ExpertGrid(offset);
  auto groups = parallel::StandardGroupRanks(*r, offset);
  if (!dense.ok() || !expert.ok() || !groups.ok()) {  // Resolve already checked these.
    out << "PROBLEM: internal: grids of a resolved config failed\n";
    return false;
  }
  out << "dense grid order " << dense->OrderString() << ", expert grid order "
      << expert->OrderString() << " (expert tp=ETP, gtp=EGTP, dp=EDP)\n\n";

  out << absl::StrFormat("%6s | %4s %4s %4s %4s %4s | %4s %4s %4s %4s %4s\n", "rank", "tp", "gtp",
                         "cp", "dp", "pp", "etp", "ep", "egtp", "edp", "pp");
  for (int rank = offset; rank < offset + r->world_size; ++rank) {
    const AxisValues d = *dense->Coordinates(rank), e = *expert->Coordinates(rank);
    out << absl::StrFormat("%6d | %4d %4d %4d %4d %4d | %4d %4d %4d %4d %4d\n", rank, d.tp, d.gtp,
                           d.cp, d.dp, d.pp, e.tp, e.ep, e.gtp, e.dp, e.pp);
  }

  out << "\ngroups:\n";
  const std::vector<GroupSpec>& specs = parallel::StandardGroupSpecs();
  for (size_t i = 0; i < specs.size(); ++i) {
    const auto& [name, lists] = (*groups)[i];
    const char* grid = specs[i].grid == GridKind::kDense    ? "dense"
                       : specs[i].grid == GridKind::kExpert ? "expert"
                                                            : "ends of";
    std::vector<std::string> parts;
    for (const std::vector<int>& g : lists) {
      parts.push_back(absl::StrCat("[", absl::StrJoin(g, ","), "]"));
    }
    out << absl::StrFormat("  %-9s %-7s %-19s %s\n", name, grid, specs[i].axes, specs[i].purpose);
    out << "            " << lists.size() << " x " << (lists.empty() ? 0 : lists[0].size()) << ": "
        << absl::StrJoin(parts, " ") << "\n";
  }
  for (const auto& [alias, target] : parallel::StandardGroupAliases()) {
    out << absl::StrFormat("  %-9s = %s\n", alias, target);
  }
  return true;
}

}  // namespace gtp::tools
