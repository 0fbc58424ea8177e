#include "comm/ucx/ucx_communicator.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "comm/env/launch_env.h"
#include "comm/internal/ops.h"
#include "comm/store/tcp_store.h"
#include "comm/ucx/ucx_engine.h"
#include "comm/ucx/ucx_reduce.h"
#include "core/status.h"

namespace gtp::comm {
namespace {

using internal::OpDesc;
using internal::OpKind;
using ucx_internal::Engine;
using ucx_internal::Group;
using ucx_internal::Op;
using ucx_internal::Step;

class UcxWork : public Work {
 public:
  UcxWork(std::shared_ptr<Engine> e, std::shared_ptr<Op> op, absl::Duration default_timeout)
      : e_(std::move(e)), op_(std::move(op)), default_timeout_(default_timeout) {}
  absl::Status Wait(absl::Duration timeout) override {
    return e_->Wait(op_, timeout == absl::InfiniteDuration() ? default_timeout_ : timeout);
  }
  bool Test() override { return e_->Finished(*op_); }

 private:
  std::shared_ptr<Engine> e_;
  std::shared_ptr<Op> op_;
  absl::Duration default_timeout_;
};

// A ring step's transfer is cut into pieces of at most this many bytes, each
// its own message, all posted at once: a piece is reduced (off the
// communication thread) while the next ones are still arriving. Both ends
// cut the same count the same way, and UCX matches messages of one sender
// and tag in order.
constexpr int64_t kPieceBytes = int64_t{1} << 20;
// The last ring step receives into this many piece buffers in turn (a
// piece's receive is posted once the reduction of the piece kPieceWindow
// earlier has emptied its buffer): they stay in cache. 1 MiB × 8 measured
// best with comm:bench on a 16-core host (256 KiB pieces: per-message costs
// dominate; window 4: receives wait for reductions).
constexpr int64_t kPieceWindow = 8;

// Appends ring all-gather steps over `buf`, whose chunk k is
// [off[k], off[k] + cnt[k]) elements of `es` bytes; this rank's chunk must
// already be in place when the first step runs.
void RingAllGather(Op& op, char* buf, size_t es, const std::vector<int64_t>& off,
                   const std::vector<int64_t>& cnt) {
  const int n = op.group->size(), me = op.group->rank;
  const int right = (me + 1) % n, left = (me + n - 1) % n;
  for (int s = 0; s + 1 < n; ++s) {
    int send_idx = ((me - s) % n + n) % n, recv_idx = ((me - s - 1) % n + n) % n;
    op.steps.emplace_back();
    Step& st = op.steps.back();
    op.AddSend(st, right, buf + off[send_idx] * es, cnt[send_idx] * es);
    op.AddRecv(st, left, buf + off[recv_idx] * es, cnt[recv_idx] * es);
  }
}

// Appends ring reduce-scatter steps: chunk k of `src` (same layout as
// above) is reduced over the group in the wide type (partials travel wide
// after the first step, which sends src as it is); the last step writes
// this rank's chunk, finished (rounded, divided for kMean), into `dst`
// (cnt[me] elements of dtype; may be src's own chunk, in place).
void RingReduce(Op& op, ucx_internal::ScratchPool& pool, const char* src, DType dtype, ReduceOp rop,
                const std::vector<int64_t>& off, const std::vector<int64_t>& cnt, void* dst) {
  const int n = op.group->size(), me = op.group->rank;
  const int right = (me + 1) % n, left = (me + n - 1) % n;
  const size_t es = SizeOf(dtype);
  const DType wide = internal::WideType(dtype);
  const size_t ws = SizeOf(wide);
  int64_t max_cnt = 0;
  for (int64_t c : cnt) max_cnt = std::max(max_cnt, c);
  // Whole-chunk partials, which the steps between the first and the last
  // receive and send on.
  char* bufs[2] = {nullptr, nullptr};
  if (n != 2) {
    op.scratch.push_back(pool.Get(max_cnt * ws));
    op.scratch.push_back(pool.Get(max_cnt * ws));
    bufs[0] = op.scratch[op.scratch.size() - 2].get();
    bufs[1] = op.scratch.back().get();
  }
  auto idx = [n](int v) { return ((v % n) + n) % n; };
  if (n == 1) {
    op.steps.emplace_back();
    op.steps.back().after = [=] {
      internal::Widen(dtype, src + off[0] * es, bufs[0], cnt[0]);
      internal::Finish(dtype, rop, 1, bufs[0], dst, cnt[0]);
    };
    return;
  }
  const int64_t piece = std::max<int64_t>(1, kPieceBytes / static_cast<int64_t>(ws));
  const int64_t window = kPieceWindow;
  op.scratch.push_back(pool.Get(std::min(window * piece, max_cnt) * ws));
  char* ring = op.scratch.back().get();
  auto pieces = [piece](int64_t count) { return std::max<int64_t>(1, (count + piece - 1) / piece); };
  for (int s = 0; s + 1 < n; ++s) {
    const int send_idx = idx(me - s - 1), recv_idx = idx(me - s - 2);
    // The first step sends straight from src (narrow: widening is exact, the
    // receiver does it); the others send the wide partial the step before made.
    const bool first = s == 0, last = s + 2 == n;
    const size_t xs = first ? es : ws;  // bytes per element on the wire
    char* out = first ? const_cast<char*>(src) + off[send_idx] * es : bufs[s % 2];
    char* in = bufs[(s + 1) % 2];
    op.steps.emplace_back();
    Step& st = op.steps.back();
    const int64_t sc = cnt[send_idx], rc = cnt[recv_idx];
    const char* mine = src + off[recv_idx] * es;  // this rank's contribution to what arrives
    std::vector<int> recv_at;  // index in st.xfers of each piece's receive
    for (int64_t p = 0; p < std::max(pieces(sc), pieces(rc)); ++p) {
      const int64_t o = p * piece;
      if (p < pieces(sc)) op.AddSend(st, right, out + o * xs, std::min(piece, sc - o) * xs);
      if (p >= pieces(rc)) continue;
      const int64_t len = std::min(piece, rc - o);
      const char* contrib = mine + o * es;
      recv_at.push_back(static_cast<int>(st.xfers.size()));
      std::function<void()> reduce;
      char* at;  // where the piece arrives
      if (last) {
        at = ring + (p % window) * piece * ws;
        char* fin = static_cast<char*>(dst) + o * es;
        if (first) {
          reduce = [=] {
            ucx_internal::WidenCombineFinishChunk(dtype, rop, n, at, contrib, fin, len);
          };
        } else {
          reduce = [=] { ucx_internal::CombineFinishChunk(dtype, rop, n, at, contrib, fin, len); };
        }
      } else if (first) {
        // Arrives narrow in the buffer the next step receives into; the wide
        // partial goes where the next step sends from.
        at = bufs[0] + o * es;
        char* acc = in + o * ws;
        reduce = [=] { ucx_internal::WidenCombineChunk(dtype, rop, at, contrib, acc, len); };
      } else {
        at = in + o * ws;
        reduce = [=] { ucx_internal::CombineChunk(dtype, rop, at, contrib, len); };
      }
      op.AddRecv(st, left, at, len * xs, std::move(reduce),
                 last && p >= window ? recv_at[p - window] : -1);
    }
  }
}

// Equal-as-possible chunks of `count` over n ranks.
void Chunks(int64_t count, int n, std::vector<int64_t>* off, std::vector<int64_t>* cnt) {
  off->assign(n, 0);
  cnt->assign(n, 0);
  int64_t o = 0;
  for (int k = 0; k < n; ++k) {
    (*cnt)[k] = count / n + (k < count % n ? 1 : 0);
    (*off)[k] = o;
    o += (*cnt)[k];
  }
}

class UcxCommunicator : public Communicator {
 public:
  UcxCommunicator(std::shared_ptr<Engine> e, std::shared_ptr<Group> g, absl::Duration timeout)
      : e_(std::move(e)), g_(std::move(g)), timeout_(timeout) {
    e_->Register(g_);
  }
  ~UcxCommunicator() override { e_->Unregister(g_->gid); }

  int rank() const override { return g_->rank; }
  int size() const override { return g_->size(); }
  std::string name() const override { return g_->name; }
  std::string backend() const override { return "ucx"; }
  absl::Duration timeout() const override { return timeout_; }

  absl::StatusOr<WorkPtr> AllGather(const void* send, void* recv, int64_t count,
                                    DType dtype) override {
    GTP_ASSIGN_OR_RETURN(auto op, NewOp({OpKind::kAllGather, count, dtype},
                                        {internal::CheckCount(count),
                                         internal::CheckBuffer(count, send, "send"),
                                         internal::CheckBuffer(count, recv, "recv")}));
    const int n = size();
    const size_t bytes = count * SizeOf(dtype);
    char* out = static_cast<char*>(recv);
    char* mine = out + rank() * bytes;
    op->steps.emplace_back();
    op->steps.back().after = [=] {
      if (bytes > 0 && mine != send) std::memmove(mine, send, bytes);
    };
    std::vector<int64_t> off(n), cnt(n, count);
    for (int k = 0; k < n; ++k) off[k] = k * count;
    RingAllGather(*op, out, SizeOf(dtype), off, cnt);
    return Submit(op);
  }

  absl::StatusOr<WorkPtr> ReduceScatter(const void* send, void* recv, int64_t count, DType dtype,
                                        ReduceOp rop) override {
    GTP_ASSIGN_OR_RETURN(auto op, NewOp({OpKind::kReduceScatter, count, dtype, rop},
                                        {internal::CheckCount(count),
                                         internal::CheckReducible(dtype, rop),
                                         internal::CheckBuffer(count, send, "send"),
                                         internal::CheckBuffer(count, recv, "recv")}));
    const int n = size();
    std::vector<int64_t> off(n), cnt(n, count);
    for (int k = 0; k < n; ++k) off[k] = k * count;
    RingReduce(*op, e_->scratch(), static_cast<const char*>(send), dtype, rop, off, cnt, recv);
    return Submit(op);
  }

  absl::StatusOr<WorkPtr> AllReduce(const void* send, void* recv, int64_t count, DType dtype,
                                    ReduceOp rop) override {
    GTP_ASSIGN_OR_RETURN(auto op, NewOp({OpKind::kAllReduce, count, dtype, rop},
                                        {internal::CheckCount(count),
                                         internal::CheckReducible(dtype, rop),
                                         internal::CheckBuffer(count, send, "send"),
                                         internal::CheckBuffer(count, recv, "recv")}));
    const int n = size(), me = rank();
    const size_t es = SizeOf(dtype);
    std::vector<int64_t> off, cnt;
    Chunks(count, n, &off, &cnt);
    char* out = static_cast<char*>(recv);
    RingReduce(*op, e_->scratch(), static_cast<const char*>(send), dtype, rop, off, cnt,
               out + off[me] * es);
    RingAllGather(*op, out, es, off, cnt);
    return Submit(op);
  }

  absl::StatusOr<WorkPtr> Broadcast(void* buf, int64_t count, DType dtype, int root) override {
    GTP_ASSIGN_OR_RETURN(auto op, NewOp({OpKind::kBroadcast, count, dtype, ReduceOp::kSum, root},
                                        {internal::CheckCount(count),
                                         internal::CheckRoot(root, size()),
                                         internal::CheckBuffer(count, buf, "buf")}));
    // Binomial tree on ranks relative to the root.
    const int n = size(), vr = (rank() - root + n) % n;
    const size_t bytes = count * SizeOf(dtype);
    int mask = 1;
    while (mask < n) {
      if (vr & mask) {
        op->steps.emplace_back();
        op->AddRecv(op->steps.back(), (vr - mask + root) % n, buf, bytes);
        break;
      }
      mask <<= 1;
    }
    op->steps.emplace_back();
    for (mask >>= 1; mask > 0; mask >>= 1) {
      if (vr + mask < n) op->AddSend(op->steps.back(), (vr + mask + root) % n, buf, bytes);
    }
    return Submit(op);
  }

  absl::StatusOr<WorkPtr> AllToAll(const void* send, void* recv, int64_t count,
                                   DType dtype) override {
    const int64_t total = count * size() * static_cast<int64_t>(SizeOf(dtype));
    GTP_ASSIGN_OR_RETURN(auto op, NewOp({OpKind::kAllToAll, count, dtype},
                                        {internal::CheckCount(count),
                                         internal::CheckBuffer(count, send, "send"),
                                         internal::CheckBuffer(count, recv, "recv"),
                                         internal::CheckNoOverlap(send, total, recv, total,
                                                                  "all_to_all")}));
    const int n = size(), me = rank();
    std::vector<int64_t> c(n, count), d(n);
    for (int r = 0; r < n; ++r) d[r] = r * count;
    Direct(*op, static_cast<const char*>(send), c, d, static_cast<char*>(recv), c, d,
           SizeOf(dtype));
    (void)me;
    return Submit(op);
  }

  absl::StatusOr<WorkPtr> AllToAllV(const void* send, const std::vector<int64_t>& send_counts,
                                    const std::vector<int64_t>& send_displs, void* recv,
                                    const std::vector<int64_t>& recv_counts,
                                    const std::vector<int64_t>& recv_displs,
                                    DType dtype) override {
    GTP_ASSIGN_OR_RETURN(auto op, NewOp({OpKind::kAllToAllV, -1, dtype},
                                        {internal::CheckAllToAllV(size(), send_counts, send_displs,
                                                                  recv_counts, recv_displs)}));
    Direct(*op, static_cast<const char*>(send), send_counts, send_displs, static_cast<char*>(recv),
           recv_counts, recv_displs, SizeOf(dtype));
    return Submit(op);
  }

  absl::StatusOr<WorkPtr> Send(const void* buf, int64_t count, DType dtype, int peer,
                               int tag) override {
    GTP_ASSIGN_OR_RETURN(auto op, NewOp({OpKind::kSend, count, dtype},
                                        {internal::CheckCount(count),
                                         internal::CheckPeer(peer, size()), internal::CheckTag(tag),
                                         internal::CheckBuffer(count, buf, "buf")},
                                        tag));
    op->steps.emplace_back();
    op->AddSend(op->steps.back(), peer, buf, count * SizeOf(dtype));
    return Submit(op);
  }

  absl::StatusOr<WorkPtr> Recv(void* buf, int64_t count, DType dtype, int peer, int tag) override {
    GTP_ASSIGN_OR_RETURN(auto op, NewOp({OpKind::kRecv, count, dtype},
                                        {internal::CheckCount(count),
                                         internal::CheckPeer(peer, size()), internal::CheckTag(tag),
                                         internal::CheckBuffer(count, buf, "buf")},
                                        tag));
    op->steps.emplace_back();
    op->AddRecv(op->steps.back(), peer, buf, count * SizeOf(dtype));
    return Submit(op);
  }

  absl::StatusOr<WorkPtr> Barrier() override {
    GTP_ASSIGN_OR_RETURN(auto op, NewOp({OpKind::kBarrier}, {}));
    // Dissemination: round k talks to ranks 2^k away.
    const int n = size(), me = rank();
    op->steps.emplace_back();
    for (int d = 1; d < n; d <<= 1) {
      op->steps.emplace_back();
      op->AddSend(op->steps.back(), (me + d) % n, nullptr, 0);
      op->AddRecv(op->steps.back(), (me - d + n) % n, nullptr, 0);
    }
    return Submit(op);
  }

  absl::StatusOr<std::unique_ptr<Communicator>> Split(const std::vector<std::vector<int>>& groups,
                                                      const std::string& name) override {
    const std::string what = absl::StrCat("group ", g_->name, " (ucx): split '", name, "'");
    absl::Status bad = internal::CheckGroups(groups, size());
    if (!bad.ok()) return absl::InvalidArgumentError(absl::StrCat(what, ": ", bad.message()));
    int my_group = -1, my_pos = -1;
    for (size_t g = 0; g < groups.size(); ++g) {
      for (size_t i = 0; i < groups[g].size(); ++i) {
        if (groups[g][i] == rank()) {
          my_group = static_cast<int>(g);
          my_pos = static_cast<int>(i);
        }
      }
    }
    // Each group's first rank draws a fresh group id from the store; then
    // everyone learns every (groups hash, id) pair through the parent.
    int64_t mine[2] = {static_cast<int64_t>(internal::HashGroups(groups, name)), 0};
    if (my_pos == 0) {
      GTP_ASSIGN_OR_RETURN(mine[1], e_->store().Add(e_->config().prefix + "/next_gid", 1, timeout_));
      if (mine[1] > ucx_internal::kMaxGroupId) {
        return absl::ResourceExhaustedError(absl::StrCat(what, ": out of group ids (",
                                                         ucx_internal::kMaxGroupId, " used)"));
      }
    }
    std::vector<int64_t> all(2 * size());
    GTP_RETURN_IF_ERROR(Run(AllGather(mine, all.data(), 2, DType::kI64)));
    for (int r = 0; r < size(); ++r) {
      if (all[2 * r] != mine[0]) {
        return absl::InvalidArgumentError(absl::StrCat(
            what, ": rank ", r, " passed different groups or name than rank ", rank()));
      }
    }
    if (my_group < 0) return std::unique_ptr<Communicator>();
    auto g = std::make_shared<Group>();
    g->gid = static_cast<uint32_t>(all[2 * groups[my_group][0] + 1]);
    g->name = internal::SubGroupName(name, groups[my_group]);
    g->rank = my_pos;
    for (int r : groups[my_group]) g->world.push_back(g_->world[r]);
    return std::unique_ptr<Communicator>(std::make_unique<UcxCommunicator>(e_, g, timeout_));
  }

 private:
  // Validates this rank's arguments and makes an Op with the next sequence
  // number (only when valid, so ranks stay in step).
  absl::StatusOr<std::shared_ptr<Op>> NewOp(const OpDesc& d, std::vector<absl::Status> checks,
                                            int user_tag = -1) {
    for (const auto& st : checks) {
      if (!st.ok()) {
        return absl::Status(st.code(), absl::StrCat("group ", g_->name, " (ucx): ", d.ToString(),
                                                    ": ", st.message()));
      }
    }
    GTP_RETURN_IF_ERROR(e_->GroupFailure(g_->gid));
    auto op = std::make_shared<Op>();
    op->group = g_;
    op->desc = d;
    op->user_tag = user_tag;
    if (user_tag < 0) op->seq = next_seq_++;
    return op;
  }

  // Direct exchange with every peer (zero-length messages too, so counts
  // that disagree are noticed); this rank's own block is a local copy.
  void Direct(Op& op, const char* send, const std::vector<int64_t>& sc,
              const std::vector<int64_t>& sd, char* recv, const std::vector<int64_t>& rc,
              const std::vector<int64_t>& rd, size_t es) {
    const int n = size(), me = rank();
    op.steps.emplace_back();
    Step& st = op.steps.back();
    const int64_t self_bytes = std::min(sc[me], rc[me]) * static_cast<int64_t>(es);
    const char* self_src = send + sd[me] * es;
    char* self_dst = recv + rd[me] * es;
    const bool self_ok = sc[me] == rc[me];
    st.before = [=] {
      if (self_bytes > 0) std::memcpy(self_dst, self_src, self_bytes);
    };
    for (int k = 1; k < n; ++k) {
      int to = (me + k) % n, from = (me - k + n) % n;
      op.AddSend(st, to, send + sd[to] * es, sc[to] * es);
      op.AddRecv(st, from, recv + rd[from] * es, rc[from] * es);
    }
    if (!self_ok) {
      // Caught like any other count mismatch: a self message of the wrong size.
      op.AddSend(st, me, send + sd[me] * es, sc[me] * es);
      op.AddRecv(st, me, recv + rd[me] * es, rc[me] * es);
    }
  }

  absl::StatusOr<WorkPtr> Submit(const std::shared_ptr<Op>& op) {
    GTP_RETURN_IF_ERROR(e_->Submit(op));
    return WorkPtr(std::make_unique<UcxWork>(e_, op, timeout_));
  }

  std::shared_ptr<Engine> e_;
  std::shared_ptr<Group> g_;
  absl::Duration timeout_;
  uint16_t next_seq_ = 0;
};

absl::StatusOr<std::unique_ptr<Communicator>> MakeWorld(std::shared_ptr<KeyValueStore> store,
                                                        std::unique_ptr<TcpStoreServer> server,
                                                        int rank, int size,
                                                        const UcxOptions& options) {
  Engine::Config cfg;
  cfg.rank = rank;
  cfg.size = size;
  cfg.prefix = options.store_prefix;
  cfg.timeout = options.timeout;
  cfg.connect_timeout = options.connect_timeout;
  const char* shm = std::getenv("GTP_UCX_SHARED_MEMORY");
  cfg.shared_memory = options.shared_memory || (shm != nullptr && std::string(shm) == "1");
  GTP_ASSIGN_OR_RETURN(auto engine, Engine::Create(std::move(store), std::move(server), cfg));
  auto g = std::make_shared<Group>();
  g->gid = 0;
  g->name = options.name;
  g->rank = rank;
  for (int r = 0; r < size; ++r) g->world.push_back(r);
  return std::unique_ptr<Communicator>(
      std::make_unique<UcxCommunicator>(std::move(engine), std::move(g), options.timeout));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Communicator>> CreateUcxWorld(std::shared_ptr<KeyValueStore> store,
                                                             int rank, int size,
                                                             const UcxOptions& options) {
  return MakeWorld(std::move(store), nullptr, rank, size, options);
}

absl::StatusOr<std::unique_ptr<Communicator>> CreateUcxWorldFromEnv(const UcxOptions& options) {
  GTP_ASSIGN_OR_RETURN(LaunchEnv env, ReadLaunchEnv());
  std::unique_ptr<TcpStoreServer> server;
  if (env.rank == 0) {
    GTP_ASSIGN_OR_RETURN(server, TcpStoreServer::Start(env.master_port));
  }
  GTP_ASSIGN_OR_RETURN(
      std::unique_ptr<TcpStoreClient> client,
      TcpStoreClient::Connect(env.master_addr, env.master_port, options.connect_timeout));
  return MakeWorld(std::shared_ptr<KeyValueStore>(std::move(client)), std::move(server), env.rank,
                   env.world_size, options);
}

}  // namespace gtp::comm
