// plan/step.h — one training step predicted: time with its breakdown,
// tokens/s, MFU, and memory per GPU.
//
// Order of events, as the project runs them (docs/DESIGN.md §4–5):
//   forward of a chunk   its blocks in order; block i's GTP (and EGTP)
//                        gather was prefetched during block i − 1's compute:
//                        exposed = max(0, gather_i − compute_{i−1}); the
//                        first block's gather is cold (exposed). TP/SP
//                        collectives, EP all-to-alls and what ring
//                        attention's exchange leaves are on the critical path.
//   backward of a chunk  blocks in reverse; during block i's backward (with
//                        recompute: its forward re-run first) the chain
//                        gathers block i − 1 (twice with recompute: the
//                        recompute slot and the backward slot) and finishes
//                        block i + 1's gradient reduce-scatter; exposed =
//                        max(0, those − compute_i); the last block's gather is
//                        cold, the first block's reduce-scatter is waited for.
//   pipeline             plan/pipeline_sim.h over those pass times.
//   data parallelism     the last micro-batch's gradients (f32 main grads)
//                        reduce-scattered over the replicate group (CP × DP;
//                        experts over EDP) in 4M-element buckets
//                        (optimizer/grad_buffer.h) during that micro-batch's
//                        backward: everything but the last bucket hides
//                        behind it; then the AdamW update (HBM-bound: f32
//                        master, two moments, gradient; plan/calibration
//                        op adamw) on this rank's 1/(CP·DP) shard and the
//                        parameter all-gather over the replicate group.
// Memory per GPU (the busiest pipeline stage), as parallel/ and optimizer/
// shard it: weights 1/(TP·GTP) (experts 1/(EP·EGTP)) in the param dtype,
// f32 main gradients of the same local shard (not sharded over DP),
// optimizer state (f32 master when params are bf16, exp_avg, exp_avg_sq)
// 1/(CP·DP) of that, activations (plan/model.h) times the micro-batches in
// flight on the stage (from the schedule), GTP gather buffers (two blocks'
// TP-local weights: the current and the prefetched, plus their unsharded f32
// weight gradients awaiting reduce-scatter), NCCL buffers (none on one GPU)
// and the CUDA context (cluster constants). `allocator()` is what the
// trainer's caching allocator holds at its peak (metrics.jsonl
// peak_mem_bytes): the total without the context and NCCL's buffers.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "plan/calibration.h"
#include "plan/model.h"
#include "recipes/trainer/config.pb.h"

namespace gtp::plan {

struct CommCost {
  double total = 0, exposed = 0;  // seconds per step on the reported stage
};

struct Breakdown {
  // Kernel seconds per step on the reported stage, by block kind:
  // "attention", "mlp", "moe", "mamba", "embedding+head", "recompute".
  std::map<std::string, double> compute;
  CommCost tp, ep, cp, gtp_gather, gtp_reduce_scatter, egtp, pp_p2p, dp_reduce, dp_param_gather;
  double bubble = 0;     // seconds the reported stage waits inside the pipeline
  double optimizer = 0;  // AdamW + grad norm
};

struct Memory {  // bytes on one GPU of the busiest stage
  double weights = 0, grads = 0, optimizer = 0;
  double activations = 0;  // under the layout's recompute setting
  double activations_no_recompute = 0, activations_recompute = 0;
  double gather_buffers = 0, comm_buffers = 0, context = 0;
  double total = 0;
  double allocator() const { return total - context - comm_buffers; }
};

struct Prediction {
  Layout layout;
  double step_time = 0;
  double tokens_per_s = 0;   // whole cluster
  double mfu = 0;            // on the bf16 peak (recipes/trainer/mfu.h convention)
  double model_tflops_per_gpu = 0;
  Breakdown breakdown;
  Memory memory;
  int reported_stage = 0;    // the stage whose breakdown is shown (the last to finish)
  int micro_batches = 0;
  bool calibrated = false;   // every kernel kind used came from a measured table
  // The (op dtype) pairs the prediction used that the table does not
  // measure (costed on the default curve), e.g. "conv1d_fwd f32".
  std::vector<std::string> uncalibrated;
};

absl::StatusOr<Prediction> Predict(const recipes::proto::Recipe& r, const Layout& l, const CostModel& cost);

}  // namespace gtp::plan
