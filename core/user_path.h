// core/user_path.h — a path the user typed, as the user meant it.
//
// `bazel run` starts a binary inside its runfiles tree and says where the
// user ran it from in BUILD_WORKING_DIRECTORY: a relative path on the
// command line (or in a --set) then means that directory, not the runfiles
// tree (a run directory used to land inside bazel-bin, and relative
// --config paths failed with "cannot read"). Outside `bazel run` paths are
// left as they are (relative to the current directory).
//
//   flags.config = gtp::UserPath(absl::GetFlag(FLAGS_config));
#pragma once

#include <string>

namespace gtp {

// `path` unchanged when empty, absolute or not under `bazel run`; otherwise
// BUILD_WORKING_DIRECTORY/path.
std::string UserPath(const std::string& path);

}  // namespace gtp
