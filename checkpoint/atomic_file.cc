#include "checkpoint/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace gtp::checkpoint {
namespace {

std::string Dir(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

}  // namespace

absl::StatusOr<std::unique_ptr<AtomicFileWriter>> AtomicFileWriter::Create(const std::string& path) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot create ", tmp, ": ", std::strerror(errno)));
  }
  return std::unique_ptr<AtomicFileWriter>(new AtomicFileWriter(path, fd));
}

AtomicFileWriter::AtomicFileWriter(std::string path, int fd)
    : path_(std::move(path)), tmp_(path_ + ".tmp"), fd_(fd) {}

AtomicFileWriter::~AtomicFileWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(tmp_.c_str());
}

absl::Status AtomicFileWriter::Fail(const std::string& what, int err) {
  failed_ = absl::DataLossError(absl::StrCat(what, " ", tmp_, ": ", std::strerror(err)));
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  ::unlink(tmp_.c_str());
  return failed_;
}

absl::Status AtomicFileWriter::Append(const void* data, size_t n) {
  if (!failed_.ok()) return failed_;
  if (committed_ || fd_ < 0) return absl::FailedPreconditionError(absl::StrCat(path_, ": written after Commit"));
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd_, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return Fail("cannot write", errno);
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return absl::OkStatus();
}

absl::Status AtomicFileWriter::Commit() {
  if (!failed_.ok()) return failed_;
  if (committed_ || fd_ < 0) return absl::FailedPreconditionError(absl::StrCat(path_, ": committed twice"));
  if (::fsync(fd_) != 0) return Fail("cannot fsync", errno);
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) return Fail("cannot close", errno);
  if (std::rename(tmp_.c_str(), path_.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp_.c_str());
    failed_ = absl::DataLossError(
        absl::StrCat("cannot rename ", tmp_, " to ", path_, ": ", std::strerror(err)));
    return failed_;
  }
  committed_ = true;
  // The rename itself reaches the disk with the directory.
  const std::string dir = Dir(path_);
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_CLOEXEC);
  if (dfd < 0) return absl::DataLossError(absl::StrCat("cannot open ", dir, ": ", std::strerror(errno)));
  const int rc = ::fsync(dfd);
  const int err = errno;
  ::close(dfd);
  if (rc != 0) return absl::DataLossError(absl::StrCat("cannot fsync ", dir, ": ", std::strerror(err)));
  return absl::OkStatus();
}

absl::Status WriteFileAtomic(const std::string& path, std::string_view data) {
  auto w = AtomicFileWriter::Create(path);
  if (!w.ok()) return w.status();
  if (absl::Status st = (*w)->Append(data); !st.ok()) return st;
  return (*w)->Commit();
}

}  // namespace gtp::checkpoint
