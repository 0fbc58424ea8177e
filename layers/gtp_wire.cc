#include "layers/gtp_wire.h"

#include "core/kernels/kernels.h"
#include "core/status.h"

namespace gtp::layers {

namespace ops = kernels::ops;

const char* GatherCodecName(GatherCodec c) {
  return c == GatherCodec::kMxfp8 ? "mxfp8" : "nvfp4";
}

int64_t WireBytes(GatherCodec c, int64_t n) {
  if (c == GatherCodec::kNvfp4) return kernels::Nvfp4WireBytes(n);
  const int64_t blocks = (n + kernels::kFp8BlockSize - 1) / kernels::kFp8BlockSize;
  return n + blocks;
}

void EncodeWire(GatherCodec c, const kernels::Exec& e, const Tensor& x, const Tensor& wire) {
  const int64_t n = x.numel(), w = wire.numel();
  GTP_CHECK(w == WireBytes(c, n), GatherCodecName(c), " wire of ", x.ToString(), ": ",
            wire.ToString());
  if (c == GatherCodec::kNvfp4) {
    ops::EncodeNvfp4(e, x.View({n}), wire);
  } else {
    ops::QuantizeFp8Blockwise(e, x.View({n}), wire.Slice(0, n), wire.Slice(n, w));
  }
}

void DecodeWire(GatherCodec c, const kernels::Exec& e, const Tensor& wire, const Tensor& out) {
  const int64_t n = out.numel(), w = wire.numel();
  GTP_CHECK(w == WireBytes(c, n), GatherCodecName(c), " wire ", wire.ToString(), " into ",
            out.ToString());
  if (c == GatherCodec::kNvfp4) {
    ops::DecodeNvfp4(e, wire, out.View({n}));
  } else {
    ops::DequantizeFp8Blockwise(e, wire.Slice(0, n), wire.Slice(n, w), out.View({n}));
  }
}

void DecodeGatheredWire(GatherCodec c, const kernels::Exec& e, const Tensor& gathered, int ranks,
                        const Tensor& out) {
  GTP_CHECK(ranks > 0 && out.dim(0) % ranks == 0, GatherCodecName(c), " wire of ", ranks,
            " ranks into ", out.ToString());
  const int64_t rows = out.dim(0) / ranks;
  const int64_t n = out.numel() / ranks, w = WireBytes(c, n);
  GTP_CHECK(gathered.numel() == ranks * w, "gathered ", GatherCodecName(c), " wire ",
            gathered.ToString(), " for ", ranks, " ranks of ", n, " elements");
  for (int r = 0; r < ranks; ++r) {
    DecodeWire(c, e, gathered.Slice(r * w, (r + 1) * w),
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
