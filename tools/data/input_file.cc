#include "tools/data/input_file.h"

#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "data/tokenizer/internal/json.h"

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

absl::Status ForEachJsonLine(const std::string& path, absl::string_view text, const std::string& key,
                             const std::function<absl::Status(absl::string_view)>& doc) {
  size_t line_no = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == absl::string_view::npos) continue;
    absl::StatusOr<std::optional<std::string>> field = data::tokenizer_internal::FindStringField(line, key);
    if (!field.ok() || !field->has_value()) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, " line ", line_no, ": ",
          field.ok() ? absl::StrCat("no string field \"", key, "\"") : field.status().message()));
    }
    absl::Status st = doc(**field);
    if (!st.ok()) return st;
  }
  return absl::OkStatus();
}

}  // namespace gtp::tools
