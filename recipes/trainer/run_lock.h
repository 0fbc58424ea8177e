// recipes/trainer/run_lock.h — a run directory belongs to one run at a time.
//
// RunDirLock::Acquire takes an advisory lock (flock) on <run_dir>/run.lock
// and writes who holds it (pid, host, start time) into the file. A second
// run on the same directory — from this process or any other on a machine
// sharing the file system — fails at once with an error naming the holder,
// before it writes anything. The lock goes with the object (or the
// process): nothing to clean up after a crash.
//
// One lock per run: the process of world rank 0 takes it (threads share
// their process's). Acquire returns Status; nothing here blocks.
//
// A run that fails before it has results (its first step, a checkpoint)
// leaves nothing: when the directory held only run.lock as the lock was
// taken (fresh()), everything in it since is that run's start-up
// (recipe.pbtxt, metrics.jsonl, TensorBoard events), and RemoveRunOutputs
// removes it while the lock still keeps any other run out.
//
// Every recipe starts its run through InRunDir (the directory, the lock, the
// clean-up of a failed start) and sets earlier checkpoints aside for
// checkpoint.no_resume=true through SetAsideCheckpoints: the GPT trainer
// (trainer.cc, checkpointing.cc) and recipes/vlm_mimo alike.
#pragma once

#include <atomic>
#include <functional>
#include <string>
#include <utility>

#include "absl/status/statusor.h"

namespace gtp::recipes {

class RunDirLock {
 public:
  // FailedPrecondition naming the holder when another run holds `dir`;
  // PermissionDenied naming the path when the directory cannot be written.
  static absl::StatusOr<RunDirLock> Acquire(const std::string& dir);

  RunDirLock(RunDirLock&& o) noexcept : fd_(o.fd_), dir_(std::move(o.dir_)), fresh_(o.fresh_) {
    o.fd_ = -1;
    o.fresh_ = false;
  }
  RunDirLock& operator=(RunDirLock&& o) noexcept;
  RunDirLock(const RunDirLock&) = delete;
  RunDirLock& operator=(const RunDirLock&) = delete;
  ~RunDirLock();

  // True when the directory held nothing but run.lock when the lock was taken.
  bool fresh() const { return fresh_; }
  // A fresh directory's entries, run.lock last (its flock stays held until
  // the object goes); nothing when not fresh(). Best effort: what cannot be
  // removed stays.
  void RemoveRunOutputs();

 private:
  RunDirLock(int fd, std::string dir, bool fresh) : fd_(fd), dir_(std::move(dir)), fresh_(fresh) {}
  int fd_ = -1;
  std::string dir_;
  bool fresh_ = false;
};

// A run in `run_dir`: the directory made when missing (PermissionDenied
// naming it when it cannot be), then `run` with the directory locked by
// world rank 0's process (every process when not `under_launcher`; under
// one its LaunchEnv says which) until `run` returns. `run` sets
// `has_results` once the run has something to keep (its first step, a
// checkpoint). A run that fails before that leaves no trace: what its
// start-up wrote into its own fresh directory goes (RemoveRunOutputs), and
// a directory made here goes when nothing else is in it. Returns `run`'s
// status (or the lock's error: another run holds the directory).
absl::Status InRunDir(const std::string& run_dir, bool under_launcher,
                      const std::function<absl::Status(std::atomic<bool>& has_results)>& run);

// checkpoint.no_resume=true in a run directory whose checkpoint directory
// `root` holds anything: this run's saves and the retention of old
// iterations would mix with them (and delete some), so `root` moves to
// <root>.replaced (one generation kept: an older .replaced goes), announced
// on stdout. OK with nothing to move. Call on one process (world rank 0).
absl::Status SetAsideCheckpoints(const std::string& root);

}  // namespace gtp::recipes
