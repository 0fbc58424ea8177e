#include "recipes/trainer/run_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "comm/env/launch_env.h"

namespace gtp::recipes {

RunDirLock& RunDirLock::operator=(RunDirLock&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) close(fd_);
    fd_ = o.fd_;
    dir_ = std::move(o.dir_);
    fresh_ = o.fresh_;
    o.fd_ = -1;
    o.fresh_ = false;
  }
  return *this;
}

RunDirLock::~RunDirLock() {
  if (fd_ >= 0) close(fd_);  // releases the flock
}

absl::StatusOr<RunDirLock> RunDirLock::Acquire(const std::string& dir) {
  const std::string path = dir + "/run.lock";
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::PermissionDeniedError(absl::StrCat(
        "cannot write the run directory: ", path, ": ", std::strerror(errno),
        " (the run directory must be writable; --run_dir picks another)"));
  }
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    std::string holder;
    char buf[512];
    const ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
    if (n > 0) holder.assign(buf, static_cast<size_t>(n));
    close(fd);
    if (err != EWOULDBLOCK) {
      return absl::PermissionDeniedError(
          absl::StrCat("cannot lock ", path, ": ", std::strerror(err)));
    }
    holder = std::string(absl::StripAsciiWhitespace(holder));
    return absl::FailedPreconditionError(absl::StrCat(
        "run directory ", dir, " is in use by another run (",
        holder.empty() ? "holder unknown" : holder,
        "): wait for it to end, or give this run its own --run_dir"));
  }
  char host[256] = "?";
  gethostname(host, sizeof(host) - 1);
  const std::string who =
      absl::StrCat("pid ", getpid(), " on ", host, ", since ",
                   absl::FormatTime("%Y-%m-%d %H:%M:%S UTC", absl::Now(), absl::UTCTimeZone()),
                   "\n");
  if (ftruncate(fd, 0) != 0 || pwrite(fd, who.data(), who.size(), 0) != static_cast<ssize_t>(who.size())) {
    const int err = errno;
    close(fd);
    return absl::PermissionDeniedError(
        absl::StrCat("cannot write ", path, ": ", std::strerror(err),
                     " (the run directory must be writable; --run_dir picks another)"));
  }
  // Fresh: nothing but the lock file (a run dir made for this run, or an
  // empty one the user made).
  bool fresh = true;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    if (e.path().filename() != "run.lock") fresh = false;
  }
  return RunDirLock(fd, dir, fresh && !ec);
}

void RunDirLock::RemoveRunOutputs() {
  if (!fresh_ || fd_ < 0) return;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir_, ec)) {
    if (e.path().filename() != "run.lock") std::filesystem::remove_all(e.path(), ec);
  }
  std::filesystem::remove(dir_ + "/run.lock", ec);
}

absl::Status InRunDir(const std::string& run_dir, bool under_launcher,
                      const std::function<absl::Status(std::atomic<bool>& has_results)>& run) {
  std::error_code ec;
  const bool existed = std::filesystem::exists(run_dir, ec);
  std::filesystem::create_directories(run_dir, ec);
  if (ec) return absl::PermissionDeniedError(absl::StrCat("cannot create ", run_dir, ": ", ec.message()));
  // One run per directory: world rank 0's process holds the lock until the
  // end (another run's rank 0 fails here; its other ranks then fail on
  // their rendezvous, or gtprun stops them).
  std::optional<RunDirLock> lock;
  std::atomic<bool> has_results{false};
  absl::Status st = [&]() -> absl::Status {
    bool rank0 = true;
    if (under_launcher) {
      absl::StatusOr<comm::LaunchEnv> env = comm::ReadLaunchEnv();
      if (!env.ok()) return env.status();
      rank0 = env->rank == 0;
    }
    if (rank0) {
      absl::StatusOr<RunDirLock> l = RunDirLock::Acquire(run_dir);
      if (!l.ok()) return l.status();
      lock.emplace(std::move(*l));
    }
    return run(has_results);
  }();
  // A run that failed before it had results leaves no trace: what its
  // start-up wrote into its own (fresh) directory goes, and a directory
  // this process made goes when nothing else is in it.
  if (!st.ok()) {
    if (lock && !has_results.load()) lock->RemoveRunOutputs();
    lock.reset();
    if (!existed) std::filesystem::remove(run_dir, ec);  // only when empty
  }
  return st;
}

absl::Status SetAsideCheckpoints(const std::string& root) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (root.empty() || !fs::is_directory(root, ec) || fs::is_empty(root, ec)) return absl::OkStatus();
  const std::string aside = root + ".replaced";
  fs::remove_all(aside, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot remove ", aside, ": ", ec.message()));
  fs::rename(root, aside, ec);
  if (ec) {
    return absl::InternalError(
        absl::StrCat("cannot move the earlier checkpoints ", root, " to ", aside, ": ", ec.message()));
  }
  std::printf("checkpoint.no_resume=true: the earlier run's checkpoints in %s moved to %s "
              "(this run starts from step 0)\n",
              root.c_str(), aside.c_str());
  return absl::OkStatus();
}

}  // namespace gtp::recipes
