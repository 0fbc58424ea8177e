// recipes/trainer/step_boundary.h — what a training loop does between two
// steps, the same for every trainer (the GPT trainer, recipes/vlm_mimo):
//
//   - every rank agrees on stopping: a signal that reached one rank
//     (StopSignals::Requested) stops every rank after the same step, or the
//     next collective would wait forever for the rank that left;
//   - a checkpoint is due every checkpoint.every steps (0: never), at the
//     last step, and when stopping; at the last step and when stopping the
//     loop waits for it to be on disk before it ends.
//
//   GTP_ASSIGN_OR_RETURN(StepBoundary b, AtStepBoundary(host, step, steps, every));
//   if (b.save) save(step, /*wait=*/b.wait);
//   if (b.stop) { PrintStoppedBySignal(step, root); return; }
//   ...
//   PrintRunEnd(first, step, steps, root, metrics_path, "");
//
// AtStepBoundary is a collective of the host world (one int32 all-reduce):
// every rank calls it after every step.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "comm/communicator.h"

namespace gtp::recipes {

struct StepBoundary {
  bool stop = false;  // some rank was asked to stop: save, then end the run
  bool save = false;  // a checkpoint is due after this step
  bool wait = false;  // and it must be complete before the loop goes on (last step or stop)
};

// `step`: the steps done so far (1 after the first); `steps`: train.steps;
// `every`: checkpoint.every.
absl::StatusOr<StepBoundary> AtStepBoundary(comm::Communicator& host, int64_t step,
                                            int64_t steps, int64_t every);

// Rank 0's line when a signal ended the run after `step` (ckpt_root ""
// when no checkpoint was written: checkpoint.disable).
void PrintStoppedBySignal(int64_t step, const std::string& ckpt_root);

// Rank 0's last line: "done: …" or, when the run resumed at or past the last
// step (first >= steps), "nothing to train: …" with `nothing_note` inside its
// parentheses (e.g. "; the run that reached it captioned"). ckpt_root "":
// the run wrote none (checkpoint.disable).
void PrintRunEnd(int64_t first, int64_t step, int64_t steps, const std::string& ckpt_root,
                 const std::string& metrics_path, absl::string_view nothing_note);

}  // namespace gtp::recipes
