// tools/topology/topology.h — prints a parallel config's full rank grid.
//
// The library behind //tools/topology:topology. For a ParallelConfig it
// prints the resolved degrees, every rank's coordinates on the dense and the
// expert grid, and every standard process group (parallel/process_groups.h);
// or, when the config is invalid, each problem ParallelConfig::Validate
// finds. Pure: no communication; thread-safe.
#pragma once

#include <ostream>

#include "parallel/parallel_config.h"

namespace gtp::tools {

// Writes the report for `config` on the grid starting at world rank `offset`
// to `out`. Returns false (after listing the problems) when the config is
// invalid.
bool PrintTopology(const parallel::ParallelConfig& config, const parallel::ModelFacts& facts,
                   int offset, std::ostream& out);

}  // namespace gtp::tools
