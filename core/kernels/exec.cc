// core/kernels/exec.cc — Exec's tensor constructors (ops.h): new tensors on
// the Exec's device, from its allocator.
#include <cuda_runtime_api.h>

#include <cstring>

#include "core/cuda_runtime.h"
#include "core/kernels/ops.h"
#include "core/status.h"

namespace gtp::kernels {

Tensor Exec::Empty(const Shape& s, DType t) const {
  GTP_CHECK(alloc != nullptr, "Exec without an allocator");
  return Tensor::Empty(s, t, *alloc);
}

Tensor Exec::Zeros(const Shape& s, DType t) const {
  Tensor x = Empty(s, t);
  if (x.nbytes() == 0) return x;
  if (is_cuda()) {
    GTP_CUDA_CHECK(cudaMemsetAsync(x.raw_data(), 0, x.nbytes(), stream));
  } else {
    std::memset(x.raw_data(), 0, x.nbytes());
  }
  return x;
}

}  // namespace gtp::kernels
