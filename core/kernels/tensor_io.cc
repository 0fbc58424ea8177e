#include "core/kernels/tensor_io.h"

#include <vector>

namespace gtp::kernels {

namespace {
// Copies host f32 `h` into `dst` (any device), rounding to dst's dtype.
void CopyRounded(const Tensor& h, const Tensor& dst, const Exec& e) {
  if (dst.dtype() == DType::kF32) {
    GTP_CHECK_OK(Copy(h, dst, e.stream, /*sync=*/true));
    return;
  }
  GTP_CHECK(dst.dtype() == DType::kBF16, "parameters are f32 or bf16, got ", DTypeName(dst.dtype()));
  std::vector<bf16> r(h.numel());
  const float* f = h.data<float>();
  for (size_t i = 0; i < r.size(); ++i) r[i] = ToBF16(f[i]);
  Tensor hb = Tensor::Wrap(r.data(), dst.shape(), DType::kBF16, Device::Cpu());
  GTP_CHECK_OK(Copy(hb, dst, e.stream, /*sync=*/true));
}
}  // namespace

Tensor TensorFromHost(const Exec& e, const float* values, const Shape& s, DType dtype) {
  Tensor out = e.Empty(s, dtype);
  CopyFromHostF32(e, values, out);
  return out;
}

void CopyFromHostF32(const Exec& e, const float* values, const Tensor& dst) {
  CopyRounded(Tensor::Wrap(const_cast<float*>(values), dst.shape(), DType::kF32, Device::Cpu()),
              dst, e);
}

std::vector<float> DeviceToHostF32(const Exec& e, const Tensor& src) {
  std::vector<float> out(src.numel());
  if (src.dtype() == DType::kF32) {
    GTP_CHECK_OK(Copy(src, Tensor::Wrap(out.data(), src.shape(), DType::kF32, Device::Cpu()),
                      e.stream, /*sync=*/true));
    return out;
  }
  std::vector<bf16> b(src.numel());
  GTP_CHECK_OK(Copy(src, Tensor::Wrap(b.data(), src.shape(), DType::kBF16, Device::Cpu()),
                    e.stream, /*sync=*/true));
  for (size_t i = 0; i < out.size(); ++i) out[i] = ToF32(b[i]);
  return out;
}

}  // namespace gtp::kernels
