// The block-scaled FP8 GEMM (block_gemm.h): the argument checks, the CPU
// reference, and the dispatch to cuBLASLt or our own kernel
// (block_gemm_cuda.cc) on a CUDA Exec. The CPU's loop order and rounding are those of
// block_scale.h's design note: per output element, per K block in ascending order, the f32 sum of
// the exact code products (k ascending), scaled by the f32 product of the two block scales and
// added to an f32 accumulator (rounded once to bf16 for a bf16 y).
#include "core/kernels/fp8/block_gemm.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/kernels/cuda.h"
#include "core/kernels/fp8/block_gemm_cuda.h"
#include "core/kernels/fp8/internal.h"
#include "core/status.h"

namespace gtp::kernels::fp8 {
namespace {

// Checks one operand and returns its rows; k is its columns.
int64_t CheckOperand(const Exec& e, const Fp8Matrix& m, const char* op, const char* what) {
  internal::CheckOn(e, m.q, op, what);
  GTP_CHECK(m.q.rank() == 2, op, ": ", what, ".q must be a matrix, got ", m.q.ToString());
  const int64_t rows = m.q.dim(0), k = m.q.dim(1);
  internal::CheckCodes(e, m.q, rows, k, op, what);
  internal::CheckScales(e, m.scales, Fp8ScaleShape(rows, k, m.layout), op, what);
  return rows;
}

// The offset of row r's scales in an operand's scale matrix (ceil(K/128) per row).
int64_t ScaleRow(const Fp8Matrix& m, int64_t r, int64_t kb) {
  return (m.layout == Fp8Layout::kRow1x128 ? r : r / kFp8Block) * kb;
}

}  // namespace

void BlockScaledGemm(const Exec& e, const Fp8Matrix& a, const Fp8Matrix& b, const Tensor& y,
                     float beta, const Tensor& bias, Fp8GemmEngine engine) {
  const char* op = "fp8::BlockScaledGemm";
  const int64_t M = CheckOperand(e, a, op, "a");
  const int64_t N = CheckOperand(e, b, op, "b");
  const int64_t K = a.q.dim(1);
  GTP_CHECK(b.q.dim(1) == K, op, ": a ", a.q.ToString(), " and b ", b.q.ToString(),
            " differ in K");
  internal::CheckOn(e, y, op, "y");
  GTP_CHECK((y.dtype() == DType::kF32 || y.dtype() == DType::kBF16) && y.shape() == Shape({M, N}),
            op, ": y must be f32 or bf16 [", M, ", ", N, "], got ", y.ToString());
  if (bias.defined()) {
    internal::CheckOn(e, bias, op, "bias");
    GTP_CHECK(bias.dtype() == y.dtype() && bias.shape() == Shape({N}), op, ": bias must be ",
              DTypeName(y.dtype()), "[", N, "] (y's dtype, one per column), got ",
              bias.ToString());
    GTP_CHECK(beta == 0.0f, op, ": a bias with beta ", beta, " (only 0) is not supported");
  }
  if (e.is_cuda()) {
    if (engine == Fp8GemmEngine::kWgmma ||
        (engine == Fp8GemmEngine::kContext && e.blas != nullptr && e.blas->fp8_wgmma())) {
      internal::BlockScaledGemmWgmma(e, a, b, y, beta, bias);
    } else {
      internal::BlockScaledGemmCuda(e, a, b, y, beta, bias);
    }
    return;
  }
  const uint8_t* qa = static_cast<const uint8_t*>(a.q.raw_data());
  const uint8_t* qb = static_cast<const uint8_t*>(b.q.raw_data());
  const float* sa = a.scales.data<float>();
  const float* sb = b.scales.data<float>();
  float* yf = y.dtype() == DType::kF32 ? y.data<float>() : nullptr;
  bf16* yb = yf == nullptr ? static_cast<bf16*>(y.raw_data()) : nullptr;
  const int64_t kb = Fp8NumBlocks(K);
  // Every code decoded once (exact: e4m3 ⊂ f32).
  std::vector<float> da(static_cast<size_t>(M * K)), db(static_cast<size_t>(N * K));
  for (int64_t i = 0; i < M * K; ++i) da[i] = E4M3BitsToF32(qa[i]);
  for (int64_t i = 0; i < N * K; ++i) db[i] = E4M3BitsToF32(qb[i]);
  for (int64_t m = 0; m < M; ++m) {
    const float* ar = da.data() + m * K;
    const float* as = sa + ScaleRow(a, m, kb);
    for (int64_t n = 0; n < N; ++n) {
      const float* br = db.data() + n * K;
      const float* bs = sb + ScaleRow(b, n, kb);
      float acc = 0.0f;
      for (int64_t blk = 0; blk < kb; ++blk) {
        const int64_t k0 = blk * kFp8Block, k1 = std::min(K, k0 + kFp8Block);
        float partial = 0.0f;
        for (int64_t k = k0; k < k1; ++k) partial += ar[k] * br[k];  // products exact in f32
        acc += partial * (as[blk] * bs[blk]);
      }
      // beta·y (or the bias) added to the f32 sum before the one rounding
      // (as cuBLASLt's epilogue: alpha·acc + beta·C, + bias, in f32).
      if (bias.defined()) acc += internal::LoadF32(bias.raw_data(), bias.dtype(), n);
      if (yf != nullptr) {
        yf[m * N + n] = beta == 0.0f ? acc : acc + beta * yf[m * N + n];
      } else {
        const float old = beta == 0.0f ? 0.0f : beta * BF16BitsToF32(yb[m * N + n].bits);
        yb[m * N + n].bits = F32ToBF16Bits(acc + old);
      }
    }
  }
}

}  // namespace gtp::kernels::fp8
