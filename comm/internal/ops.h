// comm/internal/ops.h — what every backend shares: the description of one
// collective call (for cross-rank agreement checks and error messages), the
// per-rank argument checks, and host reductions with the project's numerics.
//
// Reduction numerics (all backends, DESIGN.md §2): f32 accumulates in f32;
// bf16 and f16 widen to f32, accumulate there and round once at the end;
// i32/i64 accumulate in their own type (two's-complement wrap-around). kMean
// divides the sum by the group size once, in the wide type (integer mean
// truncates toward zero). fp8 and u8 cannot be reduced.
//
// Everything here is pure and thread-safe; nothing blocks.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "comm/communicator.h"
#include "core/dtype.h"

namespace gtp::comm::internal {

enum class OpKind : uint8_t {
  kAllGather = 1,
  kReduceScatter,
  kAllReduce,
  kBroadcast,
  kAllToAll,
  kAllToAllV,
  kSend,
  kRecv,
  kBarrier,
  kSplit,
};

// "all_gather", "reduce_scatter", ...
const char* OpKindName(OpKind kind);

// Everything ranks must agree on for one collective call.
struct OpDesc {
  OpKind kind = OpKind::kBarrier;
  int64_t count = 0;  // elements per rank as the op defines it; -1 for all_to_allv
  DType dtype = DType::kU8;
  ReduceOp op = ReduceOp::kSum;  // meaningful for reductions only
  int root = -1;                 // broadcast only
  uint64_t extra = 0;            // e.g. a hash of Split's groups

  // e.g. "all_reduce(count=5, dtype=bf16, op=sum)".
  std::string ToString() const;
  // First difference between two descriptions in words, "" when they agree.
  std::string DiffAgainst(const OpDesc& other) const;
  // 16-bit fingerprint: 4 bits kind, 12 bits hash of the rest.
  uint16_t Signature() const;
  bool operator==(const OpDesc& o) const;
};

// True for reductions, which take a ReduceOp.
bool IsReduction(OpKind kind);

// Checks this rank's own arguments. `size` is the group size.
absl::Status CheckCount(int64_t count);
// Fails when `buf` is null but `count` > 0; `what` names the buffer.
absl::Status CheckBuffer(int64_t count, const void* buf, const char* what);
absl::Status CheckReducible(DType dtype, ReduceOp op);
absl::Status CheckRoot(int root, int size);
absl::Status CheckPeer(int peer, int size);
// Point-to-point tags are in [0, kMaxTag] on every backend.
inline constexpr int kMaxTag = (1 << 24) - 1;
absl::Status CheckTag(int tag);
absl::Status CheckAllToAllV(int size, const std::vector<int64_t>& send_counts,
                            const std::vector<int64_t>& send_displs,
                            const std::vector<int64_t>& recv_counts,
                            const std::vector<int64_t>& recv_displs);
// Fails when [a, a+a_bytes) and [b, b+b_bytes) overlap (both non-empty).
absl::Status CheckNoOverlap(const void* a, int64_t a_bytes, const void* b, int64_t b_bytes,
                            const char* what);
// Checks Split's `groups` against the parent size: disjoint, in range,
// non-empty lists.
absl::Status CheckGroups(const std::vector<std::vector<int>>& groups, int size);
// Order-sensitive hash of groups and name (for agreement checks).
uint64_t HashGroups(const std::vector<std::vector<int>>& groups, const std::string& name);
// "name[3,1,2]" for a sub-group built from parent ranks.
std::string SubGroupName(const std::string& prefix, const std::vector<int>& parent_ranks);

// ---- host reductions ---------------------------------------------------------
// The wide (accumulator) type of `dtype`: f32 for f32/bf16/f16, itself for
// i32/i64.
DType WideType(DType dtype);

// dst_wide[i] = widen(src[i]).
void Widen(DType dtype, const void* src, void* dst_wide, int64_t count);
// acc_wide[i] = op(acc_wide[i], src_wide[i]); kMean accumulates as kSum.
void CombineWide(DType wide, ReduceOp op, void* acc_wide, const void* src_wide, int64_t count);
// acc_wide[i] = op(acc_wide[i], widen(src[i])) without a temporary.
void CombineNarrow(DType dtype, ReduceOp op, void* acc_wide, const void* src, int64_t count);
// dst[i] = narrow(acc_wide[i] / group_size if kMean else acc_wide[i]).
// dst may alias acc_wide only when dtype == WideType(dtype).
void Finish(DType dtype, ReduceOp op, int group_size, const void* acc_wide, void* dst,
            int64_t count);

// Ranks as a short list with runs folded: {0,1,2,3,6} -> "ranks 0-3, 6",
// {2} -> "rank 2" (sorted input).
std::string RankList(const std::vector<int>& ranks);

}  // namespace gtp::comm::internal
