// core/kernels/fp8/internal.h — argument checks and loads shared by
// block_quant.cc and block_gemm.cc (not for use outside this package).
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "core/kernels/ops.h"
#include "core/shape.h"
#include "core/tensor.h"
#include "core/status.h"

namespace gtp::kernels::fp8::internal {

// A defined, contiguous tensor on e's device, CPU or CUDA (`what` names it).
inline void CheckOn(const Exec& e, const Tensor& t, const char* op, const char* what) {
  GTP_CHECK(t.defined(), op, ": ", what, " is undefined");
  GTP_CHECK(t.device() == e.device, op, ": ", what, " is on ", t.device().ToString(),
            ", exec on ", e.device.ToString());
  GTP_CHECK(t.is_contiguous(), op, ": ", what, " must be contiguous: ", t.ToString());
}

// A data matrix: rank 2, f32 or bf16.
inline void CheckMatrix(const Exec& e, const Tensor& t, const char* op, const char* what) {
  CheckOn(e, t, op, what);
  GTP_CHECK(t.rank() == 2 && (t.dtype() == DType::kF32 || t.dtype() == DType::kBF16), op, ": ",
            what, " must be an f32 or bf16 matrix, got ", t.ToString());
}

// Codes: [rows, cols], one byte per element (fp8_e4m3 or u8).
inline void CheckCodes(const Exec& e, const Tensor& t, int64_t rows, int64_t cols, const char* op,
                       const char* what) {
  CheckOn(e, t, op, what);
  GTP_CHECK((t.dtype() == DType::kF8E4M3 || t.dtype() == DType::kU8) &&
                t.shape() == Shape({rows, cols}),
            op, ": ", what, " must be fp8_e4m3 or u8 [", rows, ", ", cols, "], got ",
            t.ToString());
}

// Scales: f32 of the given shape.
inline void CheckScales(const Exec& e, const Tensor& t, const Shape& shape, const char* op,
                        const char* what) {
  CheckOn(e, t, op, what);
  GTP_CHECK(t.dtype() == DType::kF32 && t.shape() == shape, op, ": ", what, " must be f32",
            shape.ToString(), ", got ", t.ToString());
}

// Element i of f32 or bf16 data as f32 (bf16 widens exactly).
inline float LoadF32(const void* x, DType t, int64_t i) {
  return t == DType::kF32 ? static_cast<const float*>(x)[i]
                          : BF16BitsToF32(static_cast<const bf16*>(x)[i].bits);
}

}  // namespace gtp::kernels::fp8::internal
