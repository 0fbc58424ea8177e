// layers/replicated_param.h — ReplicatedParam: a parameter that is not
// GTP-sharded (norm weights, biases, routers, Mamba's small tensors) with its
// f32 gradient and where it sits in the global tensor. Its gradient is
// averaged over the data lanes (and, when grad_needs_tp_sum, summed over TP)
// by gradient finalisation (optimizer/); checkpoints read its layout.
#pragma once

#include <string>

#include "core/tensor.h"
#include "layers/sharded_param.h"

namespace gtp::layers {

// A replicated (not GTP-sharded) parameter with its f32 gradient.
struct ReplicatedParam {
  std::string name;
  Tensor value;  // the model dtype (f32 or bf16)
  Tensor grad;   // f32, same shape; += by backward
  // True when each TP rank's grad covers only its sequence-parallel rows, so
  // finalisation must sum it over TP (Megatron's sequence-parallel params).
  bool grad_needs_tp_sum = false;
  // Where `value` sits in the global tensor: rows (dim 0) map through
  // layout.row_map, all columns are held. When tp_sharded is false every TP
  // rank holds the whole tensor (norm weights, row-parallel biases); when
  // true each holds its slice (column-parallel biases).
  ShardedParam::GlobalLayout layout;
  bool tp_sharded = false;
};

}  // namespace gtp::layers
