// layers/moe/internal/dispatch_math.h — the small pieces of arithmetic the
// MoE token dispatchers and the grouped experts share: prefix offsets of
// per-expert row counts, and the deterministic sum of R ranks' partial
// results (f32, rank order), which every reduce-scatter of the dispatchers
// uses so that results do not depend on the communicator's reduction order.
#pragma once

#include <cstdint>
#include <vector>

#include "core/kernels/ops.h"
#include "core/tensor.h"

namespace gtp::layers::moe::dispatch_internal {

// [0, c0, c0 + c1, …, Σ c]: counts.size() + 1 offsets.
std::vector<int64_t> Offsets(const std::vector<int64_t>& counts);

// parts [R·m, c] → Σ_r parts[r] [m, c] in f32, r ascending (deterministic).
Tensor SumInRankOrder(const kernels::Exec& e, const Tensor& parts, int R);

// dx32 (f32) + add (f32, like dx32; undefined: nothing) by ops::Axpby into
// dx32, then dx32 itself for dt f32, else a new tensor rounded to dt.
Tensor AddThenCast(const kernels::Exec& e, const Tensor& dx32, const Tensor& add, DType dt);

}  // namespace gtp::layers::moe::dispatch_internal
