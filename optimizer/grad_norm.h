// optimizer/grad_norm.h — the global gradient norm and clipping (DESIGN.md §5).
//
// After GradBuffer::FinishGradSync every element of the model's gradient
// lives, final, on one or more ranks. The global L2 norm counts each element
// exactly once:
//   - sharded params: once per (TP, GTP) shard — every rank counts its own
//     (a pipeline's tied LM-head copy, ShardedParam::tied_copy, not at all:
//     the first stage counts that weight);
//   - replicated params: once per GTP group (only GTP rank 0 counts), and
//     TP-replicated ones (norms, row-parallel biases) once per TP group too
//     (only TP rank 0), while TP-sharded ones (column-parallel biases) count
//     on every TP rank;
//   - over the replicate group: each rank counts its slice after a
//     reduce-scatter; after an all-reduce only replicate rank 0 counts;
//   - over the buffer's `distinct` groups (PP stages; EP for an expert
//     buffer): every rank counts its own params.
// Each buffer's partial sum of squares (accumulated in double, carried as two
// f32 words) is summed over its replicate, tp, gtp and distinct groups; the
// buffers' totals (dense and expert) add up.
//
//   GTP_ASSIGN_OR_RETURN(double norm, ClipGradNorm({dense, experts}, max_norm));
#pragma once

#include <vector>

#include "absl/status/statusor.h"
#include "optimizer/grad_buffer.h"

namespace gtp::optimizer {

// The global L2 norm of the finished gradients of all `buffers` (NaN or Inf
// when any element is). Collective over each buffer's groups, in order;
// blocks.
absl::StatusOr<double> GlobalGradNorm(const std::vector<const GradBuffer*>& buffers);
absl::StatusOr<double> GlobalGradNorm(const GradBuffer& grads);

// The same norm decided on the device, without reading it back: `out`
// (f32 [3] on the buffers' device) receives {norm, clip scale, skip} in
// stream order — scale = max_norm / (norm + 1e-6) when 0 < max_norm < norm,
// else 1; skip = 1 when the norm is NaN/Inf (see ops::GradNormFinalize).
// Every group with more than one rank must take device memory (NCCL on
// CUDA); GradNormOnDeviceSupported says whether that holds.
// FailedPrecondition otherwise. Collective like GlobalGradNorm (enqueued).
bool GradNormOnDeviceSupported(const std::vector<const GradBuffer*>& buffers);
absl::Status GlobalGradNormOnDevice(const std::vector<const GradBuffer*>& buffers, double max_norm,
                                    const Tensor& out);

// Multiplies every valid gradient element by `factor`. Enqueued on the
// buffer's exec stream; does not communicate.
void ScaleGrads(const GradBuffer& grads, float factor);

// Clips the finished gradients to global norm `max_norm` (no-op when
// max_norm <= 0 or the norm is not finite) and returns the norm before
// clipping. Collective like GlobalGradNorm; blocks.
absl::StatusOr<double> ClipGradNorm(const std::vector<const GradBuffer*>& buffers,
                                    double max_norm);
absl::StatusOr<double> ClipGradNorm(const GradBuffer& grads, double max_norm);

}  // namespace gtp::optimizer
