// core/kernels/ops/embedding.cc — Dispatch of the (vocab-sharded) embedding
// lookup and its gradient (cpu/embedding.cc, cuda/embedding.cu).
#include "core/kernels/cpu.h"
#include "core/kernels/cuda.h"
#include "core/kernels/ops.h"
#include "core/kernels/ops/internal/dispatch.h"
#include "core/status.h"

namespace gtp::kernels::ops {

using internal::ActDType;
using internal::CheckOn;
using internal::Dispatch;
using internal::I;
using internal::M;

void EmbeddingForward(const Exec& e, const Tensor& idx, const Tensor& table, const Tensor& out,
                      int64_t vocab_start) {
  CheckOn(e, idx, "idx");
  CheckOn(e, table, "table");
  CheckOn(e, out, "out");
  const int64_t n = idx.numel(), v = table.dim(0), c = table.dim(1);
  GTP_CHECK(out.numel() == n * c, "EmbeddingForward: out ", out.ToString());
  Dispatch(
      e, ActDType("EmbeddingForward", {{"table", &table}, {"out", &out}}),
      [&](auto a) { cpu::EmbeddingForward(I(idx), a.In(table), a.Out(out), n, v, c, vocab_start); },
      [&](auto a) {
        cuda::EmbeddingForward(I(idx), a.In(table), a.Out(out), n, v, c, vocab_start, e.stream);
      });
}

void EmbeddingBackward(const Exec& e, const Tensor& idx, const Tensor& dout, const Tensor& dtable,
                       int64_t vocab_start) {
  CheckOn(e, idx, "idx");
  CheckOn(e, dout, "dout");
  CheckOn(e, dtable, "dtable");
  const int64_t n = idx.numel(), v = dtable.dim(0), c = dtable.dim(1);
  GTP_CHECK(dout.numel() == n * c, "EmbeddingBackward: dout ", dout.ToString());
  Dispatch(
      e, ActDType("EmbeddingBackward", {{"dout", &dout}}, {{"dtable", &dtable}}),
      [&](auto a) { cpu::EmbeddingBackward(I(idx), a.In(dout), M(dtable), n, v, c, vocab_start); },
      [&](auto a) {
        Tensor scratch = e.Empty({cuda::EmbeddingBackwardScratchBytes(n, v)}, DType::kU8);
        cuda::EmbeddingBackward(I(idx), a.In(dout), M(dtable), n, v, c, vocab_start, e.stream,
                                scratch.raw_data());
      });
}

}  // namespace gtp::kernels::ops
