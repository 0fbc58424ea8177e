// core/kernels/cpu/elem.h — private: element load/store of the CPU kernels.
//
// Kernels are templates on the storage type T (float or bf16) and do all
// their math in f32: Load widens an element (exact), Store rounds the f32
// result once (round to nearest even, core/dtype.h). For T = float both are
// the identity, so the f32 instantiations compute exactly what the f32-only
// kernels did.
#pragma once

#include "core/dtype.h"

namespace gtp::kernels::cpu::internal {

inline float Load(float v) { return v; }
inline float Load(bf16 v) { return ToF32(v); }

template <typename T>
T Store(float v);
template <>
inline float Store<float>(float v) {
  return v;
}
template <>
inline bf16 Store<bf16>(float v) {
  return ToBF16(v);
}

}  // namespace gtp::kernels::cpu::internal
