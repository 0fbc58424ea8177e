// comm/delaying.h — a Communicator decorator that makes every operation take
// at least a fixed time, for tests of communication/compute overlap on
// backends (local threads) whose collectives are otherwise near-instant.
//
//   comm::DelayingCommunicator world(inner_world, absl::Milliseconds(40));  // inner not owned
//   ... build process groups from `world`: sub-communicators from Split are
//   delayed too ...
//
// The delay is asynchronous, like a slow wire: an op is issued on the inner
// communicator at once and its Work completes no earlier than (issue time +
// delay) and no earlier than the inner Work. The caller computes meanwhile,
// and ops in flight together overlap (two ops started together finish after
// about one delay, not two). Split blocks as the inner Split does and then
// until the delay has passed. Wait's timeout argument applies to the inner
// Work; the remaining delay is slept afterwards. set_delay changes the delay
// of the whole family of communicators split from one another.
// Thread-safety and blocking follow the Communicator contract: only Wait,
// Synchronize and Split block.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "comm/communicator.h"
#include "comm/forwarding.h"

namespace gtp::comm {

class DelayingCommunicator final : public ForwardingCommunicator {
 public:
  // Delays every op of `inner` (not owned; must outlive this) by `delay`.
  DelayingCommunicator(Communicator* inner, absl::Duration delay);
  // The same, owning the inner communicator (what Split returns).
  DelayingCommunicator(std::unique_ptr<Communicator> inner, absl::Duration delay);

  absl::Duration delay() const;
  // Changes the delay of ops issued from now on, here and on every
  // communicator split from this one (before or after). Thread-safe.
  void set_delay(absl::Duration delay);

  // The inner Split, then a wait until the delay has passed.
  absl::StatusOr<std::unique_ptr<Communicator>> Split(const std::vector<std::vector<int>>& groups,
                                                      const std::string& name) override;

 private:
  using SharedDelay = std::shared_ptr<std::atomic<int64_t>>;  // nanoseconds
  DelayingCommunicator(std::unique_ptr<Communicator> inner, SharedDelay delay);
  absl::StatusOr<WorkPtr> Issue(const OpCall& op, IssueFn issue) override;
  std::unique_ptr<Communicator> Wrap(std::unique_ptr<Communicator> sub) override;

  SharedDelay delay_;
};

}  // namespace gtp::comm
