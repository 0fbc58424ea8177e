// layers/gtp_wire.h — the GTP wire codecs: what a weight gather or a gradient
// reduce-scatter puts on the wire when that is not the plain param / f32
// gradient (GtpOptions::fp8_gather / nvfp4_gather, GtpOptions::
// bf16_reduce_scatter), and how it is turned back. ShardedParam owns the
// buffers and the collectives; these functions only encode and decode.
//
//   MXFP8 gather wire (one per shard of n elements): u8
//     [e4m3 codes (n bytes) | E8M0 scales (ceil(n / 32) bytes)]
//   bytes throughout, so no padding (kernels::kFp8BlockSize,
//   ops::QuantizeFp8Blockwise).
//   NVFP4 gather wire: u8 [f32 scale of the shard | e2m1 codes, two per byte
//   | e4m3 scales, one per 16 elements], padded to 16 bytes
//   (kernels::Nvfp4WireBytes, ops::EncodeNvfp4): 0.5625 bytes per element
//   plus 4 + padding per shard.
//   An all-gather of either puts the ranks' wires end to end; each decodes
//   into its rank's block of the gathered weight.
//
//   bf16 reduce-scatter wire: the f32 wgrad [padded_rows, cols] rounded to
//   bf16 and exchanged by all-to-all; each rank then holds the GTP ranks'
//   pieces of its shard, stacked in rank order, and adds them in f32 in that
//   order (Megatron's --gtp-remat-reduce-scatter-with-fp32-accumulation).
//
// Every function enqueues kernels on e's stream and neither blocks nor
// communicates; none returns Status (a size mismatch is a broken invariant
// and aborts).
#pragma once

#include <cstdint>

#include "comm/communicator.h"
#include "core/kernels/ops.h"
#include "core/tensor.h"

namespace gtp::layers {

// The gather wire codecs.
enum class GatherCodec { kMxfp8, kNvfp4 };
const char* GatherCodecName(GatherCodec c);  // "mxfp8" / "nvfp4"

// Bytes of the wire of n elements: MXFP8 n codes + ceil(n / 32) scales;
// NVFP4 kernels::Nvfp4WireBytes(n).
int64_t WireBytes(GatherCodec c, int64_t n);
// wire (u8 [WireBytes(c, x.numel())]) ← x (f32 or bf16, contiguous).
void EncodeWire(GatherCodec c, const kernels::Exec& e, const Tensor& x, const Tensor& wire);
// out (f32 or bf16, contiguous, n elements) ← wire (u8 [WireBytes(c, n)]).
void DecodeWire(GatherCodec c, const kernels::Exec& e, const Tensor& wire, const Tensor& out);
// out [ranks · rows, cols] ← gathered (u8 [ranks · WireBytes(c, rows · cols)],
// the ranks' wires end to end): rank r's wire decodes into out's rows
// [r · rows, (r + 1) · rows).
void DecodeGatheredWire(GatherCodec c, const kernels::Exec& e, const Tensor& gathered, int ranks,
                        const Tensor& out);

// wire (bf16, wgrad's shape) ← wgrad (f32), rounded.
void EncodeBf16Wire(const kernels::Exec& e, const Tensor& wgrad, const Tensor& wire);
// out (f32 [rows, cols]) = Σ_r pieces[r] (pieces bf16 [ranks · rows, cols],
// rank r's piece in rows [r · rows, (r + 1) · rows)), added in f32 in rank
// order, then divided by ranks when `op` is kMean (kSum: left as the sum).
// `scratch` is f32 shaped like out; its contents are overwritten.
void SumBf16Pieces(const kernels::Exec& e, const Tensor& pieces, int ranks, comm::ReduceOp op,
                   const Tensor& scratch, const Tensor& out);

}  // namespace gtp::layers
