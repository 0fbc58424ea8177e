#include "comm/ucx/ucs_status.h"

#include "absl/strings/str_cat.h"

namespace gtp::comm::ucx_internal {

absl::Status UcsStatus(ucs_status_t s, const std::string& what) {
  if (s == UCS_OK) return absl::OkStatus();
  std::string msg = absl::StrCat(what, ": ", ucs_status_string(s));
  switch (s) {
    case UCS_ERR_TIMED_OUT: case UCS_ERR_ENDPOINT_TIMEOUT:
      return absl::DeadlineExceededError(msg);
    case UCS_ERR_UNREACHABLE: case UCS_ERR_CONNECTION_RESET: case UCS_ERR_REJECTED:
    case UCS_ERR_NO_DEVICE: case UCS_ERR_IO_ERROR: case UCS_ERR_SHMEM_SEGMENT:
      return absl::UnavailableError(msg);
    case UCS_ERR_MESSAGE_TRUNCATED: case UCS_ERR_INVALID_PARAM:
      return absl::InvalidArgumentError(msg);
    case UCS_ERR_NO_MEMORY: case UCS_ERR_NO_RESOURCE: case UCS_ERR_EXCEEDS_LIMIT:
      return absl::ResourceExhaustedError(msg);
    case UCS_ERR_CANCELED:
      return absl::CancelledError(msg);
    default:
      return absl::InternalError(msg);
  }
}

}  // namespace gtp::comm::ucx_internal
