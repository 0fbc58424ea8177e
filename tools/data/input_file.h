// tools/data/input_file.h — reading one input file of the data tools
// (make_indexed, train_bpe) whole, refusing what is not a regular file by
// name: a directory used to read as an empty file and make an empty dataset.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace gtp::tools {

// The bytes of `path`. NotFound when it does not exist or cannot be opened;
// InvalidArgument naming the path for a directory or another non-regular
// file; DataLoss when reading fails midway.
absl::StatusOr<std::string> ReadInputFile(const std::string& path);

}  // namespace gtp::tools
