// layers/tp_comm.h — the activation collectives of tensor and sequence
// parallelism, along dim 0 (rows, N = B·T) over a group, usually TP:
// sequence-parallel gather (N_tp → N rows), reduce-scatter (N → N_tp rows,
// summed) and the TP all-reduce (sum, in place). The parallel linears use
// them at the edges of the TP region; so do the layers that enter or leave
// that region themselves (attention, MoE, Mamba, the embedding and head).
//
// All block until the collective is done and return absl::Status (a peer's
// failure, or rows not divisible by the group size). Size-1 groups return
// the input unchanged.
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "comm/communicator.h"
#include "core/kernels/ops.h"
#include "core/tensor.h"

namespace gtp::layers {

// x[N_g, ...] on every rank → [group.size() · N_g, ...], ranks in group order.
absl::StatusOr<Tensor> AllGatherRows(const kernels::Exec& e, comm::Communicator& group,
                                     const Tensor& x);
// x[N, ...] summed over the group → this rank's rows [N / group.size(), ...].
absl::StatusOr<Tensor> ReduceScatterRows(const kernels::Exec& e, comm::Communicator& group,
                                         const Tensor& x);
// x summed over the group, in place.
absl::Status AllReduceSum(comm::Communicator& group, const Tensor& x);

}  // namespace gtp::layers
