// CheckWgmmaGemm (block_gemm.h): our own FP8 GEMM against a double reference
// on the host, on the device it is about to train on.
//
// Two problems, each a linear's GEMM as the fp8 linears call it: the forward
// (a 1×128 · b 128×128 into a bf16 y) and the wgrad (1×128 · 1×128 into an
// f32 y with beta 1, the gradient accumulation). M = N = 256 (2 × 2 tiles) and
// K = 1024 (8 K blocks: more than the kernel's 6 stages, so each is reused).
// The data vary their magnitude by block (2^-3 … 2^3), so a scale applied to
// the wrong row, column or K block is off by far more than the bound. The
// operands are quantised on the device (the CUDA quantisers, bit-identical
// to the CPU's: block_quant_gpu_test) and read back, and the reference sums
// their exact dequantised values in double. Bound per element, as
// block_gemm_gpu_test.cc derives it: γ·S with γ = 128·2⁻¹³ + (nb + 2)·2⁻²⁴ +
// K·2⁻⁵² (the tensor cores' partial sums within a K block carry about 14
// bits), S = Σ_k |da_k·db_k|; + one rounding of y0's sum (2⁻²³·(|ref| + S +
// |y0|)); + a bf16 ulp of the result for a bf16 y.
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/cuda_runtime.h"
#include "core/dtype.h"
#include "core/kernels/fp8/block_gemm.h"
#include "core/kernels/fp8/block_quant.h"
#include "core/kernels/fp8/wgmma_gemm_cuda.h"
#include "core/status.h"

namespace gtp::kernels::fp8 {
namespace {

constexpr int64_t kM = 256, kN = 256, kK = 1024;

// Deterministic values in ±[0, 1) times a power of two per 16 rows and 128
// columns.
std::vector<float> Blocky(int64_t R, int64_t C, uint32_t seed) {
  std::vector<float> v(static_cast<size_t>(R * C));
  uint32_t h = seed * 2654435761u + 12345u;
  for (int64_t r = 0; r < R; ++r) {
    for (int64_t c = 0; c < C; ++c) {
      h = h * 1664525u + 1013904223u;
      const float u = static_cast<float>(h >> 8) * 0x1p-24f * 2.0f - 1.0f;
      const int e = static_cast<int>((r / 16 + 3 * (c / 128) + seed) % 7) - 3;
      v[static_cast<size_t>(r * C + c)] = std::ldexp(u, e);
    }
  }
  return v;
}

absl::Status ToDevice(const Exec& e, const std::vector<float>& v, const Tensor& t) {
  return CudaStatus(cudaMemcpyAsync(t.raw_data(), v.data(), v.size() * sizeof(float),
                                    cudaMemcpyHostToDevice, e.stream),
                    "fp8::CheckWgmmaGemm: copy to the device");
}

template <typename T>
absl::Status ToHost(const Exec& e, const Tensor& t, std::vector<T>* v) {
  v->resize(static_cast<size_t>(t.nbytes() / sizeof(T)));
  GTP_RETURN_IF_ERROR(CudaStatus(
      cudaMemcpyAsync(v->data(), t.raw_data(), t.nbytes(), cudaMemcpyDeviceToHost, e.stream),
      "fp8::CheckWgmmaGemm: copy to the host"));
  return CudaStatus(cudaStreamSynchronize(e.stream), "fp8::CheckWgmmaGemm: synchronise");
}

// An operand quantised on the device, and its exact values on the host.
struct Operand {
  Fp8Matrix m;
  std::vector<double> deq;
};

absl::StatusOr<Operand> Quantized(const Exec& e, int64_t R, int64_t C, Fp8Layout l, uint32_t seed) {
  Operand o;
  const Tensor x = e.Empty({R, C});
  GTP_RETURN_IF_ERROR(ToDevice(e, Blocky(R, C, seed), x));
  o.m = {e.Empty({R, C}, DType::kF8E4M3), e.Empty(Fp8ScaleShape(R, C, l)), l};
  QuantizeBlocks(e, x, l, o.m.q, o.m.scales);
  std::vector<uint8_t> q;
  std::vector<float> s;
  GTP_RETURN_IF_ERROR(ToHost(e, o.m.q, &q));
  GTP_RETURN_IF_ERROR(ToHost(e, o.m.scales, &s));
  const int64_t cb = Fp8NumBlocks(C);
  o.deq.resize(static_cast<size_t>(R * C));
  for (int64_t r = 0; r < R; ++r) {
    for (int64_t c = 0; c < C; ++c) {
      const float scale = s[(l == Fp8Layout::kRow1x128 ? r : r / kFp8Block) * cb + c / kFp8Block];
      o.deq[r * C + c] = static_cast<double>(E4M3BitsToF32(q[r * C + c])) * scale;
    }
  }
  return o;
}

// y = a·bᵀ (+ y0 with beta 1) through the wgmma kernel, against the reference.
absl::Status CheckCase(const Exec& e, const char* name, const Operand& a, const Operand& b,
                       DType y_type, bool beta_one) {
  std::vector<float> y0(static_cast<size_t>(kM * kN), 0.0f);
  const Tensor y = e.Empty({kM, kN}, y_type);
  if (beta_one) {
    y0 = Blocky(kM, kN, 9);
    for (float& v : y0) v *= 64.0f;  // about the outputs' size
    if (y_type != DType::kF32) {
      return absl::InternalError("fp8::CheckWgmmaGemm: beta 1 is checked with an f32 y only");
    }
    GTP_RETURN_IF_ERROR(ToDevice(e, y0, y));
  }
  BlockScaledGemm(e, a.m, b.m, y, beta_one ? 1.0f : 0.0f, Tensor(), Fp8GemmEngine::kWgmma);
  std::vector<float> got(static_cast<size_t>(kM * kN));
  if (y_type == DType::kF32) {
    GTP_RETURN_IF_ERROR(ToHost(e, y, &got));
  } else {
    std::vector<uint16_t> bits;
    GTP_RETURN_IF_ERROR(ToHost(e, y, &bits));
    for (size_t i = 0; i < bits.size(); ++i) got[i] = BF16BitsToF32(bits[i]);
  }
  const double gamma = 128 * 0x1p-13 + (Fp8NumBlocks(kK) + 2) * 0x1p-24 + kK * 0x1p-52;
  const double ulp = y_type == DType::kBF16 ? 0x1p-8 : 0.0;
  for (int64_t m = 0; m < kM; ++m) {
    for (int64_t n = 0; n < kN; ++n) {
      double ref = 0, S = 0;
      for (int64_t k = 0; k < kK; ++k) {
        const double p = a.deq[m * kK + k] * b.deq[n * kK + k];
        ref += p;
        S += std::fabs(p);
      }
      const double v0 = y0[m * kN + n];
      const double add = beta_one ? 0x1p-23 * (std::fabs(ref) + S + std::fabs(v0)) : 0.0;
      ref += v0;
      const double bound = gamma * S + add + ulp * (std::fabs(ref) + gamma * S + add);
      const double v = got[m * kN + n];
      if (!(std::fabs(v - ref) <= bound)) {  // NaN fails
        return absl::FailedPreconditionError(absl::StrCat(
            "fp8::CheckWgmmaGemm: gtp's wgmma FP8 GEMM gave a wrong result on this GPU (", name,
            ", M=", kM, " N=", kN, " K=", kK, "): y[", m, "][", n, "] = ", v, ", reference ", ref,
            ", |Δ| ", std::fabs(v - ref), " > bound ", bound));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckWgmmaGemm(const Exec& e) {
  if (!e.is_cuda() || e.blas == nullptr) {
    return absl::InvalidArgumentError("fp8::CheckWgmmaGemm needs a CUDA Exec with a BlasContext");
  }
  if (!cuda::WgmmaGemmSupported(e.device.index)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "gtp's wgmma FP8 GEMM runs on compute capability 9.0 (H100, H200) only; device ",
        e.device.index, " is another"));
  }
  const Fp8Layout rows = Fp8Layout::kRow1x128, tiles = Fp8Layout::kTile128x128;
  GTP_ASSIGN_OR_RETURN(const Operand x, Quantized(e, kM, kK, rows, 1));
  GTP_ASSIGN_OR_RETURN(const Operand w, Quantized(e, kN, kK, tiles, 2));
  GTP_ASSIGN_OR_RETURN(const Operand xt, Quantized(e, kN, kK, rows, 3));
  GTP_RETURN_IF_ERROR(CheckCase(e, "forward: a 1x128, b 128x128, bf16 y", x, w, DType::kBF16,
                                /*beta_one=*/false));
  GTP_RETURN_IF_ERROR(CheckCase(e, "wgrad: a 1x128, b 1x128, f32 y += a·bᵀ", x, xt, DType::kF32,
                                /*beta_one=*/true));
  return absl::OkStatus();
}

}  // namespace gtp::kernels::fp8
