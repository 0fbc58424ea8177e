// core/kernels/cuda/elem.cuh — private: element load/store of the CUDA kernels.
//
// Kernels are templates on the storage type T (float or bf16) and on kVec,
// the elements one thread moves per access: 1, or 8 for bf16 (one 16-byte
// load/store). All math is f32: Load widens (exact), Store rounds once to
// nearest even (cvt.rn.bf16.f32, the rounding of core/dtype.h). For T = float
// and kVec = 1 both are the identity, so the f32 instantiations compute what
// the f32-only kernels did, operation for operation.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "core/dtype.h"

namespace gtp::kernels::cuda::internal {

__device__ __forceinline__ float Load(float v) { return v; }
__device__ __forceinline__ float Load(bf16 v) { return BF16BitsToF32(v.bits); }

template <typename T>
__device__ __forceinline__ T Store(float v);
template <>
__device__ __forceinline__ float Store<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ bf16 Store<bf16>(float v) {
  return bf16{__bfloat16_as_ushort(__float2bfloat16_rn(v))};
}

// bf16 elements per 16-byte access.
inline constexpr int kBf16Vec = 8;

// The 8 bf16 of a 16-byte word, widened to f32 (v[0] from the lowest address).
__device__ __forceinline__ void UnpackBf16x8(const uint4& u, float (&v)[kBf16Vec]) {
  const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {  // little-endian: the lower address is the low half
    v[2 * i] = BitsFloat(w[i] << 16);
    v[2 * i + 1] = BitsFloat(w[i] & 0xffff0000u);
  }
}

// v[0, kVec) = p[0, kVec) widened to f32. kVec > 1 needs T = bf16, kVec = 8
// and p 16-byte aligned.
template <int kVec, typename T>
__device__ __forceinline__ void LoadVec(const T* p, float (&v)[kVec]) {
  if constexpr (kVec == 1) {
    v[0] = Load(p[0]);
  } else {
    static_assert(std::is_same_v<T, bf16> && kVec == kBf16Vec, "16-byte access of 8 bf16");
    UnpackBf16x8(*reinterpret_cast<const uint4*>(p), v);
  }
}

// p[0, kVec) = Store<T>(v[0, kVec)); same requirements as LoadVec.
template <int kVec, typename T>
__device__ __forceinline__ void StoreVec(T* p, const float (&v)[kVec]) {
  if constexpr (kVec == 1) {
    p[0] = Store<T>(v[0]);
  } else {
    static_assert(std::is_same_v<T, bf16> && kVec == kBf16Vec, "16-byte access of 8 bf16");
    uint32_t w[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      w[i] = static_cast<uint32_t>(Store<bf16>(v[2 * i]).bits) |
             (static_cast<uint32_t>(Store<bf16>(v[2 * i + 1]).bits) << 16);
    }
    *reinterpret_cast<uint4*>(p) = make_uint4(w[0], w[1], w[2], w[3]);
  }
}

inline bool Aligned16(std::initializer_list<const void*> ptrs) {
  for (const void* p : ptrs) {
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  }
  return true;
}

// Calls f(std::integral_constant<int, kVec>{}) with kVec = kBf16Vec when T
// is bf16 and `vec` holds (the caller checked sizes and alignment), else 1.
template <typename T, typename F>
void WithVec(bool vec, F&& f) {
  if constexpr (std::is_same_v<T, bf16>) {
    if (vec) {
      f(std::integral_constant<int, kBf16Vec>{});
      return;
    }
  }
  f(std::integral_constant<int, 1>{});
}

}  // namespace gtp::kernels::cuda::internal
