#include "tools/data/input_file.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace gtp::tools {

absl::StatusOr<std::string> ReadInputFile(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (ec || !fs::exists(st)) return absl::NotFoundError(absl::StrCat("cannot open ", path, ": no such file"));
  if (fs::is_directory(st)) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, " is a directory: name the files in it (e.g. ", path, "/*.txt)"));
  }
  if (!fs::is_regular_file(st) && !fs::is_fifo(st) && !fs::is_character_file(st)) {
    return absl::InvalidArgumentError(absl::StrCat(path, " is not a regular file"));
  }
  std::ifstream f(path, std::ios::binary);
  if (!f) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::stringstream ss;
  ss << f.rdbuf();
  if (f.bad()) return absl::DataLossError(absl::StrCat("cannot read ", path));
  return ss.str();
}

}  // namespace gtp::tools
