#include "comm/local/local_communicator.h"

#include <algorithm>

#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <thread>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "comm/internal/ops.h"
#include "core/status.h"

namespace gtp::comm {
namespace {

using internal::OpDesc;
using internal::OpKind;

// One rank's arguments to a collective (vectors copied: callers may drop
// theirs once the call returns).
struct RankArgs {
  const void* send = nullptr;
  void* recv = nullptr;
  std::vector<int64_t> send_counts, send_displs, recv_counts, recv_displs;
  std::vector<std::vector<int>> groups;
  std::string name;
};

class Group;

// The communication thread of one local world (shared by every sub-group
// Split makes from it): runs posted tasks one at a time, in posting order.
// Tasks only copy and reduce memory, so they never block and a single thread
// cannot deadlock. The loop's state is shared with the thread, so the last
// owner may drop the ProgressThread from inside a task (the thread then
// detaches, drains what is queued and exits); elsewhere the destructor joins.
class ProgressThread {
 public:
  ProgressThread() : state_(std::make_shared<State>()) {
    thread_ = std::thread([s = state_]() { Loop(*s); });
  }
  ~ProgressThread() {
    {
      absl::MutexLock l(&state_->mu);
      state_->stop = true;
    }
    if (thread_.get_id() == std::this_thread::get_id()) {
      thread_.detach();
    } else {
      thread_.join();
    }
  }
  ProgressThread(const ProgressThread&) = delete;
  ProgressThread& operator=(const ProgressThread&) = delete;

  // Never blocks (beyond the queue's mutex); thread-safe.
  void Post(std::function<void()> task) {
    absl::MutexLock l(&state_->mu);
    state_->queue.push_back(std::move(task));
  }

 private:
  struct State {
    absl::Mutex mu;
    std::deque<std::function<void()>> queue ABSL_GUARDED_BY(mu);
    bool stop ABSL_GUARDED_BY(mu) = false;
  };
  static void Loop(State& s) {
    for (;;) {
      std::function<void()> task;
      {
        absl::MutexLock l(&s.mu);
        s.mu.Await(absl::Condition(
            +[](State* st) ABSL_NO_THREAD_SAFETY_ANALYSIS { return st->stop || !st->queue.empty(); },
            &s));
        if (s.queue.empty()) return;  // stopped and drained
        task = std::move(s.queue.front());
        s.queue.pop_front();
      }
      task();
    }
  }

  std::shared_ptr<State> state_;
  std::thread thread_;
};

// One collective call, shared by all ranks of the group.
struct Slot {
  uint64_t seq = 0;
  OpDesc desc;
  int first_rank = 0;
  int arrived = 0;
  std::vector<char> present;
  std::vector<RankArgs> args;
  enum class State { kPending, kRunning, kDone } state = State::kPending;
  absl::Status status;
  std::vector<std::shared_ptr<Group>> children;  // split only
};

// One posted send or recv.
struct P2P {
  bool is_send = false;
  int src = 0, dst = 0, tag = 0;
  const void* send = nullptr;
  void* recv = nullptr;
  int64_t count = 0;
  DType dtype = DType::kU8;
  bool matched = false;  // both sides posted: the copy is queued or done
  bool done = false;
  absl::Status status;
};

class Group : public std::enable_shared_from_this<Group> {
 public:
  Group(std::string name, int size, absl::Duration timeout,
        std::shared_ptr<ProgressThread> progress, bool pair_by_order = false)
      : name_(std::move(name)),
        size_(size),
        timeout_(timeout),
        pair_by_order_(pair_by_order),
        progress_(std::move(progress)),
        departed_(size, 0),
        p2p_running_(size, 0) {}

  const std::string& name() const { return name_; }
  int size() const { return size_; }
  absl::Duration timeout() const { return timeout_; }
  bool pair_by_order() const { return pair_by_order_; }

  std::string Prefix(const OpDesc& d, uint64_t seq) const {
    return absl::StrCat("group ", name_, " (local): ", d.ToString(), " #", seq, ": ");
  }

  // ---- collectives ----
  absl::StatusOr<std::shared_ptr<Slot>> Arrive(int rank, uint64_t seq, const OpDesc& desc,
                                               RankArgs args) {
    std::shared_ptr<Slot> slot;
    {
      absl::MutexLock l(&mu_);
      if (!failure_.ok()) return failure_;
      for (int r = 0; r < size_; ++r) {
        if (departed_[r]) {
          return FailLocked(absl::UnavailableError(absl::StrCat(
              Prefix(desc, seq), "rank ", r, " has left the group (its communicator was destroyed)")));
        }
      }
      auto& s = slots_[seq];
      if (!s) {
        s = std::make_shared<Slot>();
        s->seq = seq;
        s->desc = desc;
        s->first_rank = rank;
        s->present.assign(size_, 0);
        s->args.resize(size_);
      } else if (std::string diff = desc.DiffAgainst(s->desc); !diff.empty()) {
        return FailLocked(absl::InvalidArgumentError(absl::StrCat(
            "group ", name_, " (local): call #", seq, " differs across ranks: rank ", rank,
            " issued ", desc.ToString(), ", rank ", s->first_rank, " issued ", s->desc.ToString(),
            " (", diff, ")")));
      }
      slot = s;
      slot->args[rank] = std::move(args);
      slot->present[rank] = 1;
      if (++slot->arrived < size_) return slot;
      slot->state = Slot::State::kRunning;
    }
    // Last arrival: every rank's buffers are valid until the slot is done
    // (Depart waits for running slots). The work happens on the world's
    // communication thread; this call returns at once.
    progress_->Post([self = shared_from_this(), slot]() { self->Complete(slot); });
    return slot;
  }

  // On the communication thread.
  void Complete(const std::shared_ptr<Slot>& slot) {
    absl::Status st = Execute(*slot);
    absl::MutexLock l(&mu_);
    slot->state = Slot::State::kDone;
    slot->status = st;
    slots_.erase(slot->seq);
    if (!st.ok()) FailLocked(st).IgnoreError();
    cv_.SignalAll();
  }

  absl::Status WaitSlot(const Slot& slot, absl::Duration timeout) {
    absl::Time deadline = absl::Now() + (timeout == absl::InfiniteDuration() ? timeout_ : timeout);
    absl::MutexLock l(&mu_);
    while (slot.state != Slot::State::kDone) {
      if (slot.state == Slot::State::kRunning) {
        cv_.Wait(&mu_);  // everyone arrived; the communication thread is on it
        continue;
      }
      if (cv_.WaitWithDeadline(&mu_, deadline) && slot.state == Slot::State::kPending) {
        std::vector<int> missing;
        for (int r = 0; r < size_; ++r) {
          if (!slot.present[r]) missing.push_back(r);
        }
        return FailLocked(absl::DeadlineExceededError(absl::StrCat(
            Prefix(slot.desc, slot.seq), "timed out after ",
            absl::FormatDuration(timeout == absl::InfiniteDuration() ? timeout_ : timeout),
            " waiting for rank(s) [", absl::StrJoin(missing, ", "), "]")));
      }
    }
    return slot.status;
  }

  bool SlotDone(const Slot& slot) {
    absl::MutexLock l(&mu_);
    return slot.state == Slot::State::kDone;
  }

  // ---- point to point ----
  absl::StatusOr<std::shared_ptr<P2P>> PostP2P(bool is_send, int self, int peer, int tag,
                                               const void* send, void* recv, int64_t count,
                                               DType dtype) {
    auto op = std::make_shared<P2P>();
    op->is_send = is_send;
    op->src = is_send ? self : peer;
    op->dst = is_send ? peer : self;
    op->tag = tag;
    op->send = send;
    op->recv = recv;
    op->count = count;
    op->dtype = dtype;
    absl::MutexLock l(&mu_);
    if (!failure_.ok()) return failure_;
    if (departed_[peer]) {
      return FailLocked(absl::UnavailableError(absl::StrCat(
          "group ", name_, " (local): ", is_send ? "send to" : "recv from", " rank ", peer,
          ": that rank has left the group")));
    }
    auto key = std::make_tuple(op->src, op->dst, pair_by_order_ ? 0 : tag);
    auto& other = is_send ? recvs_[key] : sends_[key];
    if (other.empty()) {
      (is_send ? sends_[key] : recvs_[key]).push_back(op);
      return op;
    }
    std::shared_ptr<P2P> match = other.front();
    other.pop_front();
    P2P& s = is_send ? *op : *match;
    P2P& r = is_send ? *match : *op;
    // Paired by order, the tags must still agree: code that would pair
    // differently by tag posts its two sides in different orders, which NCCL
    // (tags unseen) would deliver to the wrong buffers without an error.
    if (s.count != r.count || s.dtype != r.dtype || s.tag != r.tag) {
      absl::Status st = absl::InvalidArgumentError(absl::StrCat(
          "group ", name_, " (local): send from rank ", s.src, " to rank ", s.dst, " tag ", s.tag,
          " has count=", s.count, ", dtype=", DTypeName(s.dtype), " but the recv",
          pair_by_order_ ? " it pairs with by order (NCCL's rule)" : "", " has tag ", r.tag,
          ", count=", r.count, ", dtype=", DTypeName(r.dtype)));
      s.status = r.status = st;
      s.done = r.done = true;
      FailLocked(st).IgnoreError();
      return op;
    }
    s.matched = r.matched = true;
    ++p2p_running_[s.src];
    ++p2p_running_[s.dst];
    progress_->Post([self = shared_from_this(), send = is_send ? op : match,
                     recv = is_send ? match : op]() { self->CompleteP2P(*send, *recv); });
    return op;
  }

  // On the communication thread: both buffers are valid until done.
  void CompleteP2P(P2P& s, P2P& r) {
    if (s.count > 0) std::memcpy(r.recv, s.send, s.count * SizeOf(s.dtype));
    absl::MutexLock l(&mu_);
    s.done = r.done = true;
    --p2p_running_[s.src];
    --p2p_running_[s.dst];
    cv_.SignalAll();
  }

  absl::Status WaitP2P(const P2P& op, absl::Duration timeout) {
    absl::Duration t = timeout == absl::InfiniteDuration() ? timeout_ : timeout;
    absl::Time deadline = absl::Now() + t;
    absl::MutexLock l(&mu_);
    while (!op.done) {
      if (op.matched) {
        cv_.Wait(&mu_);  // both sides posted: the copy is queued
        continue;
      }
      if (cv_.WaitWithDeadline(&mu_, deadline) && !op.done && !op.matched) {
        const bool is_send = op.is_send;
        return FailLocked(absl::DeadlineExceededError(absl::StrCat(
            "group ", name_, " (local): ", is_send ? "send" : "recv", "(count=", op.count,
            ", dtype=", DTypeName(op.dtype), ", tag=", op.tag, ") ", is_send ? "to" : "from",
            " rank ", is_send ? op.dst : op.src, " timed out after ", absl::FormatDuration(t),
            ": rank ", is_send ? op.dst : op.src, " never posted the matching ",
            is_send ? "recv" : "send")));
      }
    }
    return op.status;
  }

  bool P2PDone(const P2P& op) {
    absl::MutexLock l(&mu_);
    return op.done;
  }

  // Called when rank `rank`'s communicator is destroyed.
  void Depart(int rank) {
    absl::MutexLock l(&mu_);
    departed_[rank] = 1;
    // Operations using this rank's buffers must not outlive it.
    auto running = [this, rank]() {
      for (auto& [seq, s] : slots_) {
        if (s->present[rank] && s->state == Slot::State::kRunning) return true;
      }
      return p2p_running_[rank] > 0;
    };
    while (running()) cv_.Wait(&mu_);
    bool pending = !slots_.empty();
    for (auto* q : {&sends_, &recvs_}) {
      for (auto& [key, dq] : *q) {
        if (!dq.empty() && (std::get<0>(key) == rank || std::get<1>(key) == rank)) pending = true;
      }
    }
    if (pending) {
      std::string what = slots_.empty() ? "a send/recv" : slots_.begin()->second->desc.ToString();
      FailLocked(absl::UnavailableError(absl::StrCat(
          "group ", name_, " (local): rank ", rank, " left the group (its communicator was ",
          "destroyed) while ", what, " was pending")))
          .IgnoreError();
    }
  }

 private:
  // Marks the group failed (first error wins), fails everything pending and
  // wakes all waiters. Returns the group's failure.
  absl::Status FailLocked(absl::Status st) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (failure_.ok()) failure_ = st;
    for (auto it = slots_.begin(); it != slots_.end();) {
      if (it->second->state == Slot::State::kPending) {
        it->second->state = Slot::State::kDone;
        it->second->status = failure_;
        it = slots_.erase(it);
      } else {
        ++it;
      }
    }
    for (auto* q : {&sends_, &recvs_}) {
      for (auto& [key, dq] : *q) {
        for (auto& op : dq) {
          op->done = true;
          op->status = failure_;
        }
      }
      q->clear();
    }
    cv_.SignalAll();
    return failure_;
  }

  absl::Status Execute(Slot& slot);

  const std::string name_;
  const int size_;
  const absl::Duration timeout_;
  const bool pair_by_order_;  // LocalOptions::p2p_pair_by_order
  const std::shared_ptr<ProgressThread> progress_;
  absl::Mutex mu_;
  absl::CondVar cv_;
  absl::Status failure_ ABSL_GUARDED_BY(mu_);
  std::vector<char> departed_ ABSL_GUARDED_BY(mu_);
  std::vector<int> p2p_running_ ABSL_GUARDED_BY(mu_);  // queued copies per rank
  std::map<uint64_t, std::shared_ptr<Slot>> slots_ ABSL_GUARDED_BY(mu_);
  using Key = std::tuple<int, int, int>;
  std::map<Key, std::deque<std::shared_ptr<P2P>>> sends_ ABSL_GUARDED_BY(mu_);
  std::map<Key, std::deque<std::shared_ptr<P2P>>> recvs_ ABSL_GUARDED_BY(mu_);
};

// Performs a collective with every rank's arguments in hand. Reads all
// inputs before writing any output where an output may alias an input.
absl::Status Group::Execute(Slot& slot) {
  const OpDesc& d = slot.desc;
  const int n = size_;
  const size_t es = SizeOf(d.dtype);
  const size_t bytes = static_cast<size_t>(d.count) * es;
  auto& a = slot.args;
  switch (d.kind) {
    case OpKind::kAllGather:
      if (bytes == 0) return absl::OkStatus();
      for (int i = 0; i < n; ++i) {
        for (int r = 0; r < n; ++r) {
          char* dst = static_cast<char*>(a[r].recv) + i * bytes;
          if (dst != a[i].send) std::memmove(dst, a[i].send, bytes);
        }
      }
      return absl::OkStatus();
    case OpKind::kReduceScatter: {
      if (bytes == 0) return absl::OkStatus();
      DType wide = internal::WideType(d.dtype);
      std::vector<std::vector<char>> acc(n, std::vector<char>(d.count * SizeOf(wide)));
      for (int r = 0; r < n; ++r) {
        internal::Widen(d.dtype, static_cast<const char*>(a[0].send) + r * bytes, acc[r].data(),
                        d.count);
        for (int i = 1; i < n; ++i) {
          internal::CombineNarrow(d.dtype, d.op, acc[r].data(),
                                  static_cast<const char*>(a[i].send) + r * bytes, d.count);
        }
      }
      for (int r = 0; r < n; ++r) {
        internal::Finish(d.dtype, d.op, n, acc[r].data(), a[r].recv, d.count);
      }
      return absl::OkStatus();
    }
    case OpKind::kAllReduce: {
      if (bytes == 0) return absl::OkStatus();
      DType wide = internal::WideType(d.dtype);
      std::vector<char> acc(d.count * SizeOf(wide));
      internal::Widen(d.dtype, a[0].send, acc.data(), d.count);
      for (int i = 1; i < n; ++i) internal::CombineNarrow(d.dtype, d.op, acc.data(), a[i].send, d.count);
      for (int r = 0; r < n; ++r) internal::Finish(d.dtype, d.op, n, acc.data(), a[r].recv, d.count);
      return absl::OkStatus();
    }
    case OpKind::kBroadcast:
      if (bytes == 0) return absl::OkStatus();
      for (int r = 0; r < n; ++r) {
        if (r != d.root) std::memcpy(a[r].recv, a[d.root].recv, bytes);
      }
      return absl::OkStatus();
    case OpKind::kAllToAll:
      if (bytes == 0) return absl::OkStatus();
      for (int i = 0; i < n; ++i) {
        for (int r = 0; r < n; ++r) {
          std::memcpy(static_cast<char*>(a[r].recv) + i * bytes,
                      static_cast<const char*>(a[i].send) + r * bytes, bytes);
        }
      }
      return absl::OkStatus();
    case OpKind::kAllToAllV:
      for (int i = 0; i < n; ++i) {
        for (int r = 0; r < n; ++r) {
          if (a[i].send_counts[r] != a[r].recv_counts[i]) {
            return absl::InvalidArgumentError(absl::StrCat(
                Prefix(d, slot.seq), "rank ", i, " sends ", a[i].send_counts[r], " elements to rank ",
                r, " but rank ", r, " expects ", a[r].recv_counts[i]));
          }
        }
      }
      for (int i = 0; i < n; ++i) {
        for (int r = 0; r < n; ++r) {
          int64_t c = a[i].send_counts[r];
          if (c == 0) continue;
          std::memcpy(static_cast<char*>(a[r].recv) + a[r].recv_displs[i] * es,
                      static_cast<const char*>(a[i].send) + a[i].send_displs[r] * es, c * es);
        }
      }
      return absl::OkStatus();
    case OpKind::kBarrier:
      return absl::OkStatus();
    case OpKind::kSplit: {
      GTP_RETURN_IF_ERROR(internal::CheckGroups(a[0].groups, n));
      for (const auto& g : a[0].groups) {
        slot.children.push_back(
            std::make_shared<Group>(internal::SubGroupName(a[0].name, g), g.size(), timeout_,
                                    progress_, pair_by_order_));
      }
      return absl::OkStatus();
    }
    default:
      return absl::InternalError(absl::StrCat(Prefix(d, slot.seq), "not a collective"));
  }
}

class SlotWork : public Work {
 public:
  SlotWork(std::shared_ptr<Group> g, std::shared_ptr<Slot> s) : g_(std::move(g)), s_(std::move(s)) {}
  absl::Status Wait(absl::Duration timeout) override { return g_->WaitSlot(*s_, timeout); }
  bool Test() override { return g_->SlotDone(*s_); }
  const Slot& slot() const { return *s_; }

 private:
  std::shared_ptr<Group> g_;
  std::shared_ptr<Slot> s_;
};

class P2PWork : public Work {
 public:
  P2PWork(std::shared_ptr<Group> g, std::shared_ptr<P2P> op) : g_(std::move(g)), op_(std::move(op)) {}
  absl::Status Wait(absl::Duration timeout) override { return g_->WaitP2P(*op_, timeout); }
  bool Test() override { return g_->P2PDone(*op_); }

 private:
  std::shared_ptr<Group> g_;
  std::shared_ptr<P2P> op_;
};

class LocalCommunicator : public Communicator {
 public:
  LocalCommunicator(std::shared_ptr<Group> group, int rank) : g_(std::move(group)), rank_(rank) {}
  ~LocalCommunicator() override { g_->Depart(rank_); }

  int rank() const override { return rank_; }
  int size() const override { return g_->size(); }
  std::string name() const override { return g_->name(); }
  std::string backend() const override { return "local"; }
  absl::Duration timeout() const override { return g_->timeout(); }
  bool p2p_pairs_by_tag() const override { return !g_->pair_by_order(); }

  absl::StatusOr<WorkPtr> AllGather(const void* send, void* recv, int64_t count,
                                    DType dtype) override {
    OpDesc d{OpKind::kAllGather, count, dtype};
    GTP_RETURN_IF_ERROR(Check(d, internal::CheckCount(count)));
    GTP_RETURN_IF_ERROR(Check(d, internal::CheckBuffer(count, send, "send")));
    GTP_RETURN_IF_ERROR(Check(d, internal::CheckBuffer(count, recv, "recv")));
    return Post(d, send, recv);
  }
  absl::StatusOr<WorkPtr> ReduceScatter(const void* send, void* recv, int64_t count, DType dtype,
                                        ReduceOp op) override {
    OpDesc d{OpKind::kReduceScatter, count, dtype, op};
    GTP_RETURN_IF_ERROR(Check(d, internal::CheckCount(count)));
    GTP_RETURN_IF_ERROR(Check(d, internal::CheckReducible(dtype, op)));
    GTP_RETURN_IF_ERROR(Check(d, internal::CheckBuffer(count, send, "send")));
    GTP_RETURN_IF_ERROR(Check(d, internal::CheckBuffer(count, recv, "recv")));
    return Post(d, send, recv);
  }
  absl::StatusOr<WorkPtr> AllReduce(const void* send, void* recv, int64_t count, DType dtype,
                                    ReduceOp op) override {
    OpDesc d{OpKind::kAllReduce, count, dtype, op};
    GTP_RETURN_IF_ERROR(Check(d, internal::CheckCount(count)));
    GTP_RETURN_IF_ERROR(Check(d, internal::CheckReducible(dtype, op)));
    GTP_RETURN_IF_ERROR(Check(d, internal::CheckBuffer(count, send, "send")));
    GTP_RETURN_IF_ERROR(Check(d, internal::CheckBuffer(count, recv, "recv")));
    return Post(d, send, recv);
  }
  absl::StatusOr<WorkPtr> Broadcast(void* buf, int64_t count, DType dtype, int root) override {
    OpDesc d{OpKind::kBroadcast, count, dtype, ReduceOp::kSum, root};
    GTP_RETURN_IF_ERROR(Check(d, internal::CheckCount(count)));
    GTP_RETURN_IF_ERROR(Check(d, internal::CheckRoot(root, size())));
    GTP_RETURN_IF_ERROR(Check(d, internal::CheckBuffer(count, buf, "buf")));
    return Post(d, buf, buf);
  }
  absl::StatusOr<WorkPtr> AllToAll(const void* send, void* recv, int64_t count,
                                   DType dtype) override {
    OpDesc d{OpKind::kAllToAll, count, dtype};
    GTP_RETURN_IF_ERROR(Check(d, internal::CheckCount(count)));
    GTP_RETURN_IF_ERROR(Check(d, internal::CheckBuffer(count, send, "send")));
    GTP_RETURN_IF_ERROR(Check(d, internal::CheckBuffer(count, recv, "recv")));
    int64_t total = count * size() * static_cast<int64_t>(SizeOf(dtype));
    GTP_RETURN_IF_ERROR(Check(d, internal::CheckNoOverlap(send, total, recv, total, "all_to_all")));
    return Post(d, send, recv);
  }
  absl::StatusOr<WorkPtr> AllToAllV(const void* send, const std::vector<int64_t>& send_counts,
                                    const std::vector<int64_t>& send_displs, void* recv,
                                    const std::vector<int64_t>& recv_counts,
                                    const std::vector<int64_t>& recv_displs,
                                    DType dtype) override {
    OpDesc d{OpKind::kAllToAllV, -1, dtype};
    GTP_RETURN_IF_ERROR(Check(d, internal::CheckAllToAllV(size(), send_counts, send_displs,
                                                          recv_counts, recv_displs)));
    RankArgs args;
    args.send = send;
    args.recv = recv;
    args.send_counts = send_counts;
    args.send_displs = send_displs;
    args.recv_counts = recv_counts;
    args.recv_displs = recv_displs;
    return PostArgs(d, std::move(args));
  }
  absl::StatusOr<WorkPtr> Send(const void* buf, int64_t count, DType dtype, int peer,
                               int tag) override {
    OpDesc d{OpKind::kSend, count, dtype};
    GTP_RETURN_IF_ERROR(Check(d, internal::CheckCount(count)));
    GTP_RETURN_IF_ERROR(Check(d, internal::CheckPeer(peer, size())));
    GTP_RETURN_IF_ERROR(Check(d, internal::CheckTag(tag)));
    GTP_RETURN_IF_ERROR(Check(d, internal::CheckBuffer(count, buf, "buf")));
    GTP_ASSIGN_OR_RETURN(auto op, g_->PostP2P(true, rank_, peer, tag, buf, nullptr, count, dtype));
    return WorkPtr(std::make_unique<P2PWork>(g_, std::move(op)));
  }
  absl::StatusOr<WorkPtr> Recv(void* buf, int64_t count, DType dtype, int peer, int tag) override {
    OpDesc d{OpKind::kRecv, count, dtype};
    GTP_RETURN_IF_ERROR(Check(d, internal::CheckCount(count)));
    GTP_RETURN_IF_ERROR(Check(d, internal::CheckPeer(peer, size())));
    GTP_RETURN_IF_ERROR(Check(d, internal::CheckTag(tag)));
    GTP_RETURN_IF_ERROR(Check(d, internal::CheckBuffer(count, buf, "buf")));
    GTP_ASSIGN_OR_RETURN(auto op, g_->PostP2P(false, rank_, peer, tag, nullptr, buf, count, dtype));
    return WorkPtr(std::make_unique<P2PWork>(g_, std::move(op)));
  }
  absl::StatusOr<WorkPtr> Barrier() override {
    return Post(OpDesc{OpKind::kBarrier}, nullptr, nullptr);
  }

  absl::StatusOr<std::unique_ptr<Communicator>> Split(const std::vector<std::vector<int>>& groups,
                                                      const std::string& name) override {
    OpDesc d{OpKind::kSplit};
    d.extra = internal::HashGroups(groups, name);
    GTP_RETURN_IF_ERROR(Check(d, internal::CheckGroups(groups, size())));
    RankArgs args;
    args.groups = groups;
    args.name = name;
    GTP_ASSIGN_OR_RETURN(WorkPtr w, PostArgs(d, std::move(args)));
    GTP_RETURN_IF_ERROR(w->Wait());
    const Slot& slot = static_cast<SlotWork&>(*w).slot();
    for (size_t g = 0; g < groups.size(); ++g) {
      for (size_t i = 0; i < groups[g].size(); ++i) {
        if (groups[g][i] == rank_) {
          return std::unique_ptr<Communicator>(
              std::make_unique<LocalCommunicator>(slot.children[g], static_cast<int>(i)));
        }
      }
    }
    return std::unique_ptr<Communicator>();
  }

 private:
  absl::Status Check(const OpDesc& d, absl::Status st) const {
    if (st.ok()) return st;
    return absl::Status(st.code(), absl::StrCat("group ", g_->name(), " (local): ", d.ToString(),
                                                ": ", st.message()));
  }
  absl::StatusOr<WorkPtr> Post(const OpDesc& d, const void* send, void* recv) {
    RankArgs args;
    args.send = send;
    args.recv = recv;
    return PostArgs(d, std::move(args));
  }
  absl::StatusOr<WorkPtr> PostArgs(const OpDesc& d, RankArgs args) {
    GTP_ASSIGN_OR_RETURN(auto slot, g_->Arrive(rank_, next_seq_++, d, std::move(args)));
    return WorkPtr(std::make_unique<SlotWork>(g_, std::move(slot)));
  }

  std::shared_ptr<Group> g_;
  const int rank_;
  uint64_t next_seq_ = 0;
};

}  // namespace

std::vector<std::unique_ptr<Communicator>> CreateLocalWorld(int size, const LocalOptions& options) {
  GTP_CHECK(size >= 1, "local world size must be >= 1, got ", size);
  auto group = std::make_shared<Group>(options.name, size, options.timeout,
                                       std::make_shared<ProgressThread>(), options.p2p_pair_by_order);
  std::vector<std::unique_ptr<Communicator>> out;
  for (int r = 0; r < size; ++r) out.push_back(std::make_unique<LocalCommunicator>(group, r));
  return out;
}

absl::Status RunRanks(int size, const std::function<absl::Status(Communicator&)>& fn,
                      const LocalOptions& options) {
  auto comms = CreateLocalWorld(size, options);
  std::vector<absl::Status> results(size);
  std::vector<std::thread> threads;
  threads.reserve(size);
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r, comm = std::move(comms[r])]() mutable {
      try {
        results[r] = fn(*comm);
      } catch (const std::exception& e) {
        results[r] = absl::InternalError(absl::StrCat("exception: ", e.what()));
      } catch (...) {
        results[r] = absl::InternalError("unknown exception");
      }
      comm.reset();  // peers waiting for this rank now fail instead of hanging
    });
  }
  for (auto& t : threads) t.join();
  // One entry per distinct error, with the ranks that gave it folded in
  // ("ranks 0-3: …"; it used to repeat the same message once per rank), in
  // the order of each error's first rank.
  std::vector<std::pair<std::string, std::vector<int>>> errors;
  absl::StatusCode code = absl::StatusCode::kOk;
  for (int r = 0; r < size; ++r) {
    if (results[r].ok()) continue;
    if (code == absl::StatusCode::kOk) code = results[r].code();
    const std::string msg = results[r].ToString();
    auto it = std::find_if(errors.begin(), errors.end(), [&](const auto& e) { return e.first == msg; });
    if (it == errors.end()) {
      errors.push_back({msg, {r}});
    } else {
      it->second.push_back(r);
    }
  }
  if (errors.empty()) return absl::OkStatus();
  std::vector<std::string> parts;
  for (const auto& [msg, ranks] : errors) parts.push_back(absl::StrCat(internal::RankList(ranks), ": ", msg));
  return absl::Status(code, absl::StrJoin(parts, "; "));
}

}  // namespace gtp::comm
