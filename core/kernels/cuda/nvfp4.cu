// core/kernels/cuda/nvfp4.cu — NVFP4 encode / decode, bit-identical to the
// CPU (core/kernels/cpu/nvfp4.cc; the format, rules and error bound are in
// kernels.h):
//   1. memset amax_scratch to 0; AmaxKernel: each block reduces the bits of
//      |x| (an unsigned max: NaN > inf > finite) and atomicMax-es them into
//      amax_scratch. An integer max is exact and order-free, so the tensor
//      amax is the CPU's bits whatever the schedule.
//   2. EncodeKernel: g = Nvfp4TensorScale(amax); one thread per code byte
//      (elements 2i, 2i + 1), eight lanes per block of 16 share its amax
//      through xor shuffles, then Nvfp4BlockScaleCode / Nvfp4ElementCode
//      (kernels.h, GTP_HD: f32 division and multiplication, round to
//      nearest, no FMA involved). Grid thread 0 writes g and the zero
//      padding.
// Decode: one thread per code byte, Nvfp4ElementValue of each nibble.
// Everything is enqueued on the caller's stream; nothing blocks the host.
#include <cuda_runtime.h>

#include "core/kernels/cuda.h"
#include "core/kernels/cuda/common.cuh"

namespace gtp::kernels::cuda {
namespace {

using internal::CeilDiv;
using internal::GridFor;
using internal::kFullMask;
using internal::kWarpSize;

constexpr int kThreads = 256;
// A warp covers 32 code bytes = 64 elements = 4 blocks of 16.
constexpr int kLanesPerBlock = kNvfp4BlockSize / 2;
static_assert(kWarpSize % kLanesPerBlock == 0, "NVFP4 blocks must tile a warp");

// Bits of x[i] as f32 (bf16 widened exactly).
template <bool kBF16In>
__device__ __forceinline__ uint32_t LoadBits(const void* __restrict__ x, int64_t i) {
  if constexpr (kBF16In) {
    return uint32_t{static_cast<const bf16*>(x)[i].bits} << 16;
  } else {
    return FloatBits(static_cast<const float*>(x)[i]);
  }
}

template <bool kBF16In>
__global__ void AmaxKernel(const void* __restrict__ x, int64_t n, uint32_t* __restrict__ amax) {
  __shared__ uint32_t partial[kThreads / kWarpSize];
  uint32_t m = 0;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    m = max(m, LoadBits<kBF16In>(x, i) & 0x7fffffffu);
  }
  for (int o = kWarpSize / 2; o > 0; o >>= 1) m = max(m, __shfl_xor_sync(kFullMask, m, o));
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  if (lane == 0) partial[warp] = m;
  __syncthreads();
  if (warp == 0) {
    m = lane < kThreads / kWarpSize ? partial[lane] : 0u;
    for (int o = kWarpSize / 2; o > 0; o >>= 1) m = max(m, __shfl_xor_sync(kFullMask, m, o));
    if (lane == 0 && m != 0) atomicMax(amax, m);
  }
}

template <bool kBF16In>
__global__ void EncodeKernel(const void* __restrict__ x, uint8_t* __restrict__ wire, int64_t n,
                             const uint32_t* __restrict__ amax) {
  const float g = Nvfp4TensorScale(*amax);
  const int64_t code_bytes = (n + 1) / 2, scales_at = Nvfp4ScalesOffset(n);
  const int lane = threadIdx.x % kWarpSize;
  const int64_t warp = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) / kWarpSize;
  const int64_t warps = int64_t{gridDim.x} * blockDim.x / kWarpSize;
  for (int64_t chunk = warp; chunk < CeilDiv(code_bytes, kWarpSize); chunk += warps) {
    // Uniform over the warp, so every lane takes part in the shuffles.
    const int64_t byte = chunk * kWarpSize + lane, i = 2 * byte;
    const uint32_t u0 = i < n ? LoadBits<kBF16In>(x, i) : 0u;
    const uint32_t u1 = i + 1 < n ? LoadBits<kBF16In>(x, i + 1) : 0u;
    uint32_t bits = max(u0 & 0x7fffffffu, u1 & 0x7fffffffu);
    for (int o = kLanesPerBlock / 2; o > 0; o >>= 1) {
      bits = max(bits, __shfl_xor_sync(kFullMask, bits, o));  // within the aligned 8 lanes
    }
    if (i < n) {
      const uint8_t s = Nvfp4BlockScaleCode(bits, g);
      const float d = Nvfp4BlockScale(s, g);
      const uint8_t c0 = Nvfp4ElementCode(BitsFloat(u0), d);
      const uint8_t c1 = i + 1 < n ? Nvfp4ElementCode(BitsFloat(u1), d) : uint8_t{0};
      wire[kNvfp4CodesOffset + byte] = static_cast<uint8_t>(c0 | c1 << 4);
      if (lane % kLanesPerBlock == 0) wire[scales_at + byte / kLanesPerBlock] = s;
    }
  }
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    const uint32_t gb = FloatBits(g);
    for (int k = 0; k < 4; ++k) wire[k] = static_cast<uint8_t>(gb >> (8 * k));
    const int64_t used = scales_at + CeilDiv(n, kNvfp4BlockSize);
    for (int64_t k = used; k < Nvfp4WireBytes(n); ++k) wire[k] = 0;
  }
}

template <bool kBF16Out>
__global__ void DecodeKernel(const uint8_t* __restrict__ wire, void* __restrict__ y, int64_t n) {
  const float g = BitsFloat(uint32_t{wire[0]} | uint32_t{wire[1]} << 8 | uint32_t{wire[2]} << 16 |
                            uint32_t{wire[3]} << 24);
  const uint8_t* codes = wire + kNvfp4CodesOffset;
  const uint8_t* scales = wire + Nvfp4ScalesOffset(n);
  for (int64_t byte = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; byte < (n + 1) / 2;
       byte += int64_t{gridDim.x} * blockDim.x) {
    const float d = Nvfp4BlockScale(scales[byte / kLanesPerBlock], g);
    const uint8_t c = codes[byte];
    const int64_t i = 2 * byte;
    const float v0 = Nvfp4ElementValue(c, d);
    const float v1 = Nvfp4ElementValue(static_cast<uint8_t>(c >> 4), d);
    if constexpr (kBF16Out) {
      bf16* out = static_cast<bf16*>(y);
      out[i].bits = F32ToBF16Bits(v0);
      if (i + 1 < n) out[i + 1].bits = F32ToBF16Bits(v1);
    } else {
      float* out = static_cast<float*>(y);
      out[i] = v0;
      if (i + 1 < n) out[i + 1] = v1;
    }
  }
}

void CheckArgs(const char* op, int64_t n, DType t, const char* what) {
  GTP_CU_REQUIRE(n >= 0, "%s: negative size %lld", op, static_cast<long long>(n));
  GTP_CU_REQUIRE(t == DType::kF32 || t == DType::kBF16, "%s: %s must be f32 or bf16, got %s", op,
                 what, DTypeName(t));
}

template <bool kBF16In>
void LaunchEncode(const void* x, uint8_t* wire, int64_t n, uint32_t* amax, cudaStream_t stream) {
  if (n > 0) {
    AmaxKernel<kBF16In><<<GridFor(n, kThreads), kThreads, 0, stream>>>(x, n, amax);
    GTP_CU_LAUNCH_CHECK();
  }
  const int64_t threads = CeilDiv((n + 1) / 2, kWarpSize) * kWarpSize;
  EncodeKernel<kBF16In><<<GridFor(threads, kThreads), kThreads, 0, stream>>>(x, wire, n, amax);
  GTP_CU_LAUNCH_CHECK();
}

template <bool kBF16Out>
void LaunchDecode(const uint8_t* wire, void* y, int64_t n, cudaStream_t stream) {
  DecodeKernel<kBF16Out><<<GridFor((n + 1) / 2, kThreads), kThreads, 0, stream>>>(wire, y, n);
  GTP_CU_LAUNCH_CHECK();
}

}  // namespace

void EncodeNvfp4(const void* x, DType x_type, uint8_t* wire, int64_t n, uint32_t* amax_scratch,
                 cudaStream_t stream) {
  CheckArgs("EncodeNvfp4", n, x_type, "x");
  GTP_CU_REQUIRE(wire != nullptr && amax_scratch != nullptr,
                 "EncodeNvfp4: null wire or amax_scratch");
  GTP_CU_CHECK(cudaMemsetAsync(amax_scratch, 0, sizeof(uint32_t), stream));
  x_type == DType::kBF16 ? LaunchEncode<true>(x, wire, n, amax_scratch, stream)
                         : LaunchEncode<false>(x, wire, n, amax_scratch, stream);
}

void DecodeNvfp4(const uint8_t* wire, void* y, DType y_type, int64_t n, cudaStream_t stream) {
  CheckArgs("DecodeNvfp4", n, y_type, "y");
  if (n == 0) return;
  y_type == DType::kBF16 ? LaunchDecode<true>(wire, y, n, stream)
                         : LaunchDecode<false>(wire, y, n, stream);
}

}  // namespace gtp::kernels::cuda
