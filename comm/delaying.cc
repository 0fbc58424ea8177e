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
    : inner_(inner),
      delay_(std::make_shared<std::atomic<int64_t>>(absl::ToInt64Nanoseconds(delay))) {}

DelayingCommunicator::DelayingCommunicator(std::unique_ptr<Communicator> inner,
                                           absl::Duration delay)
    : owned_(std::move(inner)),
      inner_(owned_.get()),
      delay_(std::make_shared<std::atomic<int64_t>>(absl::ToInt64Nanoseconds(delay))) {}

DelayingCommunicator::DelayingCommunicator(std::unique_ptr<Communicator> inner, SharedDelay delay)
    : owned_(std::move(inner)), inner_(owned_.get()), delay_(std::move(delay)) {}

absl::Duration DelayingCommunicator::delay() const { return absl::Nanoseconds(delay_->load()); }

void DelayingCommunicator::set_delay(absl::Duration delay) {
  delay_->store(absl::ToInt64Nanoseconds(delay));
}

absl::Time DelayingCommunicator::ReadyAt(absl::Time start) const { return start + delay(); }

// The start time is taken before the inner call: an inner call that itself
// takes a while counts towards the delay.
#define GTP_DELAYED(call)                                                              \
  do {                                                                                 \
    const absl::Time start = absl::Now();                                              \
    absl::StatusOr<WorkPtr> w = (call);                                                \
    if (!w.ok()) return w.status();                                                    \
    return WorkPtr(std::make_unique<DelayedWork>(std::move(*w), ReadyAt(start)));      \
  } while (0)

absl::StatusOr<WorkPtr> DelayingCommunicator::AllGather(const void* send, void* recv,
                                                        int64_t count, DType dtype) {
  GTP_DELAYED(inner_->AllGather(send, recv, count, dtype));
}

absl::StatusOr<WorkPtr> DelayingCommunicator::ReduceScatter(const void* send, void* recv,
                                                            int64_t count, DType dtype,
                                                            ReduceOp op) {
  GTP_DELAYED(inner_->ReduceScatter(send, recv, count, dtype, op));
}

absl::StatusOr<WorkPtr> DelayingCommunicator::AllReduce(const void* send, void* recv,
                                                        int64_t count, DType dtype, ReduceOp op) {
  GTP_DELAYED(inner_->AllReduce(send, recv, count, dtype, op));
}

absl::StatusOr<WorkPtr> DelayingCommunicator::Broadcast(void* buf, int64_t count, DType dtype,
                                                        int root) {
  GTP_DELAYED(inner_->Broadcast(buf, count, dtype, root));
}

absl::StatusOr<WorkPtr> DelayingCommunicator::AllToAll(const void* send, void* recv,
                                                       int64_t count, DType dtype) {
  GTP_DELAYED(inner_->AllToAll(send, recv, count, dtype));
}

absl::StatusOr<WorkPtr> DelayingCommunicator::AllToAllV(
    const void* send, const std::vector<int64_t>& send_counts,
    const std::vector<int64_t>& send_displs, void* recv, const std::vector<int64_t>& recv_counts,
    const std::vector<int64_t>& recv_displs, DType dtype) {
  GTP_DELAYED(
      inner_->AllToAllV(send, send_counts, send_displs, recv, recv_counts, recv_displs, dtype));
}

absl::StatusOr<WorkPtr> DelayingCommunicator::Send(const void* buf, int64_t count, DType dtype,
                                                   int peer, int tag) {
  GTP_DELAYED(inner_->Send(buf, count, dtype, peer, tag));
}

absl::StatusOr<WorkPtr> DelayingCommunicator::Recv(void* buf, int64_t count, DType dtype,
                                                   int peer, int tag) {
  GTP_DELAYED(inner_->Recv(buf, count, dtype, peer, tag));
}

absl::StatusOr<WorkPtr> DelayingCommunicator::Barrier() { GTP_DELAYED(inner_->Barrier()); }

#undef GTP_DELAYED

absl::StatusOr<std::unique_ptr<Communicator>> DelayingCommunicator::Split(
    const std::vector<std::vector<int>>& groups, const std::string& name) {
  const absl::Time ready = ReadyAt(absl::Now());
  absl::StatusOr<std::unique_ptr<Communicator>> sub = inner_->Split(groups, name);
  for (absl::Time now = absl::Now(); now < ready; now = absl::Now()) absl::SleepFor(ready - now);
  if (!sub.ok() || *sub == nullptr) return sub;
  return std::unique_ptr<Communicator>(new DelayingCommunicator(std::move(*sub), delay_));  // shared
}

}  // namespace gtp::comm
