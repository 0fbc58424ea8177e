// layers/moe/combine.h — the MoE unpermute-and-combine op, forward and
// backward, CPU and CUDA.
//
// Each of n tokens was routed to k slots; slot s = t·k + j has the row pos[s]
// of the expert outputs ye [M, C] that holds its result (pos < 0: dropped)
// and its combine weight w[s]:
//
//   forward:   y[t, :]    = Σ_j w[t·k + j] · ye[pos[t·k + j], :]      (j ascending)
//   backward:  dye[pos[s], :] = w[s] · dy[t, :]        (rows no slot names: 0)
//              dw[s]          = Σ_c ye[pos[s], c] · dy[t, c]   (0 where dropped)
//
// Sums run in f32 in a fixed order (CPU and CUDA give the same bits for the
// products and the j-sums; dw's c-sum is a tree on CUDA, so within rounding).
// ye, y, dy, dye share one dtype (f32 or bf16); w, dw f32; pos i32. Every
// row of ye is named by at most one slot.
//
// The dispatch's backward on one rank (no exchange), GatherAdd:
//
//   dx[t, :] = add[t, :] + (((+0 + xe[p_1, :]) + xe[p_2, :]) + …)
//
// over the token's slots with pos ≥ 0, p_1 < p_2 < … (the dispatched rows'
// order), in f32 (add undefined: nothing added), then dx f32 or bf16, rounded
// once. These are the bits of summing the rows into a zeroed f32 dx in row
// order (ops::EmbeddingBackward with the inverse permutation), adding add by
// ops::Axpby(1, add, 1, ·) and casting, in one pass instead of four. xe f32
// or bf16 [M, C]; at most 8 slots a token.
#pragma once

#include "core/kernels/ops.h"
#include "core/tensor.h"
#include "layers/moe/cuda/combine_cuda.h"

namespace gtp::layers::moe {

void CombineForward(const kernels::Exec& e, const Tensor& ye, const Tensor& pos, const Tensor& w,
                    const Tensor& y);
void CombineBackward(const kernels::Exec& e, const Tensor& dy, const Tensor& ye, const Tensor& pos,
                     const Tensor& w, const Tensor& dye, const Tensor& dw);
void GatherAdd(const kernels::Exec& e, const Tensor& xe, const Tensor& pos, const Tensor& add,
               const Tensor& dx);

}  // namespace gtp::layers::moe
