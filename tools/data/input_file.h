// tools/data/input_file.h — reading one input file of the data tools
// (make_indexed, train_bpe) whole, refusing what is not a regular file by
// name: a directory used to read as an empty file and make an empty dataset;
// and the documents of a JSON-lines file (--json_key), read the one way
// both tools read them.
#pragma once

#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace gtp::tools {

// The bytes of `path`. NotFound when it does not exist or cannot be opened;
// InvalidArgument naming the path for a directory or another non-regular
// file; DataLoss when reading fails midway.
absl::StatusOr<std::string> ReadInputFile(const std::string& path);

// `text` (the contents of `path`) as JSON lines: `doc` with the string field
// `key` of every line that is not blank, in order. InvalidArgument naming
// the path and line for a line without that string field or that does not
// parse; `doc`'s first error stops the reading and is returned.
absl::Status ForEachJsonLine(const std::string& path, absl::string_view text, const std::string& key,
                             const std::function<absl::Status(absl::string_view)>& doc);

}  // namespace gtp::tools
