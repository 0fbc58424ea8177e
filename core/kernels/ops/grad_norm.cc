// core/kernels/ops/grad_norm.cc — Dispatch of the gradient-norm bookkeeping
// (cpu/grad_norm.cc, cuda/grad_norm.cu, with the Σ x² of elementwise):
// SumSquaresMany/Into, GradNormWords and GradNormFinalize.
#include <cstddef>
#include <vector>

#include "core/kernels/cpu.h"
#include "core/kernels/cuda.h"
#include "core/kernels/ops.h"
#include "core/kernels/ops/internal/dispatch.h"
#include "core/status.h"

namespace gtp::kernels::ops {

using internal::CheckOn;
using internal::F;
using internal::M;
using internal::OnDevice;

std::vector<double> SumSquaresMany(const Exec& e, const std::vector<Tensor>& xs) {
  std::vector<double> out(xs.size(), 0.0);
  if (xs.empty()) return out;
  OnDevice(
      e,
      [&] {
        for (size_t i = 0; i < xs.size(); ++i) {
          CheckOn(e, xs[i], "x");
          cpu::SumSquares(F(xs[i]), xs[i].numel(), &out[i]);
        }
      },
      [&] {
        // Doubles in 8-byte storage (there is no f64 DType).
        Tensor sums = e.Empty({static_cast<int64_t>(xs.size())}, DType::kI64);
        double* d = static_cast<double*>(sums.raw_data());
        for (size_t i = 0; i < xs.size(); ++i) {
          CheckOn(e, xs[i], "x");
          cuda::SumSquares(F(xs[i]), xs[i].numel(), d + i, e.stream);
        }
        GTP_CHECK_OK(Copy(sums, Tensor::Wrap(out.data(), sums.shape(), DType::kI64, Device::Cpu()),
                          e.stream, /*sync=*/true));
      });
  return out;
}

void SumSquaresInto(const Exec& e, const std::vector<Tensor>& xs, const Tensor& sums) {
  CheckOn(e, sums, "sums");
  GTP_CHECK(sums.dtype() == DType::kI64 && sums.numel() >= static_cast<int64_t>(xs.size()),
            "SumSquaresInto: sums ", sums.ToString(), " for ", xs.size(), " tensors");
  double* d = static_cast<double*>(sums.raw_data());
  for (size_t i = 0; i < xs.size(); ++i) {
    CheckOn(e, xs[i], "x");
    OnDevice(
        e, [&] { cpu::SumSquares(F(xs[i]), xs[i].numel(), d + i); },
        [&] { cuda::SumSquares(F(xs[i]), xs[i].numel(), d + i, e.stream); });
  }
}

void GradNormWords(const Exec& e, const Tensor& sums, int n_count, int n, const Tensor& words) {
  CheckOn(e, sums, "sums");
  CheckOn(e, words, "words");
  GTP_CHECK(sums.dtype() == DType::kI64 && sums.numel() >= n && words.numel() == 2,
            "GradNormWords: sums ", sums.ToString(), " words ", words.ToString(), " n=", n);
  const double* d = static_cast<const double*>(sums.raw_data());
  OnDevice(
      e, [&] { cpu::GradNormWords(d, n_count, n, M(words)); },
      [&] { cuda::GradNormWords(d, n_count, n, M(words), e.stream); });
}

void GradNormFinalize(const Exec& e, const Tensor& words, double max_norm, const Tensor& out) {
  CheckOn(e, words, "words");
  CheckOn(e, out, "out");
  GTP_CHECK(words.numel() % 2 == 0 && out.numel() == 3, "GradNormFinalize: words ",
            words.ToString(), " out ", out.ToString());
  const int buffers = static_cast<int>(words.numel() / 2);
  OnDevice(
      e, [&] { cpu::GradNormFinalize(F(words), buffers, max_norm, M(out)); },
      [&] { cuda::GradNormFinalize(F(words), buffers, max_norm, M(out), e.stream); });
}

}  // namespace gtp::kernels::ops
