// recipes/trainer/metrics.h — rank 0's record of a run: the step line (or
// a progress bar with ETA on a terminal), one JSON line per step and per
// evaluation in <run_dir>/metrics.jsonl, and the same scalars as TensorBoard
// events with train.tensorboard_dir (tags listed in recipes/README.md).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "core/allocator.h"
#include "recipes/trainer/config.pb.h"
#include "recipes/trainer/run_options.h"
#include "recipes/trainer/tensorboard/event_writer.h"

namespace gtp::recipes {

// "5.2 MiB", "1.25 GiB".
std::string FormatBytes(int64_t bytes);

class Metrics {
 public:
  // metrics.jsonl in options.run_dir (PermissionDenied naming it when it
  // cannot be written: found before the first step, not at the end); opens
  // train.tensorboard_dir (relative to the run dir) when set. `r` and
  // `options` must outlive the object. Every write below is checked: a full
  // disk ends the run with an error naming the file.
  static absl::StatusOr<std::unique_ptr<Metrics>> Open(const proto::Recipe& r,
                                                       const RunOptions& options);
  // The same for a run whose config has another schema (recipes/vlm_mimo):
  // `r` carries only what the record reads (train.steps, log_every,
  // tensorboard_dir, device and model for the MFU); `config_text` is that
  // run's own resolved config, written to <run_dir>/`config_file` and to
  // TensorBoard instead of `r`.
  static absl::StatusOr<std::unique_ptr<Metrics>> Open(const proto::Recipe& r,
                                                       const RunOptions& options,
                                                       const std::string& config_text,
                                                       const std::string& config_file);

  // One finished step: RunOptions::on_step, the log line (every
  // train.log_every steps, the first and the last) or the progress bar, the
  // JSON line, TensorBoard. `mem`: the allocator's figures; MFU per GPU
  // from train.peak_tflops (or the GPU's) over `world_size` ranks; the ETA
  // from the steps run since `first_step` started at `t_start`.
  absl::Status Step(const StepRecord& rec, const AllocatorStats& mem, int world_size,
                    std::chrono::steady_clock::time_point t_start, int64_t first_step);
  // A validation loss after step `step`.
  absl::Status Eval(int64_t step, float loss);
  // Other scalars measured after step `step` (e.g. a recipe's own
  // evaluation): one JSON line {"step": N, "<key>": value, ...} and each as
  // the TensorBoard scalar "eval/<key>".
  absl::Status Values(int64_t step, const std::vector<std::pair<std::string, double>>& values);
  // The run continues after step `step` (0: from the start): lines of later
  // steps — run again now — and any line a crash cut short are dropped from
  // metrics.jsonl, so every step appears once. Prints how many were.
  absl::Status ResumeAt(int64_t step);

  const std::string& path() const { return path_; }
  // Null without train.tensorboard_dir.
  const tensorboard::EventWriter* tensorboard() const { return tb_ ? &*tb_ : nullptr; }

 private:
  Metrics(const proto::Recipe& r, const RunOptions& options) : r_(r), options_(options) {}
  absl::Status Append(const std::string& line);
  const proto::Recipe& r_;
  const RunOptions& options_;
  std::string path_;
  std::optional<tensorboard::EventWriter> tb_;
  // Steps since the last printed line: the line shows their averages (one
  // step's time is noisy); metrics.jsonl keeps every step's own.
  double interval_ms_ = 0, interval_tokens_ = 0;
  int64_t interval_steps_ = 0;
};

}  // namespace gtp::recipes
