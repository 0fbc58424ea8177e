#include "comm/internal/ops.h"

#include <cstring>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace gtp::comm::internal {

const char* OpKindName(OpKind kind) {
  switch (kind) {
    case OpKind::kAllGather: return "all_gather";
    case OpKind::kReduceScatter: return "reduce_scatter";
    case OpKind::kAllReduce: return "all_reduce";
    case OpKind::kBroadcast: return "broadcast";
    case OpKind::kAllToAll: return "all_to_all";
    case OpKind::kAllToAllV: return "all_to_allv";
    case OpKind::kSend: return "send";
    case OpKind::kRecv: return "recv";
    case OpKind::kBarrier: return "barrier";
    case OpKind::kSplit: return "split";
  }
  return "unknown_op";
}

bool IsReduction(OpKind kind) {
  return kind == OpKind::kReduceScatter || kind == OpKind::kAllReduce;
}

std::string OpDesc::ToString() const {
  std::string s = absl::StrCat(OpKindName(kind), "(");
  switch (kind) {
    case OpKind::kBarrier: break;
    case OpKind::kSplit: absl::StrAppend(&s, "groups_hash=", extra); break;
    case OpKind::kAllToAllV: absl::StrAppend(&s, "dtype=", DTypeName(dtype)); break;
    default:
      absl::StrAppend(&s, "count=", count, ", dtype=", DTypeName(dtype));
      if (IsReduction(kind)) absl::StrAppend(&s, ", op=", ReduceOpName(op));
      if (kind == OpKind::kBroadcast) absl::StrAppend(&s, ", root=", root);
  }
  return s + ")";
}

std::string OpDesc::DiffAgainst(const OpDesc& o) const {
  if (kind != o.kind) return absl::StrCat("op ", OpKindName(kind), " vs ", OpKindName(o.kind));
  if (count != o.count) return absl::StrCat("count ", count, " vs ", o.count);
  if (dtype != o.dtype) return absl::StrCat("dtype ", DTypeName(dtype), " vs ", DTypeName(o.dtype));
  if (IsReduction(kind) && op != o.op)
    return absl::StrCat("reduce op ", ReduceOpName(op), " vs ", ReduceOpName(o.op));
  if (root != o.root) return absl::StrCat("root ", root, " vs ", o.root);
  if (extra != o.extra) {
    return kind == OpKind::kSplit ? "split groups or name differ" : "arguments differ";
  }
  return "";
}

bool OpDesc::operator==(const OpDesc& o) const { return DiffAgainst(o).empty(); }

namespace {
uint64_t Mix(uint64_t h, uint64_t v) {
  // splitmix64 step over the running value.
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebull;
  return h ^ (h >> 31);
}
}  // namespace

uint16_t OpDesc::Signature() const {
  uint64_t h = Mix(0, static_cast<uint64_t>(count));
  h = Mix(h, static_cast<uint64_t>(dtype));
  h = Mix(h, IsReduction(kind) ? static_cast<uint64_t>(op) : 0);
  h = Mix(h, static_cast<uint64_t>(static_cast<int64_t>(root)));
  h = Mix(h, extra);
  return static_cast<uint16_t>((static_cast<unsigned>(kind) & 0xf) << 12 | (h & 0xfff));
}

absl::Status CheckCount(int64_t count) {
  if (count < 0) return absl::InvalidArgumentError(absl::StrCat("negative count ", count));
  return absl::OkStatus();
}

absl::Status CheckBuffer(int64_t count, const void* buf, const char* what) {
  if (count > 0 && buf == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(what, " is null with a non-zero count"));
  }
  return absl::OkStatus();
}

absl::Status CheckReducible(DType dtype, ReduceOp op) {
  switch (dtype) {
    case DType::kF32: case DType::kBF16: case DType::kF16: case DType::kI32: case DType::kI64:
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("dtype ", DTypeName(dtype), " cannot be reduced (gather-type collectives only)"));
  }
  switch (op) {
    case ReduceOp::kSum: case ReduceOp::kMean: case ReduceOp::kMax: case ReduceOp::kMin:
      return absl::OkStatus();
  }
  return absl::InvalidArgumentError("unknown reduce op");
}

absl::Status CheckRoot(int root, int size) {
  if (root < 0 || root >= size) {
    return absl::InvalidArgumentError(absl::StrCat("root ", root, " out of range [0, ", size, ")"));
  }
  return absl::OkStatus();
}

absl::Status CheckPeer(int peer, int size) {
  if (peer < 0 || peer >= size) {
    return absl::InvalidArgumentError(absl::StrCat("peer ", peer, " out of range [0, ", size, ")"));
  }
  return absl::OkStatus();
}

absl::Status CheckTag(int tag) {
  if (tag < 0 || tag > kMaxTag) {
    return absl::InvalidArgumentError(absl::StrCat("tag ", tag, " out of range [0, ", kMaxTag, "]"));
  }
  return absl::OkStatus();
}

absl::Status CheckAllToAllV(int size, const std::vector<int64_t>& send_counts,
                            const std::vector<int64_t>& send_displs,
                            const std::vector<int64_t>& recv_counts,
                            const std::vector<int64_t>& recv_displs) {
  const std::vector<int64_t>* vs[] = {&send_counts, &send_displs, &recv_counts, &recv_displs};
  const char* names[] = {"send_counts", "send_displs", "recv_counts", "recv_displs"};
  for (int i = 0; i < 4; ++i) {
    if (static_cast<int>(vs[i]->size()) != size) {
      return absl::InvalidArgumentError(
          absl::StrCat(names[i], " has ", vs[i]->size(), " entries, group size is ", size));
    }
    for (int64_t v : *vs[i]) {
      if (v < 0) return absl::InvalidArgumentError(absl::StrCat(names[i], " has a negative entry ", v));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckNoOverlap(const void* a, int64_t a_bytes, const void* b, int64_t b_bytes,
                            const char* what) {
  if (a_bytes <= 0 || b_bytes <= 0) return absl::OkStatus();
  auto pa = reinterpret_cast<uintptr_t>(a), pb = reinterpret_cast<uintptr_t>(b);
  if (pa < pb + static_cast<uintptr_t>(b_bytes) && pb < pa + static_cast<uintptr_t>(a_bytes)) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": send and recv buffers overlap"));
  }
  return absl::OkStatus();
}

absl::Status CheckGroups(const std::vector<std::vector<int>>& groups, int size) {
  std::set<int> seen;
  for (size_t g = 0; g < groups.size(); ++g) {
    if (groups[g].empty()) {
      return absl::InvalidArgumentError(absl::StrCat("split: group ", g, " is empty"));
    }
    for (int r : groups[g]) {
      if (r < 0 || r >= size) {
        return absl::InvalidArgumentError(
            absl::StrCat("split: rank ", r, " in group ", g, " out of range [0, ", size, ")"));
      }
      if (!seen.insert(r).second) {
        return absl::InvalidArgumentError(
            absl::StrCat("split: rank ", r, " appears in more than one place (group ", g, ")"));
      }
    }
  }
  return absl::OkStatus();
}

uint64_t HashGroups(const std::vector<std::vector<int>>& groups, const std::string& name) {
  uint64_t h = Mix(0x5b17, groups.size());
  for (const auto& g : groups) {
    h = Mix(h, g.size());
    for (int r : g) h = Mix(h, static_cast<uint64_t>(r));
  }
  for (char c : name) h = Mix(h, static_cast<unsigned char>(c));
  return h;
}

std::string SubGroupName(const std::string& prefix, const std::vector<int>& parent_ranks) {
  return absl::StrCat(prefix, "[", absl::StrJoin(parent_ranks, ","), "]");
}

// ---- reductions ---------------------------------------------------------------

DType WideType(DType dtype) {
  switch (dtype) {
    case DType::kI32: return DType::kI32;
    case DType::kI64: return DType::kI64;
    default: return DType::kF32;
  }
}

namespace {

template <typename T>
inline T Apply(ReduceOp op, T a, T b) {
  switch (op) {
    case ReduceOp::kMax: return b > a ? b : a;
    case ReduceOp::kMin: return b < a ? b : a;
    default: return a + b;
  }
}

// Integers wrap around rather than overflow (which would be UB).
template <typename T>
inline T AddWrap(T a, T b) {
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
}

template <typename T>
void CombineInt(ReduceOp op, T* acc, const T* src, int64_t n) {
  if (op == ReduceOp::kSum || op == ReduceOp::kMean) {
    for (int64_t i = 0; i < n; ++i) acc[i] = AddWrap(acc[i], src[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) acc[i] = Apply(op, acc[i], src[i]);
  }
}

template <typename Load>
void CombineF32(ReduceOp op, float* acc, int64_t n, Load load) {
  switch (op) {
    case ReduceOp::kMax:
      for (int64_t i = 0; i < n; ++i) { float v = load(i); acc[i] = v > acc[i] ? v : acc[i]; }
      break;
    case ReduceOp::kMin:
      for (int64_t i = 0; i < n; ++i) { float v = load(i); acc[i] = v < acc[i] ? v : acc[i]; }
      break;
    default:
      for (int64_t i = 0; i < n; ++i) acc[i] += load(i);
  }
}

}  // namespace

void Widen(DType dtype, const void* src, void* dst_wide, int64_t count) {
  float* out = static_cast<float*>(dst_wide);
  switch (dtype) {
    case DType::kBF16: {
      auto* in = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < count; ++i) out[i] = BF16BitsToF32(in[i]);
      return;
    }
    case DType::kF16: {
      auto* in = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < count; ++i) out[i] = F16BitsToF32(in[i]);
      return;
    }
    default:
      if (count > 0 && src != dst_wide) std::memmove(dst_wide, src, count * SizeOf(dtype));
  }
}

void CombineWide(DType wide, ReduceOp op, void* acc_wide, const void* src_wide, int64_t count) {
  switch (wide) {
    case DType::kI32:
      CombineInt(op, static_cast<int32_t*>(acc_wide), static_cast<const int32_t*>(src_wide), count);
      return;
    case DType::kI64:
      CombineInt(op, static_cast<int64_t*>(acc_wide), static_cast<const int64_t*>(src_wide), count);
      return;
    default: {
      auto* s = static_cast<const float*>(src_wide);
      CombineF32(op, static_cast<float*>(acc_wide), count, [s](int64_t i) { return s[i]; });
    }
  }
}

void CombineNarrow(DType dtype, ReduceOp op, void* acc_wide, const void* src, int64_t count) {
  auto* acc = static_cast<float*>(acc_wide);
  switch (dtype) {
    case DType::kBF16: {
      auto* s = static_cast<const uint16_t*>(src);
      CombineF32(op, acc, count, [s](int64_t i) { return BF16BitsToF32(s[i]); });
      return;
    }
    case DType::kF16: {
      auto* s = static_cast<const uint16_t*>(src);
      CombineF32(op, acc, count, [s](int64_t i) { return F16BitsToF32(s[i]); });
      return;
    }
    default:
      CombineWide(dtype, op, acc_wide, src, count);
  }
}

void Finish(DType dtype, ReduceOp op, int group_size, const void* acc_wide, void* dst,
            int64_t count) {
  const bool mean = op == ReduceOp::kMean && group_size > 1;
  switch (dtype) {
    case DType::kI32: case DType::kI64: {
      if (dst != acc_wide && count > 0) std::memmove(dst, acc_wide, count * SizeOf(dtype));
      if (mean) {
        if (dtype == DType::kI32) {
          auto* d = static_cast<int32_t*>(dst);
          for (int64_t i = 0; i < count; ++i) d[i] /= group_size;
        } else {
          auto* d = static_cast<int64_t*>(dst);
          for (int64_t i = 0; i < count; ++i) d[i] /= group_size;
        }
      }
      return;
    }
    default: break;
  }
  auto* a = static_cast<const float*>(acc_wide);
  const float n = static_cast<float>(group_size);
  switch (dtype) {
    case DType::kBF16: {
      auto* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < count; ++i) d[i] = F32ToBF16Bits(mean ? a[i] / n : a[i]);
      return;
    }
    case DType::kF16: {
      auto* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < count; ++i) d[i] = F32ToF16Bits(mean ? a[i] / n : a[i]);
      return;
    }
    default: {
      auto* d = static_cast<float*>(dst);
      if (mean) {
        for (int64_t i = 0; i < count; ++i) d[i] = a[i] / n;
      } else if (d != a && count > 0) {
        std::memmove(d, a, count * sizeof(float));
      }
    }
  }
}

std::string RankList(const std::vector<int>& ranks) {
  std::string out = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (i > 0) out += ", ";
    absl::StrAppend(&out, ranks[i]);
    if (j > i) absl::StrAppend(&out, j == i + 1 ? ", " : "-", ranks[j]);
    i = j + 1;
  }
  return out;
}

}  // namespace gtp::comm::internal
