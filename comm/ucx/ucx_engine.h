// comm/ucx/ucx_engine.h — internals of the UCX backend: one UCP worker, its
// communication thread and task threads (an Engine: one per lane, see
// UcxOptions::lanes), and the schedule ("Op") format the collectives are
// compiled into. Not a public header.
//
// An Op is a list of Steps. A Step runs `before` (local work), posts its
// transfers (all at once, except receives that wait for an earlier
// receive's task to free their buffer: Xfer::after), and when every
// transfer has completed (and was
// checked: size, call signature) and every task has run, runs `after` and
// moves on. A receive may carry a task (e.g. reducing the piece it
// received): it is queued as soon as that receive completed and was checked,
// and runs off the communication thread — on the engine's task threads or on
// a thread blocked in Wait — so it overlaps the step's other transfers; the
// step's last one, with nothing left to overlap, runs on the communication
// thread.
// Everything else in an Op after Submit runs on the communication thread.
//
// Tag layout (64 bits):
//   collective: gid:14 | kind:2 (0) | seq:16 | src:16 | sig:16
//   p2p:        gid:14 | kind:2 (1) | src:16 | tag:24 | sig:8
//   abort:      gid:14 | kind:2 (2) | src:16 | 0:31 | notice:1
// Receives mask out the signature bits and compare them after completion, so
// a peer issuing a different call is reported instead of silently matching.
// A rank that fails a group sends the reason to the group's members (abort)
// and to every other rank (notice: it only records the reason), so that a
// rank waiting on it in another group, which sees only its endpoint vanish
// when it exits, names the rank that caused the failure instead of it.
#pragma once

#include <ucp/api/ucp.h>

#include <atomic>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "comm/internal/ops.h"
#include "comm/store/key_value_store.h"
#include "comm/store/tcp_store.h"

namespace gtp::comm::ucx_internal {

inline constexpr int kMaxGroupId = (1 << 14) - 1;
inline constexpr int kMaxWorldSize = 1 << 16;

struct UcpContextDeleter { void operator()(ucp_context_h c) const { ucp_cleanup(c); } };
struct UcpWorkerDeleter { void operator()(ucp_worker_h w) const { ucp_worker_destroy(w); } };
using UcpContextPtr = std::unique_ptr<std::remove_pointer_t<ucp_context_h>, UcpContextDeleter>;
using UcpWorkerPtr = std::unique_ptr<std::remove_pointer_t<ucp_worker_h>, UcpWorkerDeleter>;

// One communicator's identity, shared by its Ops.
struct Group {
  uint32_t gid = 0;
  std::string name;
  int rank = 0;             // this process's rank in the group
  std::vector<int> world;   // group rank -> world rank
  int size() const { return static_cast<int>(world.size()); }
  // "peer 2 (world rank 5)".
  std::string Peer(int r) const;
};

// Reusable scratch buffers (uninitialised), so that large collectives do
// not page-fault fresh memory on every call. Thread-safe.
class ScratchPool : public std::enable_shared_from_this<ScratchPool> {
 public:
  // A buffer of at least `bytes`; it returns to the pool when released.
  std::shared_ptr<char> Get(size_t bytes);

 private:
  static constexpr size_t kMaxCached = size_t{1} << 30;
  absl::Mutex mu_;
  std::multimap<size_t, std::unique_ptr<char[]>> free_ ABSL_GUARDED_BY(mu_);
  size_t cached_ ABSL_GUARDED_BY(mu_) = 0;
};

struct Op;

struct Xfer {
  Op* op = nullptr;
  bool is_send = false;
  int peer = 0;  // group rank
  void* buf = nullptr;
  size_t bytes = 0;
  ucp_tag_t tag = 0, mask = 0;
  void* req = nullptr;
  bool posted = false, done = false;
  ucs_status_t status = UCS_OK;
  ucp_tag_recv_info_t info{};
  // Receives only: runs once, after the receive completed and was checked,
  // on the task thread or a waiting thread (not the communication thread).
  std::function<void()> task;
  bool task_queued = false;
  // Set (release) by the thread that ran `task`.
  struct Flag {
    std::atomic<bool> v{false};
    Flag() = default;
    Flag(const Flag& o) : v(o.v.load()) {}
    Flag& operator=(const Flag& o) {
      v.store(o.v.load());
      return *this;
    }
  } task_done;
  // >= 0: posted only once the task of xfers[after] (same step) has run, so
  // that this receive may reuse that one's buffer.
  int after = -1;
};

struct Step {
  std::function<void()> before;
  std::vector<Xfer> xfers;
  std::function<void()> after;
  bool started = false;  // `before` ran
  size_t unposted = 0;   // xfers not posted yet (waiting for `after` ones)
};

struct Op {
  std::shared_ptr<Group> group;
  internal::OpDesc desc;
  uint16_t seq = 0;
  int user_tag = -1;  // >= 0 for send/recv
  std::vector<Step> steps;
  std::vector<std::shared_ptr<char>> scratch;  // buffers the steps use

  // Adds a transfer to `step`; tags follow the layout above.
  void AddSend(Step& step, int peer, const void* buf, size_t bytes);
  // `task` and `after`: see Xfer.
  void AddRecv(Step& step, int peer, void* buf, size_t bytes,
               std::function<void()> task = nullptr, int after = -1);
  // "group tp[0,1] (ucx): all_reduce(count=4, dtype=f32, op=sum) #7"
  std::string Label() const;

  // Engine state (communication thread only, except where noted).
  size_t cur = 0;
  int outstanding = 0;     // posted, not completed
  std::atomic<int> tasks_pending{0};  // queued or running tasks
  bool failed = false;
  absl::Time failed_at;            // when `failed` was set
  bool timeout_requested = false;  // guarded by Engine::mu_
  absl::Status cancel;             // guarded by Engine::mu_: see Engine::Cancel
  absl::Duration waited;           // guarded by Engine::mu_
  bool finished = false;           // guarded by Engine::mu_
  absl::Status status;             // guarded by Engine::mu_ once finished
};

class Engine {
 public:
  struct Config {
    int rank = 0, size = 1;
    std::string prefix;
    absl::Duration timeout, connect_timeout;
    bool shared_memory = false;  // UcxOptions::shared_memory: make the data endpoints
    int reduce_threads = 1;      // task threads (UcxOptions::reduce_threads)
  };
  // Creates the UCP worker, exchanges addresses through `store`, connects
  // to every rank and starts the communication and task threads. Blocks.
  static absl::StatusOr<std::shared_ptr<Engine>> Create(std::shared_ptr<KeyValueStore> store,
                                                        std::unique_ptr<TcpStoreServer> server,
                                                        const Config& config);
  // Says goodbye through the store (when healthy), stops the thread, closes
  // endpoints. Blocks (bounded).
  ~Engine();

  const Config& config() const { return config_; }
  KeyValueStore& store() { return *store_; }
  ScratchPool& scratch() { return *scratch_; }

  // Hands `op` to the communication thread. Fails at once when its group
  // already failed. Non-blocking; thread-safe.
  absl::Status Submit(std::shared_ptr<Op> op);
  // Blocks until `op` finished; after `timeout` fails its group with
  // DeadlineExceeded naming the peers not heard from. Thread-safe.
  absl::Status Wait(const std::shared_ptr<Op>& op, absl::Duration timeout);
  // Fails `op`'s group with `why` (telling the peers), as if this engine had
  // found the error itself: used when another lane of the same call failed,
  // so that this lane's part ends too. Non-blocking; thread-safe.
  void Cancel(const std::shared_ptr<Op>& op, const absl::Status& why);
  // Non-blocking; thread-safe.
  bool Finished(const Op& op);
  // The group's failure (OK while healthy). Thread-safe.
  absl::Status GroupFailure(uint32_t gid);
  // Lets abort messages for `group` find it. Thread-safe.
  void Register(const std::shared_ptr<Group>& group);
  void Unregister(uint32_t gid);

 private:
  struct Peer {
    Engine* engine = nullptr;
    int world_rank = 0;
    // `ep` has peer-failure handling, which UCX grants only to transports
    // that can notice a dead peer (TCP here): it carries the abort messages
    // and reports a peer's death. `data_ep` (Config::shared_memory) has none,
    // so UCX may use shared memory and CMA for a peer on this host: then
    // every transfer goes through it. Null when off or not made (then `ep`).
    // (UCX_MM_ERROR_HANDLING=y with a short UCX_KEEPALIVE_INTERVAL would let
    // `ep` use shared memory too, 3-4x faster, but UCX 1.13.1 then sometimes
    // asserts in ucp_request_send_state_ff when a peer dies mid-transfer.)
    ucp_ep_h ep = nullptr;
    ucp_ep_h data_ep = nullptr;
    ucs_status_t error = UCS_OK;  // set by the endpoint's error handler
    absl::Time error_time;        // when it was set
    std::string last_words;       // the failure it last reported to this rank
  };
  struct Abort {  // an outgoing abort message and its request
    std::string payload;
    void* req = nullptr;
  };

  Engine(std::shared_ptr<KeyValueStore> store, std::unique_ptr<TcpStoreServer> server,
         const Config& config);
  absl::Status Connect();
  void Loop();
  void Start(const std::shared_ptr<Op>& op);
  void Post(Op& op);
  void Advance(const std::shared_ptr<Op>& op);
  absl::Status CheckXfer(const Op& op, const Xfer& x);
  void FailGroup(uint32_t gid, const absl::Status& st, bool tell_peers);
  void Finish(const std::shared_ptr<Op>& op, absl::Status st);
  void QueueTask(const std::shared_ptr<Op>& op, Xfer& x);
  // Runs the oldest queued task, if any, with mu_ released meanwhile.
  bool RunTaskLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void TaskLoop();
  void PostAbortRecv();
  void HandleAbort();
  void SendAborts(const Group& g, const absl::Status& st);
  std::string Outstanding(const Op& op) const;
  // "peer 1 (world rank 3) is gone (...)", or, when that peer reported a
  // failure before it went, "... exited after it failed: <its reason>".
  std::string Gone(const Group& g, int peer) const;
  static void OnEpError(void* arg, ucp_ep_h ep, ucs_status_t status);
  static void OnSend(void* request, ucs_status_t status, void* user_data);
  static void OnRecv(void* request, ucs_status_t status, const ucp_tag_recv_info_t* info,
                     void* user_data);

  const Config config_;
  // Declared before store_ so that this rank's client goes first.
  std::unique_ptr<TcpStoreServer> server_;  // rank 0 only (CreateUcxWorldFromEnv)
  std::shared_ptr<KeyValueStore> store_;
  UcpContextPtr context_;
  UcpWorkerPtr worker_;
  int worker_fd_ = -1;
  int wake_fd_ = -1;
  std::vector<std::unique_ptr<Peer>> peers_;  // by world rank
  std::shared_ptr<ScratchPool> scratch_ = std::make_shared<ScratchPool>();
  std::thread thread_;
  std::vector<std::thread> task_threads_;  // run tasks (so do threads blocked in Wait)

  // Communication thread only.
  std::vector<Xfer*> ready_;  // Advance's scratch
  std::vector<std::shared_ptr<Op>> active_;
  std::vector<std::shared_ptr<Op>> orphans_;  // failed ops with sends still in flight
  std::vector<std::unique_ptr<Abort>> aborts_out_;
  Xfer abort_rx_;
  std::vector<char> abort_buf_;
  bool any_failure_ = false;

  absl::Mutex mu_;
  absl::CondVar cv_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::deque<std::shared_ptr<Op>> incoming_ ABSL_GUARDED_BY(mu_);
  std::vector<std::shared_ptr<Op>> cancels_ ABSL_GUARDED_BY(mu_);  // Cancel, for the loop
  struct Task {
    std::shared_ptr<Op> op;
    Xfer* x = nullptr;
  };
  std::deque<Task> tasks_ ABSL_GUARDED_BY(mu_);
  std::map<uint32_t, std::shared_ptr<Group>> groups_ ABSL_GUARDED_BY(mu_);
  std::map<uint32_t, absl::Status> failures_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gtp::comm::ucx_internal
