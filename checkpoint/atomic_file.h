// checkpoint/atomic_file.h — a file written whole or not at all.
//
// Bytes go to `path`.tmp; Commit() fsyncs it, renames it over `path` and
// fsyncs the directory, so after a crash `path` is either the old file or
// the new one, never a prefix. A writer that fails, or is destroyed before
// Commit, removes its .tmp: a failed save leaves nothing behind.
//
//   GTP_ASSIGN_OR_RETURN(auto w, AtomicFileWriter::Create(path));
//   GTP_RETURN_IF_ERROR(w->Append(header.data(), header.size()));
//   GTP_RETURN_IF_ERROR(w->Commit());
//
// Errors name the file and the system's reason ("No space left on device").
// One thread per writer; blocking.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace gtp::checkpoint {

class AtomicFileWriter {
 public:
  static absl::StatusOr<std::unique_ptr<AtomicFileWriter>> Create(const std::string& path);
  // Removes the .tmp unless Commit succeeded.
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  // Writes all of [data, data + n) (retrying short writes). After a failure
  // every later call fails too and the .tmp is removed.
  absl::Status Append(const void* data, size_t n);
  absl::Status Append(std::string_view s) { return Append(s.data(), s.size()); }
  // fsync, close, rename over the path, fsync the directory.
  absl::Status Commit();

  const std::string& path() const { return path_; }

 private:
  AtomicFileWriter(std::string path, int fd);
  absl::Status Fail(const std::string& what, int err);

  const std::string path_, tmp_;
  int fd_ = -1;
  bool committed_ = false;
  absl::Status failed_;
};

// Create + Append + Commit.
absl::Status WriteFileAtomic(const std::string& path, std::string_view data);

}  // namespace gtp::checkpoint
