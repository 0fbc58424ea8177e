// comm/testing/conformance.h — the backend-independent conformance suite.
//
// Every check is a function run on every rank of a communicator; it builds
// each rank's inputs from a deterministic generator (so any rank can compute
// any other rank's input), runs one collective, and compares this rank's
// output element by element with a sequential reference. Reductions use
// inputs whose f32 sums are exact (multiples of 1/8 below 2^8), so every
// summation order gives the same f32 value and the reference is exact; bf16
// and f16 results are that value rounded once, which a backend rounding per
// hop would miss. Backends that promise rank-order reductions (local) are
// also checked with random full-precision f32 against a rank-order sum.
//
// Buffers come from a TestMemory so device backends run the same checks.
// All functions block until the collectives complete; each rank's call must be
// made by that rank's thread/process. Not thread-safe across ranks of one
// communicator beyond the Communicator contract.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "comm/communicator.h"

namespace gtp::comm::testing {

// Where test buffers live. Blocking; thread-safe.
class TestMemory {
 public:
  virtual ~TestMemory() = default;
  virtual void* Alloc(size_t bytes) = 0;
  virtual void Free(void* p) = 0;
  virtual void Upload(void* dst, const void* host_src, size_t bytes) = 0;
  virtual void Download(void* host_dst, const void* src, size_t bytes) = 0;
};

// Plain host memory.
TestMemory& HostMemory();

struct ConformanceOptions {
  TestMemory* memory = nullptr;          // null: HostMemory()
  bool rank_order_reductions = false;    // also check random f32 bit-exactly
  bool large = true;                     // include the 1 MiB+ sizes
};

struct ConformanceCase {
  std::string name;  // e.g. "AllReduce"
  std::function<absl::Status(Communicator&, const ConformanceOptions&)> run;
};

// All checks: AllGather, ReduceScatter, AllReduce (each also in place),
// Broadcast, AllToAll, AllToAllV, SendRecv, Barrier, InFlight (several
// collectives issued before any is waited on, waited in reverse order),
// Split (which reruns small checks of every collective on sub-groups built
// from permuted rank lists).
const std::vector<ConformanceCase>& ConformanceCases();

// Runs every case in order; the first failure is returned with the case
// name prepended.
absl::Status RunConformance(Communicator& comm, const ConformanceOptions& options);

}  // namespace gtp::comm::testing
