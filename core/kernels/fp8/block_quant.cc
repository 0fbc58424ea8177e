// Block-scaled e4m3 quantisation (block_quant.h): the argument checks, the
// CPU implementation, and the dispatch to the CUDA kernels (block_quant.cu,
// through block_quant_cuda.h) on a CUDA Exec. Every code and scale on either
// side comes from the scalar rules of block_scale.h.
#include "core/kernels/fp8/block_quant.h"

#include <algorithm>
#include <cstdint>
#include <utility>

#include "core/kernels/fp8/block_quant_cuda.h"
#include "core/kernels/fp8/internal.h"
#include "core/kernels/fp8/lt_scale_layout.h"
#include "core/kernels/ops.h"
#include "core/status.h"

namespace gtp::kernels::fp8 {

using internal::CheckCodes;
using internal::CheckMatrix;
using internal::CheckScales;
using internal::LoadF32;

namespace {

void StoreF32(const Tensor& y, int64_t i, float v) {
  if (y.dtype() == DType::kF32) {
    static_cast<float*>(y.raw_data())[i] = v;
  } else {
    static_cast<bf16*>(y.raw_data())[i].bits = F32ToBF16Bits(v);
  }
}

uint8_t* Codes(const Tensor& q) { return static_cast<uint8_t*>(q.raw_data()); }
const bf16* BF16Data(const Tensor& x) { return static_cast<const bf16*>(x.raw_data()); }

// amax bits over element indices base + r·row_stride + c·col_stride for r in
// [r0, r1), c in [c0, c1) of data x (f32 or bf16).
uint32_t AmaxBits(const void* x, DType t, int64_t r0, int64_t r1, int64_t c0, int64_t c1,
                  int64_t row_stride, int64_t col_stride) {
  uint32_t amax = 0;
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t c = c0; c < c1; ++c)
      amax = std::max(amax, FloatBits(LoadF32(x, t, r * row_stride + c * col_stride)) & 0x7fffffffu);
  return amax;
}

// 1×128 quantisation of the logical matrix X[r, c] = x[r·rs + c·cs], R × C,
// into q [R, C] and scales [R, ceil(C/128)] (row-major).
void QuantizeRowBlocks(const void* x, DType t, int64_t R, int64_t C, int64_t rs, int64_t cs,
                       uint8_t* q, float* scales) {
  const int64_t nb = Fp8NumBlocks(C);
  for (int64_t r = 0; r < R; ++r) {
    for (int64_t b = 0; b < nb; ++b) {
      const int64_t c0 = b * kFp8Block, c1 = std::min(C, c0 + kFp8Block);
      const float s = Fp8BlockScale(AmaxBits(x, t, r, r + 1, c0, c1, rs, cs));
      scales[r * nb + b] = s;
      for (int64_t c = c0; c < c1; ++c) q[r * C + c] = Fp8BlockEncode(LoadF32(x, t, r * rs + c * cs), s);
    }
  }
}

// The argument checks shared by the ops that read codes q [R, C] (scales in
// `l`) and write their transpose's codes qt [C, R] (scales in `l` too).
// Returns {R, C}.
std::pair<int64_t, int64_t> CheckTransposePair(const Exec& e, const Tensor& q, const Tensor& scales,
                                               const Tensor& qt, const Tensor& scales_t, Fp8Layout l,
                                               const char* op) {
  GTP_CHECK(q.defined() && q.rank() == 2, op, ": q must be a matrix, got ",
            q.defined() ? q.ToString() : "undefined");
  const int64_t R = q.dim(0), C = q.dim(1);
  CheckCodes(e, q, R, C, op, "q");
  CheckScales(e, scales, Fp8ScaleShape(R, C, l), op, "scales");
  CheckCodes(e, qt, C, R, op, "qt");
  CheckScales(e, scales_t, Fp8ScaleShape(C, R, l), op, "scales_t");
  return {R, C};
}

// The checks of a fused quantiser's outputs: x [R, C]'s codes q and scales
// in layout l, and xᵀ's, qt [C, R] and scales_t (CheckTransposePair).
// Returns {R, C}.
std::pair<int64_t, int64_t> CheckFusedOutputs(const Exec& e, const Tensor& x, const Tensor& q,
                                              const Tensor& scales, const Tensor& qt,
                                              const Tensor& scales_t, Fp8Layout l,
                                              const char* op) {
  CheckMatrix(e, x, op, "x");
  CheckCodes(e, q, x.dim(0), x.dim(1), op, "q");
  return CheckTransposePair(e, q, scales, qt, scales_t, l, op);
}

// lt (optional): f32 [LtScaleCount(tiles, rows, K)] on e's device; its raw
// pointer, or null when undefined.
float* CheckLt(const Exec& e, const Tensor& lt, bool tiles, int64_t rows, int64_t K,
               const char* op) {
  if (!lt.defined()) return nullptr;
  CheckScales(e, lt, Shape({LtScaleCount(tiles, rows, K)}), op, "lt_scales");
  return lt.data<float>();
}

// The CPU's copy of a scale table [table_rows, ceil(K/128)] into cuBLASLt's
// layout (lt_scale_layout.h), padding as NaN bytes.
void WriteLt(const float* table, bool tiles, int64_t rows, int64_t K, float* lt) {
  if (lt == nullptr) return;
  const int64_t L = Fp8NumBlocks(K), table_rows = tiles ? Fp8NumBlocks(rows) : rows;
  std::fill(lt, lt + LtScaleCount(tiles, rows, K), BitsFloat(0xffffffffu));
  for (int64_t i = 0; i < table_rows; ++i)
    for (int64_t j = 0; j < L; ++j) lt[LtScaleOffset(tiles, rows, K, i, j)] = table[i * L + j];
}

}  // namespace

const char* Fp8LayoutName(Fp8Layout l) {
  return l == Fp8Layout::kRow1x128 ? "row1x128" : "tile128x128";
}

Shape Fp8ScaleShape(int64_t rows, int64_t cols, Fp8Layout l) {
  GTP_CHECK(rows >= 0 && cols >= 0, "Fp8ScaleShape: negative size ", rows, " x ", cols);
  return l == Fp8Layout::kRow1x128 ? Shape{rows, Fp8NumBlocks(cols)}
                                   : Shape{Fp8NumBlocks(rows), Fp8NumBlocks(cols)};
}

void QuantizeBlocks(const Exec& e, const Tensor& x, Fp8Layout l, const Tensor& q,
                    const Tensor& scales, const Tensor& lt_scales) {
  const char* op = "fp8::QuantizeBlocks";
  CheckMatrix(e, x, op, "x");
  const int64_t R = x.dim(0), C = x.dim(1);
  CheckCodes(e, q, R, C, op, "q");
  CheckScales(e, scales, Fp8ScaleShape(R, C, l), op, "scales");
  const bool tiles = l == Fp8Layout::kTile128x128;
  float* lt = CheckLt(e, lt_scales, tiles, R, C, op);
  uint8_t* qp = Codes(q);
  float* sp = scales.data<float>();
  if (e.is_cuda()) {
    const bool f32 = x.dtype() == DType::kF32;
    if (!tiles && f32) {
      cuda::QuantizeRow1x128(x.data<float>(), R, C, qp, sp, lt, e.stream);
    } else if (!tiles) {
      cuda::QuantizeRow1x128(BF16Data(x), R, C, qp, sp, lt, e.stream);
    } else if (f32) {
      cuda::QuantizeTile128x128(x.data<float>(), R, C, qp, sp, lt, e.stream);
    } else {
      cuda::QuantizeTile128x128(BF16Data(x), R, C, qp, sp, lt, e.stream);
    }
    return;
  }
  if (!tiles) {
    QuantizeRowBlocks(x.raw_data(), x.dtype(), R, C, C, 1, qp, sp);
    WriteLt(sp, false, R, C, lt);
    return;
  }
  const int64_t rb = Fp8NumBlocks(R), cb = Fp8NumBlocks(C);
  for (int64_t i = 0; i < rb; ++i) {
    const int64_t r0 = i * kFp8Block, r1 = std::min(R, r0 + kFp8Block);
    for (int64_t j = 0; j < cb; ++j) {
      const int64_t c0 = j * kFp8Block, c1 = std::min(C, c0 + kFp8Block);
      const float s = Fp8BlockScale(AmaxBits(x.raw_data(), x.dtype(), r0, r1, c0, c1, C, 1));
      sp[i * cb + j] = s;
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t c = c0; c < c1; ++c)
          qp[r * C + c] = Fp8BlockEncode(LoadF32(x.raw_data(), x.dtype(), r * C + c), s);
    }
  }
  WriteLt(sp, true, R, C, lt);
}

void DequantizeBlocks(const Exec& e, const Tensor& q, const Tensor& scales, Fp8Layout l,
                      const Tensor& y) {
  const char* op = "fp8::DequantizeBlocks";
  CheckMatrix(e, y, op, "y");
  const int64_t R = y.dim(0), C = y.dim(1);
  CheckCodes(e, q, R, C, op, "q");
  CheckScales(e, scales, Fp8ScaleShape(R, C, l), op, "scales");
  const uint8_t* qp = Codes(q);
  const float* sp = scales.data<float>();
  if (e.is_cuda()) {
    const bool tiles = l == Fp8Layout::kTile128x128;
    if (y.dtype() == DType::kF32) {
      cuda::DequantizeBlocks(qp, sp, tiles, R, C, y.data<float>(), e.stream);
    } else {
      cuda::DequantizeBlocks(qp, sp, tiles, R, C, static_cast<bf16*>(y.raw_data()), e.stream);
    }
    return;
  }
  const int64_t cb = Fp8NumBlocks(C);
  for (int64_t r = 0; r < R; ++r) {
    const int64_t srow = (l == Fp8Layout::kRow1x128 ? r : r / kFp8Block) * cb;
    for (int64_t c = 0; c < C; ++c)
      StoreF32(y, r * C + c, Fp8BlockDecode(qp[r * C + c], sp[srow + c / kFp8Block]));
  }
}

void QuantizeRowsTransposed(const Exec& e, const Tensor& x, const Tensor& qt,
                            const Tensor& scales_t, const Tensor& lt_scales) {
  const char* op = "fp8::QuantizeRowsTransposed";
  CheckMatrix(e, x, op, "x");
  const int64_t R = x.dim(0), C = x.dim(1);
  CheckCodes(e, qt, C, R, op, "qt");
  CheckScales(e, scales_t, Fp8ScaleShape(C, R, Fp8Layout::kRow1x128), op, "scales_t");
  float* lt = CheckLt(e, lt_scales, false, C, R, op);
  if (e.is_cuda()) {
    if (x.dtype() == DType::kF32) {
      cuda::QuantizeRowsTransposed(x.data<float>(), R, C, Codes(qt), scales_t.data<float>(), lt,
                                   e.stream);
    } else {
      cuda::QuantizeRowsTransposed(BF16Data(x), R, C, Codes(qt), scales_t.data<float>(), lt,
                                   e.stream);
    }
    return;
  }
  // Xᵀ[c, r] = x[r·C + c]: row stride 1, column stride C.
  QuantizeRowBlocks(x.raw_data(), x.dtype(), C, R, 1, C, Codes(qt), scales_t.data<float>());
  WriteLt(scales_t.data<float>(), false, C, R, lt);
}

namespace {

// column_sums[c] += Σ_rows x[r, c] in QuantizeRowsAndTransposed's order.
void AddColumnSumsCpu(const Tensor& x, const Tensor& column_sums) {
  const int64_t R = x.dim(0), C = x.dim(1), nbr = Fp8NumBlocks(R);
  for (int64_t c = 0; c < C; ++c) {
    float acc = 0.0f;
    for (int64_t bi = 0; bi < nbr; ++bi) {
      float p[32];
      for (int64_t l = 0; l < 32; ++l) {
        float v[4];
        for (int64_t k = 0; k < 4; ++k) {
          const int64_t r = bi * kFp8Block + l + 32 * k;
          v[k] = r < R ? LoadF32(x.raw_data(), x.dtype(), r * C + c) : 0.0f;
        }
        p[l] = ((v[0] + v[1]) + v[2]) + v[3];
      }
      for (int64_t o = 16; o > 0; o >>= 1) {
        float next[32];
        for (int64_t l = 0; l < 32; ++l) next[l] = p[l] + p[l ^ o];
        std::copy(next, next + 32, p);
      }
      acc += p[0];
    }
    StoreF32(column_sums, c, LoadF32(column_sums.raw_data(), column_sums.dtype(), c) + acc);
  }
}

}  // namespace

namespace {

void CheckColumnSums(const Exec& e, const Tensor& column_sums, int64_t C, const char* op) {
  if (!column_sums.defined()) return;
  internal::CheckOn(e, column_sums, op, "column_sums");
  GTP_CHECK((column_sums.dtype() == DType::kF32 || column_sums.dtype() == DType::kBF16) &&
                column_sums.shape() == Shape({C}) && column_sums.is_contiguous(),
            op, ": column_sums must be f32 or bf16 [", C, "], got ", column_sums.ToString());
}

// QuantizeRowsAndTransposed's CUDA path (and its activation forms'): the
// outputs checked, the partial sums' scratch, `kernel(lt, lt_t, partial)`
// (the launcher), then the partials added to column_sums. False, with
// nothing added, where `kernel` returns false (it launched nothing).
template <class Kernel>
bool RowsAndTransposedCuda(const Exec& e, const Tensor& x, const Tensor& q, const Tensor& scales,
                           const Tensor& qt, const Tensor& scales_t, const Tensor& lt_scales,
                           const Tensor& lt_scales_t, const Tensor& column_sums, const char* op,
                           Kernel kernel) {
  const int64_t R = x.dim(0), C = x.dim(1);
  CheckFusedOutputs(e, x, q, scales, qt, scales_t, Fp8Layout::kRow1x128, op);
  float* lt = CheckLt(e, lt_scales, false, R, C, op);
  float* lt_t = CheckLt(e, lt_scales_t, false, C, R, op);
  const int64_t nbr = Fp8NumBlocks(R);
  // The per-block partial sums: stream-ordered scratch (as RequantizeRowsTransposed's).
  Tensor partial = column_sums.defined() && R > 0 && C > 0 ? e.Empty({nbr, C}) : Tensor();
  float* pp = partial.defined() ? partial.data<float>() : nullptr;
  if (!kernel(lt, lt_t, pp)) return false;
  if (pp == nullptr) return true;
  if (column_sums.dtype() == DType::kF32) {
    cuda::AddColumnPartials(pp, nbr, C, column_sums.data<float>(), e.stream);
  } else {
    cuda::AddColumnPartials(pp, nbr, C, static_cast<bf16*>(column_sums.raw_data()), e.stream);
  }
  return true;
}

}  // namespace

void QuantizeRowsAndTransposed(const Exec& e, const Tensor& x, const Tensor& q,
                               const Tensor& scales, const Tensor& qt, const Tensor& scales_t,
                               const Tensor& lt_scales, const Tensor& lt_scales_t,
                               const Tensor& column_sums) {
  const char* op = "fp8::QuantizeRowsAndTransposed";
  CheckMatrix(e, x, op, "x");
  const int64_t R = x.dim(0), C = x.dim(1);
  CheckColumnSums(e, column_sums, C, op);
  if (!e.is_cuda()) {  // the two CPU paths (each checks its arguments)
    QuantizeBlocks(e, x, Fp8Layout::kRow1x128, q, scales, lt_scales);
    QuantizeRowsTransposed(e, x, qt, scales_t, lt_scales_t);
    if (column_sums.defined()) AddColumnSumsCpu(x, column_sums);
    return;
  }
  RowsAndTransposedCuda(
      e, x, q, scales, qt, scales_t, lt_scales, lt_scales_t, column_sums, op,
      [&](float* lt, float* lt_t, float* pp) {
        if (x.dtype() == DType::kF32) {
          cuda::QuantizeRowsAndTransposed(x.data<float>(), R, C, Codes(q), scales.data<float>(), lt,
                                          Codes(qt), scales_t.data<float>(), lt_t, pp, e.stream);
        } else {
          cuda::QuantizeRowsAndTransposed(BF16Data(x), R, C, Codes(q), scales.data<float>(), lt,
                                          Codes(qt), scales_t.data<float>(), lt_t, pp, e.stream);
        }
        return true;
      });
}

void QuantizeActRowsAndTransposed(const Exec& e, Fp8InputAct act, const Tensor& x,
                                  const Tensor& pre, const Tensor& q, const Tensor& scales,
                                  const Tensor& qt, const Tensor& scales_t, const Tensor& lt_scales,
                                  const Tensor& lt_scales_t, const Tensor& column_sums) {
  const char* op = "fp8::QuantizeActRowsAndTransposed";
  CheckMatrix(e, x, op, "x");
  const bool grad = act == Fp8InputAct::kGeluGrad;
  if (grad) {
    internal::CheckOn(e, pre, op, "pre");
    GTP_CHECK(pre.shape() == x.shape() && pre.dtype() == x.dtype() && pre.is_contiguous(), op,
              ": pre (GELU's input) must have x's shape and dtype ", x.ToString(), ", got ",
              pre.ToString());
  } else {
    GTP_CHECK(!pre.defined(), op, ": pre is kGeluGrad's argument, got ", pre.ToString(),
              " with kGelu");
  }
  const int64_t R = x.dim(0), C = x.dim(1);
  CheckColumnSums(e, column_sums, C, op);
  if (e.is_cuda() && x.dtype() == DType::kBF16 &&
      RowsAndTransposedCuda(
          e, x, q, scales, qt, scales_t, lt_scales, lt_scales_t, column_sums, op,
          [&](float* lt, float* lt_t, float* pp) {
            return grad ? cuda::QuantizeGeluGradRowsAndTransposed(
                              BF16Data(x), BF16Data(pre), R, C, Codes(q), scales.data<float>(), lt,
                              Codes(qt), scales_t.data<float>(), lt_t, pp, e.stream)
                        : cuda::QuantizeGeluRowsAndTransposed(
                              BF16Data(x), R, C, Codes(q), scales.data<float>(), lt, Codes(qt),
                              scales_t.data<float>(), lt_t, pp, e.stream);
          })) {
    return;
  }
  // Elsewhere the composition the fused kernel stands for (a in x's dtype).
  Tensor a = e.Empty(x.shape(), x.dtype());
  if (grad) {
    ops::GeluBackward(e, x, pre, a);
  } else {
    ops::GeluForward(e, x, a);
  }
  QuantizeRowsAndTransposed(e, a, q, scales, qt, scales_t, lt_scales, lt_scales_t, column_sums);
}

void QuantizeTilesAndTransposed(const Exec& e, const Tensor& x, const Tensor& q,
                                const Tensor& scales, const Tensor& qt, const Tensor& scales_t,
                                const Tensor& lt_scales, const Tensor& lt_scales_t) {
  const char* op = "fp8::QuantizeTilesAndTransposed";
  if (!e.is_cuda()) {  // the two CPU paths (each checks its arguments)
    QuantizeBlocks(e, x, Fp8Layout::kTile128x128, q, scales, lt_scales);
    TransposeTiles(e, q, scales, qt, scales_t, lt_scales_t);
    return;
  }
  const auto [R, C] =
      CheckFusedOutputs(e, x, q, scales, qt, scales_t, Fp8Layout::kTile128x128, op);
  float* lt = CheckLt(e, lt_scales, true, R, C, op);
  float* lt_t = CheckLt(e, lt_scales_t, true, C, R, op);
  if (x.dtype() == DType::kF32) {
    cuda::QuantizeTileAndTranspose(x.data<float>(), R, C, Codes(q), scales.data<float>(), lt,
                                   Codes(qt), scales_t.data<float>(), lt_t, e.stream);
  } else {
    cuda::QuantizeTileAndTranspose(BF16Data(x), R, C, Codes(q), scales.data<float>(), lt,
                                   Codes(qt), scales_t.data<float>(), lt_t, e.stream);
  }
}

void RequantizeRowsTransposed(const Exec& e, const Tensor& q, const Tensor& scales,
                              const Tensor& qt, const Tensor& scales_t) {
  const auto [R, C] = CheckTransposePair(e, q, scales, qt, scales_t, Fp8Layout::kRow1x128,
                                         "fp8::RequantizeRowsTransposed");
  // The forward's dequantised values (f32 scratch on e's device; on CUDA it
  // is freed on return without a sync: the caching allocator hands it out
  // again only to work ordered after ours on the same stream), then the fused
  // transpose + quantise.
  Tensor d = e.Empty({R, C}, DType::kF32);
  DequantizeBlocks(e, q, scales, Fp8Layout::kRow1x128, d);
  QuantizeRowsTransposed(e, d, qt, scales_t);
}

void TransposeTiles(const Exec& e, const Tensor& q, const Tensor& scales, const Tensor& qt,
                    const Tensor& scales_t, const Tensor& lt_scales) {
  const auto [R, C] = CheckTransposePair(e, q, scales, qt, scales_t, Fp8Layout::kTile128x128,
                                         "fp8::TransposeTiles");
  float* lt = CheckLt(e, lt_scales, true, C, R, "fp8::TransposeTiles");
  const uint8_t* qp = Codes(q);
  uint8_t* qtp = Codes(qt);
  const float* sp = scales.data<float>();
  float* stp = scales_t.data<float>();
  if (e.is_cuda()) {
    cuda::TransposeTiles(qp, sp, R, C, qtp, stp, lt, e.stream);
    return;
  }
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c) qtp[c * R + r] = qp[r * C + c];
  const int64_t rb = Fp8NumBlocks(R), cb = Fp8NumBlocks(C);
  for (int64_t i = 0; i < rb; ++i)
    for (int64_t j = 0; j < cb; ++j) stp[j * rb + i] = sp[i * cb + j];
  WriteLt(stp, true, C, R, lt);
}

}  // namespace gtp::kernels::fp8
