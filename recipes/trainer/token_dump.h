// recipes/trainer/token_dump.h — the training tokens as a flat file, for
// replaying a run elsewhere (tools/bench/torch_gpt.py trains PyTorch on them).
//
// Every Append writes one micro-batch: tokens then targets, each int32
// [B, T] row-major, native (little-endian) byte order, no header. A run of
// S steps with M micro-batches per step leaves S·M such pairs in step order:
//   file = (tok[B, T], tgt[B, T]) × M × S
// The file is opened for appending on the first Append, so a resumed run
// continues it. The trainer dumps rank 0's (lane 0's) micro-batches only.
//
//   TokenDump dump(path);                     // "" : every Append is a no-op
//   GTP_RETURN_IF_ERROR(dump.Append(tok, tgt, B * T));
//
// Not thread-safe; Append blocks on the file write.
#pragma once

#include <cstdint>
#include <fstream>
#include <string>
#include <utility>

#include "absl/status/status.h"

namespace gtp::recipes {

class TokenDump {
 public:
  explicit TokenDump(std::string path) : path_(std::move(path)) {}

  // Whether `path` can be opened for appending without writing to it (the
  // trainer checks before its run directory exists): PermissionDenied
  // naming train.dump_tokens, the path and what works when it is a
  // directory, its directory is missing or not one, or either is not
  // writable. OK for "".
  static absl::Status CheckPath(const std::string& path);

  // Appends `n` tokens and then `n` targets. Error naming the file when it
  // cannot be opened or written.
  absl::Status Append(const int32_t* tokens, const int32_t* targets, int64_t n);

 private:
  std::string path_;
  std::ofstream out_;
};

}  // namespace gtp::recipes
