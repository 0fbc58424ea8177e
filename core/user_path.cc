#include "core/user_path.h"

#include <cstdlib>

namespace gtp {

std::string UserPath(const std::string& path) {
  if (path.empty() || path.front() == '/') return path;
  const char* wd = std::getenv("BUILD_WORKING_DIRECTORY");
  if (wd == nullptr || *wd == '\0') return path;
  std::string out = wd;
  if (out.back() != '/') out += '/';
  return out + path;
}

}  // namespace gtp
