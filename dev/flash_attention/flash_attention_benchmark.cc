// Fused bf16 flash attention vs the GEMM-based f32 attention (cuBLASLt +
// causal-softmax row kernels, T×T probabilities materialised).
//   tools/gpu.sh bundle //dev/flash_attention:flash_attention_benchmark
//   bash tools/gpu.sh run dev_flash_attention_flash_attention_benchmark
// Times each call with CUDA events after 5 warm-up calls; prints the median of
// 30. Causal FLOPs: forward 2·B·NH·T²·HS (QKᵀ and PV over the lower triangle),
// backward 2.5× that. Also prints ‖flash − gemm‖/‖gemm‖ of out and dq/dk/dv at
// the benchmark size, as a sanity check of the timed kernels.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <vector>

#include "core/cuda_runtime.h"
#include "core/dtype.h"
#include "core/kernels/cuda.h"
#include "core/philox.h"
#include "dev/flash_attention/variants.h"

namespace gtp::kernels {
namespace {

constexpr int kWarmup = 5, kReps = 30;

struct Config {
  int64_t B, T, NH, NKV, HS;
};

template <typename T>
T* Alloc(int64_t n) {
  void* p = nullptr;
  GTP_CUDA_CHECK(cudaMalloc(&p, std::max<int64_t>(n, 1) * sizeof(T)));
  return static_cast<T*>(p);
}

// Median milliseconds of kReps calls of f on stream, each timed by events.
double MedianMs(const std::function<void()>& f, cudaStream_t stream) {
  cudaEvent_t a, b;
  GTP_CUDA_CHECK(cudaEventCreate(&a));
  GTP_CUDA_CHECK(cudaEventCreate(&b));
  for (int i = 0; i < kWarmup; ++i) f();
  std::vector<double> ms;
  for (int i = 0; i < kReps; ++i) {
    GTP_CUDA_CHECK(cudaEventRecord(a, stream));
    f();
    GTP_CUDA_CHECK(cudaEventRecord(b, stream));
    GTP_CUDA_CHECK(cudaEventSynchronize(b));
    float t = 0;
    GTP_CUDA_CHECK(cudaEventElapsedTime(&t, a, b));
    ms.push_back(t);
  }
  GTP_CUDA_CHECK(cudaGetLastError());
  std::sort(ms.begin(), ms.end());
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return ms[ms.size() / 2];
}

double RelErr(const std::vector<float>& x, const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    num += (double(x[i]) - ref[i]) * (double(x[i]) - ref[i]);
    den += double(ref[i]) * ref[i];
  }
  return std::sqrt(num / den);
}

std::vector<float> Download(const float* d, int64_t n) {
  std::vector<float> h(n);
  GTP_CUDA_CHECK(cudaMemcpy(h.data(), d, n * 4, cudaMemcpyDeviceToHost));
  return h;
}

void Run(const Config& c, cuda::BlasContext& ctx, cudaStream_t stream) {
  const int64_t nq = c.B * c.T * c.NH * c.HS, nkv = c.B * c.T * c.NKV * c.HS;
  const int64_t rows = c.B * c.NH * c.T, natt = rows * c.T;
  const double fwd_flop = 2.0 * c.B * c.NH * c.T * c.T * c.HS, bwd_flop = 2.5 * fwd_flop;

  // Inputs: N(0, 1) rounded to bf16; the f32 path gets the same values.
  std::vector<float> h[4];
  const int64_t sizes[4] = {nq, nkv, nkv, nq};  // q, k, v, dout
  for (int i = 0; i < 4; ++i) {
    h[i].resize(sizes[i]);
    for (int64_t j = 0; j < sizes[i]; ++j) h[i][j] = ToF32(ToBF16(PhiloxNormal(100 + i, j)));
  }
  bf16* in16[4];
  float* in32[4];
  for (int i = 0; i < 4; ++i) {
    std::vector<bf16> b(sizes[i]);
    for (int64_t j = 0; j < sizes[i]; ++j) b[j] = ToBF16(h[i][j]);
    in16[i] = Alloc<bf16>(sizes[i]);
    in32[i] = Alloc<float>(sizes[i]);
    GTP_CUDA_CHECK(cudaMemcpy(in16[i], b.data(), sizes[i] * 2, cudaMemcpyHostToDevice));
    GTP_CUDA_CHECK(cudaMemcpy(in32[i], h[i].data(), sizes[i] * 4, cudaMemcpyHostToDevice));
  }
  bf16 *out = Alloc<bf16>(nq), *dq = Alloc<bf16>(nq), *dk = Alloc<bf16>(nkv), *dv = Alloc<bf16>(nkv);
  float* lse = Alloc<float>(rows);
  // The variants need more scratch than the shipped path (fused-dq slots).
  void* scratch = Alloc<uint8_t>(std::max(
      cuda::FlashAttentionBackwardScratchBytes(c.B, c.T, c.NH, c.NKV, c.HS),
      cuda::FlashAttentionBackwardVariantScratchBytes(c.B, c.T, c.NH, c.HS)));

  auto fwd = [&] {
    cuda::FlashAttentionForward(in16[0], in16[1], in16[2], out, lse, c.B, c.T, c.NH, c.NKV, c.HS,
                                stream);
  };
  auto bwd = [&] {
    cuda::FlashAttentionBackward(in16[3], in16[0], in16[1], in16[2], out, lse, dq, dk, dv, scratch,
                                 c.B, c.T, c.NH, c.NKV, c.HS, stream);
  };
  bf16 *dq_old = Alloc<bf16>(nq), *dk_old = Alloc<bf16>(nkv), *dv_old = Alloc<bf16>(nkv);
  auto bwd_old = [&] {
    cuda::FlashAttentionBackwardSeparateDq(in16[3], in16[0], in16[1], in16[2], out, lse, dq_old,
                                           dk_old, dv_old, scratch, c.B, c.T, c.NH, c.NKV, c.HS,
                                           stream);
  };
  // Side by side: shipped (new), old (three kernels), again (the second pair shows the spread).
  const double f_ms = MedianMs(fwd, stream), b_ms = MedianMs(bwd, stream),
               bo_ms = MedianMs(bwd_old, stream), b2_ms = MedianMs(bwd, stream),
               bo2_ms = MedianMs(bwd_old, stream);

  // GEMM baseline (f32).
  float *out32 = Alloc<float>(nq), *dq32 = Alloc<float>(nq), *dk32 = Alloc<float>(nkv),
        *dv32 = Alloc<float>(nkv), *att = Alloc<float>(natt), *gscratch = Alloc<float>(natt);
  auto gfwd = [&] {
    cuda::AttentionForwardGemm(ctx, in32[0], in32[1], in32[2], out32, att, c.B, c.T, c.NH, c.NKV,
                               c.HS, stream);
  };
  auto gbwd = [&] {
    cuda::AttentionBackwardGemm(ctx, in32[3], in32[0], in32[1], in32[2], att, dq32, dk32, dv32,
                                gscratch, c.B, c.T, c.NH, c.NKV, c.HS, stream);
  };
  const double gf_ms = MedianMs(gfwd, stream), gb_ms = MedianMs(gbwd, stream);

  // Agreement of the two at this size (flash bf16 outputs widened to f32).
  float* tmp = Alloc<float>(nq);
  auto err = [&](const bf16* x, const float* ref, int64_t n) {
    cuda::CastBF16ToF32(x, tmp, n, stream);
    GTP_CUDA_CHECK(cudaStreamSynchronize(stream));
    return RelErr(Download(tmp, n), Download(ref, n));
  };
  const double e_out = err(out, out32, nq), e_dq = err(dq, dq32, nq), e_dk = err(dk, dk32, nkv),
               e_dv = err(dv, dv32, nkv);
  const double eo_dq = err(dq_old, dq32, nq), eo_dk = err(dk_old, dk32, nkv),
               eo_dv = err(dv_old, dv32, nkv);

  std::printf("B=%lld T=%lld NH=%lld NKV=%lld HS=%lld\n", (long long)c.B, (long long)c.T,
              (long long)c.NH, (long long)c.NKV, (long long)c.HS);
  std::printf("  flash bf16  fwd %8.3f ms %7.1f TFLOP/s   bwd %8.3f ms %7.1f TFLOP/s\n", f_ms,
              fwd_flop / f_ms * 1e-9, b_ms, bwd_flop / b_ms * 1e-9);
  std::printf("  bwd new     %8.3f ms %7.1f TFLOP/s (again %8.3f ms)\n", b_ms,
              bwd_flop / b_ms * 1e-9, b2_ms);
  std::printf("  bwd old     %8.3f ms %7.1f TFLOP/s (again %8.3f ms)  new/old %.3f\n", bo_ms,
              bwd_flop / bo_ms * 1e-9, bo2_ms, (b_ms + b2_ms) / (bo_ms + bo2_ms));
  std::printf("  old rel diff vs gemm: dq %.2e dk %.2e dv %.2e\n", eo_dq, eo_dk, eo_dv);
  if (c.HS == 64) {
    for (int mode : {0, 1, 2, 3, 4, 6, 8, 9, 10, 11, 12, 10, 9}) {
      auto f = [&] {
        cuda::FlashAttentionBackwardFusedDqVariant(mode, in16[3], in16[0], in16[1], in16[2], out,
                                                   lse, dq_old, dk_old, dv_old, scratch, c.B, c.T,
                                                   c.NH, c.NKV, c.HS, stream);
      };
      const double ms = MedianMs(f, stream);
      std::printf("  variant %d   %8.3f ms %7.1f TFLOP/s  dq rel diff vs gemm %.2e\n", mode, ms,
                  bwd_flop / ms * 1e-9, err(dq_old, dq32, nq));
    }
  }
  if (c.HS == 128) {
    auto f = [&] {
      cuda::FlashAttentionBackwardFusedDqVariant(7, in16[3], in16[0], in16[1], in16[2], out, lse,
                                                 dq_old, dk_old, dv_old, scratch, c.B, c.T, c.NH,
                                                 c.NKV, c.HS, stream);
    };
    const double ms = MedianMs(f, stream);
    std::printf("  variant 7   %8.3f ms %7.1f TFLOP/s  dq rel diff vs gemm %.2e\n", ms,
                bwd_flop / ms * 1e-9, err(dq_old, dq32, nq));
  }
  std::printf("  gemm  f32   fwd %8.3f ms %7.1f TFLOP/s   bwd %8.3f ms %7.1f TFLOP/s\n", gf_ms,
              fwd_flop / gf_ms * 1e-9, gb_ms, bwd_flop / gb_ms * 1e-9);
  std::printf("  speed-up    fwd %.2fx  bwd %.2fx   rel diff vs gemm: out %.2e dq %.2e dk %.2e dv %.2e\n",
              gf_ms / f_ms, gb_ms / b_ms, e_out, e_dq, e_dk, e_dv);
  std::fflush(stdout);

  for (void* p : {(void*)out, (void*)dq, (void*)dk, (void*)dv, (void*)lse, scratch, (void*)out32,
                  (void*)dq32, (void*)dk32, (void*)dv32, (void*)att, (void*)gscratch, (void*)tmp, (void*)dq_old, (void*)dk_old,
                  (void*)dv_old}) {
    GTP_CUDA_CHECK(cudaFree(p));
  }
  for (int i = 0; i < 4; ++i) {
    GTP_CUDA_CHECK(cudaFree(in16[i]));
    GTP_CUDA_CHECK(cudaFree(in32[i]));
  }
}

}  // namespace
}  // namespace gtp::kernels

int main() {
  if (gtp::CudaDeviceCount() == 0) {
    std::printf("flash_attention_benchmark: no GPU (%s)\n", gtp::NoGpuReason().c_str());
    return 0;
  }
  GTP_CUDA_CHECK(cudaSetDevice(0));
  cudaStream_t stream;
  GTP_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  gtp::kernels::cuda::BlasContext ctx(0);
  const gtp::kernels::Config configs[] = {
      {8, 1024, 12, 12, 64},   // GPT-2 124M
      {4, 2048, 16, 16, 128},  // HS 128
      {4, 2048, 16, 4, 128},   // GQA 4:1
  };
  for (const auto& c : configs) gtp::kernels::Run(c, ctx, stream);
  GTP_CUDA_CHECK(cudaStreamDestroy(stream));
  return 0;
}
