// core/kernels/ops/attention.cc — Dispatch of the unfused f32 attention with
// its [B, NH, T, T] probabilities (cpu/attention.cc, cuda/attention_gemm.cc),
// forward and backward.
#include "core/kernels/cpu.h"
#include "core/kernels/cuda.h"
#include "core/kernels/ops.h"
#include "core/kernels/ops/internal/dispatch.h"
#include "core/status.h"

namespace gtp::kernels::ops {

using internal::Blas;
using internal::CheckOn;
using internal::F;
using internal::M;
using internal::OnDevice;

void AttentionForward(const Exec& e, const Tensor& q, const Tensor& k, const Tensor& v,
                      const Tensor& out, const Tensor& att, bool causal) {
  CheckOn(e, q, "q");
  const int64_t B = q.dim(0), T = q.dim(1), NH = q.dim(2), HS = q.dim(3), NKV = k.dim(2);
  GTP_CHECK(att.numel() == B * NH * T * T, "AttentionForward: att ", att.ToString());
  OnDevice(
      e,
      [&] { cpu::AttentionForward(F(q), F(k), F(v), M(out), M(att), B, T, NH, NKV, HS, causal); },
      [&] {
        cuda::AttentionForwardGemm(Blas(e), F(q), F(k), F(v), M(out), M(att), B, T, NH, NKV, HS,
                                   e.stream, causal);
      });
}

void AttentionBackward(const Exec& e, const Tensor& dout, const Tensor& q, const Tensor& k,
                       const Tensor& v, const Tensor& att, const Tensor& dq, const Tensor& dk,
                       const Tensor& dv, bool causal) {
  CheckOn(e, dout, "dout");
  const int64_t B = q.dim(0), T = q.dim(1), NH = q.dim(2), HS = q.dim(3), NKV = k.dim(2);
  Tensor scratch = e.Empty({B * NH * T * T});
  OnDevice(
      e,
      [&] {
        cpu::AttentionBackward(F(dout), F(q), F(k), F(v), F(att), M(dq), M(dk), M(dv), M(scratch),
                               B, T, NH, NKV, HS, causal);
      },
      [&] {
        cuda::AttentionBackwardGemm(Blas(e), F(dout), F(q), F(k), F(v), F(att), M(dq), M(dk), M(dv),
                                    M(scratch), B, T, NH, NKV, HS, e.stream, causal);
      });
}

}  // namespace gtp::kernels::ops
