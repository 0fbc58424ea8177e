// comm/ucx/ucs_status.h — the UCX backend's one error-conversion helper.
//
// UcsStatus maps ucs_status_t to canonical absl codes:
//   UCS_OK                                   -> OK
//   UCS_ERR_TIMED_OUT, ENDPOINT_TIMEOUT       -> DeadlineExceeded
//   UNREACHABLE, CONNECTION_RESET, REJECTED,
//   NO_DEVICE, IO_ERROR, SHMEM_SEGMENT       -> Unavailable
//   MESSAGE_TRUNCATED, INVALID_PARAM          -> InvalidArgument
//   NO_MEMORY, NO_RESOURCE, EXCEEDS_LIMIT     -> ResourceExhausted
//   CANCELED                                  -> Cancelled
//   anything else                             -> Internal
// The message is "<what>: <ucs_status_string>". Pure; thread-safe.
#pragma once

#include <ucs/type/status.h>

#include <string>

#include "absl/status/status.h"

namespace gtp::comm::ucx_internal {

absl::Status UcsStatus(ucs_status_t status, const std::string& what);

}  // namespace gtp::comm::ucx_internal
