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
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace gtp::recipes {

class RunDirLock {
 public:
  // FailedPrecondition naming the holder when another run holds `dir`;
  // PermissionDenied naming the path when the directory cannot be written.
  static absl::StatusOr<RunDirLock> Acquire(const std::string& dir);

  RunDirLock(RunDirLock&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  RunDirLock& operator=(RunDirLock&& o) noexcept;
  RunDirLock(const RunDirLock&) = delete;
  RunDirLock& operator=(const RunDirLock&) = delete;
  ~RunDirLock();

 private:
  explicit RunDirLock(int fd) : fd_(fd) {}
  int fd_ = -1;
};

}  // namespace gtp::recipes
