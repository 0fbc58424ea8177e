#include "comm/ucx/ucx_reduce.h"

#include <type_traits>

#include "core/status.h"

namespace gtp::comm::ucx_internal {
namespace {

constexpr int64_t kBlock = 16;

struct F32 {
  using T = float;
  static float Load(T v) { return v; }
  static T Store(float v) { return v; }
};
struct BF16 {
  using T = uint16_t;
  static float Load(T v) { return BF16BitsToF32(v); }
  static T Store(float v) { return F32ToBF16Bits(v); }
};
struct F16 {
  using T = uint16_t;
  static float Load(T v) { return F16BitsToF32(v); }
  static T Store(float v) { return F32ToF16Bits(v); }
};

// The element operation of ops.cc: acc first, the new value second.
template <ReduceOp kOp, typename T>
inline T Apply(T acc, T v) {
  if constexpr (kOp == ReduceOp::kMax) {
    return v > acc ? v : acc;
  } else if constexpr (kOp == ReduceOp::kMin) {
    return v < acc ? v : acc;
  } else if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;  // wraps, as integers reduce
    return static_cast<T>(static_cast<U>(acc) + static_cast<U>(v));
  } else {
    return acc + v;
  }
}

// Restrict pointers and blocks of a fixed length: GCC's -O2 cost model
// vectorises only loops that need neither alias checks nor a scalar epilogue.
template <typename D, ReduceOp kOp>
void Combine(float* __restrict__ acc, const typename D::T* __restrict__ src, int64_t n) {
  int64_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    for (int j = 0; j < kBlock; ++j) acc[i + j] = Apply<kOp>(acc[i + j], D::Load(src[i + j]));
  }
  for (; i < n; ++i) acc[i] = Apply<kOp>(acc[i], D::Load(src[i]));
}

// dst = finish(op(in, src)): `in` is the partial that arrived (I: F32 when
// wide, D when narrow), the result is stored as O (D finished, or F32).
template <typename I, typename D, typename O, ReduceOp kOp, bool kMean>
inline typename O::T One(typename I::T a, typename D::T v, float size) {
  float r = Apply<kOp>(I::Load(a), D::Load(v));
  return O::Store(kMean ? r / size : r);
}

template <typename I, typename D, typename O, ReduceOp kOp, bool kMean>
void Reduce(const typename I::T* __restrict__ in, const typename D::T* __restrict__ src,
            typename O::T* __restrict__ dst, float size, int64_t n) {
  int64_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    for (int j = 0; j < kBlock; ++j) {
      dst[i + j] = One<I, D, O, kOp, kMean>(in[i + j], src[i + j], size);
    }
  }
  for (; i < n; ++i) dst[i] = One<I, D, O, kOp, kMean>(in[i], src[i], size);
}

// In place: dst is src.
template <typename I, typename D, ReduceOp kOp, bool kMean>
void ReduceInPlace(const typename I::T* __restrict__ in, typename D::T* __restrict__ io,
                   float size, int64_t n) {
  int64_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    for (int j = 0; j < kBlock; ++j) {
      io[i + j] = One<I, D, D, kOp, kMean>(in[i + j], io[i + j], size);
    }
  }
  for (; i < n; ++i) io[i] = One<I, D, D, kOp, kMean>(in[i], io[i], size);
}

template <typename I, typename D, typename O, ReduceOp kOp, bool kMean>
void ReduceAny(const void* in, const void* src, void* dst, float size, int64_t n) {
  auto* a = static_cast<const typename I::T*>(in);
  auto* s = static_cast<const typename D::T*>(src);
  if constexpr (std::is_same_v<D, O>) {
    if (dst == src) {
      return ReduceInPlace<I, D, kOp, kMean>(a, static_cast<typename D::T*>(dst), size, n);
    }
  }
  Reduce<I, D, O, kOp, kMean>(a, s, static_cast<typename O::T*>(dst), size, n);
}

// `finish`: round to D and divide for kMean; otherwise store the wide sum.
template <typename I, typename D>
void ReduceFloat(ReduceOp op, bool finish, int group_size, const void* in, const void* src,
                 void* dst, int64_t n) {
  const float size = static_cast<float>(group_size);
  if (!finish) {
    switch (op) {
      case ReduceOp::kMax: return ReduceAny<I, D, F32, ReduceOp::kMax, false>(in, src, dst, size, n);
      case ReduceOp::kMin: return ReduceAny<I, D, F32, ReduceOp::kMin, false>(in, src, dst, size, n);
      default: return ReduceAny<I, D, F32, ReduceOp::kSum, false>(in, src, dst, size, n);
    }
  }
  switch (op) {
    case ReduceOp::kMax: return ReduceAny<I, D, D, ReduceOp::kMax, false>(in, src, dst, size, n);
    case ReduceOp::kMin: return ReduceAny<I, D, D, ReduceOp::kMin, false>(in, src, dst, size, n);
    case ReduceOp::kMean:
      if (group_size > 1) return ReduceAny<I, D, D, ReduceOp::kSum, true>(in, src, dst, size, n);
      return ReduceAny<I, D, D, ReduceOp::kSum, false>(in, src, dst, size, n);
    default: return ReduceAny<I, D, D, ReduceOp::kSum, false>(in, src, dst, size, n);
  }
}

template <typename D>
void CombineFloat(ReduceOp op, void* acc, const void* src, int64_t n) {
  auto* a = static_cast<float*>(acc);
  auto* s = static_cast<const typename D::T*>(src);
  switch (op) {
    case ReduceOp::kMax: return Combine<D, ReduceOp::kMax>(a, s, n);
    case ReduceOp::kMin: return Combine<D, ReduceOp::kMin>(a, s, n);
    default: return Combine<D, ReduceOp::kSum>(a, s, n);
  }
}

template <typename T, ReduceOp kOp>
void CombineFinishInt(const T* in, const T* src, T* dst, int group_size, bool mean, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    T r = Apply<kOp>(in[i], src[i]);
    dst[i] = mean ? static_cast<T>(r / group_size) : r;
  }
}

template <typename T>
void IntOp(ReduceOp op, int group_size, const void* in, const void* src, void* dst, int64_t n) {
  auto* a = static_cast<const T*>(in);
  auto* s = static_cast<const T*>(src);
  auto* d = static_cast<T*>(dst);
  const bool mean = op == ReduceOp::kMean && group_size > 1;
  switch (op) {
    case ReduceOp::kMax: return CombineFinishInt<T, ReduceOp::kMax>(a, s, d, group_size, false, n);
    case ReduceOp::kMin: return CombineFinishInt<T, ReduceOp::kMin>(a, s, d, group_size, false, n);
    default: return CombineFinishInt<T, ReduceOp::kSum>(a, s, d, group_size, mean, n);
  }
}

}  // namespace

void CombineChunk(DType dtype, ReduceOp op, void* acc_wide, const void* src, int64_t count) {
  switch (dtype) {
    case DType::kF32: return CombineFloat<F32>(op, acc_wide, src, count);
    case DType::kBF16: return CombineFloat<BF16>(op, acc_wide, src, count);
    case DType::kF16: return CombineFloat<F16>(op, acc_wide, src, count);
    // Integers accumulate in their own type: a combine is a finish without the mean.
    case DType::kI32: return IntOp<int32_t>(op, 1, acc_wide, src, acc_wide, count);
    case DType::kI64: return IntOp<int64_t>(op, 1, acc_wide, src, acc_wide, count);
    default: GTP_CHECK(false, "ucx: cannot reduce dtype ", DTypeName(dtype));
  }
}

void CombineFinishChunk(DType dtype, ReduceOp op, int group_size, const void* in_wide,
                        const void* src, void* dst, int64_t count) {
  switch (dtype) {
    case DType::kF32: return ReduceFloat<F32, F32>(op, true, group_size, in_wide, src, dst, count);
    case DType::kBF16: return ReduceFloat<F32, BF16>(op, true, group_size, in_wide, src, dst, count);
    case DType::kF16: return ReduceFloat<F32, F16>(op, true, group_size, in_wide, src, dst, count);
    case DType::kI32: return IntOp<int32_t>(op, group_size, in_wide, src, dst, count);
    case DType::kI64: return IntOp<int64_t>(op, group_size, in_wide, src, dst, count);
    default: GTP_CHECK(false, "ucx: cannot reduce dtype ", DTypeName(dtype));
  }
}

void WidenCombineChunk(DType dtype, ReduceOp op, const void* in, const void* src, void* out_wide,
                       int64_t count) {
  switch (dtype) {
    case DType::kF32: return ReduceFloat<F32, F32>(op, false, 1, in, src, out_wide, count);
    case DType::kBF16: return ReduceFloat<BF16, BF16>(op, false, 1, in, src, out_wide, count);
    case DType::kF16: return ReduceFloat<F16, F16>(op, false, 1, in, src, out_wide, count);
    case DType::kI32: return IntOp<int32_t>(op, 1, in, src, out_wide, count);
    case DType::kI64: return IntOp<int64_t>(op, 1, in, src, out_wide, count);
    default: GTP_CHECK(false, "ucx: cannot reduce dtype ", DTypeName(dtype));
  }
}

void WidenCombineFinishChunk(DType dtype, ReduceOp op, int group_size, const void* in,
                             const void* src, void* dst, int64_t count) {
  switch (dtype) {
    case DType::kF32: return ReduceFloat<F32, F32>(op, true, group_size, in, src, dst, count);
    case DType::kBF16: return ReduceFloat<BF16, BF16>(op, true, group_size, in, src, dst, count);
    case DType::kF16: return ReduceFloat<F16, F16>(op, true, group_size, in, src, dst, count);
    case DType::kI32: return IntOp<int32_t>(op, group_size, in, src, dst, count);
    case DType::kI64: return IntOp<int64_t>(op, group_size, in, src, dst, count);
    default: GTP_CHECK(false, "ucx: cannot reduce dtype ", DTypeName(dtype));
  }
}

}  // namespace gtp::comm::ucx_internal
