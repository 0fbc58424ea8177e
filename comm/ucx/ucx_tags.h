// comm/ucx/ucx_tags.h — internal to comm/ucx: how the engine's messages are
// tagged (group id, kind: collective, point-to-point or abort notice) and
// the engine's timing constants, shared by its units (ucx_engine.cc:
// creation, teardown and the user-thread API; ucx_progress.cc: the
// communication thread; ucx_abort.cc: failure and abort notices).
#pragma once

#include <cstdint>

#include <ucp/api/ucp.h>

#include "absl/time/time.h"

namespace gtp::comm::ucx_internal {


inline constexpr uint64_t kKindCollective = 0, kKindP2P = 1, kKindAbort = 2;

inline ucp_tag_t Head(uint32_t gid, uint64_t kind) {
  return (static_cast<uint64_t>(gid) << 50) | (kind << 48);
}
inline constexpr ucp_tag_t kKindMask = 3ull << 48;
// Abort tags: set when the receiver is not in the failed group.
inline constexpr ucp_tag_t kNoticeBit = 1;

// Iterations without progress before the thread sleeps on the event fd.
inline constexpr int kSpinsBeforeSleep = 256;
// How long a failed endpoint's peer gets to deliver its abort message.
inline constexpr absl::Duration kPeerGoneGrace = absl::Milliseconds(200);
// A failed op still waits this long for its posted sends to a live peer: a
// rendezvous send whose receive the peer had already matched reads the
// caller's buffer when the peer's ready-to-receive arrives, so returning at
// once would let the caller free memory UCX is about to read (ASan found it:
// UcxFaults.MismatchedCountsFailEveryRank with calls cut across lanes). A
// send the peer never matched (it cancelled its receives when it failed)
// never completes; after this it is left to the orphan list, and nothing can
// read it any more.
inline constexpr absl::Duration kSendDrainGrace = absl::Seconds(1);


}  // namespace gtp::comm::ucx_internal
