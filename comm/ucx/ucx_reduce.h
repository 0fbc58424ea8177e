// comm/ucx/ucx_reduce.h — the host reductions of the UCX collectives, one
// chunk at a time. Not a public header.
//
// Same numerics as comm/internal/ops.h, bit for bit (ucx_reduce_test checks
// it): each element is reduced on its own, so a chunk's result does not
// depend on how a buffer is cut into chunks or which thread reduces which
// chunk. The f32/bf16/f16 loops work on fixed blocks of kBlock elements
// (loads, then arithmetic, then stores), which GCC vectorises at -O2, where
// the cheap cost model leaves ops.cc's plain loops scalar.
//
// Pure and thread-safe; nothing blocks.
#pragma once

#include <cstdint>

#include "comm/communicator.h"
#include "core/dtype.h"

namespace gtp::comm::ucx_internal {

// acc_wide[i] = op(acc_wide[i], widen(src[i])) — internal::CombineNarrow.
void CombineChunk(DType dtype, ReduceOp op, void* acc_wide, const void* src, int64_t count);

// dst[i] = finish(op(in_wide[i], widen(src[i]))) — internal::CombineNarrow
// then internal::Finish, in one pass and without touching in_wide. dst may
// be src (the same elements), never in_wide.
void CombineFinishChunk(DType dtype, ReduceOp op, int group_size, const void* in_wide,
                        const void* src, void* dst, int64_t count);

// The first ring step's versions, whose partial `in` arrives narrow (dtype,
// as the peer's send buffer holds it): widening is exact, so these give the
// bits of Widen followed by the functions above.
// out_wide[i] = op(widen(in[i]), widen(src[i])); out_wide aliases neither.
void WidenCombineChunk(DType dtype, ReduceOp op, const void* in, const void* src, void* out_wide,
                       int64_t count);
// dst[i] = finish(op(widen(in[i]), widen(src[i]))); dst may be src, never in.
void WidenCombineFinishChunk(DType dtype, ReduceOp op, int group_size, const void* in,
                             const void* src, void* dst, int64_t count);

}  // namespace gtp::comm::ucx_internal
