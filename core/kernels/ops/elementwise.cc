// core/kernels/ops/elementwise.cc — Dispatch of the elementwise ops
// (cpu/elementwise.cc, cuda/elementwise.cu): Axpby, Fill, SumSquares, and
// CopyInto; ColumnSumAccumulate (cpu/column_sum.cc, cuda/column_sum.cu).
#include <cuda_runtime_api.h>

#include "core/cuda_runtime.h"
#include "core/kernels/cpu.h"
#include "core/kernels/cuda.h"
#include "core/kernels/ops.h"
#include "core/kernels/ops/internal/dispatch.h"
#include "core/status.h"

namespace gtp::kernels::ops {

using internal::ActDType;
using internal::CheckOn;
using internal::Dispatch;

void Axpby(const Exec& e, float alpha, const Tensor& x, float beta, const Tensor& y) {
  CheckOn(e, x, "x");
  CheckOn(e, y, "y");
  GTP_CHECK(x.numel() == y.numel(), "Axpby: ", x.ToString(), " vs ", y.ToString());
  Dispatch(
      e, ActDType("Axpby", {{"x", &x}, {"y", &y}}),
      [&](auto a) { cpu::Axpby(alpha, a.In(x), beta, a.Out(y), x.numel()); },
      [&](auto a) { cuda::Axpby(alpha, a.In(x), beta, a.Out(y), x.numel(), e.stream); });
}

void ColumnSumAccumulate(const Exec& e, const Tensor& x, const Tensor& sums) {
  CheckOn(e, x, "x");
  CheckOn(e, sums, "sums");
  GTP_CHECK(x.rank() >= 1 && sums.dtype() == DType::kF32 && sums.numel() == x.dim(-1),
            "ColumnSumAccumulate: want x [R, C] and f32 sums [C], got x ", x.ToString(),
            " sums ", sums.ToString());
  const int64_t C = x.dim(-1), R = C == 0 ? 0 : x.numel() / C;
  float* s = sums.data<float>();
  Dispatch(
      e, ActDType("ColumnSumAccumulate", {{"x", &x}}),
      [&](auto a) { cpu::ColumnSumAccumulate(a.In(x), R, C, s); },
      [&](auto a) {
        const Tensor partial = e.Empty({cuda::ColumnSumPartials(R, C)});
        cuda::ColumnSumAccumulate(a.In(x), R, C, s, partial.data<float>(), e.stream);
      });
}

void Fill(const Exec& e, const Tensor& x, float value) {
  CheckOn(e, x, "x");
  Dispatch(
      e, ActDType("Fill", {{"x", &x}}), [&](auto a) { cpu::Fill(a.Out(x), value, x.numel()); },
      [&](auto a) { cuda::Fill(a.Out(x), value, x.numel(), e.stream); });
}

double SumSquares(const Exec& e, const Tensor& x) {
  CheckOn(e, x, "x");
  const DType dtype = ActDType("SumSquares", {{"x", &x}});
  double out = 0.0;
  Dispatch(
      e, dtype, [&](auto a) { cpu::SumSquares(a.In(x), x.numel(), &out); },
      [&](auto a) {
        double* d = nullptr;
        GTP_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&d), sizeof(double), e.stream));
        cuda::SumSquares(a.In(x), x.numel(), d, e.stream);
        GTP_CUDA_CHECK(cudaMemcpyAsync(&out, d, sizeof(double), cudaMemcpyDeviceToHost, e.stream));
        GTP_CUDA_CHECK(cudaFreeAsync(d, e.stream));
        gtp::internal::CountHostSync();
        GTP_CUDA_CHECK(cudaStreamSynchronize(e.stream));
      });
  return out;
}

void CopyInto(const Exec& e, const Tensor& src, const Tensor& dst) {
  GTP_CHECK_OK(Copy(src, dst, e.stream, /*sync=*/false));
}

}  // namespace gtp::kernels::ops
