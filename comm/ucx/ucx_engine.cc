#include "comm/ucx/ucx_engine.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "comm/ucx/ucs_status.h"
#include "comm/ucx/ucx_tags.h"
#include "core/status.h"

namespace gtp::comm::ucx_internal {

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

}  // namespace gtp::comm::ucx_internal
