// layers/param_io.h — a ShardedParam's shard and the global (unsharded)
// weight: the topology-invariant initialiser, and loading / storing the
// shard from / into a host copy of the global weight, through the param's
// ShardedParam::GlobalLayout. Checkpoint import, the parity tests and
// sampling use them; so do the layers that build their weights.
//
// Initialisation is topology-invariant: element (R, C) of the global weight
// is std · PhiloxNormal(KeyFromName(name, seed), R·global_cols + C), so every
// layout builds the same global weight.
//
// All block (host copies); none returns Status (a param without a global
// layout, or a tensor not shaped like its shard, aborts).
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "layers/sharded_param.h"

namespace gtp::layers {

// Sets p's global layout (see ShardedParam::GlobalLayout) and fills its
// shard from the topology-invariant initialiser: element (R, C) of the
// global weight is std · PhiloxNormal(KeyFromName(name, seed), R·global_cols + C).
// Pad rows stay zero.
void InitShardFromGlobal(ShardedParam& p, ShardedParam::GlobalLayout layout, uint64_t seed,
                         float std);
// Fills p's shard from the full global weight (host, row-major f32
// [global_rows, global_cols]) using p's global layout, rounded to p's dtype.
// Blocks (host copy).
void LoadShardFromGlobal(ShardedParam& p, const float* global);
// Gathers nothing: writes this rank's piece of `src` (p's shard, or any
// tensor shaped like it, e.g. its main grad; f32 or bf16) into `global`
// (host, f32, sized like the global weight); elements this rank does not
// hold are left untouched.
void StoreShardToGlobal(const ShardedParam& p, const Tensor& src, float* global);

}  // namespace gtp::layers
