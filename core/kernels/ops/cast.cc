// core/kernels/ops/cast.cc — Dispatch of the dtype conversions (cpu/cast.cc,
// cuda/cast.cu): f32 ↔ bf16 Cast and the MXFP8 blockwise quantisation; the
// NVFP4 wire codec (cpu/nvfp4.cc, cuda/nvfp4.cu).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/kernels/cpu.h"
#include "core/kernels/cuda.h"
#include "core/kernels/ops.h"
#include "core/kernels/ops/internal/dispatch.h"
#include "core/status.h"

namespace gtp::kernels::ops {

using internal::CheckHeadsOn;
using internal::CheckOn;
using internal::F;
using internal::FB;
using internal::M;
using internal::MB;
using internal::OnDevice;

void Cast(const Exec& e, const Tensor& src, const Tensor& dst) {
  CheckOn(e, src, "src");
  CheckOn(e, dst, "dst");
  GTP_CHECK(src.numel() == dst.numel(), "Cast: ", src.ToString(), " -> ", dst.ToString());
  const int64_t n = src.numel();
  if (src.dtype() == dst.dtype()) {
    CopyInto(e, src, dst);
  } else if (src.dtype() == DType::kF32 && dst.dtype() == DType::kBF16) {
    OnDevice(
        e, [&] { cpu::CastF32ToBF16(F(src), MB(dst), n); },
        [&] { cuda::CastF32ToBF16(F(src), MB(dst), n, e.stream); });
  } else if (src.dtype() == DType::kBF16 && dst.dtype() == DType::kF32) {
    OnDevice(
        e, [&] { cpu::CastBF16ToF32(FB(src), M(dst), n); },
        [&] { cuda::CastBF16ToF32(FB(src), M(dst), n, e.stream); });
  } else {
    GTP_CHECK(false, "Cast: unsupported ", src.ToString(), " -> ", dst.ToString());
  }
}

namespace {

// A view as rows × width elements, rows `pitch` apart: contiguous (one row)
// or a matrix's column block (rank 2, unit column stride). False otherwise.
bool AsRows(const Tensor& t, int64_t* rows, int64_t* width, int64_t* pitch) {
  if (t.is_contiguous()) {
    *rows = 1, *width = *pitch = t.numel();
    return true;
  }
  if (t.rank() != 2 || t.strides()[1] != 1 || t.strides()[0] < t.dim(1)) return false;
  *rows = t.dim(0), *width = t.dim(1), *pitch = t.strides()[0];
  return true;
}

}  // namespace

void CastMany(const Exec& e, const std::vector<Tensor>& srcs, const std::vector<Tensor>& dsts) {
  GTP_CHECK(srcs.size() == dsts.size(), "CastMany: ", srcs.size(), " sources, ", dsts.size(),
            " destinations");
  auto f32_or_bf16 = [](DType t) { return t == DType::kF32 || t == DType::kBF16; };
  std::vector<cuda::CastPair> pairs;
  pairs.reserve(srcs.size());
  for (size_t i = 0; i < srcs.size(); ++i) {
    const Tensor &src = srcs[i], &dst = dsts[i];
    CheckHeadsOn(e, src, "src");  // any layout: AsRows checks it
    CheckHeadsOn(e, dst, "dst");
    int64_t sr, sw, sp, dr, dw, dp;
    bool ok = f32_or_bf16(src.dtype()) && f32_or_bf16(dst.dtype()) && src.numel() == dst.numel() &&
              AsRows(src, &sr, &sw, &sp) && AsRows(dst, &dr, &dw, &dp);
    // A contiguous side takes the other side's rows (its pitch the width).
    if (ok && sr == 1 && dr > 1) sr = dr, sw = sp = dw;
    if (ok && dr == 1 && sr > 1) dr = sr, dw = dp = sw;
    GTP_CHECK(ok && sr == dr && sw == dw, "CastMany: pair ", i, " ", src.ToString(), " -> ",
              dst.ToString(), " (f32 or bf16, the same size, each contiguous or a column block)");
    pairs.push_back({src.raw_data(), dst.raw_data(), sr, sw, sp, dp, src.dtype(), dst.dtype()});
  }
  OnDevice(
      e,
      [&] {
        for (const cuda::CastPair& p : pairs) {
          const size_t ss = SizeOf(p.src_type), ds = SizeOf(p.dst_type);
          for (int64_t r = 0; r < p.rows; ++r) {
            const void* from = static_cast<const char*>(p.src) + r * p.src_pitch * ss;
            void* to = static_cast<char*>(p.dst) + r * p.dst_pitch * ds;
            if (p.src_type == p.dst_type) {
              std::memcpy(to, from, p.width * ss);
            } else if (p.src_type == DType::kF32) {
              cpu::CastF32ToBF16(static_cast<const float*>(from), static_cast<bf16*>(to), p.width);
            } else {
              cpu::CastBF16ToF32(static_cast<const bf16*>(from), static_cast<float*>(to), p.width);
            }
          }
        }
      },
      [&] {
        for (size_t i = 0; i < pairs.size(); i += cuda::kCastManyMax) {
          const int count =
              static_cast<int>(std::min<size_t>(cuda::kCastManyMax, pairs.size() - i));
          cuda::CastMany(pairs.data() + i, count, e.stream);
        }
      });
}

namespace {

void CheckFp8(const Exec& e, const char* op, const Tensor& x, const Tensor& q,
              const Tensor& scales) {
  CheckOn(e, x, "x");
  CheckOn(e, q, "q");
  CheckOn(e, scales, "scales");
  const int64_t n = x.numel();
  GTP_CHECK((x.dtype() == DType::kF32 || x.dtype() == DType::kBF16) && SizeOf(q.dtype()) == 1 &&
                q.numel() == n && scales.dtype() == DType::kU8 &&
                scales.numel() == (n + kFp8BlockSize - 1) / kFp8BlockSize,
            op, ": x/y ", x.ToString(), " q ", q.ToString(), " scales ", scales.ToString());
}

}  // namespace

void QuantizeFp8Blockwise(const Exec& e, const Tensor& x, const Tensor& q, const Tensor& scales,
                          DType fmt) {
  CheckFp8(e, "QuantizeFp8Blockwise", x, q, scales);
  uint8_t* qp = static_cast<uint8_t*>(q.raw_data());
  uint8_t* sp = static_cast<uint8_t*>(scales.raw_data());
  OnDevice(
      e, [&] { cpu::QuantizeFp8Blockwise(x.raw_data(), x.dtype(), qp, sp, x.numel(), fmt); },
      [&] {
        cuda::QuantizeFp8Blockwise(x.raw_data(), x.dtype(), qp, sp, x.numel(), fmt, e.stream);
      });
}

void DequantizeFp8Blockwise(const Exec& e, const Tensor& q, const Tensor& scales, const Tensor& y,
                            DType fmt) {
  CheckFp8(e, "DequantizeFp8Blockwise", y, q, scales);
  const uint8_t* qp = static_cast<const uint8_t*>(q.raw_data());
  const uint8_t* sp = static_cast<const uint8_t*>(scales.raw_data());
  OnDevice(
      e, [&] { cpu::DequantizeFp8Blockwise(qp, sp, y.raw_data(), y.dtype(), y.numel(), fmt); },
      [&] {
        cuda::DequantizeFp8Blockwise(qp, sp, y.raw_data(), y.dtype(), y.numel(), fmt, e.stream);
      });
}

namespace {

// data (x or y, named `what`) f32 or bf16; wire u8 of its element count's size.
void CheckNvfp4(const Exec& e, const char* op, const Tensor& data, const char* what,
                const Tensor& wire) {
  CheckOn(e, data, what);
  CheckOn(e, wire, "wire");
  GTP_CHECK((data.dtype() == DType::kF32 || data.dtype() == DType::kBF16) &&
                wire.dtype() == DType::kU8 && wire.numel() == Nvfp4WireBytes(data.numel()),
            op, ": ", what, " ", data.ToString(), " wire ", wire.ToString(), " (want u8 [",
            Nvfp4WireBytes(data.numel()), "])");
}

}  // namespace

void EncodeNvfp4(const Exec& e, const Tensor& x, const Tensor& wire) {
  CheckNvfp4(e, "EncodeNvfp4", x, "x", wire);
  uint8_t* w = static_cast<uint8_t*>(wire.raw_data());
  OnDevice(
      e, [&] { cpu::EncodeNvfp4(x.raw_data(), x.dtype(), w, x.numel()); },
      [&] {
        // Freed on return while the kernels may still be queued, like every
        // op's CUDA scratch: e.alloc serves work ordered after them on
        // e.stream (allocator.h: no stream tracking).
        Tensor amax = e.Empty({1}, DType::kI32);
        cuda::EncodeNvfp4(x.raw_data(), x.dtype(), w, x.numel(),
                          static_cast<uint32_t*>(amax.raw_data()), e.stream);
      });
}

void DecodeNvfp4(const Exec& e, const Tensor& wire, const Tensor& y) {
  CheckNvfp4(e, "DecodeNvfp4", y, "y", wire);
  const uint8_t* w = static_cast<const uint8_t*>(wire.raw_data());
  OnDevice(
      e, [&] { cpu::DecodeNvfp4(w, y.raw_data(), y.dtype(), y.numel()); },
      [&] { cuda::DecodeNvfp4(w, y.raw_data(), y.dtype(), y.numel(), e.stream); });
}

}  // namespace gtp::kernels::ops
