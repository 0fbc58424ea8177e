#include "recipes/trainer/run_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

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

}  // namespace gtp::recipes
