// core/kernels/ops/flash_attention.cc — Dispatch of the fused attention
// (cpu/flash_attention.cc f32/bf16; on CUDA the Exec's AttentionEngine when it
// takes the shape, else cuda/flash_attention.cu bf16), forward and backward.
#include "core/kernels/cpu.h"
#include "core/kernels/cuda.h"
#include "core/kernels/ops.h"
#include "core/kernels/ops/internal/dispatch.h"
#include "core/status.h"

namespace gtp::kernels::ops {

using internal::CheckOn;
using internal::F;
using internal::ForDType;
using internal::M;
using internal::OnDevice;

namespace {

// Shapes of the fused attention: q/out [B, T, NH, HS], k/v [B, T, NKV, HS], lse [B, NH, T] f32.
void CheckFlashShapes(const Exec& e, const char* what, const Tensor& q, const Tensor& k,
                      const Tensor& v, const Tensor& out, const Tensor& lse) {
  CheckOn(e, q, "q");
  CheckOn(e, k, "k");
  CheckOn(e, v, "v");
  CheckOn(e, out, "out");
  CheckOn(e, lse, "lse");
  GTP_CHECK(q.rank() == 4 && k.rank() == 4 && k.shape() == v.shape() && q.shape() == out.shape() &&
                k.dim(0) == q.dim(0) && k.dim(1) == q.dim(1) && k.dim(3) == q.dim(3) &&
                k.dim(2) >= 1 && q.dim(2) % k.dim(2) == 0,
            what, ": q ", q.ToString(), " k ", k.ToString(), " v ", v.ToString(), " out ",
            out.ToString());
  GTP_CHECK(lse.dtype() == DType::kF32 && lse.numel() == q.dim(0) * q.dim(2) * q.dim(1), what,
            ": lse ", lse.ToString());
  GTP_CHECK(k.dtype() == q.dtype() && v.dtype() == q.dtype() && out.dtype() == q.dtype(), what,
            ": q, k, v and out must share a dtype");
  if (e.is_cuda()) {
    GTP_CHECK(q.dtype() == DType::kBF16, what, ": CUDA supports bf16 only, got ",
              DTypeName(q.dtype()));
  } else {
    GTP_CHECK(q.dtype() == DType::kBF16 || q.dtype() == DType::kF32, what,
              ": CPU supports f32 and bf16, got ", DTypeName(q.dtype()));
  }
}

}  // namespace

void FlashAttentionForward(const Exec& e, const Tensor& q, const Tensor& k, const Tensor& v,
                           const Tensor& out, const Tensor& lse, bool causal) {
  CheckFlashShapes(e, "FlashAttentionForward", q, k, v, out, lse);
  const int64_t B = q.dim(0), T = q.dim(1), NH = q.dim(2), HS = q.dim(3), NKV = k.dim(2);
  OnDevice(
      e,
      [&] {
        ForDType(q.dtype(), [&](auto a) {
          cpu::FlashAttentionForward(a.In(q), a.In(k), a.In(v), a.Out(out), M(lse), B, T, NH, NKV,
                                     HS, causal);
        });
      },
      [&] {
        if (e.attention != nullptr) {
          const AttentionEngine::Shape s{B, T, NH, NKV, HS, causal};
          const int64_t bytes = e.attention->ForwardWorkspace(s);
          if (bytes >= 0) {
            Tensor ws = e.Empty({(bytes + 3) / 4 + 1});
            GTP_CHECK_OK(e.attention->Forward(q.data<bf16>(), k.data<bf16>(), v.data<bf16>(),
                                              out.data<bf16>(), M(lse), s, ws.raw_data(), bytes,
                                              e.stream));
            return;
          }
        }
        cuda::FlashAttentionForward(q.data<bf16>(), k.data<bf16>(), v.data<bf16>(),
                                    out.data<bf16>(), M(lse), B, T, NH, NKV, HS, e.stream, causal);
      });
}

void FlashAttentionBackward(const Exec& e, const Tensor& dout, const Tensor& q, const Tensor& k,
                            const Tensor& v, const Tensor& out, const Tensor& lse, const Tensor& dq,
                            const Tensor& dk, const Tensor& dv, bool causal) {
  CheckFlashShapes(e, "FlashAttentionBackward", q, k, v, out, lse);
  for (const Tensor* t : {&dout, &dq}) {
    CheckOn(e, *t, "dout/dq");
    GTP_CHECK(t->shape() == q.shape() && t->dtype() == q.dtype(),
              "FlashAttentionBackward: ", t->ToString(), " vs q ", q.ToString());
  }
  for (const Tensor* t : {&dk, &dv}) {
    CheckOn(e, *t, "dk/dv");
    GTP_CHECK(t->shape() == k.shape() && t->dtype() == k.dtype(),
              "FlashAttentionBackward: ", t->ToString(), " vs k ", k.ToString());
  }
  const int64_t B = q.dim(0), T = q.dim(1), NH = q.dim(2), HS = q.dim(3), NKV = k.dim(2);
  OnDevice(
      e,
      [&] {
        ForDType(q.dtype(), [&](auto a) {
          cpu::FlashAttentionBackward(a.In(dout), a.In(q), a.In(k), a.In(v), a.In(out), F(lse),
                                      a.Out(dq), a.Out(dk), a.Out(dv), B, T, NH, NKV, HS, causal);
        });
      },
      [&] {
        if (e.attention != nullptr) {
          const AttentionEngine::Shape s{B, T, NH, NKV, HS, causal};
          const int64_t bytes = e.attention->BackwardWorkspace(s);
          if (bytes >= 0) {
            Tensor ws = e.Empty({(bytes + 3) / 4 + 1});
            GTP_CHECK_OK(e.attention->Backward(dout.data<bf16>(), q.data<bf16>(), k.data<bf16>(),
                                               v.data<bf16>(), out.data<bf16>(), F(lse),
                                               dq.data<bf16>(), dk.data<bf16>(), dv.data<bf16>(), s,
                                               ws.raw_data(), bytes, e.stream));
            return;
          }
        }
        const int64_t bytes = cuda::FlashAttentionBackwardScratchBytes(B, T, NH, NKV, HS);
        Tensor scratch = e.Empty({(bytes + 3) / 4});
        cuda::FlashAttentionBackward(dout.data<bf16>(), q.data<bf16>(), k.data<bf16>(),
                                     v.data<bf16>(), out.data<bf16>(), F(lse), dq.data<bf16>(),
                                     dk.data<bf16>(), dv.data<bf16>(), scratch.raw_data(), B, T, NH,
                                     NKV, HS, e.stream, causal);
      });
}

}  // namespace gtp::kernels::ops
