// cuDNN graph-API fused attention vs our FlashAttention-2 kernels, bf16 causal.
//   tools/gpu.sh bundle //dev/cudnn_attention:cudnn_attention_benchmark
//   bash tools/gpu.sh run dev_cudnn_attention_cudnn_attention_benchmark
// Each call timed by CUDA events after 5 warm-up calls; median of 30.
// Causal FLOPs as in dev/flash_attention: forward 2·B·NH·T²·HS, backward 2.5×.
// Inputs N(0, 1) in bf16, two input sets alternated so no two calls in a row
// read the same buffers from L2.
#include <cuda_runtime_api.h>
#include <cudnn_version.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <memory>
#include <tuple>
#include <vector>

#include "core/cuda_runtime.h"
#include "core/dtype.h"
#include "core/kernels/cuda.h"
#include "core/philox.h"
#include "core/kernels/cuda/cudnn_attention.h"

namespace gtp::kernels {
namespace {

using cuda::AttentionShape;
constexpr int kWarmup = 5, kReps = 30;

template <typename T>
T* Alloc(int64_t n) {
  void* p = nullptr;
  GTP_CUDA_CHECK(cudaMalloc(&p, std::max<int64_t>(n, 1) * sizeof(T)));
  return static_cast<T*>(p);
}

double MedianMs(const std::function<void(int)>& f, cudaStream_t stream) {
  cudaEvent_t a, b;
  GTP_CUDA_CHECK(cudaEventCreate(&a));
  GTP_CUDA_CHECK(cudaEventCreate(&b));
  for (int i = 0; i < kWarmup; ++i) f(i);
  std::vector<double> ms;
  for (int i = 0; i < kReps; ++i) {
    GTP_CUDA_CHECK(cudaEventRecord(a, stream));
    f(i);
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

struct Set {
  bf16 *q, *k, *v, *dout, *out, *dq, *dk, *dv;
  float* lse;
};

void Run(const AttentionShape& s, cuda::CudnnAttention& det, cuda::CudnnAttention& nondet,
         cudaStream_t stream) {
  const int64_t nq = s.B * s.T * s.NH * s.HS, nkv = s.B * s.T * s.NKV * s.HS,
                rows = s.B * s.NH * s.T;
  const double fwd_flop = 2.0 * s.B * s.NH * s.T * s.T * s.HS, bwd_flop = 2.5 * fwd_flop;
  Set sets[2];
  for (int i = 0; i < 2; ++i) {
    Set& x = sets[i];
    bf16** ins[4] = {&x.q, &x.k, &x.v, &x.dout};
    const int64_t n[4] = {nq, nkv, nkv, nq};
    for (int j = 0; j < 4; ++j) {
      std::vector<bf16> h(n[j]);
      for (int64_t e = 0; e < n[j]; ++e) h[e] = ToBF16(PhiloxNormal(200 + 10 * i + j, e));
      *ins[j] = Alloc<bf16>(n[j]);
      GTP_CUDA_CHECK(cudaMemcpy(*ins[j], h.data(), n[j] * 2, cudaMemcpyHostToDevice));
    }
    x.out = Alloc<bf16>(nq);
    x.dq = Alloc<bf16>(nq);
    x.dk = Alloc<bf16>(nkv);
    x.dv = Alloc<bf16>(nkv);
    x.lse = Alloc<float>(rows);
  }
  auto ws_or = [](absl::StatusOr<int64_t> w) {
    GTP_CHECK_OK(w.status());
    return *w;
  };
  const int64_t ws_f = ws_or(det.ForwardWorkspaceBytes(s)),
                ws_b = ws_or(det.BackwardWorkspaceBytes(s));
  absl::StatusOr<int64_t> ws_nd_or = nondet.BackwardWorkspaceBytes(s);
  const int64_t ws_nd = ws_nd_or.ok() ? *ws_nd_or : 0;
  const int64_t ws_bytes = std::max({ws_f, ws_b, ws_nd});
  void* ws = Alloc<uint8_t>(ws_bytes);
  void* scratch =
      Alloc<uint8_t>(cuda::FlashAttentionBackwardScratchBytes(s.B, s.T, s.NH, s.NKV, s.HS));

  auto c_fwd = [&](int i) {
    const Set& x = sets[i & 1];
    GTP_CHECK_OK(det.Forward(x.q, x.k, x.v, x.out, x.lse, s, ws, ws_bytes, stream));
  };
  auto c_bwd = [&](int i) {
    const Set& x = sets[i & 1];
    GTP_CHECK_OK(det.Backward(x.dout, x.q, x.k, x.v, x.out, x.lse, x.dq, x.dk, x.dv, s, ws,
                              ws_bytes, stream));
  };
  auto c_bwd_nd = [&](int i) {
    const Set& x = sets[i & 1];
    GTP_CHECK_OK(nondet.Backward(x.dout, x.q, x.k, x.v, x.out, x.lse, x.dq, x.dk, x.dv, s, ws,
                                 ws_bytes, stream));
  };
  auto o_fwd = [&](int i) {
    const Set& x = sets[i & 1];
    cuda::FlashAttentionForward(x.q, x.k, x.v, x.out, x.lse, s.B, s.T, s.NH, s.NKV, s.HS, stream);
  };
  auto o_bwd = [&](int i) {
    const Set& x = sets[i & 1];
    cuda::FlashAttentionBackward(x.dout, x.q, x.k, x.v, x.out, x.lse, x.dq, x.dk, x.dv, scratch,
                                 s.B, s.T, s.NH, s.NKV, s.HS, stream);
  };
  // Forward first on both sets so backward reads valid out/lse.
  for (int i = 0; i < 2; ++i) c_fwd(i);
  const double cf = MedianMs(c_fwd, stream), cb = MedianMs(c_bwd, stream);
  const double cbn = ws_nd_or.ok() ? MedianMs(c_bwd_nd, stream) : -1;
  const double of = MedianMs(o_fwd, stream), ob = MedianMs(o_bwd, stream);
  const double cf2 = MedianMs(c_fwd, stream), cb2 = MedianMs(c_bwd, stream);
  const double of2 = MedianMs(o_fwd, stream), ob2 = MedianMs(o_bwd, stream);
  auto tf = [](double flop, double ms) { return flop / ms * 1e-9; };
  std::printf(
      "B=%lld T=%lld NH=%lld NKV=%lld HS=%lld  (fwd engine %lld ws %lld B, bwd engine %lld "
      "ws %lld B, non-det bwd engine %lld ws %lld B)\n",
      (long long)s.B, (long long)s.T, (long long)s.NH, (long long)s.NKV, (long long)s.HS,
      (long long)det.ForwardEngine(s), (long long)ws_f, (long long)det.BackwardEngine(s),
      (long long)ws_b, (long long)nondet.BackwardEngine(s), (long long)ws_nd);
  std::printf(
      "  cudnn  fwd %7.3f ms %6.1f TF (again %7.3f)  bwd(det) %7.3f ms %6.1f TF (again "
      "%7.3f)  bwd(non-det) %7.3f ms %6.1f TF\n",
      cf, tf(fwd_flop, cf), cf2, cb, tf(bwd_flop, cb), cb2, cbn, tf(bwd_flop, cbn));
  std::printf(
      "  ours   fwd %7.3f ms %6.1f TF (again %7.3f)  bwd      %7.3f ms %6.1f TF (again "
      "%7.3f)\n",
      of, tf(fwd_flop, of), of2, ob, tf(bwd_flop, ob), ob2);
  std::printf(
      "  TABLE %lld,%lld,%lld,%lld,%lld cudnn_fwd_ms=%.4f cudnn_bwd_ms=%.4f ours_fwd_ms=%.4f "
      "ours_bwd_ms=%.4f cudnn_fwd_tf=%.1f cudnn_bwd_tf=%.1f ours_fwd_tf=%.1f ours_bwd_tf=%.1f "
      "speedup_fwd=%.2f speedup_bwd=%.2f\n",
      (long long)s.B, (long long)s.T, (long long)s.NH, (long long)s.NKV, (long long)s.HS,
      std::min(cf, cf2), std::min(cb, cb2), std::min(of, of2), std::min(ob, ob2),
      tf(fwd_flop, std::min(cf, cf2)), tf(bwd_flop, std::min(cb, cb2)),
      tf(fwd_flop, std::min(of, of2)), tf(bwd_flop, std::min(ob, ob2)),
      std::min(of, of2) / std::min(cf, cf2), std::min(ob, ob2) / std::min(cb, cb2));
  std::fflush(stdout);
  for (Set& x : sets) {
    for (void* p : {(void*)x.q, (void*)x.k, (void*)x.v, (void*)x.dout, (void*)x.out, (void*)x.dq,
                    (void*)x.dk, (void*)x.dv, (void*)x.lse}) {
      GTP_CUDA_CHECK(cudaFree(p));
    }
  }
  GTP_CUDA_CHECK(cudaFree(ws));
  GTP_CUDA_CHECK(cudaFree(scratch));
}

// Times every engine config heuristics offer (k-th that finalizes) on one shape.
void Sweep(const AttentionShape& s, cudaStream_t stream) {
  const int64_t nq = s.B * s.T * s.NH * s.HS, nkv = s.B * s.T * s.NKV * s.HS,
                rows = s.B * s.NH * s.T;
  const double fwd_flop = 2.0 * s.B * s.NH * s.T * s.T * s.HS, bwd_flop = 2.5 * fwd_flop;
  bf16 *q = Alloc<bf16>(nq), *k = Alloc<bf16>(nkv), *v = Alloc<bf16>(nkv), *g = Alloc<bf16>(nq);
  for (auto [p, n, key] : {std::tuple{q, nq, 300}, {k, nkv, 301}, {v, nkv, 302}, {g, nq, 303}}) {
    std::vector<bf16> h(n);
    for (int64_t e = 0; e < n; ++e) h[e] = ToBF16(PhiloxNormal(key, e));
    GTP_CUDA_CHECK(cudaMemcpy(p, h.data(), n * 2, cudaMemcpyHostToDevice));
  }
  bf16 *out = Alloc<bf16>(nq), *dq = Alloc<bf16>(nq), *dk = Alloc<bf16>(nkv),
       *dv = Alloc<bf16>(nkv);
  float* lse = Alloc<float>(rows);
  for (bool det : {true, false}) {
    for (int choice = 0; choice < 8; ++choice) {
      absl::StatusOr<std::unique_ptr<cuda::CudnnAttention>> a = cuda::CudnnAttention::Create(0);
      GTP_CHECK_OK(a.status());
      (*a)->set_deterministic(det);
      (*a)->set_config_choice(choice);
      absl::StatusOr<int64_t> wf = (*a)->ForwardWorkspaceBytes(s),
                              wb = (*a)->BackwardWorkspaceBytes(s);
      if (!wf.ok() || !wb.ok()) {
        std::printf("  sweep %s choice %d: %s\n", det ? "det" : "non-det", choice,
                    (!wf.ok() ? wf.status() : wb.status()).ToString().c_str());
        break;
      }
      const int64_t wsb = std::max(*wf, *wb);
      void* ws = Alloc<uint8_t>(wsb);
      auto fwd = [&](int) { GTP_CHECK_OK((*a)->Forward(q, k, v, out, lse, s, ws, wsb, stream)); };
      auto bwd = [&](int) {
        GTP_CHECK_OK((*a)->Backward(g, q, k, v, out, lse, dq, dk, dv, s, ws, wsb, stream));
      };
      fwd(0);
      const double f = MedianMs(fwd, stream), b = MedianMs(bwd, stream);
      std::printf(
          "  sweep %s choice %d: fwd engine %lld %7.3f ms %6.1f TF | bwd engine %lld ws %lld "
          "%7.3f ms %6.1f TF\n",
          det ? "det" : "non-det", choice, (long long)(*a)->ForwardEngine(s), f,
          fwd_flop / f * 1e-9, (long long)(*a)->BackwardEngine(s), (long long)*wb, b,
          bwd_flop / b * 1e-9);
      std::fflush(stdout);
      GTP_CUDA_CHECK(cudaFree(ws));
    }
  }
  for (void* p : {(void*)q, (void*)k, (void*)v, (void*)g, (void*)out, (void*)dq, (void*)dk,
                  (void*)dv, (void*)lse}) {
    GTP_CUDA_CHECK(cudaFree(p));
  }
}

}  // namespace
}  // namespace gtp::kernels

int main() {
  using gtp::kernels::cuda::AttentionShape;
  using gtp::kernels::cuda::CudnnAttention;
  if (gtp::CudaDeviceCount() == 0) {
    std::printf("%s\n", gtp::NoGpuReason().c_str());
    return 0;
  }
  std::printf("cuDNN version %lld (headers %d.%d.%d)\n",
              (long long)gtp::kernels::cuda::CudnnVersion(), CUDNN_MAJOR, CUDNN_MINOR,
              CUDNN_PATCHLEVEL);
  absl::StatusOr<gtp::Stream> stream = gtp::Stream::Create(0);
  GTP_CHECK_OK(stream.status());
  absl::StatusOr<std::unique_ptr<CudnnAttention>> det = CudnnAttention::Create(0);
  GTP_CHECK_OK(det.status());
  absl::StatusOr<std::unique_ptr<CudnnAttention>> nondet = CudnnAttention::Create(0);
  GTP_CHECK_OK(nondet.status());
  (*nondet)->set_deterministic(false);
  const AttentionShape shapes[] = {{8, 1024, 12, 12, 64},
                                   {8, 1024, 16, 16, 64},
                                   {16, 1024, 12, 12, 64},
                                   {4, 2048, 16, 16, 128},
                                   {4, 2048, 16, 4, 128}};
  for (const AttentionShape& s : shapes) {
    gtp::kernels::Run(s, **det, **nondet, stream->get());
  }
  for (const AttentionShape& s : {shapes[0], shapes[3]}) {
    std::printf("engine-config sweep B=%lld T=%lld NH=%lld HS=%lld\n", (long long)s.B,
                (long long)s.T, (long long)s.NH, (long long)s.HS);
    gtp::kernels::Sweep(s, stream->get());
  }
  return 0;
}
