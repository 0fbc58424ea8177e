// comm/forwarding.h — the base of Communicator decorators (CountingCommunicator,
// DelayingCommunicator): it forwards every call to an inner communicator and
// passes each operation through one hook, so that a decorator says only what
// it adds.
//
//   class Tracing final : public ForwardingCommunicator {
//     absl::StatusOr<WorkPtr> Issue(const OpCall& op, IssueFn issue) override {
//       Log(op.kind, op.bytes);
//       return issue();                       // the inner communicator's call
//     }
//     std::unique_ptr<Communicator> Wrap(std::unique_ptr<Communicator> sub) override {
//       return std::make_unique<Tracing>(std::move(sub));   // Split's result, decorated too
//     }
//   };
//
// OpCall::bytes is this rank's input to the operation, the usual "message
// size": all-gather count·es; reduce-scatter size()·count·es; all-reduce
// count·es; broadcast count·es on the root, 0 elsewhere; all-to-all
// size()·count·es; all-to-all-v Σ send_counts·es; send count·es; recv 0 (its
// bytes are the sender's); barrier 0. Thread-safety and blocking are the
// inner communicator's plus the hook's.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "comm/communicator.h"

namespace gtp::comm {

enum class OpKind : int {
  kAllGather = 0,
  kReduceScatter,
  kAllReduce,
  kBroadcast,
  kAllToAll,
  kSend,
  kRecv,
  kBarrier,
  kCount
};
const char* OpKindName(OpKind k);

// One operation as a decorator sees it.
struct OpCall {
  OpKind kind;
  int64_t bytes;  // this rank's input (the header's rules)
};

class ForwardingCommunicator : public Communicator {
 public:
  using IssueFn = absl::FunctionRef<absl::StatusOr<WorkPtr>()>;

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::string name() const override { return inner_->name(); }
  std::string backend() const override { return inner_->backend(); }
  bool p2p_pairs_by_tag() const override { return inner_->p2p_pairs_by_tag(); }
  absl::Duration timeout() const override { return inner_->timeout(); }
  absl::Status ConnectPeers(const std::vector<int>& peers) override {
    return inner_->ConnectPeers(peers);
  }

  absl::StatusOr<WorkPtr> AllGather(const void* send, void* recv, int64_t count,
                                    DType dtype) final;
  absl::StatusOr<WorkPtr> ReduceScatter(const void* send, void* recv, int64_t count, DType dtype,
                                        ReduceOp op) final;
  absl::StatusOr<WorkPtr> AllReduce(const void* send, void* recv, int64_t count, DType dtype,
                                    ReduceOp op) final;
  absl::StatusOr<WorkPtr> Broadcast(void* buf, int64_t count, DType dtype, int root) final;
  absl::StatusOr<WorkPtr> AllToAll(const void* send, void* recv, int64_t count, DType dtype) final;
  absl::StatusOr<WorkPtr> AllToAllV(const void* send, const std::vector<int64_t>& send_counts,
                                    const std::vector<int64_t>& send_displs, void* recv,
                                    const std::vector<int64_t>& recv_counts,
                                    const std::vector<int64_t>& recv_displs, DType dtype) final;
  absl::StatusOr<WorkPtr> Send(const void* buf, int64_t count, DType dtype, int peer,
                               int tag) final;
  absl::StatusOr<WorkPtr> Recv(void* buf, int64_t count, DType dtype, int peer, int tag) final;
  absl::StatusOr<WorkPtr> Barrier() final;
  // The inner Split, its result (when this rank is in a group) passed to Wrap.
  absl::StatusOr<std::unique_ptr<Communicator>> Split(const std::vector<std::vector<int>>& groups,
                                                      const std::string& name) override;

 protected:
  // Forwards to `inner` (not owned; must outlive this).
  explicit ForwardingCommunicator(Communicator* inner) : inner_(inner) {}
  // The same, owning it (a decorated Split result).
  explicit ForwardingCommunicator(std::unique_ptr<Communicator> inner)
      : owned_(std::move(inner)), inner_(owned_.get()) {}

  // Every operation passes through here; `issue` makes the inner call (at
  // most once) and returns its Work.
  virtual absl::StatusOr<WorkPtr> Issue(const OpCall& op, IssueFn issue) = 0;
  // A sub-communicator from Split (owned, non-null) as a decorator of this kind.
  virtual std::unique_ptr<Communicator> Wrap(std::unique_ptr<Communicator> sub) = 0;

 private:
  std::unique_ptr<Communicator> owned_;
  Communicator* inner_;
};

}  // namespace gtp::comm
