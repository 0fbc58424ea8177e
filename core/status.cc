#include "core/status.h"

namespace gtp::internal {

void CheckFailed(const char* file, int line, const char* cond,
                 const std::string& msg) {
  std::fprintf(stderr, "%s:%d: check failed: %s%s%s\n", file, line, cond,
               msg.empty() ? "" : ": ", msg.c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace gtp::internal
