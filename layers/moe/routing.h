// layers/moe/routing.h — the router's ops on the exec's device (CPU and
// CUDA): scores, top-k and weights; capacity dropping; the dispatch order;
// aux-loss counts and value; the router backward. The semantics are
// router.h's file comment; router.h's pure functions (double precision, host)
// are the independent reference these are tested against.
//
// All math is f32 in one fixed operation order written once
// (layers/moe/internal/routing_math.h) and run by the CPU loops and the CUDA
// kernels alike: selections, weights, dropping, the dispatch order and
// dlogits are the same bits on both. Only the reported aux / z values (sums
// over tokens in double) differ, within double rounding.
//
// Shapes: n tokens, E experts, top-k, S = n·k slots (slot s = t·k + j).
// Index tensors i32, values f32; `acc` tensors hold f64 values in an i64
// tensor (the core has no f64 dtype) and are accumulated into (+=). Nothing
// here synchronises with the host; shape mismatches abort.
#pragma once

#include "core/kernels/ops.h"
#include "core/tensor.h"
#include "layers/moe/internal/routing_math.h"

namespace gtp::layers::moe {

using routing_internal::RouteParams;

// selected [S] (experts of each token, best first) and weight [S] (=) of
// logits [n, E]; bias [E] (selection only) or undefined.
void RouteTokens(const kernels::Exec& e, const RouteParams& p, const Tensor& logits,
                 const Tensor& bias, const Tensor& selected, const Tensor& weight);
// counts [G·E] f32 (=): the selections per (aux-loss group, expert).
void CountSelections(const kernels::Exec& e, const RouteParams& p, const Tensor& selected,
                     const Tensor& counts);
// The expert-sorted order of the slots whose expert [S] is ≥ 0, by expert,
// then slot (= token, then j): counts [E] (=) per expert, pos [S] (=) the
// sorted row of each slot (−1 where expert < 0), row_slot [S] and row_tok
// [S] (optional) the slot and token of each of the first Σ counts rows (the
// rest are left as they were).
void Dispatch(const kernels::Exec& e, int E, int k, const Tensor& expert, const Tensor& counts,
              const Tensor& pos, const Tensor& row_slot, const Tensor& row_tok = Tensor());
// Dispatch's order padded to `cap` rows per expert (static sizes, e.g. for
// CUDA graphs), from Dispatch's expert / counts / pos / row_tok (counts[e] ≤
// cap): padded_pos [S] (=) the row e·cap + (rank of the slot within e) of
// each slot (−1 where expert < 0) and padded_tok [E·cap] (=) the token of
// each padded row, −1 on the cap − counts[e] rows that end each expert's
// block (EmbeddingForward reads them as zero rows; EmbeddingBackward skips
// them).
void PadToCapacity(const kernels::Exec& e, int E, int64_t cap, const Tensor& expert,
                   const Tensor& counts, const Tensor& pos, const Tensor& row_tok,
                   const Tensor& padded_pos, const Tensor& padded_tok);
// local [S] (=): expert − e0 for the slots of experts [e0, e0 + el), else −1
// (an EP rank's own experts, for Dispatch).
void SelectLocalExperts(const kernels::Exec& e, int e0, int el, const Tensor& expert,
                        const Tensor& local);
// expert [S] (=): selected, or −1 where the slot is over its expert's
// p.capacity; counts / pos / row_slot: the Dispatch of `selected`.
void DropOverCapacity(const kernels::Exec& e, const RouteParams& p, const Tensor& selected,
                      const Tensor& weight, const Tensor& counts, const Tensor& pos,
                      const Tensor& row_slot, const Tensor& expert);
// acc[0] += this rank's part of aux, from the lane's selection counts [G·E].
void AuxLoss(const kernels::Exec& e, const RouteParams& p, const Tensor& logits,
             const Tensor& counts, const Tensor& acc);
// dlogits [n, E] (=) from dweight [S] (ignored where expert < 0), the aux
// gradient of the lane's counts [G·E] (undefined: no aux loss) and the z-loss
// (p.z_coeff > 0, over p.lane_rows · p.cp tokens), the aux and z parts times
// p.loss_scale; acc (optional) [0] += this rank's part of z.
void RouteBackward(const kernels::Exec& e, const RouteParams& p, const Tensor& logits,
                   const Tensor& selected, const Tensor& expert, const Tensor& dweight,
                   const Tensor& counts, const Tensor& dlogits, const Tensor& acc = Tensor());
// acc [E + 1]: acc[e] += selected_counts[e]; acc[E] += S − Σ kept_counts.
void AccumulateCounts(const kernels::Exec& e, int64_t S, const Tensor& selected_counts,
                      const Tensor& kept_counts, const Tensor& acc);

}  // namespace gtp::layers::moe
