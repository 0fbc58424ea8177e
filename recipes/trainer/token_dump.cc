#include "recipes/trainer/token_dump.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"

namespace gtp::recipes {

absl::Status TokenDump::CheckPath(const std::string& path) {
  if (path.empty()) return absl::OkStatus();
  namespace fs = std::filesystem;
  auto bad = [&](const std::string& why) {
    return absl::PermissionDeniedError(
        absl::StrCat("train.dump_tokens ", path, ": ", why,
                     ": give a file in an existing, writable directory (e.g. "
                     "train.dump_tokens=/tmp/tokens.bin)"));
  };
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (fs::is_directory(st)) return bad("is a directory");
  if (fs::exists(st)) {
    if (!fs::is_regular_file(st)) return bad("is not a regular file");
    if (access(path.c_str(), W_OK) != 0)
      return bad(absl::StrCat("cannot be written (", std::strerror(errno), ")"));
    return absl::OkStatus();
  }
  fs::path dir = fs::path(path).parent_path();
  if (dir.empty()) dir = ".";
  if (!fs::is_directory(dir, ec)) {
    return bad(absl::StrCat("its directory ", dir.string(),
                            fs::exists(dir, ec) ? " is not a directory" : " does not exist"));
  }
  if (access(dir.c_str(), W_OK) != 0) {
    return bad(absl::StrCat("its directory ", dir.string(), " cannot be written (",
                            std::strerror(errno), ")"));
  }
  return absl::OkStatus();
}

absl::Status TokenDump::Append(const int32_t* tokens, const int32_t* targets, int64_t n) {
  if (path_.empty()) return absl::OkStatus();
  if (!out_.is_open()) {
    out_.open(path_, std::ios::binary | std::ios::app);
    if (!out_)
      return absl::PermissionDeniedError(absl::StrCat("train.dump_tokens: cannot open ", path_));
  }
  const auto bytes = static_cast<std::streamsize>(n * sizeof(int32_t));
  out_.write(reinterpret_cast<const char*>(tokens), bytes);
  out_.write(reinterpret_cast<const char*>(targets), bytes);
  out_.flush();
  if (!out_) return absl::DataLossError(absl::StrCat("train.dump_tokens: cannot write ", path_));
  return absl::OkStatus();
}

}  // namespace gtp::recipes
