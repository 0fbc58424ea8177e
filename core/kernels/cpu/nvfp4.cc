// NVFP4 encode / decode on the host (the format, its rules and its error
// bound: kernels.h). Two passes: the tensor amax, then one block of 16 at a
// time (its amax, scale code and the element codes). Every scalar step is a
// kernels.h GTP_HD function, shared with cuda/nvfp4.cu.
#include <algorithm>
#include <cstring>

#include "core/kernels/cpu.h"
#include "core/status.h"

namespace gtp::kernels::cpu {
namespace {

inline uint32_t AbsBits(const void* x, DType t, int64_t i) {
  const uint32_t u = t == DType::kF32 ? FloatBits(static_cast<const float*>(x)[i])
                                      : uint32_t{static_cast<const bf16*>(x)[i].bits} << 16;
  return u & 0x7fffffffu;
}

inline float Load(const void* x, DType t, int64_t i) {
  return t == DType::kF32 ? static_cast<const float*>(x)[i]
                          : BF16BitsToF32(static_cast<const bf16*>(x)[i].bits);
}

void CheckType(DType t, const char* op, const char* what) {
  GTP_CHECK(t == DType::kF32 || t == DType::kBF16, op, ": ", what, " must be f32 or bf16, got ",
            DTypeName(t));
}

}  // namespace

void EncodeNvfp4(const void* x, DType x_type, uint8_t* wire, int64_t n) {
  GTP_CHECK(n >= 0, "EncodeNvfp4: negative size ", n);
  CheckType(x_type, "EncodeNvfp4", "x");
  uint32_t amax_bits = 0;
  for (int64_t i = 0; i < n; ++i) amax_bits = std::max(amax_bits, AbsBits(x, x_type, i));
  const float g = Nvfp4TensorScale(amax_bits);
  const int64_t scales_at = Nvfp4ScalesOffset(n);
  const int64_t blocks = (n + kNvfp4BlockSize - 1) / kNvfp4BlockSize;
  std::memcpy(wire, &g, 4);
  uint8_t* codes = wire + kNvfp4CodesOffset;
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t lo = b * kNvfp4BlockSize, hi = std::min<int64_t>(lo + kNvfp4BlockSize, n);
    uint32_t block_bits = 0;
    for (int64_t i = lo; i < hi; ++i) block_bits = std::max(block_bits, AbsBits(x, x_type, i));
    const uint8_t s = Nvfp4BlockScaleCode(block_bits, g);
    wire[scales_at + b] = s;
    const float d = Nvfp4BlockScale(s, g);
    for (int64_t i = lo; i < hi; i += 2) {  // lo is even: pairs stay in the block
      const uint8_t c0 = Nvfp4ElementCode(Load(x, x_type, i), d);
      const uint8_t c1 = i + 1 < hi ? Nvfp4ElementCode(Load(x, x_type, i + 1), d) : uint8_t{0};
      codes[i / 2] = static_cast<uint8_t>(c0 | c1 << 4);
    }
  }
  const int64_t used = scales_at + blocks;
  std::memset(wire + used, 0, Nvfp4WireBytes(n) - used);
}

void DecodeNvfp4(const uint8_t* wire, void* y, DType y_type, int64_t n) {
  GTP_CHECK(n >= 0, "DecodeNvfp4: negative size ", n);
  CheckType(y_type, "DecodeNvfp4", "y");
  float g;
  std::memcpy(&g, wire, 4);
  const uint8_t* codes = wire + kNvfp4CodesOffset;
  const uint8_t* scales = wire + Nvfp4ScalesOffset(n);
  for (int64_t i = 0; i < n; ++i) {
    const float d = Nvfp4BlockScale(scales[i / kNvfp4BlockSize], g);
    const float v = Nvfp4ElementValue(static_cast<uint8_t>(codes[i / 2] >> (4 * (i & 1))), d);
    if (y_type == DType::kF32) {
      static_cast<float*>(y)[i] = v;
    } else {
      static_cast<bf16*>(y)[i].bits = F32ToBF16Bits(v);
    }
  }
}

}  // namespace gtp::kernels::cpu
