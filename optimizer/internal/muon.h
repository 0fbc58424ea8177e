// optimizer/internal/muon.h — Muon's layer-wise distributed update (the
// algorithm and its modes are described in optimizer/optimizer.h).
//
// Layout exchange: at creation every rank all-gathers, over tp, each Muon
// matrix's TP-local geometry (rows, cols, col_offset and row_map of every
// TP-local row), compressed into runs of consecutive rows, so any rank can
// place every TP rank's block in the global matrix. The GTP part needs no
// exchange: GTP rank g holds TP-local rows [g·shard_rows, (g+1)·shard_rows).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
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

  // Updates the owned matrices from the finished (all-reduced) gradients
  // with learning rate `lr`, then broadcasts every matrix from its owner over
  // the replicate group. Collective over gtp/tp (duplicated mode) and
  // replicate; blocks.
  absl::Status Step(const GradBuffer& grads, float lr);

  std::vector<MuonMatrixInfo> matrices() const;
  int64_t newton_schulz_calls() const { return ns_calls_; }
  void AppendState(const GradBuffer& grads, std::vector<StateTensor>* out) const;
  int64_t state_bytes() const;

 private:
  // Consecutive TP-local rows [local, local + len) at global rows [global, ...).
  struct Run {
    int64_t local, global, len;
  };
  struct Matrix {
    int param;
    MuonMatrixInfo info;
    int64_t rows, cols;  // TP-local
    float scale;
    int blocks = 1;  // matrices stacked along rows, orthogonalised one by one
    std::vector<std::vector<Run>> runs;  // per TP rank
    std::vector<int64_t> col_offset;     // per TP rank
    Tensor momentum;  // [shard_rows, cols], owner replica only
    Tensor master;    // f32 copy for non-f32 params, owner replica only
  };
  // One owned matrix between its momentum update and its parameter update,
  // with the collectives of kDuplicated mode in flight.
  struct InFlight {
    const Matrix* m = nullptr;
    Tensor u, update;
    Tensor full;    // GTP > 1: the GTP gather's output, TP-local [padded_rows, cols]
    Tensor blocks;  // TP > 1: the TP gather's output, [TP·rows, cols]
    Tensor X;       // the orthogonalised global [M, N]
    comm::WorkPtr gtp_gather, tp_gather;  // null when not issued (or one rank)
    comm::WorkPtr gtp_bcast, tp_bcast;    // X's broadcasts; null likewise
  };
  // Momentum update and u; issues the GTP gather of u. Never waits.
  absl::StatusOr<InFlight> Begin(const GradBuffer& grads, const Matrix& m);
  // Waits for the GTP gather and issues the TP gather of the TP-local rows.
  absl::Status GatherTp(const GradBuffer& grads, InFlight& f);
  // Waits for the TP gather; the NS rank orthogonalises and the result's
  // broadcasts are issued (over GTP from the NS rank, then over TP: a rank
  // of the NS rank's TP row that is not the GTP root waits for the GTP
  // broadcast before forwarding). kBlockwise: Newton–Schulz of the rows.
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
