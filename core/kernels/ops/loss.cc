// core/kernels/ops/loss.cc — Dispatch of the loss bookkeeping kept on the
// device (cpu/loss.cc, cuda/loss.cu): MaskedMeanAccumulate, FillReciprocal
// and CountValid.
#include "core/kernels/cpu.h"
#include "core/kernels/cuda.h"
#include "core/kernels/ops.h"
#include "core/kernels/ops/internal/dispatch.h"
#include "core/status.h"

namespace gtp::kernels::ops {

using internal::CheckOn;
using internal::F;
using internal::I;
using internal::M;
using internal::OnDevice;

void MaskedMeanAccumulate(const Exec& e, const Tensor& loss, const Tensor& targets,
                          const Tensor& acc, const Tensor& count) {
  CheckOn(e, loss, "loss");
  CheckOn(e, targets, "targets");
  GTP_CHECK(loss.numel() == targets.numel() && acc.numel() == 1 && count.numel() == 1,
            "MaskedMeanAccumulate: loss ", loss.ToString(), " targets ", targets.ToString());
  OnDevice(
      e, [&] { cpu::MaskedMeanAccumulate(F(loss), I(targets), loss.numel(), M(acc), M(count)); },
      [&] {
        cuda::MaskedMeanAccumulate(F(loss), I(targets), loss.numel(), M(acc), M(count), e.stream);
      });
}

void FillReciprocal(const Exec& e, const Tensor& count, const Tensor& out) {
  CheckOn(e, out, "out");
  GTP_CHECK(count.numel() == 1, "FillReciprocal: count ", count.ToString());
  OnDevice(
      e, [&] { cpu::FillReciprocal(F(count), M(out), out.numel()); },
      [&] { cuda::FillReciprocal(F(count), M(out), out.numel(), e.stream); });
}

void CountValid(const Exec& e, const Tensor& targets, const Tensor& count) {
  CheckOn(e, targets, "targets");
  GTP_CHECK(count.numel() == 1, "CountValid: count ", count.ToString());
  OnDevice(
      e, [&] { cpu::CountValid(I(targets), targets.numel(), M(count)); },
      [&] { cuda::CountValid(I(targets), targets.numel(), M(count), e.stream); });
}

}  // namespace gtp::kernels::ops
