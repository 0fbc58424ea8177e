// core/kernels/tensor_io.h — copies between host values and tensors on an
// Exec's device: host f32 → a tensor of any parameter dtype (rounded), host
// vectors ↔ device tensors, and a tensor back to host f32.
//
// They live beside Exec (core/kernels/ops.h) because they allocate through
// it and copy on its stream. Every function blocks as its comment says;
// none returns Status (a failed copy or an unsupported dtype aborts).
#pragma once

#include <vector>

#include "core/kernels/ops.h"
#include "core/status.h"
#include "core/tensor.h"

namespace gtp::kernels {

// A new tensor on e's device holding host f32 `values` (shape `s`) rounded
// to `dtype`. Blocks (host copy).
Tensor TensorFromHost(const Exec& e, const float* values, const Shape& s, DType dtype);
// Writes host f32 `values` (dst.numel() of them) into `dst` (f32 or bf16,
// any device), rounding to dst's dtype. Blocks (host copy).
void CopyFromHostF32(const Exec& e, const float* values, const Tensor& dst);
// `src` (f32 or bf16, any device) as host f32 values. Blocks (the stream,
// up to the copy).
std::vector<float> DeviceToHostF32(const Exec& e, const Tensor& src);

// Host vector → a new tensor of shape `s` on e's device. A copy from pageable
// memory is staged before the call returns, so `v` may change afterwards;
// `wait` also waits for the copy to land.
template <typename T>
Tensor HostToDevice(const Exec& e, const std::vector<T>& v, const Shape& s, bool wait = false) {
  Tensor out = e.Empty(s, DTypeOf<T>::value);
  if (!v.empty()) {
    Tensor h = Tensor::Wrap(const_cast<T*>(v.data()), s, DTypeOf<T>::value, Device::Cpu());
    GTP_CHECK_OK(Copy(h, out, e.stream, /*sync=*/wait));
  }
  return out;
}
// Device tensor → host vector. Blocks (the stream, up to the copy).
template <typename T>
std::vector<T> DeviceToHost(const Exec& e, const Tensor& t) {
  std::vector<T> v(t.numel());
  if (!v.empty()) {
    Tensor h = Tensor::Wrap(v.data(), t.shape(), t.dtype(), Device::Cpu());
    GTP_CHECK_OK(Copy(t, h, e.stream, /*sync=*/true));
  }
  return v;
}

}  // namespace gtp::kernels
