// layers/cp/ring_attention.h — causal attention over a sequence split across
// the context-parallel ("cp") group, by ring exchange of K/V.
//
// Load balance: a sequence of T tokens is cut into 2·CP chunks of c = T/(2·CP);
// CP rank r holds chunks r and 2·CP−1−r (so every rank has the same share of
// the causal mask's work): its local row t is global position
//   t < c ? r·c + t : (2·CP−1−r)·c + (t − c).
//
// Forward: each rank starts with its own K/V block; CP steps compute the
// local queries against the visiting block (causal by global positions, an
// online softmax merged across blocks, as flash attention does across tiles)
// and pass the block on to rank r+1. Backward: the same ring with dK/dV
// accumulators travelling with their blocks; after CP steps each block's
// gradient is back at its owner. dQ stays local. Per-row log-sum-exp and
// D = rowsum(dy ∘ y) make each block's backward independent.
//
// Shapes: q [B, Tl, NH, HS], k/v [B, Tl, NKV, HS] (Tl = T/CP), f32, on the
// exec's device (CPU loops, or CUDA kernels: layers/cp/cuda);
// query head h reads kv head h / (NH/NKV); scale 1/√HS. Every rank of the
// group calls in step. On CUDA over NCCL nothing waits on the host: the ring's
// sends are ordered after the compute stream and the compute stream after
// its receives (comm/nccl); host backends block on each ring step.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "comm/communicator.h"
#include "core/kernels/ops.h"

namespace gtp::layers::cp {

// Global position of local row t of CP rank `rank` (see the file comment).
int64_t GlobalPosition(int64_t T, int cp, int rank, int64_t t);
// All local rows' global positions, [T/CP].
std::vector<int32_t> GlobalPositions(int64_t T, int cp, int rank);

// The CPU block kernels (CUDA: layers/cp/cuda/ring_attention_cuda.h).
// One block of causal attention, accumulated: for every (b, h, i) the keys j
// of the block with kpos[j] ≤ qpos[i] update the running max m, sum l and
// unnormalised output acc (all f32, [B, Tq, NH] and [B, Tq, NH, HS]).
void BlockForward(const float* q, const float* k, const float* v, const int32_t* qpos,
                  const int32_t* kpos, int64_t B, int64_t Tq, int64_t Tk, int64_t NH, int64_t NKV,
                  int64_t HS, float* m, float* l, float* acc);
// The block's backward given the final lse [B, Tq, NH] and D [B, Tq, NH]:
// dq += , dk += , dv += (the block's keys and values).
void BlockBackward(const float* q, const float* k, const float* v, const int32_t* qpos,
                   const int32_t* kpos, const float* dy, const float* lse, const float* D,
                   int64_t B, int64_t Tq, int64_t Tk, int64_t NH, int64_t NKV, int64_t HS,
                   float* dq, float* dk, float* dv);

class RingAttention {
 public:
  // cp: the group (size 1 allowed: plain causal attention); T: the full
  // sequence length. Blocks (the positions' copy to the device).
  RingAttention(comm::Communicator* cp, int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS,
                const kernels::Exec& e);
  // y (=) [B, Tl, NH, HS]. Keeps q, k, v, y and the lse for Backward.
  absl::Status Forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& y);
  // dq, dk, dv (=) from dy.
  absl::Status Backward(const Tensor& dy, const Tensor& dq, const Tensor& dk, const Tensor& dv);
  void DropActivations() { q_ = k_ = v_ = y_ = lse_ = Tensor(); }
  // This rank's rows' global positions, i32 [Tl] on the exec's device.
  const Tensor& positions() const { return pos_[rank_]; }

 private:
  // Sends `out` blocks to the next rank and receives as many from the
  // previous one into `in` (same sizes), tag base `tag`.
  absl::Status Rotate(const std::vector<Tensor>& out, const std::vector<Tensor>& in, int tag);
  // A ring step must wait on the host for the stream: device blocks carried
  // by a backend that does not order streams itself (every one but NCCL).
  bool HostWaits() const { return exec_.is_cuda() && cp_ != nullptr && cp_->backend() != "nccl"; }
  comm::Communicator* cp_;
  int64_t B_, T_, Tl_, NH_, NKV_, HS_;
  int size_ = 1, rank_ = 0;
  kernels::Exec exec_;
  std::vector<Tensor> pos_;  // every rank's positions, i32 [Tl] on the device
  Tensor q_, k_, v_, y_, lse_;
  int calls_ = 0;  // tag disambiguation across calls
};

}  // namespace gtp::layers::cp
