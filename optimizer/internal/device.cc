#include "optimizer/internal/device.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "comm/host_values.h"
#include "core/cuda_runtime.h"
#include "core/kernels/cpu.h"
#include "core/kernels/cuda.h"
#include "core/status.h"

namespace gtp::optimizer::internal {

void NewtonSchulz(const kernels::Exec& e, const Tensor& G, const Tensor& X, int steps,
                  kernels::NsCoefficients coeffs) {
  GTP_CHECK(G.rank() == 2 && G.shape() == X.shape() && G.is_contiguous() && X.is_contiguous(),
            "NewtonSchulz: G ", G.ToString(), " X ", X.ToString());
  const int64_t M = G.dim(0), N = G.dim(1), R = std::min(M, N);
  // +1 float for the CUDA norm, +2 for its 8-byte alignment slack.
  Tensor scratch = e.Empty({2 * R * R + 2 * M * N + 3});
  if (e.is_cuda()) {
    GTP_CHECK(e.blas != nullptr, "NewtonSchulz on CUDA needs exec.blas");
    kernels::cuda::NewtonSchulz(*e.blas, G.data<float>(), X.data<float>(), scratch.data<float>(),
                                M, N, steps, coeffs, e.stream);
  } else {
    kernels::cpu::NewtonSchulz(G.data<float>(), X.data<float>(), scratch.data<float>(), M, N,
                               steps, coeffs);
  }
}

void CastInto(const kernels::Exec& e, const Tensor& src, const Tensor& dst) {
  GTP_CHECK(src.numel() == dst.numel() && src.is_contiguous() && dst.is_contiguous(),
            "CastInto: ", src.ToString(), " into ", dst.ToString());
  const int64_t n = src.numel();
  if (n == 0) return;
  if (src.dtype() == dst.dtype()) {
    kernels::ops::CopyInto(e, src.View({n}), dst.View({n}));
    return;
  }
  if (src.dtype() == DType::kF32 && dst.dtype() == DType::kBF16) {
    if (e.is_cuda()) {
      kernels::cuda::CastF32ToBF16(src.data<float>(), dst.data<bf16>(), n, e.stream);
    } else {
      kernels::cpu::CastF32ToBF16(src.data<float>(), dst.data<bf16>(), n);
    }
    return;
  }
  if (src.dtype() == DType::kBF16 && dst.dtype() == DType::kF32) {
    if (e.is_cuda()) {
      kernels::cuda::CastBF16ToF32(src.data<bf16>(), dst.data<float>(), n, e.stream);
    } else {
      kernels::cpu::CastBF16ToF32(src.data<bf16>(), dst.data<float>(), n);
    }
    return;
  }
  GTP_CHECK(false, "CastInto: unsupported ", DTypeName(src.dtype()), " -> ",
            DTypeName(dst.dtype()));
}

void Copy2D(const kernels::Exec& e, const float* src, int64_t src_ld, float* dst, int64_t dst_ld,
            int64_t rows, int64_t cols) {
  if (rows == 0 || cols == 0) return;
  if (e.is_cuda()) {
    GTP_CUDA_CHECK(cudaMemcpy2DAsync(dst, dst_ld * sizeof(float), src, src_ld * sizeof(float),
                                     cols * sizeof(float), rows, cudaMemcpyDefault, e.stream));
    return;
  }
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(dst + r * dst_ld, src + r * src_ld, cols * sizeof(float));
  }
}

absl::Status AllReduceHostF32(const kernels::Exec& e, comm::Communicator* c,
                              std::vector<float>* values, comm::ReduceOp op) {
  if (c == nullptr) return absl::OkStatus();
  return comm::AllReduceHost(*c, values->data(), static_cast<int64_t>(values->size()),
                             DType::kF32, op, {e.alloc, e.stream});
}

absl::Status AllReduceHostI64(const kernels::Exec& e, comm::Communicator* c,
                              std::vector<int64_t>* values, comm::ReduceOp op) {
  if (c == nullptr) return absl::OkStatus();
  return comm::AllReduceHost(*c, values->data(), static_cast<int64_t>(values->size()),
                             DType::kI64, op, {e.alloc, e.stream});
}

absl::StatusOr<std::vector<int64_t>> AllGatherHostI64(const kernels::Exec& e,
                                                      comm::Communicator* c,
                                                      const std::vector<int64_t>& values) {
  if (c == nullptr || c->size() == 1) return values;
  const int64_t n = static_cast<int64_t>(values.size());
  std::vector<int64_t> out(n * c->size());
  GTP_RETURN_IF_ERROR(
      comm::AllGatherHost(*c, values.data(), out.data(), n, DType::kI64, {e.alloc, e.stream}));
  return out;
}

absl::Status Annotate(const absl::Status& st, const std::string& what, const comm::Communicator* c) {
  if (st.ok()) return st;
  return absl::Status(st.code(), absl::StrCat(what, " over ", c ? c->name() : "?", ": ",
                                              st.message()));
}

}  // namespace gtp::optimizer::internal
