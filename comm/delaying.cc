#include "comm/delaying.h"

#include <utility>

#include "absl/time/clock.h"

namespace gtp::comm {
namespace {

class DelayedWork final : public Work {
 public:
  DelayedWork(WorkPtr inner, absl::Time ready) : inner_(std::move(inner)), ready_(ready) {}

  absl::Status Wait(absl::Duration timeout) override {
    absl::Status st = inner_->Wait(timeout);
    if (!st.ok()) return st;
    SleepUntilReady();
    return absl::OkStatus();
  }
  bool Test() override { return absl::Now() >= ready_ && inner_->Test(); }
  absl::Status Synchronize() override {
    absl::Status st = inner_->Synchronize();
    if (!st.ok()) return st;
    SleepUntilReady();
    return absl::OkStatus();
  }

 private:
  void SleepUntilReady() const {
    for (absl::Time now = absl::Now(); now < ready_; now = absl::Now()) {
      absl::SleepFor(ready_ - now);
    }
  }

  WorkPtr inner_;
  absl::Time ready_;
};

}  // namespace

DelayingCommunicator::DelayingCommunicator(Communicator* inner, absl::Duration delay)
    : ForwardingCommunicator(inner),
      delay_(std::make_shared<std::atomic<int64_t>>(absl::ToInt64Nanoseconds(delay))) {}

DelayingCommunicator::DelayingCommunicator(std::unique_ptr<Communicator> inner,
                                           absl::Duration delay)
    : ForwardingCommunicator(std::move(inner)),
      delay_(std::make_shared<std::atomic<int64_t>>(absl::ToInt64Nanoseconds(delay))) {}

DelayingCommunicator::DelayingCommunicator(std::unique_ptr<Communicator> inner, SharedDelay delay)
    : ForwardingCommunicator(std::move(inner)), delay_(std::move(delay)) {}

absl::Duration DelayingCommunicator::delay() const { return absl::Nanoseconds(delay_->load()); }

void DelayingCommunicator::set_delay(absl::Duration delay) {
  delay_->store(absl::ToInt64Nanoseconds(delay));
}

// The start time is taken before the inner call: an inner call that itself
// takes a while counts towards the delay.
absl::StatusOr<WorkPtr> DelayingCommunicator::Issue(const OpCall&, IssueFn issue) {
  const absl::Time start = absl::Now();
  absl::StatusOr<WorkPtr> w = issue();
  if (!w.ok()) return w.status();
  return WorkPtr(std::make_unique<DelayedWork>(std::move(*w), start + delay()));
}

std::unique_ptr<Communicator> DelayingCommunicator::Wrap(std::unique_ptr<Communicator> sub) {
  // new: the constructor sharing the delay is private.
  return std::unique_ptr<Communicator>(new DelayingCommunicator(std::move(sub), delay_));
}

absl::StatusOr<std::unique_ptr<Communicator>> DelayingCommunicator::Split(
    const std::vector<std::vector<int>>& groups, const std::string& name) {
  const absl::Time ready = absl::Now() + delay();
  absl::StatusOr<std::unique_ptr<Communicator>> sub = ForwardingCommunicator::Split(groups, name);
  for (absl::Time now = absl::Now(); now < ready; now = absl::Now()) absl::SleepFor(ready - now);
  return sub;
}

}  // namespace gtp::comm
