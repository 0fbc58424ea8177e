#include "checkpoint/model_state.h"

#include <algorithm>

#include "core/status.h"

namespace gtp::checkpoint {

absl::StatusOr<std::vector<TensorPiece>> ModelPieces(const optimizer::ParamSet& params,
                                                     const parallel::ProcessGroupCollection& pgs) {
  GTP_ASSIGN_OR_RETURN(comm::Communicator * replicate, pgs.Get("replicate"));
  GTP_ASSIGN_OR_RETURN(comm::Communicator * data_cp, pgs.Get("data_cp"));
  GTP_ASSIGN_OR_RETURN(comm::Communicator * tp, pgs.Get("tp"));
  std::vector<TensorPiece> out;
  for (layers::ShardedParam* p : params.sharded) {
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
    piece.replica_index = replicate->rank();
    piece.replica_count = replicate->size();
    out.push_back(std::move(piece));
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

}  // namespace gtp::checkpoint
