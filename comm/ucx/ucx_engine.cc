#include "comm/ucx/ucx_engine.h"

#include <poll.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "comm/ucx/ucs_status.h"
#include "core/status.h"

namespace gtp::comm::ucx_internal {
namespace {

constexpr uint64_t kKindCollective = 0, kKindP2P = 1, kKindAbort = 2;

ucp_tag_t Head(uint32_t gid, uint64_t kind) {
  return (static_cast<uint64_t>(gid) << 50) | (kind << 48);
}
constexpr ucp_tag_t kKindMask = 3ull << 48;
// Abort tags: set when the receiver is not in the failed group.
constexpr ucp_tag_t kNoticeBit = 1;

// Iterations without progress before the thread sleeps on the event fd.
constexpr int kSpinsBeforeSleep = 256;
// How long a failed endpoint's peer gets to deliver its abort message.
constexpr absl::Duration kPeerGoneGrace = absl::Milliseconds(200);
// A failed op still waits this long for its posted sends to a live peer: a
// rendezvous send whose receive the peer had already matched reads the
// caller's buffer when the peer's ready-to-receive arrives, so returning at
// once would let the caller free memory UCX is about to read (ASan found it:
// UcxFaults.MismatchedCountsFailEveryRank with calls cut across lanes). A
// send the peer never matched (it cancelled its receives when it failed)
// never completes; after this it is left to the orphan list, and nothing can
// read it any more.
constexpr absl::Duration kSendDrainGrace = absl::Seconds(1);

}  // namespace

std::string Group::Peer(int r) const {
  return absl::StrCat("peer ", r, " (world rank ", world[r], ")");
}

// ---- scratch -------------------------------------------------------------------------

std::shared_ptr<char> ScratchPool::Get(size_t bytes) {
  bytes = std::max<size_t>(bytes, 64);
  std::unique_ptr<char[]> buf;
  size_t size = bytes;
  {
    absl::MutexLock l(&mu_);
    auto it = free_.lower_bound(bytes);
    if (it != free_.end() && it->first <= 2 * bytes) {
      size = it->first;
      buf = std::move(it->second);
      cached_ -= size;
      free_.erase(it);
    }
  }
  if (!buf) buf.reset(new char[bytes]);
  std::weak_ptr<ScratchPool> pool = weak_from_this();
  return std::shared_ptr<char>(buf.release(), [pool, size](char* p) {
    if (auto self = pool.lock()) {
      absl::MutexLock l(&self->mu_);
      if (self->cached_ + size <= kMaxCached) {
        self->cached_ += size;
        self->free_.emplace(size, std::unique_ptr<char[]>(p));
        return;
      }
    }
    delete[] p;
  });
}

// ---- Op ------------------------------------------------------------------------------

namespace {
uint16_t CollSig(const internal::OpDesc& d) { return d.Signature(); }
uint8_t P2PSig(const internal::OpDesc& d) {
  internal::OpDesc s = d;
  s.kind = internal::OpKind::kSend;  // a send and its recv must agree
  return static_cast<uint8_t>(s.Signature() & 0xff);
}
}  // namespace

void Op::AddSend(Step& step, int peer, const void* buf, size_t bytes) {
  Xfer x;
  x.op = this;
  x.is_send = true;
  x.peer = peer;
  x.buf = const_cast<void*>(buf);
  x.bytes = bytes;
  const uint64_t src = static_cast<uint64_t>(group->rank);
  if (user_tag >= 0) {
    x.tag = Head(group->gid, kKindP2P) | (src << 32) | (static_cast<uint64_t>(user_tag) << 8) |
            P2PSig(desc);
  } else {
    x.tag = Head(group->gid, kKindCollective) | (static_cast<uint64_t>(seq) << 32) | (src << 16) |
            CollSig(desc);
  }
  step.xfers.push_back(x);
}

void Op::AddRecv(Step& step, int peer, void* buf, size_t bytes, std::function<void()> task,
                 int after) {
  Xfer x;
  x.op = this;
  x.peer = peer;
  x.buf = buf;
  x.bytes = bytes;
  x.task = std::move(task);
  x.after = after;
  const uint64_t src = static_cast<uint64_t>(peer);
  if (user_tag >= 0) {
    x.tag = Head(group->gid, kKindP2P) | (src << 32) | (static_cast<uint64_t>(user_tag) << 8) |
            P2PSig(desc);
    x.mask = ~0xffull;
  } else {
    x.tag = Head(group->gid, kKindCollective) | (static_cast<uint64_t>(seq) << 32) | (src << 16) |
            CollSig(desc);
    x.mask = ~0xffffull;
  }
  step.xfers.push_back(x);
}

std::string Op::Label() const {
  std::string s = absl::StrCat("group ", group->name, " (ucx): ", desc.ToString());
  if (user_tag >= 0) return absl::StrCat(s, " tag ", user_tag);
  return absl::StrCat(s, " #", seq);
}

// ---- creation / teardown ---------------------------------------------------------------

Engine::Engine(std::shared_ptr<KeyValueStore> store, std::unique_ptr<TcpStoreServer> server,
               const Config& config)
    : config_(config), server_(std::move(server)), store_(std::move(store)) {
  // Peers still reading a failure from the store should see it.
  if (server_) server_->set_linger(std::min(config_.connect_timeout, absl::Seconds(5)));
}

absl::StatusOr<std::shared_ptr<Engine>> Engine::Create(std::shared_ptr<KeyValueStore> store,
                                                       std::unique_ptr<TcpStoreServer> server,
                                                       const Config& config) {
  if (config.size < 1 || config.size > kMaxWorldSize || config.rank < 0 ||
      config.rank >= config.size) {
    return absl::InvalidArgumentError(
        absl::StrCat("ucx: bad rank ", config.rank, " / size ", config.size));
  }
  std::shared_ptr<Engine> e(new Engine(std::move(store), std::move(server), config));
  GTP_RETURN_IF_ERROR(e->Connect());
  e->thread_ = std::thread([p = e.get()] { p->Loop(); });
  for (int i = 0; i < std::max(1, config.reduce_threads); ++i) {
    e->task_threads_.emplace_back([p = e.get()] { p->TaskLoop(); });
  }
  return e;
}

absl::Status Engine::Connect() {
  const std::string where = absl::StrCat("ucx world (rank ", config_.rank, "/", config_.size, ")");
  ucp_config_t* cfg = nullptr;
  GTP_RETURN_IF_ERROR(UcsStatus(ucp_config_read(nullptr, nullptr, &cfg), where + ": ucp_config_read"));
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  params.features = UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP;
  ucp_context_h ctx = nullptr;
  ucs_status_t s = ucp_init(&params, cfg, &ctx);
  ucp_config_release(cfg);
  GTP_RETURN_IF_ERROR(UcsStatus(s, where + ": ucp_init"));
  context_.reset(ctx);

  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SERIALIZED;
  ucp_worker_h w = nullptr;
  GTP_RETURN_IF_ERROR(UcsStatus(ucp_worker_create(ctx, &wp, &w), where + ": ucp_worker_create"));
  worker_.reset(w);
  GTP_RETURN_IF_ERROR(UcsStatus(ucp_worker_get_efd(w, &worker_fd_), where + ": ucp_worker_get_efd"));
  wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake_fd_ < 0) return absl::InternalError(where + ": eventfd failed");

  ucp_address_t* addr = nullptr;
  size_t len = 0;
  GTP_RETURN_IF_ERROR(UcsStatus(ucp_worker_get_address(w, &addr, &len), where + ": get_address"));
  std::string mine(reinterpret_cast<const char*>(addr), len);
  ucp_worker_release_address(w, addr);

  auto key = [&](int r) { return absl::StrCat(config_.prefix, "/addr/", r); };
  GTP_RETURN_IF_ERROR(store_->Set(key(config_.rank), mine, config_.connect_timeout));
  std::vector<std::string> keys;
  for (int r = 0; r < config_.size; ++r) keys.push_back(key(r));
  absl::Status st = store_->Wait(keys, config_.connect_timeout);
  if (!st.ok()) {
    if (st.code() != absl::StatusCode::kDeadlineExceeded) return st;
    std::vector<int> missing;
    for (int r = 0; r < config_.size; ++r) {
      if (!store_->TryGet(key(r), config_.connect_timeout).ok()) missing.push_back(r);
    }
    return absl::DeadlineExceededError(absl::StrCat(
        where, ": rank(s) [", absl::StrJoin(missing, ", "), "] did not publish a UCX address within ",
        absl::FormatDuration(config_.connect_timeout),
        " (not started, crashed, or given another MASTER_ADDR/MASTER_PORT?)"));
  }
  for (int r = 0; r < config_.size; ++r) {
    GTP_ASSIGN_OR_RETURN(std::string a, store_->Get(key(r), config_.connect_timeout));
    auto p = std::make_unique<Peer>();
    p->engine = this;
    p->world_rank = r;
    ucp_ep_params_t ep{};
    ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                    UCP_EP_PARAM_FIELD_ERR_HANDLER;
    ep.address = reinterpret_cast<const ucp_address_t*>(a.data());
    ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    ep.err_handler.cb = &Engine::OnEpError;
    ep.err_handler.arg = p.get();
    GTP_RETURN_IF_ERROR(UcsStatus(ucp_ep_create(w, &ep, &p->ep),
                                  absl::StrCat(where, ": connecting to world rank ", r)));
    ucp_ep_params_t data{};
    data.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
    data.address = ep.address;
    data.err_mode = UCP_ERR_HANDLING_MODE_NONE;
    if (config_.shared_memory && ucp_ep_create(w, &data, &p->data_ep) != UCS_OK) {
      p->data_ep = nullptr;
    }
    peers_.push_back(std::move(p));
  }
  return absl::OkStatus();
}

Engine::~Engine() {
  bool healthy;
  {
    absl::MutexLock l(&mu_);
    healthy = failures_.empty();
  }
  for (auto& p : peers_) healthy = healthy && p->error == UCS_OK;
  // Goodbye through the store: nobody closes endpoints while a peer may
  // still be receiving, and rank 0 keeps the store up until all have left.
  // A failed rank still says goodbye (so healthy peers do not wait for it)
  // but does not wait for the others.
  if (thread_.joinable()) {
    auto bye = [&](const char* what, int r) { return absl::StrCat(config_.prefix, "/", what, "/", r); };
    absl::Duration t = std::min(config_.timeout, absl::Seconds(30));
    std::vector<std::string> keys, keys2;
    for (int r = 0; r < config_.size; ++r) keys.push_back(bye("bye", r));
    for (int r = 1; r < config_.size; ++r) keys2.push_back(bye("bye2", r));
    if (store_->Set(bye("bye", config_.rank), "", healthy ? t : absl::Seconds(1)).ok() && healthy &&
        store_->Wait(keys, t).ok()) {
      if (config_.rank != 0) {
        store_->Set(bye("bye2", config_.rank), "", t).IgnoreError();
      } else {
        store_->Wait(keys2, t).IgnoreError();
      }
    }
  }
  if (thread_.joinable()) {
    {
      absl::MutexLock l(&mu_);
      stop_ = true;
    }
    uint64_t one = 1;
    (void)!write(wake_fd_, &one, sizeof(one));
    thread_.join();
  }
  if (!task_threads_.empty()) {
    {
      absl::MutexLock l(&mu_);
      stop_ = true;
      cv_.SignalAll();
    }
    for (std::thread& t : task_threads_) t.join();
  }
  if (worker_) {
    ucp_worker_h w = worker_.get();
    if (abort_rx_.req != nullptr && !abort_rx_.done) ucp_request_cancel(w, abort_rx_.req);
    // Abort messages must reach the peers before this process goes away,
    // or they would only see a vanished peer instead of the reason.
    absl::Time until = absl::Now() + absl::Seconds(1);
    auto aborts_pending = [&] {
      for (auto& a : aborts_out_) {
        if (ucp_request_check_status(a->req) == UCS_INPROGRESS) return true;
      }
      return false;
    };
    while (aborts_pending() && absl::Now() < until) ucp_worker_progress(w);
    // Flush-close live endpoints (delivers what is in flight), force-close
    // failed ones.
    std::vector<void*> closing;
    for (auto& p : peers_) {
      ucp_request_param_t prm{};
      prm.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
      prm.flags = p->error != UCS_OK ? UCP_EP_CLOSE_FLAG_FORCE : 0;
      for (ucp_ep_h e : {p->data_ep, p->ep}) {
        if (e == nullptr) continue;
        void* r = ucp_ep_close_nbx(e, &prm);
        if (r != nullptr && !UCS_PTR_IS_ERR(r)) closing.push_back(r);
      }
    }
    until = absl::Now() + absl::Seconds(2);
    auto pending = [&] {
      for (void* r : closing) {
        if (ucp_request_check_status(r) == UCS_INPROGRESS) return true;
      }
      if (abort_rx_.req != nullptr && !abort_rx_.done) return true;
      for (auto* list : {&orphans_, &active_}) {
        for (auto& op : *list) {
          if (op->outstanding > 0) return true;
        }
      }
      for (auto& a : aborts_out_) {
        if (ucp_request_check_status(a->req) == UCS_INPROGRESS) return true;
      }
      return false;
    };
    // Whatever is still in flight (a failed group's transfers) is cancelled.
    for (auto* list : {&orphans_, &active_}) {
      for (auto& op : *list) {
        for (auto& st : op->steps) {
          for (auto& x : st.xfers) {
            if (x.req != nullptr && !x.done) ucp_request_cancel(w, x.req);
          }
        }
      }
    }
    while (pending() && absl::Now() < until) ucp_worker_progress(w);
    for (void* r : closing) ucp_request_free(r);
    if (abort_rx_.req != nullptr) ucp_request_free(abort_rx_.req);
    for (auto& a : aborts_out_) {
      if (a->req != nullptr) ucp_request_free(a->req);
    }
    for (auto* list : {&orphans_, &active_}) {
      for (auto& op : *list) {
        for (auto& st : op->steps) {
          for (auto& x : st.xfers) {
            if (x.req != nullptr) ucp_request_free(x.req);
            x.req = nullptr;
          }
        }
      }
    }
  }
  worker_.reset();
  context_.reset();
  if (wake_fd_ >= 0) close(wake_fd_);
}

// ---- user-thread API ---------------------------------------------------------------------

absl::Status Engine::Submit(std::shared_ptr<Op> op) {
  {
    absl::MutexLock l(&mu_);
    auto it = failures_.find(op->group->gid);
    if (it != failures_.end()) return it->second;
    incoming_.push_back(std::move(op));
  }
  uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof(one));
  return absl::OkStatus();
}

absl::Status Engine::Wait(const std::shared_ptr<Op>& op, absl::Duration timeout) {
  absl::MutexLock l(&mu_);
  absl::Time deadline = absl::Now() + timeout;
  while (!op->finished) {
    if (RunTaskLocked()) continue;  // help: this thread would only sleep
    if (op->timeout_requested) {
      cv_.Wait(&mu_);
    } else if (cv_.WaitWithDeadline(&mu_, deadline) && !op->finished) {
      op->timeout_requested = true;
      op->waited = timeout;
      uint64_t one = 1;
      (void)!write(wake_fd_, &one, sizeof(one));
    }
  }
  return op->status;
}

void Engine::Cancel(const std::shared_ptr<Op>& op, const absl::Status& why) {
  {
    absl::MutexLock l(&mu_);
    if (op->finished || !op->cancel.ok()) return;
    op->cancel = why;
    cancels_.push_back(op);
  }
  uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof(one));
}

bool Engine::Finished(const Op& op) {
  absl::MutexLock l(&mu_);
  return op.finished;
}

absl::Status Engine::GroupFailure(uint32_t gid) {
  absl::MutexLock l(&mu_);
  auto it = failures_.find(gid);
  return it == failures_.end() ? absl::OkStatus() : it->second;
}

void Engine::Register(const std::shared_ptr<Group>& group) {
  absl::MutexLock l(&mu_);
  groups_[group->gid] = group;
}

void Engine::Unregister(uint32_t gid) {
  absl::MutexLock l(&mu_);
  groups_.erase(gid);
}

// ---- tasks ------------------------------------------------------------------------------------

void Engine::QueueTask(const std::shared_ptr<Op>& op, Xfer& x) {
  x.task_queued = true;
  op->tasks_pending.fetch_add(1, std::memory_order_relaxed);
  absl::MutexLock l(&mu_);
  tasks_.push_back({op, &x});
  cv_.Signal();
}

bool Engine::RunTaskLocked() {
  if (tasks_.empty()) return false;
  Task t = std::move(tasks_.front());
  tasks_.pop_front();
  mu_.Unlock();
  t.x->task();
  // Release: the task's writes are visible to whoever sees the op finished
  // or posts a receive into the same buffer.
  t.x->task_done.v.store(true, std::memory_order_release);
  t.op->tasks_pending.fetch_sub(1, std::memory_order_acq_rel);
  uint64_t one = 1;  // the communication thread may post or finish now
  (void)!write(wake_fd_, &one, sizeof(one));
  t.op.reset();
  mu_.Lock();
  return true;
}

void Engine::TaskLoop() {
  absl::MutexLock l(&mu_);
  while (!stop_) {
    if (!RunTaskLocked()) cv_.Wait(&mu_);
  }
}

// ---- communication thread -------------------------------------------------------------------

void Engine::OnEpError(void* arg, ucp_ep_h, ucs_status_t status) {
  auto* p = static_cast<Peer*>(arg);
  if (p->error == UCS_OK) p->error_time = absl::Now();
  p->error = status;
}

void Engine::OnSend(void*, ucs_status_t status, void* user_data) {
  auto* x = static_cast<Xfer*>(user_data);
  x->done = true;
  x->status = status;
  if (x->op != nullptr) --x->op->outstanding;
}

void Engine::OnRecv(void*, ucs_status_t status, const ucp_tag_recv_info_t* info, void* user_data) {
  auto* x = static_cast<Xfer*>(user_data);
  x->done = true;
  x->status = status;
  if (info != nullptr) x->info = *info;
  if (x->op != nullptr) --x->op->outstanding;
}

void Engine::PostAbortRecv() {
  abort_buf_.resize(64 << 10);
  abort_rx_ = Xfer();
  abort_rx_.buf = abort_buf_.data();
  abort_rx_.bytes = abort_buf_.size();
  ucp_request_param_t p{};
  // Completion always through the callback: when an abort was already
  // waiting, an immediate completion leaves recv_info zero (UCX 1.13), and
  // the message would be taken for one from world rank 0 about gid 0.
  p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                   UCP_OP_ATTR_FIELD_RECV_INFO | UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
  p.cb.recv = &Engine::OnRecv;
  p.user_data = &abort_rx_;
  p.recv_info.tag_info = &abort_rx_.info;
  ucs_status_ptr_t r = ucp_tag_recv_nbx(worker_.get(), abort_rx_.buf, abort_rx_.bytes,
                                        kKindAbort << 48, kKindMask, &p);
  if (r == nullptr) {
    abort_rx_.done = true;
  } else if (UCS_PTR_IS_ERR(r)) {
    abort_rx_.done = true;
    abort_rx_.status = UCS_PTR_STATUS(r);
  } else {
    abort_rx_.req = r;
  }
}

void Engine::HandleAbort() {
  if (abort_rx_.req != nullptr) ucp_request_free(abort_rx_.req);
  abort_rx_.req = nullptr;
  if (abort_rx_.status == UCS_OK) {
    uint32_t gid = static_cast<uint32_t>(abort_rx_.info.sender_tag >> 50);
    int src_world = static_cast<int>((abort_rx_.info.sender_tag >> 32) & 0xffff);
    const bool notice = (abort_rx_.info.sender_tag & kNoticeBit) != 0;
    std::string payload(abort_buf_.data(), abort_rx_.info.length);
    size_t nl = payload.find('\n');
    int code = static_cast<int>(absl::StatusCode::kUnknown);
    if (nl != std::string::npos) (void)absl::SimpleAtoi(payload.substr(0, nl), &code);
    std::string reason = nl == std::string::npos ? payload : payload.substr(nl + 1);
    if (src_world >= 0 && src_world < static_cast<int>(peers_.size())) {
      peers_[src_world]->last_words = reason;
    }
    if (!notice) {
      std::string name = absl::StrCat("gid ", gid);
      {
        absl::MutexLock l(&mu_);
        auto it = groups_.find(gid);
        if (it != groups_.end()) name = it->second->name;
      }
      FailGroup(gid,
                absl::Status(static_cast<absl::StatusCode>(code),
                             absl::StrCat("group ", name, " (ucx): world rank ", src_world,
                                          " failed: ", reason)),
                /*tell_peers=*/false);
    }
  }
  if (abort_rx_.status != UCS_ERR_CANCELED) PostAbortRecv();
}

void Engine::SendAborts(const Group& g, const absl::Status& st) {
  std::vector<bool> member(peers_.size(), false);
  for (int w : g.world) member[w] = true;
  for (int w = 0; w < static_cast<int>(peers_.size()); ++w) {
    if (w == config_.rank || peers_[w]->error != UCS_OK) continue;
    auto a = std::make_unique<Abort>();
    a->payload = absl::StrCat(static_cast<int>(st.code()), "\n", st.message());
    ucp_request_param_t p{};
    ucs_status_ptr_t req = ucp_tag_send_nbx(
        peers_[w]->ep, a->payload.data(), a->payload.size(),
        Head(g.gid, kKindAbort) | (static_cast<uint64_t>(config_.rank) << 32) |
            (member[w] ? 0 : kNoticeBit),
        &p);
    if (req != nullptr && !UCS_PTR_IS_ERR(req)) {
      a->req = req;
      aborts_out_.push_back(std::move(a));
    }
  }
}

std::string Engine::Outstanding(const Op& op) const {
  std::vector<std::string> who;
  if (op.cur < op.steps.size()) {
    for (const Xfer& x : op.steps[op.cur].xfers) {
      if (!x.done) {
        std::string w =
            absl::StrCat(op.group->Peer(x.peer), x.is_send ? " (not receiving)" : "");
        // A step's pieces all name the same few peers.
        if (std::find(who.begin(), who.end(), w) == who.end()) who.push_back(std::move(w));
      }
    }
  }
  if (who.empty()) return "no transfer outstanding";
  return absl::StrCat("waiting for ", absl::StrJoin(who, ", "));
}

std::string Engine::Gone(const Group& g, int peer) const {
  const Peer& p = *peers_[g.world[peer]];
  if (!p.last_words.empty()) return absl::StrCat(g.Peer(peer), " exited after it failed: ", p.last_words);
  return absl::StrCat(g.Peer(peer), " is gone (", ucs_status_string(p.error), ")");
}

void Engine::FailGroup(uint32_t gid, const absl::Status& st, bool tell_peers) {
  std::shared_ptr<Group> group;
  {
    absl::MutexLock l(&mu_);
    if (failures_.count(gid)) return;
    failures_[gid] = st;
    auto it = groups_.find(gid);
    if (it != groups_.end()) group = it->second;
  }
  any_failure_ = true;
  for (auto& op : active_) {
    if (op->group->gid != gid || op->failed) continue;
    if (!group) group = op->group;
    op->failed = true;
    op->failed_at = absl::Now();
    if (op->cur < op->steps.size()) {
      for (Xfer& x : op->steps[op->cur].xfers) {
        if (!x.done && !x.is_send && x.req != nullptr) ucp_request_cancel(worker_.get(), x.req);
      }
    }
  }
  if (tell_peers && group) SendAborts(*group, st);
}

void Engine::Finish(const std::shared_ptr<Op>& op, absl::Status st) {
  absl::MutexLock l(&mu_);
  op->finished = true;
  op->status = std::move(st);
  cv_.SignalAll();
}

void Engine::Start(const std::shared_ptr<Op>& op) {
  absl::Status failure = GroupFailure(op->group->gid);
  if (!failure.ok()) {
    Finish(op, failure);
    return;
  }
  active_.push_back(op);
}

void Engine::Post(Op& op) {
  Step& st = op.steps[op.cur];
  if (!st.started) {
    st.started = true;
    st.unposted = st.xfers.size();
    if (st.before) st.before();
  }
  const Group& g = *op.group;
  bool recv_blocked = false;  // receives are posted in order (they match in order)
  for (Xfer& x : st.xfers) {
    if (x.posted) continue;
    if (!x.is_send) {
      recv_blocked = recv_blocked || (x.after >= 0 && !st.xfers[x.after].task_done.v.load(
                                                          std::memory_order_acquire));
      if (recv_blocked) continue;
    }
    x.posted = true;
    --st.unposted;
    Peer& peer = *peers_[g.world[x.peer]];
    if (peer.error != UCS_OK) {
      x.done = true;
      x.status = peer.error;
      continue;
    }
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    p.user_data = &x;
    ucs_status_ptr_t r;
    if (x.is_send) {
      p.cb.send = &Engine::OnSend;
      r = ucp_tag_send_nbx(peer.data_ep != nullptr ? peer.data_ep : peer.ep, x.buf, x.bytes, x.tag,
                           &p);
    } else {
      // Completion always through the callback, which carries the sender's tag.
      p.op_attr_mask |= UCP_OP_ATTR_FIELD_RECV_INFO | UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
      p.cb.recv = &Engine::OnRecv;
      p.recv_info.tag_info = &x.info;
      r = ucp_tag_recv_nbx(worker_.get(), x.buf, x.bytes, x.tag, x.mask, &p);
    }
    if (r == nullptr) {
      x.done = true;
    } else if (UCS_PTR_IS_ERR(r)) {
      x.done = true;
      x.status = UCS_PTR_STATUS(r);
    } else {
      x.req = r;
      ++op.outstanding;
    }
  }
}

absl::Status Engine::CheckXfer(const Op& op, const Xfer& x) {
  const Group& g = *op.group;
  if (x.is_send) {
    ucs_status_t ep_error = peers_[g.world[x.peer]]->error;
    if (x.status != UCS_OK && ep_error != UCS_OK) {
      return absl::UnavailableError(absl::StrCat(op.Label(), ": ", Gone(g, x.peer)));
    }
    return UcsStatus(x.status, absl::StrCat(op.Label(), ": send to ", g.Peer(x.peer), " failed"));
  }
  if (x.status == UCS_ERR_MESSAGE_TRUNCATED) {
    return absl::InvalidArgumentError(absl::StrCat(
        op.Label(), ": the message from ", g.Peer(x.peer), " is larger than the ", x.bytes,
        " bytes this rank expects (calls differ across ranks)"));
  }
  if (x.status != UCS_OK) {
    ucs_status_t ep_error = peers_[g.world[x.peer]]->error;
    if (ep_error != UCS_OK) {
      return absl::UnavailableError(absl::StrCat(op.Label(), ": ", Gone(g, x.peer)));
    }
    return UcsStatus(x.status, absl::StrCat(op.Label(), ": recv from ", g.Peer(x.peer), " failed"));
  }
  const bool p2p = op.user_tag >= 0;
  const uint64_t sig_mask = p2p ? 0xff : 0xffff;
  if ((x.info.sender_tag & sig_mask) != (x.tag & sig_mask)) {
    if (p2p) {
      return absl::InvalidArgumentError(absl::StrCat(
          op.Label(), ": the matching send from ", g.Peer(x.peer), " has another count or dtype"));
    }
    auto kind = static_cast<internal::OpKind>((x.info.sender_tag >> 12) & 0xf);
    return absl::InvalidArgumentError(absl::StrCat(
        op.Label(), ": ", g.Peer(x.peer), " issued ", internal::OpKindName(kind),
        kind == op.desc.kind ? " with other arguments (count/dtype/op/root)" : " instead",
        " (calls differ across ranks)"));
  }
  if (x.info.length != x.bytes) {
    return absl::InvalidArgumentError(absl::StrCat(op.Label(), ": the message from ",
                                                   g.Peer(x.peer), " has ", x.info.length,
                                                   " bytes, this rank expects ", x.bytes,
                                                   " (calls differ across ranks)"));
  }
  return absl::OkStatus();
}

void Engine::Advance(const std::shared_ptr<Op>& op) {
  for (;;) {
    if (op->finished) return;
    if (op->failed) {
      bool transfers_pending = false;
      const bool draining = absl::Now() < op->failed_at + kSendDrainGrace;
      if (op->cur < op->steps.size()) {
        for (Xfer& x : op->steps[op->cur].xfers) {
          if (x.is_send && x.posted && !x.done && draining &&
              peers_[op->group->world[x.peer]]->error == UCS_OK) {
            transfers_pending = true;  // a send that may still read the caller's buffer
          }
          if (x.posted && !x.done && !x.is_send) {
            // A receive UCX had matched before its sender died cannot be
            // cancelled, and shared memory does not always fail it; once the
            // peer is gone past the grace period nothing more can arrive
            // for it, so it is left to the orphan list.
            const Peer& peer = *peers_[op->group->world[x.peer]];
            if (peer.error == UCS_OK || absl::Now() < peer.error_time + kPeerGoneGrace) {
              transfers_pending = true;
            }
          }
          if (x.done && x.req != nullptr) {
            ucp_request_free(x.req);
            x.req = nullptr;
          }
        }
      }
      // Tasks write into the caller's buffers: they end before the op does.
      if (!transfers_pending && op->tasks_pending.load(std::memory_order_acquire) == 0) {
        Finish(op, GroupFailure(op->group->gid));
      }
      return;
    }
    if (op->cur >= op->steps.size()) {
      Finish(op, absl::OkStatus());
      return;
    }
    Step& st = op->steps[op->cur];
    if (!st.started || st.unposted > 0) Post(*op);
    bool all_done = true;
    std::vector<Xfer*>& ready = ready_;  // tasks whose transfer completed
    ready.clear();
    for (Xfer& x : st.xfers) {
      Peer& peer = *peers_[op->group->world[x.peer]];
      if ((!x.done || x.status != UCS_OK) && peer.error != UCS_OK) {
        // A peer that failed on purpose sends an abort with the reason just
        // before it goes; give that message a moment to arrive.
        if (absl::Now() < peer.error_time + kPeerGoneGrace) {
          all_done = false;
          continue;
        }
      }
      if (!x.done) {
        if (peer.error != UCS_OK) {
          FailGroup(op->group->gid,
                    absl::UnavailableError(
                        absl::StrCat(op->Label(), ": ", Gone(*op->group, x.peer))),
                    true);
          break;
        }
        all_done = false;
        continue;
      }
      if (x.req != nullptr) {
        ucp_request_free(x.req);
        x.req = nullptr;
      }
      absl::Status bad = CheckXfer(*op, x);
      if (!bad.ok()) {
        FailGroup(op->group->gid, bad, true);
        break;
      }
      if (x.task && !x.task_queued) ready.push_back(&x);
    }
    if (op->failed) continue;
    if (all_done && ready.size() == 1 && op->tasks_pending.load(std::memory_order_acquire) == 0) {
      // The step's last task, nothing left to overlap it with: handing it to
      // another thread would only add two wake-ups (measured: a 4 MiB
      // reduce-scatter over TCP 0.88 → 1.19 × point-to-point).
      Xfer& x = *ready[0];
      x.task_queued = true;
      x.task();
      x.task_done.v.store(true, std::memory_order_release);
    } else {
      for (Xfer* x : ready) QueueTask(op, *x);
    }
    if (!all_done || op->tasks_pending.load(std::memory_order_acquire) > 0) return;
    if (st.after) st.after();
    ++op->cur;
  }
}

void Engine::Loop() {
  PostAbortRecv();
  int idle = 0;
  std::vector<std::shared_ptr<Op>> fresh, timed_out, cancelled;
  for (;;) {
    fresh.clear();
    timed_out.clear();
    cancelled.clear();
    {
      absl::MutexLock l(&mu_);
      if (stop_) break;
      while (!incoming_.empty()) {
        fresh.push_back(std::move(incoming_.front()));
        incoming_.pop_front();
      }
      for (auto& op : active_) {
        if (op->timeout_requested && !op->failed) timed_out.push_back(op);
      }
      cancelled.swap(cancels_);
    }
    for (auto& op : fresh) Start(op);
    for (auto& op : cancelled) {
      absl::Status why;
      {
        absl::MutexLock l(&mu_);
        why = op->cancel;
      }
      FailGroup(op->group->gid, why, true);
    }
    for (auto& op : timed_out) {
      absl::Duration waited;
      {
        absl::MutexLock l(&mu_);
        waited = op->waited;
      }
      FailGroup(op->group->gid,
                absl::DeadlineExceededError(absl::StrCat(
                    op->Label(), ": timed out after ", absl::FormatDuration(waited), " in step ",
                    op->cur + 1, "/", op->steps.size(), ", ", Outstanding(*op))),
                true);
    }
    int progressed = 0;
    while (progressed < 256 && ucp_worker_progress(worker_.get()) != 0) ++progressed;
    if (abort_rx_.done) HandleAbort();

    bool moved = !fresh.empty();
    for (size_t i = 0; i < active_.size(); ++i) {
      auto op = active_[i];
      size_t cur = op->cur;
      Advance(op);
      if (op->cur != cur || op->finished) moved = true;
    }
    for (size_t i = 0; i < active_.size();) {
      if (active_[i]->finished) {
        if (active_[i]->outstanding > 0) orphans_.push_back(active_[i]);
        active_.erase(active_.begin() + i);
      } else {
        ++i;
      }
    }
    for (size_t i = 0; i < orphans_.size();) {
      if (orphans_[i]->outstanding == 0) {
        for (auto& st : orphans_[i]->steps) {
          for (auto& x : st.xfers) {
            if (x.req != nullptr) ucp_request_free(x.req);
            x.req = nullptr;
          }
        }
        orphans_.erase(orphans_.begin() + i);
      } else {
        ++i;
      }
    }
    for (size_t i = 0; i < aborts_out_.size();) {
      if (ucp_request_check_status(aborts_out_[i]->req) != UCS_INPROGRESS) {
        ucp_request_free(aborts_out_[i]->req);
        aborts_out_.erase(aborts_out_.begin() + i);
      } else {
        ++i;
      }
    }

    if (progressed > 0 || moved) {
      idle = 0;
      continue;
    }
    if (!active_.empty() && ++idle < kSpinsBeforeSleep) {
      sched_yield();
      continue;
    }
    idle = 0;
    ucs_status_t s = ucp_worker_arm(worker_.get());
    if (s == UCS_ERR_BUSY) continue;
    pollfd fds[2] = {{wake_fd_, POLLIN, 0}, {worker_fd_, POLLIN, 0}};
    // With work in flight, wake up now and then even if a transport gives
    // no event (and to notice failed endpoints).
    poll(fds, 2, active_.empty() ? 100 : 1);
    uint64_t v;
    (void)!read(wake_fd_, &v, sizeof(v));
  }
}

}  // namespace gtp::comm::ucx_internal
