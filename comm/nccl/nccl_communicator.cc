#include "comm/nccl/nccl_communicator.h"

#include <algorithm>
#include <cstring>
#include <functional>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "comm/env/launch_env.h"
#include "comm/internal/ops.h"
#include "comm/nccl/accumulate_kernels.h"
#include "comm/nccl/internal/nccl_calls.h"
#include "comm/nccl/internal/nccl_state.h"
#include "comm/store/liveness.h"
#include "comm/store/tcp_store.h"
#include "core/cuda_runtime.h"
#include "core/status.h"

namespace gtp::comm {

namespace {

using internal::OpDesc;
using internal::OpKind;
using nccl_internal::Batch;
using nccl_internal::CheckDeviceBuffer;
using nccl_internal::Cuda;
using nccl_internal::Done;
using nccl_internal::F32Accumulate;
using nccl_internal::NcclOp;
using nccl_internal::NcclType;
using nccl_internal::P2PItem;
using nccl_internal::Settle;
using nccl_internal::State;
using nccl_internal::WithTimeout;

class NcclWork : public Work {
 public:
  NcclWork(std::shared_ptr<State> s, std::shared_ptr<Done> done, std::string label)
      : s_(std::move(s)), done_(std::move(done)), label_(std::move(label)) {}
  NcclWork(std::shared_ptr<State> s, std::shared_ptr<Batch> batch, std::string label)
      : s_(std::move(s)), batch_(std::move(batch)), label_(std::move(label)) {}

  absl::Status Wait(absl::Duration) override {
    GTP_RETURN_IF_ERROR(Launched());
    return s_->OrderCompute(*done_);
  }
  bool Test() override {
    if (!Launched().ok()) return true;
    return s_->Query(*done_);
  }
  absl::Status Synchronize() override {
    GTP_RETURN_IF_ERROR(Launched());
    return s_->Block(*done_, label_, s_->options().timeout);
  }

 private:
  absl::Status Launched() {
    if (done_) return absl::OkStatus();
    GTP_RETURN_IF_ERROR(s_->FlushP2P());
    if (!batch_->done) return s_->Failure();
    done_ = batch_->done;
    return absl::OkStatus();
  }

  std::shared_ptr<State> s_;
  std::shared_ptr<Done> done_;
  std::shared_ptr<Batch> batch_;
  std::string label_;
};

class NcclCommunicator : public Communicator {
 public:
  explicit NcclCommunicator(std::shared_ptr<State> s) : s_(std::move(s)) {}

  int rank() const override { return s_->rank(); }
  int size() const override { return s_->size(); }
  std::string name() const override { return s_->name(); }
  std::string backend() const override { return "nccl"; }
  bool p2p_pairs_by_tag() const override { return false; }
  absl::Duration timeout() const override { return s_->options().timeout; }

  absl::StatusOr<WorkPtr> AllGather(const void* send, void* recv, int64_t count,
                                    DType dtype) override {
    OpDesc d{OpKind::kAllGather, count, dtype};
    GTP_RETURN_IF_ERROR(Check(d, {internal::CheckCount(count),
                                  CheckDeviceBuffer(count, send, "send"),
                                  CheckDeviceBuffer(count, recv, "recv")}));
    const int n = size();
    return Issue(d, [=](ncclComm_t c, cudaStream_t s, absl::Time dl) -> absl::Status {
      if (n == 1) return CopyAsync(recv, send, count * Bytes(dtype), s);
      return Settle(c, ncclAllGather(send, recv, count * Bytes(dtype), ncclUint8, c, s), dl,
                    "ncclAllGather");
    });
  }

  absl::StatusOr<WorkPtr> ReduceScatter(const void* send, void* recv, int64_t count, DType dtype,
                                        ReduceOp op) override {
    return Reduce(OpKind::kReduceScatter, send, recv, count, dtype, op);
  }

  absl::StatusOr<WorkPtr> AllReduce(const void* send, void* recv, int64_t count, DType dtype,
                                    ReduceOp op) override {
    return Reduce(OpKind::kAllReduce, send, recv, count, dtype, op);
  }

  absl::StatusOr<WorkPtr> Broadcast(void* buf, int64_t count, DType dtype, int root) override {
    OpDesc d{OpKind::kBroadcast, count, dtype, ReduceOp::kSum, root};
    GTP_RETURN_IF_ERROR(Check(d, {internal::CheckCount(count), internal::CheckRoot(root, size()),
                                  CheckDeviceBuffer(count, buf, "buf")}));
    return Issue(d, [=](ncclComm_t c, cudaStream_t s, absl::Time dl) {
      return Settle(c, ncclBroadcast(buf, buf, count * Bytes(dtype), ncclUint8, root, c, s), dl,
                    "ncclBroadcast");
    });
  }

  absl::StatusOr<WorkPtr> AllToAll(const void* send, void* recv, int64_t count,
                                   DType dtype) override {
    OpDesc d{OpKind::kAllToAll, count, dtype};
    const int64_t total = count * size() * Bytes(dtype);
    GTP_RETURN_IF_ERROR(Check(d, {internal::CheckCount(count),
                                  CheckDeviceBuffer(count, send, "send"),
                                  CheckDeviceBuffer(count, recv, "recv"),
                                  internal::CheckNoOverlap(send, total, recv, total, "all_to_all")}));
    std::vector<int64_t> c(size(), count), disp(size());
    for (int r = 0; r < size(); ++r) disp[r] = r * count;
    return Exchange(d, send, c, disp, recv, c, disp, dtype);
  }

  absl::StatusOr<WorkPtr> AllToAllV(const void* send, const std::vector<int64_t>& send_counts,
                                    const std::vector<int64_t>& send_displs, void* recv,
                                    const std::vector<int64_t>& recv_counts,
                                    const std::vector<int64_t>& recv_displs,
                                    DType dtype) override {
    OpDesc d{OpKind::kAllToAllV, -1, dtype};
    GTP_RETURN_IF_ERROR(Check(d, {internal::CheckAllToAllV(size(), send_counts, send_displs,
                                                           recv_counts, recv_displs)}));
    return Exchange(d, send, send_counts, send_displs, recv, recv_counts, recv_displs, dtype);
  }

  absl::StatusOr<WorkPtr> Send(const void* buf, int64_t count, DType dtype, int peer,
                               int tag) override {
    return P2P(true, const_cast<void*>(buf), count, dtype, peer, tag);
  }
  absl::StatusOr<WorkPtr> Recv(void* buf, int64_t count, DType dtype, int peer, int tag) override {
    return P2P(false, buf, count, dtype, peer, tag);
  }

  absl::StatusOr<WorkPtr> Barrier() override {
    // A one-element all-reduce; Synchronize on its Work blocks the host.
    OpDesc d{OpKind::kBarrier};
    return Issue(d, [](ncclComm_t c, cudaStream_t s, absl::Time dl) -> absl::Status {
      void* tmp = nullptr;
      GTP_RETURN_IF_ERROR(Cuda(cudaMallocAsync(&tmp, 4, s), "cudaMallocAsync"));
      GTP_RETURN_IF_ERROR(Cuda(cudaMemsetAsync(tmp, 0, 4, s), "cudaMemsetAsync"));
      absl::Status st = Settle(c, ncclAllReduce(tmp, tmp, 1, ncclInt32, ncclSum, c, s), dl,
                               "ncclAllReduce (barrier)");
      cudaFreeAsync(tmp, s);
      return st;
    });
  }

  // One byte each way with every peer, in one group: NCCL sets up the send
  // and the receive connections of every pair here, the same on both sides,
  // so later batches of any shape find them made (communicator.h).
  absl::Status ConnectPeers(const std::vector<int>& peers) override {
    GTP_RETURN_IF_ERROR(Communicator::ConnectPeers(peers));
    if (peers.empty()) return absl::OkStatus();
    std::string label = absl::StrCat(s_->Prefix(), "connect peers");
    for (int p : peers) absl::StrAppend(&label, " ", p);
    const std::vector<int> ps = peers;
    GTP_ASSIGN_OR_RETURN(
        std::shared_ptr<Done> done,
        s_->Enqueue(label, [ps](ncclComm_t c, cudaStream_t s, absl::Time dl) -> absl::Status {
          const size_t n = ps.size();
          char* buf = nullptr;
          GTP_RETURN_IF_ERROR(Cuda(cudaMallocAsync(reinterpret_cast<void**>(&buf), 2 * n, s),
                                   "cudaMallocAsync"));
          absl::Status st = Cuda(cudaMemsetAsync(buf, 0, 2 * n, s), "cudaMemsetAsync");
          if (st.ok()) st = NcclStatus(ncclGroupStart(), "ncclGroupStart");
          if (st.ok()) {
            for (size_t i = 0; i < n && st.ok(); ++i) {
              for (ncclResult_t r : {ncclSend(buf + 2 * i, 1, ncclUint8, ps[i], c, s),
                                     ncclRecv(buf + 2 * i + 1, 1, ncclUint8, ps[i], c, s)}) {
                if (r != ncclSuccess && r != ncclInProgress) st = NcclStatus(r, "ncclSend/ncclRecv");
              }
            }
            absl::Status end = Settle(c, ncclGroupEnd(), dl, "connect group");
            if (st.ok()) st = end;
          }
          absl::Status freed = Cuda(cudaFreeAsync(buf, s), "cudaFreeAsync");
          return st.ok() ? freed : st;
        }));
    return s_->Block(*done, label, s_->options().timeout);
  }

  absl::StatusOr<std::unique_ptr<Communicator>> Split(const std::vector<std::vector<int>>& groups,
                                                      const std::string& name) override {
    const std::string what = absl::StrCat(s_->Prefix(), "split '", name, "'");
    absl::Status bad = internal::CheckGroups(groups, size());
    if (!bad.ok()) return absl::InvalidArgumentError(absl::StrCat(what, ": ", bad.message()));
    int color = NCCL_SPLIT_NOCOLOR, key = 0;
    for (size_t g = 0; g < groups.size(); ++g) {
      for (size_t i = 0; i < groups[g].size(); ++i) {
        if (groups[g][i] == rank()) {
          color = static_cast<int>(g);
          key = static_cast<int>(i);
        }
      }
    }
    // Agreement: every rank's hash of (groups, name), gathered on the device.
    const int64_t mine = static_cast<int64_t>(internal::HashGroups(groups, name));
    const int n = size();
    std::vector<int64_t> all(n);
    GTP_RETURN_IF_ERROR(Cuda(cudaSetDevice(s_->device()), "cudaSetDevice"));
    int64_t* dev = nullptr;
    GTP_RETURN_IF_ERROR(Cuda(cudaMalloc(reinterpret_cast<void**>(&dev), (n + 1) * 8), "cudaMalloc"));
    std::unique_ptr<int64_t, void (*)(int64_t*)> free_dev(dev, [](int64_t* p) { cudaFree(p); });
    GTP_RETURN_IF_ERROR(Cuda(cudaMemcpy(dev + n, &mine, 8, cudaMemcpyHostToDevice), "cudaMemcpy"));
    GTP_ASSIGN_OR_RETURN(WorkPtr w, AllGather(dev + n, dev, 1, DType::kI64));
    GTP_RETURN_IF_ERROR(w->Synchronize());
    GTP_RETURN_IF_ERROR(Cuda(cudaMemcpy(all.data(), dev, n * 8, cudaMemcpyDeviceToHost), "cudaMemcpy"));
    for (int r = 0; r < n; ++r) {
      if (all[r] != mine) {
        return absl::InvalidArgumentError(absl::StrCat(what, ": rank ", r,
                                                       " passed different groups or name than rank ",
                                                       rank()));
      }
    }
    auto child_box = std::make_shared<ncclComm_t>(nullptr);
    GTP_RETURN_IF_ERROR(s_->WithComm(
        [child_box, color, key, what](ncclComm_t c) {
          ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
          return NcclStatus(ncclCommSplit(c, color, key, child_box.get(), &cfg), what);
        },
        what));
    ncclComm_t child = *child_box;
    if (color == NCCL_SPLIT_NOCOLOR) return std::unique_ptr<Communicator>();
    GTP_ASSIGN_OR_RETURN(Stream stream, Stream::Create(s_->device()));
    GTP_ASSIGN_OR_RETURN(Event ready, Event::Create());
    auto st = std::make_shared<State>(child, key, static_cast<int>(groups[color].size()),
                                      s_->device(), internal::SubGroupName(name, groups[color]),
                                      s_->compute(), std::move(stream), std::move(ready),
                                      s_->options(), s_->store(), s_->store_host(), s_->liveness());
    return std::unique_ptr<Communicator>(std::make_unique<NcclCommunicator>(std::move(st)));
  }

 private:
  static int64_t Bytes(DType d) { return static_cast<int64_t>(SizeOf(d)); }
  static absl::Status CopyAsync(void* dst, const void* src, int64_t bytes, cudaStream_t s) {
    if (bytes == 0 || dst == src) return absl::OkStatus();
    return Cuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s), "cudaMemcpyAsync");
  }
  // ReduceScatter or AllReduce (`kind`): the same checks, one rank a copy (no
  // NCCL launch), bf16/f16 sums accumulated in f32, kMean divided after.
  absl::StatusOr<WorkPtr> Reduce(OpKind kind, const void* send, void* recv, int64_t count,
                                 DType dtype, ReduceOp op) {
    OpDesc d{kind, count, dtype, op};
    GTP_RETURN_IF_ERROR(Check(d, {internal::CheckCount(count), internal::CheckReducible(dtype, op),
                                  CheckDeviceBuffer(count, send, "send"),
                                  CheckDeviceBuffer(count, recv, "recv")}));
    const int n = size();
    const bool scatter = kind == OpKind::kReduceScatter;
    const char* call = scatter ? "ncclReduceScatter" : "ncclAllReduce";
    return Issue(d, [=](ncclComm_t c, cudaStream_t s, absl::Time dl) -> absl::Status {
      if (n == 1) return CopyAsync(recv, send, count * Bytes(dtype), s);
      if (UseF32(dtype, op)) {
        return F32Accumulate(scatter, c, n, send, recv, count, dtype, op, s,
                             [&](ncclResult_t r) { return Settle(c, r, dl, call); });
      }
      const ncclResult_t r =
          scatter ? ncclReduceScatter(send, recv, count, NcclType(dtype), NcclOp(op), c, s)
                  : ncclAllReduce(send, recv, count, NcclType(dtype), NcclOp(op), c, s);
      GTP_RETURN_IF_ERROR(Settle(c, r, dl, call));
      return MeanDivide(dtype, op, recv, count, n, s);
    });
  }

  static bool UseF32(DType d, ReduceOp op) {
    return (d == DType::kBF16 || d == DType::kF16) && (op == ReduceOp::kSum || op == ReduceOp::kMean);
  }
  static absl::Status MeanDivide(DType dtype, ReduceOp op, void* buf, int64_t count, int n,
                                 cudaStream_t s) {
    if (op != ReduceOp::kMean) return absl::OkStatus();
    return Cuda(nccl_internal::LaunchDivide(dtype, buf, count, n, s), "divide kernel");
  }

  absl::Status Check(const OpDesc& d, std::initializer_list<absl::Status> checks) {
    for (const auto& st : checks) {
      if (!st.ok()) {
        return absl::Status(st.code(), absl::StrCat(s_->Prefix(), d.ToString(), ": ", st.message()));
      }
    }
    return absl::OkStatus();
  }

  absl::StatusOr<WorkPtr> Issue(
      const OpDesc& d, const nccl_internal::EnqueueFn& fn) {
    std::string label = absl::StrCat(s_->Prefix(), d.ToString(), " #", seq_++);
    GTP_ASSIGN_OR_RETURN(std::shared_ptr<Done> done, s_->Enqueue(label, fn));
    return WorkPtr(std::make_unique<NcclWork>(s_, std::move(done), std::move(label)));
  }

  absl::StatusOr<WorkPtr> Exchange(const OpDesc& d, const void* send, std::vector<int64_t> sc,
                                   std::vector<int64_t> sd, void* recv, std::vector<int64_t> rc,
                                   std::vector<int64_t> rd, DType dtype) {
    const int64_t es = Bytes(dtype);
    const int n = size();
    return Issue(d, [=](ncclComm_t c, cudaStream_t s, absl::Time dl) -> absl::Status {
      if (n == 1) {
        if (sc[0] != rc[0]) return absl::InvalidArgumentError("send and recv counts differ");
        return CopyAsync(static_cast<char*>(recv) + rd[0] * es,
                         static_cast<const char*>(send) + sd[0] * es, sc[0] * es, s);
      }
      GTP_RETURN_IF_ERROR(NcclStatus(ncclGroupStart(), "ncclGroupStart"));
      for (int p = 0; p < n; ++p) {
        ncclResult_t r1 = ncclSend(static_cast<const char*>(send) + sd[p] * es, sc[p] * es,
                                   ncclUint8, p, c, s);
        ncclResult_t r2 = ncclRecv(static_cast<char*>(recv) + rd[p] * es, rc[p] * es, ncclUint8, p,
                                   c, s);
        for (ncclResult_t r : {r1, r2}) {
          if (r != ncclSuccess && r != ncclInProgress) {
            ncclGroupEnd();
            return NcclStatus(r, "ncclSend/ncclRecv");
          }
        }
      }
      return Settle(c, ncclGroupEnd(), dl, "all-to-all group");
    });
  }

  absl::StatusOr<WorkPtr> P2P(bool is_send, void* buf, int64_t count, DType dtype, int peer,
                              int tag) {
    OpDesc d{is_send ? OpKind::kSend : OpKind::kRecv, count, dtype};
    GTP_RETURN_IF_ERROR(Check(d, {internal::CheckCount(count), internal::CheckPeer(peer, size()),
                                  internal::CheckTag(tag), CheckDeviceBuffer(count, buf, "buf")}));
    GTP_ASSIGN_OR_RETURN(std::shared_ptr<Batch> b,
                         s_->QueueP2P(P2PItem{is_send, buf, count, dtype, peer, tag}));
    return WorkPtr(std::make_unique<NcclWork>(
        s_, std::move(b), absl::StrCat(s_->Prefix(), d.ToString(), " peer ", peer, " tag ", tag)));
  }

  std::shared_ptr<State> s_;
  uint64_t seq_ = 0;
};

absl::StatusOr<std::unique_ptr<Communicator>> MakeWorld(std::shared_ptr<KeyValueStore> store,
                                                        std::shared_ptr<TcpStoreServer> store_host, int rank,
                                                        int size, int device,
                                                        cudaStream_t compute,
                                                        const NcclOptions& options) {
  const std::string what = absl::StrCat("nccl world (rank ", rank, "/", size, ", device ", device, ")");
  if (CudaDeviceCount() == 0) return absl::FailedPreconditionError(what + ": " + NoGpuReason());
  GTP_RETURN_IF_ERROR(Cuda(cudaSetDevice(device), "cudaSetDevice"));
  const std::string key = options.store_prefix + "/unique_id";
  ncclUniqueId id;
  if (rank == 0) {
    GTP_RETURN_IF_ERROR(NcclStatus(ncclGetUniqueId(&id), what + ": ncclGetUniqueId"));
    GTP_RETURN_IF_ERROR(store->Set(key, std::string(id.internal, sizeof(id.internal)),
                                   options.connect_timeout));
  } else {
    auto v = store->Get(key, options.connect_timeout);
    if (!v.ok()) {
      return absl::Status(v.status().code(),
                          absl::StrCat(what, ": no NCCL unique id from rank 0: ", v.status().message()));
    }
    if (v->size() != sizeof(id.internal)) return absl::InternalError(what + ": malformed unique id");
    std::memcpy(id.internal, v->data(), sizeof(id.internal));
  }
  // Blocking communicators (the fast path for collectives); the
  // initialisation, which waits for every rank, runs on a helper thread so a
  // rank that never joins costs connect_timeout, not a hang.
  auto comm_box = std::make_shared<ncclComm_t>(nullptr);
  absl::Status st = WithTimeout(
      [comm_box, size, id, rank, device]() {
        cudaSetDevice(device);
        ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
        ncclComm_t c = nullptr;
        ncclResult_t r = ncclCommInitRankConfig(&c, size, id, rank, &cfg);
        *comm_box = c;
        return NcclStatus(r, "ncclCommInitRank");
      },
      options.connect_timeout, nullptr, what + ": ncclCommInitRank");
  if (!st.ok()) {
    if (st.code() == absl::StatusCode::kDeadlineExceeded) {
      return absl::DeadlineExceededError(absl::StrCat(
          what, ": ncclCommInitRank did not complete within ",
          absl::FormatDuration(options.connect_timeout), " (a rank did not join?)"));
    }
    return absl::Status(st.code(), absl::StrCat(what, ": ", st.message()));
  }
  ncclComm_t comm = *comm_box;
  GTP_ASSIGN_OR_RETURN(Stream stream, Stream::Create(device));
  GTP_ASSIGN_OR_RETURN(Event ready, Event::Create());
  // Heartbeats through the store, so that a failure can name the rank that
  // is gone (NCCL cannot).
  std::shared_ptr<Liveness> liveness =
      Liveness::Start(store, options.store_prefix, rank, size, absl::Milliseconds(500));
  auto state = std::make_shared<State>(comm, rank, size, device, options.name, compute,
                                       std::move(stream), std::move(ready), options,
                                       std::move(store), std::move(store_host), std::move(liveness));
  return std::unique_ptr<Communicator>(std::make_unique<NcclCommunicator>(std::move(state)));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Communicator>> CreateNcclWorld(std::shared_ptr<KeyValueStore> store,
                                                              int rank, int size, int device,
                                                              cudaStream_t compute_stream,
                                                              const NcclOptions& options) {
  return MakeWorld(std::move(store), nullptr, rank, size, device, compute_stream, options);
}

absl::StatusOr<std::unique_ptr<Communicator>> CreateNcclWorldFromEnv(cudaStream_t compute_stream,
                                                                     const NcclOptions& options) {
  GTP_ASSIGN_OR_RETURN(LaunchEnv env, ReadLaunchEnv());
  std::shared_ptr<TcpStoreServer> server;
  if (env.rank == 0) {
    GTP_ASSIGN_OR_RETURN(auto s, TcpStoreServer::StartOrAdopt(env.master_port, env.store_fd));
    s->set_linger(std::min(options.connect_timeout, absl::Seconds(5)));
    server = std::move(s);
  }
  GTP_ASSIGN_OR_RETURN(
      std::unique_ptr<TcpStoreClient> client,
      TcpStoreClient::Connect(env.master_addr, env.master_port, options.connect_timeout));
  // Ranks may outnumber the GPUs (gtprun's shared-GPU mode): LOCAL_RANK
  // modulo the devices, as the trainer picks.
  const int gpus = CudaDeviceCount();
  return MakeWorld(std::shared_ptr<KeyValueStore>(std::move(client)), server, env.rank,
                   env.world_size, gpus > 0 ? env.local_rank % gpus : env.local_rank,
                   compute_stream, options);
}

}  // namespace gtp::comm
