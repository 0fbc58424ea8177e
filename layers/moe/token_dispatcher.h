// layers/moe/token_dispatcher.h — how a MoE layer's routed rows reach the
// ranks of their experts and how the experts' results come back: the
// TokenDispatcher interface and the setup its implementations share.
//
// Implementations (MoeConfig::dispatcher picks one):
//   AllToAllDispatcher  (all_to_all_dispatcher.h)   each row to its expert's rank,
//                                                   all-to-all over "ep"
//   AllGatherDispatcher (all_gather_dispatcher.h)   every rank gathers every row of
//                                                   its ep × etp group
//
// One forward of a MoE layer (layers/moe/moe_layer.h):
//
//   r  = Router::Forward(x)                x [rows, C]
//   xe = Dispatch(x, r)                    the rows of this rank's local experts, expert-major
//   ye = GroupedExperts::Forward(xe, expert_rows())
//   y  = Combine(ye)                       y [rows, C]: Σ_j w_j · ye of each token's slots
//
// and its backward in reverse: CombineBackward(dy) gives dye and the routing
// weights' gradient, the experts' backward dxe, DispatchBackward(dxe) dx.
// Both implementations feed the experts the same rows in the same order
// (local expert, then ETP rank, EP rank, token, slot), so the expert GEMMs
// and every result are the same whichever dispatches. Under ETP the experts'
// outputs are partial sums over their hidden slice: Combine (and
// DispatchBackward) sum them over "etp", in f32 and rank order.
//
// A dispatcher keeps the last forward's plan and activations until the
// backward that follows it (or DropActivations). Calls are collective over
// the ep and etp groups (every rank of them calls the same methods in the
// same order); driven by one thread; not thread-safe.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "comm/communicator.h"
#include "core/kernels/ops.h"
#include "layers/moe/router.h"

namespace gtp::layers::moe {

// What a dispatcher needs of its layer.
struct DispatchSetup {
  kernels::Exec exec;
  comm::Communicator* ep = nullptr;   // ranks holding different experts (E/EP each)
  comm::Communicator* etp = nullptr;  // ranks holding hidden slices of the same experts
  int num_experts = 0;                // E (global)
  int top_k = 0;                      // k
  int64_t rows = 0;                   // tokens this rank routes per micro-batch
  int64_t C = 0;                      // model width
  // Router::capacity() (kept slots per expert of this rank's rows; 0:
  // dropless) and RouterConfig::pad_to_capacity: every (rank, expert) block
  // padded to it, for static sizes.
  int64_t capacity = 0;
  bool pad_to_capacity = false;
};

class TokenDispatcher {
 public:
  virtual ~TokenDispatcher() = default;

  // x [rows, C] and its routing (valid until Combine) → xe [Σ expert_rows(),
  // C] in x's dtype: the rows of this rank's local experts, expert-major.
  // Blocks on the host for the row counts unless padded to capacity.
  virtual absl::StatusOr<Tensor> Dispatch(const Tensor& x, const RouterOutput& r) = 0;
  // Rows each local expert got in the last Dispatch [E/EP].
  virtual const std::vector<int64_t>& expert_rows() const = 0;
  // ye like Dispatch's output (the experts' results) → y [rows, C] in ye's
  // dtype. Keeps ye for CombineBackward.
  virtual absl::StatusOr<Tensor> Combine(const Tensor& ye) = 0;
  // dy [rows, C] → dye like Combine's input; dw [rows·k] f32 (=) the
  // gradient of the routing weights (0 where dropped).
  virtual absl::StatusOr<Tensor> CombineBackward(const Tensor& dy, const Tensor& dw) = 0;
  // dxe like Dispatch's output → dx [rows, C] in dtype dt: the dispatched
  // rows' gradients summed into their tokens in f32, plus add (f32 [rows, C],
  // e.g. the router's input gradient; undefined: nothing added), rounded once.
  virtual absl::StatusOr<Tensor> DispatchBackward(const Tensor& dxe, const Tensor& add,
                                                  DType dt) = 0;
  virtual void DropActivations() = 0;
};

}  // namespace gtp::layers::moe
