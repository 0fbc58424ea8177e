// optimizer/internal/muon.h — Muon's layer-wise distributed update (the
// algorithm and its modes are described in optimizer/optimizer.h).
//
// Layout exchange: at creation every rank all-gathers, over tp, each Muon
// matrix's TP-local geometry (rows, cols, col_offset and row_map of every
// TP-local row), compressed into runs of consecutive rows, so any rank can
// place every TP rank's block in the global matrix. The GTP part needs no
// exchange: GTP rank g holds TP-local rows [g·shard_rows, (g+1)·shard_rows).
//
// Units: kDuplicated balances one unit per matrix Newton–Schulz sees — a
// param, or each block of a stacked param (ShardedParam::matrix_blocks, MoE
// experts) — so a stack's blocks get owners of their own. A rank keeps the
// momentum (and master) of the rows of its shard whose block its replica
// owns, packed; pad rows go with the last valid row's block. kBlockwise
// orthogonalises a rank's whole shard, so a stack stays one unit there.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "comm/communicator.h"
#include "core/kernels/ops.h"
#include "optimizer/grad_buffer.h"
#include "optimizer/optimizer.h"

namespace gtp::optimizer::internal {

class MuonUpdater {
 public:
  // `params`: GradBuffer param indices, all sharded. Collective over tp and
  // gtp (layout exchange); blocks.
  static absl::StatusOr<std::unique_ptr<MuonUpdater>> Create(const GradBuffer& grads,
                                                             const std::vector<int>& params,
                                                             const kernels::Exec& exec,
                                                             const MuonConfig& config);

  // Updates the owned units from the finished (all-reduced) gradients with
  // learning rate `lr`, then broadcasts every unit's rows from its owner
  // over the replicate group. Collective over gtp/tp (duplicated mode) and
  // replicate; blocks.
  absl::Status Step(const GradBuffer& grads, float lr);

  // One entry per unit (a stack's blocks as "<param>[b]"), params in order.
  std::vector<MuonMatrixInfo> matrices() const;
  int64_t newton_schulz_calls() const { return ns_calls_; }
  void AppendState(const GradBuffer& grads, std::vector<StateTensor>* out) const;
  int64_t state_bytes() const;

 private:
  // Consecutive TP-local rows [local, local + len) at global rows [global,
  // ...), all in one block.
  struct Run {
    int64_t local, global, len;
  };
  // Shard rows [row, row + len) whose unit(s) replicate rank `owner` owns;
  // on that replica, rows [state_row, ...) of momentum and master (else -1).
  struct Segment {
    int64_t row, len;
    int owner;
    int64_t state_row;
  };
  struct Matrix {
    int param;
    std::string name;
    int64_t M, N;        // global dims of the whole param (the stack)
    int64_t rows, cols;  // TP-local
    float scale;
    int blocks = 1;      // matrices stacked along rows, each [M / blocks, N]
    int64_t block_rows;  // M / blocks
    // kDuplicated: one per block; kBlockwise: one.
    std::vector<MuonMatrixInfo> units;
    bool owned = false;                  // this replica owns at least one unit
    bool whole = false;                  // ... and one segment holds this rank's whole shard
    std::vector<std::vector<Run>> runs;  // per TP rank
    std::vector<int64_t> col_offset;     // per TP rank
    std::vector<Segment> segments;       // this rank's shard, in row order
    Tensor momentum;                     // [owned shard rows, cols], packed by segment
    Tensor master;                       // f32 copy of those rows for non-f32 params
    const MuonMatrixInfo& unit_of_row(int64_t global_row) const {
      return units.size() == 1 ? units[0] : units[global_row / block_rows];
    }
  };
  // One matrix with an owned unit between its momentum update and its
  // parameter update, with the collectives of kDuplicated mode in flight.
  struct InFlight {
    const Matrix* m = nullptr;
    Tensor u, update;
    Tensor full;    // GTP > 1: the GTP gather's output, TP-local [padded_rows, cols]
    Tensor blocks;  // TP > 1: the TP gather's output, [TP·rows, cols]
    Tensor X;       // the orthogonalised global [M, N] (rows of owned units)
    comm::WorkPtr gtp_gather, tp_gather;  // null when not issued (or one rank)
    // X's broadcasts (per owned unit) and their groups.
    std::vector<std::pair<comm::WorkPtr, comm::Communicator*>> bcasts;
  };
  // Momentum update and u; issues the GTP gather of u. Never waits.
  absl::StatusOr<InFlight> Begin(const GradBuffer& grads, const Matrix& m);
  // Waits for the GTP gather and issues the TP gather of the TP-local rows.
  absl::Status GatherTp(const GradBuffer& grads, InFlight& f);
  // Waits for the TP gather; unit by unit (owned by this replica), its NS
  // rank orthogonalises it and its rows of X are broadcast (over GTP from
  // the NS rank, then over TP: a rank of the NS rank's TP row that is not
  // the GTP root waits for the GTP broadcast before forwarding).
  // kBlockwise: Newton–Schulz of the rows.
  absl::Status Orthogonalize(const GradBuffer& grads, InFlight& f);
  // Waits for the broadcasts, takes this rank's slice, updates the parameter.
  absl::Status Finish(const GradBuffer& grads, InFlight& f, float lr);
  // Newton–Schulz, counted.
  void RunNewtonSchulz(const Tensor& G, const Tensor& X);

  MuonConfig config_;
  kernels::Exec exec_;
  std::vector<Matrix> matrices_;
  int64_t ns_calls_ = 0;
};

}  // namespace gtp::optimizer::internal
