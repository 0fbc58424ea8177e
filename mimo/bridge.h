// mimo/bridge.h — moves per-sample activations from one module grid to
// another (forward) and their gradients back (backward).
//
// DESIGN.md §7. A grid's data lanes are its (DP, GTP) pairs
// (HyperCommGrid::num_data_lanes()); every lane reads its own samples. The
// bridge joins a source grid (an encoder) with S lanes to a destination grid
// (the language model) with D lanes, one count dividing the other:
//
//   S == D           1:1, lane i -> lane i
//   S == k·D (fan-in)  destination lane i gets source lanes [i·k, (i+1)·k)
//                      concatenated along dim 0, in lane order
//   D == k·S (fan-out) source lane i's samples are split into k equal groups
//                      (its sample count must divide by k); destination lane
//                      i·k + j gets group j
//
// Rows follow samples: a LaneBatch carries the rows of every sample
// concatenated along dim 0 plus each sample's row count, so uneven
// per-sample token counts work in both directions. Backward sends the
// gradient along the same map in reverse (fan-in's backward splits along the
// forward's lane boundaries, fan-out's concatenates).
//
// Disjoint grids (point-to-point over `world`): each lane has a leader on
// each side — on the source its last pipeline stage's tp = cp = 0 rank
// (LaneLeaders(pp - 1)), on the destination its first stage's
// (LaneLeaders(0)). Leaders exchange Send/Recv: a fixed header (sample
// count, row count, dtype, trailing dims) first, then per-sample row counts
// and the payload; every send and receive of a step is posted before any
// wait. The other ranks of the receiving lane (its "tp_cp" group on the
// receiving stage) then get header, counts and payload by Broadcast from the
// leader. CP > 1 on a bridged grid is rejected.
//
// Colocated grids (same offset and size; every rank in both): when every
// receiving rank already holds what it needs, fan-out and 1:1 are a narrow
// (a view of the input, no communication), and fan-in is an AllGather over
// groups the bridge splits off `world` at Create: for each destination lane,
// its receiving ranks bucketed by source lane, one rank from each of the k
// source lanes (padded to the largest part, then compacted, so uneven rows
// work). Standard groups do not fit in general (e.g. encoder DP4 and
// language TP2·DP2 on 4 ranks: the language "tp" group happens to be right;
// with order "dp-tp" no standard group is), so the bridge makes its own.
// When the ranks do not line up (e.g. PP > 1 on one side, or lane orders
// that disagree) a direction falls back to the leader-to-leader path above,
// where a leader that sends to itself copies locally. See forward_mode() /
// backward_mode().
//
//   GTP_ASSIGN_OR_RETURN(mimo::Bridge bridge,
//                        mimo::Bridge::Create("v2l", vision, language, *world, host));
//   GTP_ASSIGN_OR_RETURN(mimo::LaneBatch in, bridge.Forward({encoder_out, rows_per_sample}));
//   ... language forward / backward; grad has in's shape ...
//   GTP_ASSIGN_OR_RETURN(mimo::LaneBatch g, bridge.Backward({grad, in.sample_rows, in.parts}));
//
// Headers and counts are host int64 arrays sent over the same communicators
// as the payload (comm/host_values.h: on NCCL each goes through a small
// device buffer; the payload never leaves the device). Payloads may be any
// dtype the communicator moves (f32, bf16, ...) on the device of `alloc`
// (a GPU allocator when `world` is NCCL); copies run on
// BridgeOptions::cuda_stream, the stream the payloads are produced and used
// on. On NCCL, Create connects the leaders that exchange point-to-point.
//
// Create, Forward and Backward return Status and block; they are collective
// over `world` (every world rank calls them, in the same order, with the
// same grids). A Bridge is used by one thread at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "comm/communicator.h"
#include "comm/host_values.h"
#include "core/allocator.h"
#include "core/tensor.h"
#include "parallel/hyper_comm_grid.h"

namespace gtp::mimo {

// The samples of one data lane (or of a part of one).
struct LaneBatch {
  // [n_rows, ...]: the rows of every sample, concatenated along dim 0 in
  // sample order; contiguous. Undefined on ranks that hold no batch.
  Tensor data;
  // Rows of each sample; sums to data.dim(0).
  std::vector<int64_t> sample_rows;
  // Samples contributed by each lane this batch was assembled from, in lane
  // order (k entries after a fan-in or a fan-out's backward, else one).
  // Ignored on input to Forward; Backward needs the forward output's value
  // to split a fan-in gradient along the same boundaries. Empty = one part.
  std::vector<int64_t> parts;

  int64_t num_samples() const { return static_cast<int64_t>(sample_rows.size()); }
};

struct BridgeOptions {
  // Tags used on `world`: tag_base .. tag_base + 3 (distinct per bridge).
  int tag_base = 0x4d0000;
  // The cudaStream_t payloads are produced and consumed on (device tensors).
  void* cuda_stream = nullptr;
};

class Bridge {
 public:
  // How one direction moves data.
  enum class Mode {
    kP2P,     // leaders Send/Recv over world, then Broadcast in tp_cp
    kNarrow,  // colocated: every receiver takes a slice of its own input
    kGather,  // colocated: AllGather inside bridge-made groups
  };

  // Validates the pair and builds the bridge from `source` (e.g. the
  // encoder) to `destination` (the language model). InvalidArgument when
  // the grids partly overlap, when neither lane count divides the other
  // (naming both), or when a disjoint grid has CP > 1. Collective over
  // `world` (it may Split); blocks. The grids, `world` and `alloc` (where
  // outputs are allocated) must outlive the bridge.
  static absl::StatusOr<Bridge> Create(const std::string& name,
                                       const parallel::HyperCommGrid& source,
                                       const parallel::HyperCommGrid& destination,
                                       comm::Communicator& world, Allocator& alloc,
                                       const BridgeOptions& options = {});

  Bridge(Bridge&&) = default;
  Bridge& operator=(Bridge&&) = default;
  ~Bridge();

  // Source-lane batch in -> destination-lane batch out. `input` matters on
  // the source grid's last pipeline stage (every rank of a lane passes that
  // lane's batch; other ranks pass {}). Returns the destination lane's batch
  // on the destination's first stage, an empty LaneBatch elsewhere.
  // InvalidArgument for a malformed input, or in fan-out when a lane's
  // sample count does not divide by k (on that lane's and its receivers'
  // ranks). Collective over world; blocks.
  absl::StatusOr<LaneBatch> Forward(const LaneBatch& input);

  // Destination-lane gradient in (Forward's output shape, sample_rows and
  // parts, on the destination's first stage) -> the source lane's gradient
  // on the source's last stage, rows in the order Forward took them.
  // Collective over world; blocks.
  absl::StatusOr<LaneBatch> Backward(const LaneBatch& grad);

  const std::string& name() const { return name_; }
  bool colocated() const { return colocated_; }
  int num_source_lanes() const { return source_->num_data_lanes(); }
  int num_destination_lanes() const { return destination_->num_data_lanes(); }
  // Leader of each source lane (last stage) / destination lane (first
  // stage), as world ranks.
  const std::vector<int>& source_leaders() const { return source_leaders_; }
  const std::vector<int>& destination_leaders() const { return destination_leaders_; }
  // Source lanes feeding destination lane `lane` in fan-in / 1:1 (k of
  // them); in fan-out the single source lane it takes a group of.
  std::vector<int> SourceLanesOf(int lane) const;
  Mode forward_mode() const { return forward_.mode; }
  Mode backward_mode() const { return backward_.mode; }

  static constexpr int kDefaultTagBase = BridgeOptions().tag_base;

 private:
  // One side of one direction.
  struct Side {
    const parallel::HyperCommGrid* grid = nullptr;
    int stage = 0;             // the pipeline stage holding / receiving the batch
    std::vector<int> leaders;  // world rank of each lane's leader at `stage`
  };
  // One direction: `from` lanes -> `to` lanes.
  struct Route {
    Side from, to;
    Mode mode = Mode::kP2P;
    int tag = 0;
    // kGather: this rank's group (null when it receives nothing).
    std::unique_ptr<comm::Communicator> gather;
  };

  Bridge() = default;
  static absl::Status PlanColocated(const std::string& name, comm::Communicator& world,
                                    Route& route);
  absl::StatusOr<LaneBatch> Move(Route& route, const LaneBatch& input);
  absl::StatusOr<LaneBatch> MoveP2P(Route& route, const LaneBatch& input);
  absl::StatusOr<LaneBatch> MoveNarrow(Route& route, const LaneBatch& input);
  absl::StatusOr<LaneBatch> MoveGather(Route& route, const LaneBatch& input);
  absl::Status BroadcastInLane(const Side& to, bool ok, LaneBatch& out);
  comm::Staging staging() const { return {alloc_, stream_}; }

  std::string name_;
  const parallel::HyperCommGrid* source_ = nullptr;
  const parallel::HyperCommGrid* destination_ = nullptr;
  comm::Communicator* world_ = nullptr;
  Allocator* alloc_ = nullptr;
  void* stream_ = nullptr;
  bool colocated_ = false;
  std::vector<int> source_leaders_, destination_leaders_;
  Route forward_, backward_;
};

const char* BridgeModeName(Bridge::Mode mode);

}  // namespace gtp::mimo
