#include "layers/gtp_wire.h"

#include "core/kernels/kernels.h"
#include "core/status.h"

namespace gtp::layers {

namespace ops = kernels::ops;

int64_t Fp8WireBytes(int64_t n) {
  const int64_t blocks = (n + kernels::kFp8BlockSize - 1) / kernels::kFp8BlockSize;
  return n + blocks;
}

void EncodeFp8Wire(const kernels::Exec& e, const Tensor& x, const Tensor& wire) {
  const int64_t n = x.numel(), w = wire.numel();
  GTP_CHECK(w == Fp8WireBytes(n), "fp8 wire of ", x.ToString(), ": ", wire.ToString());
  ops::QuantizeFp8Blockwise(e, x.View({n}), wire.Slice(0, n), wire.Slice(n, w));
}

void DecodeFp8Wire(const kernels::Exec& e, const Tensor& wire, const Tensor& out) {
  const int64_t n = out.numel(), w = wire.numel();
  GTP_CHECK(w == Fp8WireBytes(n), "fp8 wire ", wire.ToString(), " into ", out.ToString());
  ops::DequantizeFp8Blockwise(e, wire.Slice(0, n), wire.Slice(n, w), out.View({n}));
}

void DecodeGatheredFp8Wire(const kernels::Exec& e, const Tensor& gathered, int ranks,
                           const Tensor& out) {
  GTP_CHECK(ranks > 0 && out.dim(0) % ranks == 0, "fp8 wire of ", ranks, " ranks into ",
            out.ToString());
  const int64_t rows = out.dim(0) / ranks;
  const int64_t n = out.numel() / ranks, w = Fp8WireBytes(n);
  GTP_CHECK(gathered.numel() == ranks * w, "gathered fp8 wire ", gathered.ToString(), " for ",
            ranks, " ranks of ", n, " elements");
  for (int r = 0; r < ranks; ++r) {
    Tensor wr = gathered.Slice(r * w, (r + 1) * w);
    ops::DequantizeFp8Blockwise(e, wr.Slice(0, n), wr.Slice(n, w),
                                out.Slice(r * rows, (r + 1) * rows).View({n}));
  }
}

void EncodeBf16Wire(const kernels::Exec& e, const Tensor& wgrad, const Tensor& wire) {
  ops::Cast(e, wgrad, wire);
}

void SumBf16Pieces(const kernels::Exec& e, const Tensor& pieces, int ranks, comm::ReduceOp op,
                   const Tensor& scratch, const Tensor& out) {
  const int64_t rows = out.dim(0);
  GTP_CHECK(pieces.dim(0) == ranks * rows, "bf16 pieces ", pieces.ToString(), " of ", ranks,
            " ranks into ", out.ToString());
  for (int r = 0; r < ranks; ++r) {
    const Tensor src = pieces.Slice(r * rows, (r + 1) * rows);
    ops::Cast(e, src, r == 0 ? out : scratch);
    if (r > 0) ops::Axpby(e, 1.0f, scratch, 1.0f, out);
  }
  if (op == comm::ReduceOp::kMean) {
    ops::Axpby(e, 0.0f, out, 1.0f / static_cast<float>(ranks), out);
  }
}

}  // namespace gtp::layers
