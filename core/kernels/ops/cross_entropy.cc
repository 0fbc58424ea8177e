// core/kernels/ops/cross_entropy.cc — Dispatch of the vocab-sharded
// cross-entropy stages (cpu/cross_entropy.cc, cuda/cross_entropy.cu): stats,
// sum of exponentials, loss, backward, and the unsharded fused pass.
#include "core/kernels/cpu.h"
#include "core/kernels/cuda.h"
#include "core/kernels/ops.h"
#include "core/kernels/ops/internal/dispatch.h"
#include "core/status.h"

namespace gtp::kernels::ops {

using internal::ActDType;
using internal::CheckOn;
using internal::Dispatch;
using internal::F;
using internal::I;
using internal::M;
using internal::MB;
using internal::OnDevice;
using internal::Rows;

void CrossEntropyStats(const Exec& e, const Tensor& logits, const Tensor& targets,
                       const Tensor& row_max, const Tensor& target_logit, int64_t vocab_start,
                       int64_t valid_cols) {
  CheckOn(e, logits, "logits");
  const int64_t n = Rows(logits), ld = logits.dim(-1), v = valid_cols >= 0 ? valid_cols : ld;
  Dispatch(
      e,
      ActDType("CrossEntropyStats", {{"logits", &logits}},
               {{"row_max", &row_max}, {"target_logit", &target_logit}}),
      [&](auto a) {
        cpu::CrossEntropyStats(a.In(logits), I(targets), M(row_max), M(target_logit), n, v,
                               vocab_start, ld);
      },
      [&](auto a) {
        cuda::CrossEntropyStats(a.In(logits), I(targets), M(row_max), M(target_logit), n, v,
                                vocab_start, e.stream, ld);
      });
}

void CrossEntropySumExp(const Exec& e, const Tensor& logits, const Tensor& row_max,
                        const Tensor& sumexp, int64_t valid_cols) {
  CheckOn(e, logits, "logits");
  const int64_t n = Rows(logits), ld = logits.dim(-1), v = valid_cols >= 0 ? valid_cols : ld;
  Dispatch(
      e,
      ActDType("CrossEntropySumExp", {{"logits", &logits}},
               {{"row_max", &row_max}, {"sumexp", &sumexp}}),
      [&](auto a) { cpu::CrossEntropySumExp(a.In(logits), F(row_max), M(sumexp), n, v, ld); },
      [&](auto a) {
        cuda::CrossEntropySumExp(a.In(logits), F(row_max), M(sumexp), n, v, e.stream, ld);
      });
}

void CrossEntropyLoss(const Exec& e, const Tensor& row_max, const Tensor& sumexp,
                      const Tensor& target_logit, const Tensor& targets, const Tensor& loss) {
  CheckOn(e, loss, "loss");
  const int64_t n = loss.numel();
  OnDevice(
      e,
      [&] {
        cpu::CrossEntropyLoss(F(row_max), F(sumexp), F(target_logit), I(targets), M(loss), n);
      },
      [&] {
        cuda::CrossEntropyLoss(F(row_max), F(sumexp), F(target_logit), I(targets), M(loss), n,
                               e.stream);
      });
}

void CrossEntropyBackward(const Exec& e, const Tensor& logits, const Tensor& row_max,
                          const Tensor& sumexp, const Tensor& targets, const Tensor& dloss,
                          const Tensor& dlogits, int64_t vocab_start, int64_t valid_cols) {
  CheckOn(e, logits, "logits");
  const int64_t n = Rows(logits), ld = logits.dim(-1), v = valid_cols >= 0 ? valid_cols : ld;
  Dispatch(
      e,
      ActDType("CrossEntropyBackward", {{"logits", &logits}, {"dlogits", &dlogits}},
               {{"row_max", &row_max}, {"sumexp", &sumexp}, {"dloss", &dloss}}),
      [&](auto a) {
        cpu::CrossEntropyBackward(a.In(logits), F(row_max), F(sumexp), I(targets), F(dloss),
                                  a.Out(dlogits), n, v, vocab_start, ld);
      },
      [&](auto a) {
        cuda::CrossEntropyBackward(a.In(logits), F(row_max), F(sumexp), I(targets), F(dloss),
                                   a.Out(dlogits), n, v, vocab_start, e.stream, ld);
      });
}

void CrossEntropyFused(const Exec& e, const Tensor& logits, const Tensor& targets,
                       const Tensor& dloss, const Tensor& loss, int64_t valid_cols) {
  CheckOn(e, logits, "logits");
  const int64_t n = Rows(logits), ld = logits.dim(-1), v = valid_cols >= 0 ? valid_cols : ld;
  GTP_CHECK(targets.numel() == n && dloss.numel() == n && loss.numel() == n,
            "CrossEntropyFused: logits ", logits.ToString(), " targets ", targets.ToString(),
            " dloss ", dloss.ToString(), " loss ", loss.ToString());
  if (e.is_cuda() && logits.dtype() == DType::kBF16 &&
      cuda::CrossEntropyFusedSupported(logits.raw_data(), v, ld)) {
    cuda::CrossEntropyFused(MB(logits), I(targets), F(dloss), M(loss), n, v, ld, e.stream);
    return;
  }
  // Every other case: the stages, in place.
  Tensor row_max = e.Empty({n}), sumexp = e.Empty({n}), target_logit = e.Empty({n});
  CrossEntropyStats(e, logits, targets, row_max, target_logit, /*vocab_start=*/0, v);
  CrossEntropySumExp(e, logits, row_max, sumexp, v);
  CrossEntropyLoss(e, row_max, sumexp, target_logit, targets, loss);
  CrossEntropyBackward(e, logits, row_max, sumexp, targets, dloss, logits, /*vocab_start=*/0, v);
}

}  // namespace gtp::kernels::ops
