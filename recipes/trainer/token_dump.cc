#include "recipes/trainer/token_dump.h"

#include "absl/strings/str_cat.h"

namespace gtp::recipes {

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
