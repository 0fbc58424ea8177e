#include "recipes/trainer/step_boundary.h"

#include <cstdio>

#include "core/status.h"
#include "recipes/trainer/stop_signals.h"

namespace gtp::recipes {

absl::StatusOr<StepBoundary> AtStepBoundary(comm::Communicator& host, int64_t step,
                                            int64_t steps, int64_t every) {
  int32_t stop = StopSignals::Requested() ? 1 : 0, any = 0;
  GTP_RETURN_IF_ERROR(comm::Run(host.AllReduce(&stop, &any, 1, DType::kI32, comm::ReduceOp::kMax)));
  StepBoundary b;
  b.stop = any != 0;
  b.wait = step == steps || b.stop;
  b.save = (every > 0 && step % every == 0) || b.wait;
  return b;
}

void PrintStoppedBySignal(int64_t step, const std::string& ckpt_root) {
  if (ckpt_root.empty()) {
    std::printf("\nstopped by signal after step %lld; no checkpoint written (checkpoint.disable)\n",
                static_cast<long long>(step));
    return;
  }
  std::printf("\nstopped by signal after step %lld; checkpoint written to %s\n",
              static_cast<long long>(step), ckpt_root.c_str());
}

void PrintRunEnd(int64_t first, int64_t step, int64_t steps, const std::string& ckpt_root,
                 const std::string& metrics_path, absl::string_view nothing_note) {
  if (first >= steps) {
    std::printf(
        "nothing to train: the checkpoint in %s is at step %lld and train.steps is %lld "
        "(raise train.steps to continue%.*s); nothing was saved\n",
        ckpt_root.c_str(), static_cast<long long>(first), static_cast<long long>(steps),
        static_cast<int>(nothing_note.size()), nothing_note.data());
  } else {
    std::printf("done: %lld steps; checkpoint %s; metrics %s\n", static_cast<long long>(step),
                ckpt_root.empty() ? "none (checkpoint.disable)" : ckpt_root.c_str(),
                metrics_path.c_str());
  }
  std::fflush(stdout);
}

}  // namespace gtp::recipes
