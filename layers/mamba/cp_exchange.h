// layers/mamba/cp_exchange.h — context parallelism for the Mamba mixer: an
// all-to-all that trades the sequence split for a channel (head) split and
// back, so the causal conv and the scan run on whole sequences.
//
// Under CP a rank holds two of each sequence's 2·CP load-balanced chunks
// (layers/cp/ring_attention.h: rank r has chunks r and 2·CP−1−r). The conv
// needs the d_conv−1 inputs before its chunk and the scan the state at its
// chunk's start, both owned by other ranks. Instead of passing them along
// the sequence (2·CP hops in sequence order, each waiting for the last), the
// mixer's projected inputs are exchanged once: CP part j receives every
// rank's tokens of its share of the channels (heads j·H/CP .. (j+1)·H/CP−1
// and the B/C groups they read), puts the chunks in sequence order and runs
// the conv and the scan on whole sequences exactly as one rank would; the
// outputs go back the same way. The reference system does the same
// (Megatron-LM's Mamba context parallelism). Exact: only copies and one
// all-to-all each way; where several parts read one B/C group, the adjoint
// sums their gradients (in part order: deterministic).
//
//   ToHeads:   k tensors [B·T/CP, width_k] (this rank's chunks, all channels)
//           → k tensors [B, T, part_k]    (whole sequences, part j's channels)
//   FromHeads: the adjoint (the inverse where no channel is shared).
//
// f32 tensors on exec's device; CPU or CUDA (pitched copies, core/tensor.h),
// over any backend. Collective over the CP group, in the same order on every
// rank.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "comm/communicator.h"
#include "core/kernels/ops.h"
#include "core/tensor.h"

namespace gtp::layers::mamba {

// The channels of one tensor, as CP parts take them: part j gets
// [offset[j], offset[j] + part). Parts may share channels (several parts in
// one B/C group).
struct ChannelSplit {
  int64_t width = 0;
  int64_t part = 0;
  std::vector<int64_t> offset;  // one per CP part
};

class HeadExchange {
 public:
  // B sequences of T_local = T/CP tokens per rank (even: two chunks).
  HeadExchange(const kernels::Exec& e, comm::Communicator* cp, int64_t B, int64_t T_local);

  int parts() const { return cp_->size(); }
  int part() const { return cp_->rank(); }
  int64_t full_length() const { return Tl_ * cp_->size(); }

  absl::StatusOr<std::vector<Tensor>> ToHeads(const std::vector<Tensor>& xs,
                                              const std::vector<ChannelSplit>& splits) const;
  absl::StatusOr<std::vector<Tensor>> FromHeads(const std::vector<Tensor>& ys,
                                                const std::vector<ChannelSplit>& splits) const;

 private:
  // The chunk of the sequence that chunk c (0, 1) of rank s holds.
  int64_t ChunkOf(int s, int c) const { return c == 0 ? s : 2 * cp_->size() - 1 - s; }
  absl::Status Check(const std::vector<Tensor>& ts, const std::vector<ChannelSplit>& splits,
                     bool heads) const;
  // Between an all-to-all buffer (per rank r, `per` elements: each tensor's
  // [B, 2 chunks, T/(2·CP), part] rows as rank r holds them) and the whole
  // sequences [B, T, part]: into the sequences, or out of them.
  void MoveChunks(const Tensor& wire, const std::vector<Tensor>& seqs,
                  const std::vector<ChannelSplit>& splits, int64_t per, bool to_sequences) const;

  kernels::Exec e_;
  comm::Communicator* cp_;
  int64_t B_, Tl_;
};

}  // namespace gtp::layers::mamba
