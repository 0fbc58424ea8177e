#include "comm/ucx/ucx_communicator.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "comm/env/launch_env.h"
#include "comm/internal/ops.h"
#include "comm/store/liveness.h"
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

// One lane's part of a call.
struct LanePart {
  std::shared_ptr<Engine> e;
  std::shared_ptr<Op> op;
};

class UcxWork : public Work {
 public:
  // `liveness` (may be null): on a timeout, who stopped beating is appended.
  UcxWork(std::vector<LanePart> parts, absl::Duration default_timeout,
          std::shared_ptr<Liveness> liveness = nullptr)
      : parts_(std::move(parts)), default_timeout_(default_timeout),
        liveness_(std::move(liveness)) {}
  absl::Status Wait(absl::Duration timeout) override {
    absl::Status st = WaitParts(timeout);
    // A timeout names the peer this rank waited on, which may itself wait on
    // another (a rank stopped or stuck elsewhere in the ring or another
    // group): the heartbeats name the rank that stopped answering.
    if (st.code() == absl::StatusCode::kDeadlineExceeded && liveness_ != nullptr) {
      return absl::Status(st.code(), absl::StrCat(st.message(), "; ", liveness_->Diagnose()));
    }
    return st;
  }
  bool Test() override {
    for (const LanePart& p : parts_) {
      if (!p.e->Finished(*p.op)) return false;
    }
    return true;
  }

 private:
  absl::Status WaitParts(absl::Duration timeout) {
    const absl::Duration t = timeout == absl::InfiniteDuration() ? default_timeout_ : timeout;
    absl::Status first;
    for (size_t i = 0; i < parts_.size(); ++i) {
      absl::Status st = parts_[i].e->Wait(parts_[i].op, t);
      if (st.ok() || !first.ok()) continue;
      first = st;
      // The other lanes' parts end too (their peers may never send them),
      // before the caller may touch the buffers again.
      for (size_t j = 0; j < parts_.size(); ++j) {
        if (j != i) parts_[j].e->Cancel(parts_[j].op, st);
      }
    }
    return first;
  }

  std::vector<LanePart> parts_;
  absl::Duration default_timeout_;
  std::shared_ptr<Liveness> liveness_;
};

// A world's engines (UcxOptions::lanes), shared by its sub-communicators.
// Lane 0 carries every call; a large all-gather, reduce-scatter or
// all-reduce is cut into one part per lane (each lane its own UCP worker and
// communication thread, so copies and reductions run on that many threads).
struct Lanes {
  std::vector<std::shared_ptr<Engine>> e;
  int64_t piece_bytes = 0;  // ring steps' pieces (UcxOptions::piece_bytes)
  // The world's heartbeats through the store (comm/store/liveness.h): a
  // timed-out call names the rank that stopped answering.
  std::shared_ptr<Liveness> liveness;
  // The heartbeats first, then lane 0 last: it may serve the store the
  // others say goodbye through.
  ~Lanes() {
    liveness.reset();
    while (!e.empty()) e.pop_back();
  }
};

// A call is cut across lanes only when every part gets at least this many
// bytes: below, per-message costs outweigh the extra threads.
constexpr int64_t kMinLaneBytes = int64_t{512} << 10;

// Part `l` of `count` elements cut `parts` ways (multiples of 16 elements,
// the rest to the last part).
std::pair<int64_t, int64_t> LaneRange(int64_t count, int parts, int l) {
  const int64_t base = count / parts / 16 * 16;
  const int64_t lo = l * base;
  return {lo, l + 1 == parts ? count : lo + base};
}

// A ring step's transfer is cut into pieces of at most
// UcxOptions::piece_bytes, each its own message, all posted at once: a
// piece is reduced (off the communication thread) while the next ones are
// still arriving. Both ends cut the same count the same way (the setting
// must agree across ranks), and UCX matches messages of one sender and tag
// in order.
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
void RingReduce(Op& op, ucx_internal::ScratchPool& pool, int64_t piece_bytes, const char* src,
                DType dtype, ReduceOp rop, const std::vector<int64_t>& off, const std::vector<int64_t>& cnt, void* dst) {
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
  const int64_t piece = std::max<int64_t>(1, piece_bytes / static_cast<int64_t>(ws));
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
  UcxCommunicator(std::shared_ptr<Lanes> lanes, std::shared_ptr<Group> g, absl::Duration timeout)
      : lanes_(std::move(lanes)), e_(lanes_->e[0]), g_(std::move(g)), timeout_(timeout) {
    for (auto& e : lanes_->e) e->Register(g_);
  }
  ~UcxCommunicator() override {
    for (auto& e : lanes_->e) e->Unregister(g_->gid);
  }

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
    const size_t es = SizeOf(dtype), bytes = count * es;
    char* out = static_cast<char*>(recv);
    char* mine = out + rank() * bytes;
    const char* from = static_cast<const char*>(send);
    // Parts may not copy this rank's block one piece each when the caller's
    // send buffer overlaps it without being it.
    const bool overlaps = from != mine && from < mine + bytes && mine < from + bytes;
    std::vector<std::shared_ptr<Op>> ops = LaneOps(op, overlaps ? 1 : LanesFor(n * bytes));
    for (size_t l = 0; l < ops.size(); ++l) {
      auto [lo, hi] = LaneRange(count, static_cast<int>(ops.size()), static_cast<int>(l));
      Op& o = *ops[l];
      o.steps.emplace_back();
      o.steps.back().after = [=] {
        if (hi > lo && mine != from) std::memmove(mine + lo * es, from + lo * es, (hi - lo) * es);
      };
      std::vector<int64_t> off(n), cnt(n, hi - lo);
      for (int k = 0; k < n; ++k) off[k] = k * count + lo;
      RingAllGather(o, out, es, off, cnt);
    }
    return Submit(ops);
  }

  absl::StatusOr<WorkPtr> ReduceScatter(const void* send, void* recv, int64_t count, DType dtype,
                                        ReduceOp rop) override {
    GTP_ASSIGN_OR_RETURN(auto op, NewOp({OpKind::kReduceScatter, count, dtype, rop},
                                        {internal::CheckCount(count),
                                         internal::CheckReducible(dtype, rop),
                                         internal::CheckBuffer(count, send, "send"),
                                         internal::CheckBuffer(count, recv, "recv")}));
    const int n = size();
    const size_t es = SizeOf(dtype);
    std::vector<std::shared_ptr<Op>> ops = LaneOps(op, LanesFor(n * count * es));
    for (size_t l = 0; l < ops.size(); ++l) {
      auto [lo, hi] = LaneRange(count, static_cast<int>(ops.size()), static_cast<int>(l));
      std::vector<int64_t> off(n), cnt(n, hi - lo);
      for (int k = 0; k < n; ++k) off[k] = k * count + lo;
      Engine& e = *lanes_->e[l];
      RingReduce(*ops[l], e.scratch(), lanes_->piece_bytes, static_cast<const char*>(send),
                 dtype, rop, off, cnt, static_cast<char*>(recv) + lo * es);
    }
    return Submit(ops);
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
    // Each lane takes a part of every rank's chunk: an element is reduced in
    // the same order whatever the lanes.
    std::vector<std::shared_ptr<Op>> ops = LaneOps(op, LanesFor(count * es));
    const int parts = static_cast<int>(ops.size());
    for (int l = 0; l < parts; ++l) {
      std::vector<int64_t> loff(n), lcnt(n);
      for (int k = 0; k < n; ++k) {
        auto [lo, hi] = LaneRange(cnt[k], parts, l);
        loff[k] = off[k] + lo;
        lcnt[k] = hi - lo;
      }
      Engine& e = *lanes_->e[l];
      RingReduce(*ops[l], e.scratch(), lanes_->piece_bytes, static_cast<const char*>(send),
                 dtype, rop, loff, lcnt, out + loff[me] * es);
      RingAllGather(*ops[l], out, es, loff, lcnt);
    }
    return Submit(ops);
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
    return std::unique_ptr<Communicator>(std::make_unique<UcxCommunicator>(lanes_, g, timeout_));
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
    for (auto& e : lanes_->e) GTP_RETURN_IF_ERROR(e->GroupFailure(g_->gid));
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

  // How many lanes a call moving `bytes` through each rank is cut across.
  int LanesFor(int64_t bytes) const {
    const int64_t l = std::min<int64_t>(static_cast<int64_t>(lanes_->e.size()), bytes / kMinLaneBytes);
    return static_cast<int>(std::max<int64_t>(1, l));
  }

  // `op` and parts - 1 more with its identity (group, call, sequence number:
  // each lane matches its own messages).
  static std::vector<std::shared_ptr<Op>> LaneOps(const std::shared_ptr<Op>& op, int parts) {
    std::vector<std::shared_ptr<Op>> ops = {op};
    for (int l = 1; l < parts; ++l) {
      auto o = std::make_shared<Op>();
      o->group = op->group;
      o->desc = op->desc;
      o->seq = op->seq;
      o->user_tag = op->user_tag;
      ops.push_back(std::move(o));
    }
    return ops;
  }

  absl::StatusOr<WorkPtr> Submit(const std::shared_ptr<Op>& op) {
    return Submit(std::vector<std::shared_ptr<Op>>{op});
  }
  // Part l to lane l.
  absl::StatusOr<WorkPtr> Submit(const std::vector<std::shared_ptr<Op>>& ops) {
    std::vector<LanePart> parts;
    for (size_t l = 0; l < ops.size(); ++l) {
      absl::Status st = lanes_->e[l]->Submit(ops[l]);
      if (!st.ok()) {
        // The parts already handed over end before the caller's buffers are
        // given back.
        for (LanePart& p : parts) p.e->Cancel(p.op, st);
        UcxWork(std::move(parts), timeout_).Wait(absl::InfiniteDuration()).IgnoreError();
        return st;
      }
      parts.push_back({lanes_->e[l], ops[l]});
    }
    return WorkPtr(std::make_unique<UcxWork>(std::move(parts), timeout_, lanes_->liveness));
  }

  std::shared_ptr<Lanes> lanes_;
  std::shared_ptr<Engine> e_;  // lane 0
  std::shared_ptr<Group> g_;
  absl::Duration timeout_;
  uint16_t next_seq_ = 0;
};

// A tuning setting: `value` when set (non-zero), else the environment
// variable, else `def`; it must be in [lo, hi].
absl::StatusOr<int64_t> Knob(int64_t value, const char* env, int64_t def, int64_t lo, int64_t hi) {
  if (value == 0) {
    const char* v = std::getenv(env);
    if (v == nullptr) return def;
    char* end = nullptr;
    value = std::strtoll(v, &end, 10);
    if (*v == '\0' || *end != '\0') {
      return absl::InvalidArgumentError(absl::StrCat(env, "='", v, "' is not an integer"));
    }
  }
  if (value < lo || value > hi) {
    return absl::InvalidArgumentError(
        absl::StrCat("ucx: ", env, " must be in [", lo, ", ", hi, "], got ", value));
  }
  return value;
}

// Two threads per lane (communication and reduction) out of this process's
// share of the host's cores (LOCAL_WORLD_SIZE processes), at most 4: the
// lanes that measured fastest on a 16-core host with 2 ranks
// (docs/PERFORMANCE.md); one lane on a 2-core machine.
int64_t DefaultLanes() {
  const char* local = std::getenv("LOCAL_WORLD_SIZE");
  const int64_t procs = std::max<int64_t>(1, local != nullptr ? std::atoll(local) : 1);
  const int64_t cores = std::max<unsigned>(1, std::thread::hardware_concurrency());
  return std::clamp<int64_t>(cores / (2 * procs), 1, 4);
}

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
  GTP_ASSIGN_OR_RETURN(int64_t threads,
                       Knob(options.reduce_threads, "GTP_UCX_REDUCE_THREADS", 1, 1, 64));
  GTP_ASSIGN_OR_RETURN(int64_t kib,
                       Knob(options.piece_bytes / 1024, "GTP_UCX_PIECE_KIB", 1024, 4, 1 << 20));
  cfg.reduce_threads = static_cast<int>(threads);
  const int64_t piece_bytes = kib * 1024;
  GTP_ASSIGN_OR_RETURN(int64_t lanes,
                       Knob(options.lanes, "GTP_UCX_LANES", DefaultLanes(), 1, 16));
  auto all = std::make_shared<Lanes>();
  GTP_ASSIGN_OR_RETURN(auto first, Engine::Create(store, std::move(server), cfg));
  all->e.push_back(std::move(first));
  // Every rank must cut calls the same way: rank 0's lanes and piece size
  // hold for all (hosts may differ in cores or settings).
  const std::string key = cfg.prefix + "/cut";
  if (rank == 0) {
    GTP_RETURN_IF_ERROR(store->Set(key, absl::StrCat(lanes, " ", piece_bytes), cfg.connect_timeout));
  }
  GTP_ASSIGN_OR_RETURN(std::string cut, store->Get(key, cfg.connect_timeout));
  long long l0 = 0, p0 = 0;
  if (std::sscanf(cut.c_str(), "%lld %lld", &l0, &p0) != 2 || l0 < 1 || p0 < 1) {
    return absl::InternalError(absl::StrCat("ucx: bad '", key, "' in the store: '", cut, "'"));
  }
  lanes = l0;
  all->piece_bytes = p0;
  for (int l = 1; l < lanes; ++l) {
    Engine::Config lc = cfg;
    lc.prefix = absl::StrCat(cfg.prefix, "/lane", l);
    GTP_ASSIGN_OR_RETURN(auto engine, Engine::Create(store, nullptr, lc));
    all->e.push_back(std::move(engine));
  }
  all->liveness = Liveness::Start(store, cfg.prefix, rank, size, absl::Milliseconds(500));
  auto g = std::make_shared<Group>();
  g->gid = 0;
  g->name = options.name;
  g->rank = rank;
  for (int r = 0; r < size; ++r) g->world.push_back(r);
  return std::unique_ptr<Communicator>(
      std::make_unique<UcxCommunicator>(std::move(all), std::move(g), options.timeout));
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
    GTP_ASSIGN_OR_RETURN(server, TcpStoreServer::StartOrAdopt(env.master_port, env.store_fd));
  }
  GTP_ASSIGN_OR_RETURN(
      std::unique_ptr<TcpStoreClient> client,
      TcpStoreClient::Connect(env.master_addr, env.master_port, options.connect_timeout));
  return MakeWorld(std::shared_ptr<KeyValueStore>(std::move(client)), std::move(server), env.rank,
                   env.world_size, options);
}

}  // namespace gtp::comm
