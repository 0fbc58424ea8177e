#include "checkpoint/model_state.h"

#include <algorithm>
#include <map>

#include "core/status.h"

namespace gtp::checkpoint {

namespace {

// A GTP-sharded (or expert) weight's real shard rows, replicated over `replicas`.
TensorPiece ShardPiece(const layers::ShardedParam* p, const comm::Communicator& replicas) {
  const auto& L = p->global_layout();
  const int64_t begin = p->shard_row_begin();
  const int64_t real = std::clamp<int64_t>(p->rows() - begin, 0, p->shard_rows());
  TensorPiece piece;
  piece.key = p->name();
  piece.data = p->shard().Slice(0, real);
  piece.global_shape = Shape{L.global_rows, L.global_cols};
  auto map = L.row_map;
  piece.row_map = [map, begin](int64_t r) { return map(begin + r); };
  piece.col_offset = L.col_offset;
  piece.replica_index = replicas.rank();
  piece.replica_count = replicas.size();
  return piece;
}

}  // namespace

absl::StatusOr<std::vector<TensorPiece>> ModelPieces(const optimizer::ParamSet& params,
                                                     const parallel::ProcessGroupCollection& pgs,
                                                     const optimizer::ParamSet* experts,
                                                     bool with_tied_copies) {
  GTP_ASSIGN_OR_RETURN(comm::Communicator * replicate, pgs.Get(parallel::groups::kReplicate));
  GTP_ASSIGN_OR_RETURN(comm::Communicator * data_cp, pgs.Get(parallel::groups::kDataCp));
  GTP_ASSIGN_OR_RETURN(comm::Communicator * tp, pgs.Get(parallel::groups::kTp));
  std::vector<TensorPiece> out;
  for (layers::ShardedParam* p : params.sharded) {
    if (p->tied_copy() && !with_tied_copies) continue;
    out.push_back(ShardPiece(p, *replicate));
  }
  if (experts != nullptr && !experts->sharded.empty()) {
    GTP_ASSIGN_OR_RETURN(comm::Communicator * edp, pgs.Get(parallel::groups::kEdp));
    for (layers::ShardedParam* p : experts->sharded) out.push_back(ShardPiece(p, *edp));
  }
  for (layers::ReplicatedParam* p : params.replicated) {
    TensorPiece piece;
    piece.key = p->name;
    piece.data = p->value;
    piece.global_shape = p->value.rank() >= 2 ? Shape{p->layout.global_rows, p->value.dim(1)}
                                              : Shape{p->layout.global_rows};
    piece.row_map = p->layout.row_map;
    if (p->tp_sharded) {
      piece.replica_index = data_cp->rank();
      piece.replica_count = data_cp->size();
    } else {
      piece.replica_index = tp->rank() * data_cp->size() + data_cp->rank();
      piece.replica_count = tp->size() * data_cp->size();
    }
    out.push_back(std::move(piece));
  }
  return out;
}

absl::StatusOr<std::vector<TensorPiece>> OptimizerPieces(
    const optimizer::DistributedOptimizer& opt, const optimizer::ParamSet& params,
    const parallel::ProcessGroupCollection& pgs, const optimizer::ParamSet* experts,
    bool with_tied_copies) {
  GTP_ASSIGN_OR_RETURN(comm::Communicator * tp, pgs.Get(parallel::groups::kTp));
  GTP_ASSIGN_OR_RETURN(comm::Communicator * gtp, pgs.Get(parallel::groups::kGtp));
  struct Info {
    int64_t cols, real_rows, row0;  // local storage [*, cols]; rows < real_rows are real
    layers::ShardedParam::GlobalLayout layout;
    Shape global;
    int replica_index, replica_count;
  };
  std::map<std::string, Info> info;
  std::vector<layers::ShardedParam*> sharded = params.sharded;
  if (experts != nullptr) sharded.insert(sharded.end(), experts->sharded.begin(), experts->sharded.end());
  std::map<std::string, bool> skip;  // state of tied copies (same name as the original)
  for (layers::ShardedParam* p : sharded) {
    if (p->tied_copy() && !with_tied_copies) skip[p->name()] = true;
    const auto& L = p->global_layout();
    info[p->name()] = Info{p->cols(), std::clamp<int64_t>(p->rows() - p->shard_row_begin(), 0, p->shard_rows()),
                           p->shard_row_begin(), L, Shape{L.global_rows, L.global_cols}, 0, 1};
  }
  for (layers::ReplicatedParam* p : params.replicated) {
    const int64_t cols = p->value.rank() >= 2 ? p->value.dim(1) : 1;
    Info i{cols, p->value.dim(0), 0, p->layout,
           p->value.rank() >= 2 ? Shape{p->layout.global_rows, cols} : Shape{p->layout.global_rows},
           0, 1};
    if (p->tp_sharded) {
      i.replica_index = gtp->rank();
      i.replica_count = gtp->size();
    } else {
      i.replica_index = tp->rank() * gtp->size() + gtp->rank();
      i.replica_count = tp->size() * gtp->size();
    }
    info[p->name] = i;
  }
  std::vector<TensorPiece> out;
  for (const optimizer::StateTensor& st : opt.state_tensors()) {
    if (skip.count(st.param)) continue;
    auto it = info.find(st.param);
    if (it == info.end()) return absl::InternalError("optimizer state for unknown param " + st.param);
    const Info& in = it->second;
    const int64_t b = st.begin, e = st.begin + st.tensor.numel(), C = in.cols;
    Tensor flat = st.tensor.View({st.tensor.numel()});
    // Cut [b, e) of the row-major [rows, C] storage into row blocks.
    for (int64_t r = b / C; r * C < e;) {
      const int64_t c0 = std::max(b, r * C) - r * C;
      const int64_t c1 = std::min(e, (r + 1) * C) - r * C;
      int64_t nrows = 1;
      if (c0 == 0 && c1 == C) {  // full rows: take as many as follow
        nrows = std::min(e / C, in.real_rows) - r;
        if (nrows < 1) nrows = 1;
      }
      if (r >= in.real_rows) break;  // GTP padding
      TensorPiece piece;
      piece.key = st.param + "/" + st.kind;
      piece.data = flat.Slice(r * C + c0 - b, r * C + c0 - b + (nrows - 1) * C + (c1 - c0))
                       .View(nrows == 1 ? Shape{1, c1 - c0} : Shape{nrows, C});
      if (in.global.rank() == 1) piece.data = piece.data.View({piece.data.numel()});
      auto map = in.layout.row_map;
      const int64_t row0 = in.row0 + r;
      piece.row_map = [map, row0](int64_t k) { return map ? map(row0 + k) : row0 + k; };
      piece.col_offset = in.layout.col_offset + c0;
      piece.global_shape = in.global;
      piece.replica_index = in.replica_index;
      piece.replica_count = in.replica_count;
      out.push_back(std::move(piece));
      r += nrows;
    }
  }
  return out;
}

std::vector<TensorPiece> IdenticalPieces(const std::vector<std::pair<std::string, Tensor>>& tensors,
                                         int index, int count) {
  std::vector<TensorPiece> pieces;
  for (const auto& [name, t] : tensors) {
    TensorPiece piece;
    piece.key = name;
    piece.data = t;
    piece.global_shape = t.shape();
    piece.replica_index = index;
    piece.replica_count = count;
    pieces.push_back(std::move(piece));
  }
  return pieces;
}

absl::StatusOr<std::pair<int, int>> StageReplica(const parallel::ProcessGroupCollection& pgs,
                                                 int world_rank) {
  GTP_ASSIGN_OR_RETURN(const parallel::ProcessGroup* pp, pgs.Group(parallel::groups::kPp));
  GTP_ASSIGN_OR_RETURN(const int stage, pgs.RankIn(parallel::groups::kPp));
  int index = -1;
  for (size_t i = 0; i < pp->all_ranks.size(); ++i) {
    if (pp->all_ranks[i][stage] == world_rank) index = static_cast<int>(i);
  }
  if (index < 0) {
    return absl::InternalError(absl::StrCat("rank ", world_rank, " is in no pipeline group"));
  }
  return std::make_pair(index, static_cast<int>(pp->all_ranks.size()));
}

}  // namespace gtp::checkpoint
