// core/kernels/ops/internal/dispatch.h — What the ops of core/kernels/ops/
// share: their argument checks, tensor accessors, and the one place that
// picks the CPU or CUDA kernel and its f32 or bf16 overload.
//
// Internal to //core/kernels:ops (layers use core/kernels/ops.h). An op
// checks its arguments, then states its kernel calls once per device:
//
//   Dispatch(
//       e, ActDType("GeluForward", {{"x", &x}, {"y", &y}}),
//       [&](auto a) { cpu::GeluForward(a.In(x), a.Out(y), x.numel()); },
//       [&](auto a) { cuda::GeluForward(a.In(x), a.Out(y), x.numel(), e.stream); });
//
// where `a` is Typed<float> or Typed<bf16>, so a.In / a.Out pick the kernel
// overload of the activations' dtype.
#pragma once

#include <cstdint>
#include <initializer_list>

#include "core/dtype.h"
#include "core/kernels/ops.h"
#include "core/tensor.h"

namespace gtp::kernels::ops::internal {

// Aborts unless t is defined, on e's device and contiguous (`what` names it).
void CheckOn(const Exec& e, const Tensor& t, const char* what);

// Defined and on e's device, any layout: for [B, T, heads, HS] tensors that
// may be token-strided (TokenStride checks their layout), and for other ops
// that check the layouts they take themselves (CastMany's column blocks).
void CheckHeadsOn(const Exec& e, const Tensor& t, const char* what);

// Elements between consecutive tokens of t [B, T, H, HS]: H·HS when t is
// contiguous, else rs for a token-strided view (strides {T·rs, rs, HS, 1},
// rs ≥ H·HS so that rows do not overlap; size-1 dims take any stride, as in
// Tensor::is_contiguous) — e.g. a column block of a packed QKV matrix.
// Aborts naming `op` and `what` for any other layout.
int64_t TokenStride(const char* op, const char* what, const Tensor& t);

// Pointers of tensors of a fixed dtype (abort on another): const / mutable
// f32, i32, const / mutable bf16.
inline const float* F(const Tensor& t) { return t.data<float>(); }
inline float* M(const Tensor& t) { return t.data<float>(); }
inline const int32_t* I(const Tensor& t) { return t.data<int32_t>(); }
inline const bf16* FB(const Tensor& t) { return t.data<bf16>(); }
inline bf16* MB(const Tensor& t) { return t.data<bf16>(); }

// Rows of a tensor viewed as [rows, last dim].
inline int64_t Rows(const Tensor& t) { return t.numel() / t.dim(-1); }

// A tensor argument, named for error messages.
struct Arg {
  const char* name;
  const Tensor* t;
};

// The storage type of a mixed-precision op's activations and parameter
// values: acts[0]'s dtype, which must be f32 or bf16 and shared by every
// defined tensor of `acts`; every defined tensor of `f32s` (statistics,
// parameter gradients) must be f32. Undefined (optional) tensors are skipped.
// Aborts naming the op and every dtype otherwise.
DType ActDType(const char* op, std::initializer_list<Arg> acts,
               std::initializer_list<Arg> f32s = {});

// A CUDA Exec's cuBLAS context; aborts when it has none.
cuda::BlasContext& Blas(const Exec& e);

// The element type T (f32 or bf16) a dispatched kernel call runs in: its
// tensors' pointers, which select the kernel's overload.
template <typename T>
struct Typed {
  using type = T;
  static constexpr DType kDType = DTypeOf<T>::value;
  static const T* In(const Tensor& t) { return t.data<T>(); }
  static T* Out(const Tensor& t) { return t.data<T>(); }
  // An optional input: null when undefined.
  static const T* InOrNull(const Tensor& t) { return t.defined() ? t.data<T>() : nullptr; }
};

// Runs cpu() on a CPU Exec, cuda() on a CUDA one.
template <typename CpuFn, typename CudaFn>
void OnDevice(const Exec& e, CpuFn&& cpu, CudaFn&& cuda) {
  if (e.is_cuda()) {
    cuda();
  } else {
    cpu();
  }
}

// fn(Typed<bf16>()) when t is bf16, else fn(Typed<float>()): t is an op's
// checked dtype (ActDType, or f32/bf16 checked by the op).
template <typename Fn>
void ForDType(DType t, Fn&& fn) {
  if (t == DType::kBF16) {
    fn(Typed<bf16>());
  } else {
    fn(Typed<float>());
  }
}

// The device × dtype dispatch of an op: cpu(a) on a CPU Exec, cuda(a) on a
// CUDA one, a = Typed<bf16>() when t is bf16 and Typed<float>() otherwise.
// Both callables are instantiated for both types.
template <typename CpuFn, typename CudaFn>
void Dispatch(const Exec& e, DType t, CpuFn&& cpu, CudaFn&& cuda) {
  OnDevice(
      e, [&] { ForDType(t, cpu); }, [&] { ForDType(t, cuda); });
}

}  // namespace gtp::kernels::ops::internal
