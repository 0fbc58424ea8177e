// core/kernels/ops/flash_attention.cc — Dispatch of the fused attention
// (cpu/flash_attention.cc f32/bf16; on CUDA the Exec's AttentionEngine when it
// takes the shape, else cuda/flash_attention.cu bf16), forward and backward.
//
// q, k, v, dq, dk, dv may be token-strided views: column blocks of one
// packed [B·T, R] matrix (a fused QKV GEMM's output, or its gradient). An
// engine that takes a row stride reads and writes them in place; every other
// path copies them into dense temporaries (and the gradients back), so its
// results are the bits of the dense call on the same values.
#include <cstdint>
#include <initializer_list>

#include "core/kernels/cpu.h"
#include "core/kernels/cuda.h"
#include "core/kernels/ops.h"
#include "core/kernels/ops/internal/dispatch.h"
#include "core/status.h"

namespace gtp::kernels::ops {

using internal::CheckHeadsOn;
using internal::CheckOn;
using internal::F;
using internal::ForDType;
using internal::M;
using internal::OnDevice;
using internal::TokenStride;

namespace {

// t's rows as a 2-D [B·T, H·HS] view, rs elements apart: a row-pitched view
// that Copy moves with one 2-D copy (CUDA) or a row loop (CPU).
Tensor TokenRows(const Tensor& t, int64_t rs) {
  return t.Strided({t.dim(0) * t.dim(1), t.dim(2) * t.dim(3)}, {rs, 1});
}

// t itself when contiguous, else a dense copy of it enqueued on e's stream.
Tensor Densified(const Exec& e, const Tensor& t, int64_t rs) {
  if (t.is_contiguous()) return t;
  Tensor d = e.Empty(t.shape(), t.dtype());
  CopyInto(e, TokenRows(t, rs), TokenRows(d, t.dim(2) * t.dim(3)));
  return d;
}

// An output: t itself when contiguous, else an uninitialised dense
// temporary that WriteBack copies into t.
Tensor DenseOut(const Exec& e, const Tensor& t) {
  return t.is_contiguous() ? t : e.Empty(t.shape(), t.dtype());
}
void WriteBack(const Exec& e, const Tensor& dense, const Tensor& t, int64_t rs) {
  if (t.is_contiguous()) return;  // written in place
  CopyInto(e, TokenRows(dense, t.dim(2) * t.dim(3)), TokenRows(t, rs));
}

// The row stride an engine gets for views that all share token stride rs:
// rs, or -1 (the views take the dense path) when they do not share one or
// an element 0 is not 16-byte aligned (what engines may assume of pointers).
int64_t SharedRowStride(std::initializer_list<const Tensor*> ts,
                        std::initializer_list<int64_t> strides) {
  const int64_t rs = *strides.begin();
  for (int64_t s : strides) {
    if (s != rs) return -1;
  }
  for (const Tensor* t : ts) {
    if (reinterpret_cast<uintptr_t>(t->raw_data()) % 16 != 0) return -1;
  }
  return rs;
}

// Device scratch of `bytes` for an engine.
Tensor EngineWorkspace(const Exec& e, int64_t bytes) { return e.Empty({(bytes + 3) / 4 + 1}); }

// Runs the forward on the Exec's engine with row stride rs (0: dense) when
// the engine takes that shape; false (nothing enqueued) when it declines.
bool EngineForward(const Exec& e, const Tensor& q, const Tensor& k, const Tensor& v,
                   const Tensor& out, const Tensor& lse, bool causal, int64_t rs) {
  const AttentionEngine::Shape s{q.dim(0), q.dim(1), q.dim(2), k.dim(2), q.dim(3), causal, rs};
  const int64_t bytes = e.attention->ForwardWorkspace(s);
  if (bytes < 0) return false;
  Tensor ws = EngineWorkspace(e, bytes);
  GTP_CHECK_OK(e.attention->Forward(q.data<bf16>(), k.data<bf16>(), v.data<bf16>(),
                                    out.data<bf16>(), M(lse), s, ws.raw_data(), bytes, e.stream));
  return true;
}

// The backward likewise.
bool EngineBackward(const Exec& e, const Tensor& dout, const Tensor& q, const Tensor& k,
                    const Tensor& v, const Tensor& out, const Tensor& lse, const Tensor& dq,
                    const Tensor& dk, const Tensor& dv, bool causal, int64_t rs) {
  const AttentionEngine::Shape s{q.dim(0), q.dim(1), q.dim(2), k.dim(2), q.dim(3), causal, rs};
  const int64_t bytes = e.attention->BackwardWorkspace(s);
  if (bytes < 0) return false;
  Tensor ws = EngineWorkspace(e, bytes);
  GTP_CHECK_OK(e.attention->Backward(
      dout.data<bf16>(), q.data<bf16>(), k.data<bf16>(), v.data<bf16>(), out.data<bf16>(), F(lse),
      dq.data<bf16>(), dk.data<bf16>(), dv.data<bf16>(), s, ws.raw_data(), bytes, e.stream));
  return true;
}

// Shapes of the fused attention: q/out [B, T, NH, HS], k/v [B, T, NKV, HS], lse [B, NH, T] f32.
void CheckFlashShapes(const Exec& e, const char* what, const Tensor& q, const Tensor& k,
                      const Tensor& v, const Tensor& out, const Tensor& lse) {
  CheckHeadsOn(e, q, "q");
  CheckHeadsOn(e, k, "k");
  CheckHeadsOn(e, v, "v");
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

// The forward on contiguous q, k, v: the engine when it takes the shape,
// else the kernels.
void ForwardDense(const Exec& e, const Tensor& q, const Tensor& k, const Tensor& v,
                  const Tensor& out, const Tensor& lse, bool causal) {
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
        if (e.attention != nullptr && EngineForward(e, q, k, v, out, lse, causal, 0)) return;
        cuda::FlashAttentionForward(q.data<bf16>(), k.data<bf16>(), v.data<bf16>(),
                                    out.data<bf16>(), M(lse), B, T, NH, NKV, HS, e.stream, causal);
      });
}

// The backward on contiguous q, k, v, dq, dk, dv, likewise.
void BackwardDense(const Exec& e, const Tensor& dout, const Tensor& q, const Tensor& k,
                   const Tensor& v, const Tensor& out, const Tensor& lse, const Tensor& dq,
                   const Tensor& dk, const Tensor& dv, bool causal) {
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
        if (e.attention != nullptr &&
            EngineBackward(e, dout, q, k, v, out, lse, dq, dk, dv, causal, 0)) {
          return;
        }
        const int64_t bytes = cuda::FlashAttentionBackwardScratchBytes(B, T, NH, NKV, HS);
        Tensor scratch = e.Empty({(bytes + 3) / 4});
        cuda::FlashAttentionBackward(dout.data<bf16>(), q.data<bf16>(), k.data<bf16>(),
                                     v.data<bf16>(), out.data<bf16>(), F(lse), dq.data<bf16>(),
                                     dk.data<bf16>(), dv.data<bf16>(), scratch.raw_data(), B, T, NH,
                                     NKV, HS, e.stream, causal);
      });
}

}  // namespace

void FlashAttentionForward(const Exec& e, const Tensor& q, const Tensor& k, const Tensor& v,
                           const Tensor& out, const Tensor& lse, bool causal) {
  const char* op = "FlashAttentionForward";
  CheckFlashShapes(e, op, q, k, v, out, lse);
  const int64_t rq = TokenStride(op, "q", q), rk = TokenStride(op, "k", k),
                rv = TokenStride(op, "v", v);
  if (q.is_contiguous() && k.is_contiguous() && v.is_contiguous()) {
    ForwardDense(e, q, k, v, out, lse, causal);
    return;
  }
  if (e.is_cuda() && e.attention != nullptr) {
    const int64_t rs = SharedRowStride({&q, &k, &v}, {rq, rk, rv});
    if (rs > 0 && EngineForward(e, q, k, v, out, lse, causal, rs)) return;
  }
  ForwardDense(e, Densified(e, q, rq), Densified(e, k, rk), Densified(e, v, rv), out, lse, causal);
}

void FlashAttentionBackward(const Exec& e, const Tensor& dout, const Tensor& q, const Tensor& k,
                            const Tensor& v, const Tensor& out, const Tensor& lse, const Tensor& dq,
                            const Tensor& dk, const Tensor& dv, bool causal) {
  const char* op = "FlashAttentionBackward";
  CheckFlashShapes(e, op, q, k, v, out, lse);
  CheckOn(e, dout, "dout");
  CheckHeadsOn(e, dq, "dq");
  for (const Tensor* t : {&dout, &dq}) {
    GTP_CHECK(t->shape() == q.shape() && t->dtype() == q.dtype(), op, ": ", t->ToString(), " vs q ",
              q.ToString());
  }
  CheckHeadsOn(e, dk, "dk");
  CheckHeadsOn(e, dv, "dv");
  for (const Tensor* t : {&dk, &dv}) {
    GTP_CHECK(t->shape() == k.shape() && t->dtype() == k.dtype(), op, ": ", t->ToString(), " vs k ",
              k.ToString());
  }
  const int64_t rq = TokenStride(op, "q", q), rk = TokenStride(op, "k", k),
                rv = TokenStride(op, "v", v), rdq = TokenStride(op, "dq", dq),
                rdk = TokenStride(op, "dk", dk), rdv = TokenStride(op, "dv", dv);
  if (q.is_contiguous() && k.is_contiguous() && v.is_contiguous() && dq.is_contiguous() &&
      dk.is_contiguous() && dv.is_contiguous()) {
    BackwardDense(e, dout, q, k, v, out, lse, dq, dk, dv, causal);
    return;
  }
  if (e.is_cuda() && e.attention != nullptr) {
    const int64_t rs = SharedRowStride({&q, &k, &v, &dq, &dk, &dv}, {rq, rk, rv, rdq, rdk, rdv});
    if (rs > 0 && EngineBackward(e, dout, q, k, v, out, lse, dq, dk, dv, causal, rs)) return;
  }
  const Tensor dq_d = DenseOut(e, dq), dk_d = DenseOut(e, dk), dv_d = DenseOut(e, dv);
  BackwardDense(e, dout, Densified(e, q, rq), Densified(e, k, rk), Densified(e, v, rv), out, lse,
                dq_d, dk_d, dv_d, causal);
  WriteBack(e, dq_d, dq, rdq);
  WriteBack(e, dk_d, dk, rdk);
  WriteBack(e, dv_d, dv, rdv);
}

}  // namespace gtp::kernels::ops
