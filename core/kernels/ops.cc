#include "core/kernels/ops.h"

#include <cuda_runtime_api.h>

#include <climits>
#include <cstring>
#include <initializer_list>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/cuda_runtime.h"
#include "core/kernels/cpu.h"
#include "core/kernels/cuda.h"
#include "core/status.h"

namespace gtp::kernels {

Tensor Exec::Empty(const Shape& s, DType t) const {
  GTP_CHECK(alloc != nullptr, "Exec without an allocator");
  return Tensor::Empty(s, t, *alloc);
}

Tensor Exec::Zeros(const Shape& s, DType t) const {
  Tensor x = Empty(s, t);
  if (x.nbytes() == 0) return x;
  if (is_cuda()) {
    GTP_CUDA_CHECK(cudaMemsetAsync(x.raw_data(), 0, x.nbytes(), stream));
  } else {
    std::memset(x.raw_data(), 0, x.nbytes());
  }
  return x;
}

namespace ops {
namespace {

void CheckOn(const Exec& e, const Tensor& t, const char* what) {
  GTP_CHECK(t.defined(), what, " is undefined");
  GTP_CHECK(t.device() == e.device, what, " is on ", t.device().ToString(), ", exec on ",
            e.device.ToString());
  GTP_CHECK(t.is_contiguous(), what, " must be contiguous: ", t.ToString());
}

const float* F(const Tensor& t) { return t.data<float>(); }
float* M(const Tensor& t) { return t.data<float>(); }
const int32_t* I(const Tensor& t) { return t.data<int32_t>(); }
const bf16* FB(const Tensor& t) { return t.data<bf16>(); }
bf16* MB(const Tensor& t) { return t.data<bf16>(); }

// A tensor argument, named for error messages.
struct Arg {
  const char* name;
  const Tensor* t;
};

// The storage type of a mixed-precision op's activations and parameter
// values: acts[0]'s dtype, which must be f32 or bf16 and shared by every
// defined tensor of `acts`; every defined tensor of `f32s` (statistics,
// parameter gradients) must be f32. Undefined (optional) tensors are skipped.
// Aborts naming the op and every dtype otherwise.
DType ActDType(const char* op, std::initializer_list<Arg> acts,
               std::initializer_list<Arg> f32s = {}) {
  const DType act = acts.begin()->t->dtype();
  bool ok = act == DType::kF32 || act == DType::kBF16;
  for (const Arg& a : acts) ok = ok && (!a.t->defined() || a.t->dtype() == act);
  for (const Arg& a : f32s) ok = ok && (!a.t->defined() || a.t->dtype() == DType::kF32);
  if (!ok) {
    std::string got, want_act, want_f32;
    for (const Arg& a : acts) {
      absl::StrAppend(&got, " ", a.name, "=", a.t->defined() ? DTypeName(a.t->dtype()) : "none");
      absl::StrAppend(&want_act, want_act.empty() ? "" : ", ", a.name);
    }
    for (const Arg& a : f32s) {
      absl::StrAppend(&got, " ", a.name, "=", a.t->defined() ? DTypeName(a.t->dtype()) : "none");
      absl::StrAppend(&want_f32, want_f32.empty() ? "" : ", ", a.name);
    }
    GTP_CHECK(false, op, ": unsupported dtypes", got, "; supported: ", want_act,
              " all f32 or all bf16", want_f32.empty() ? "" : ", with ", want_f32,
              want_f32.empty() ? "" : " f32");
  }
  return act;
}
// Rows of a tensor viewed as [rows, last dim].
int64_t Rows(const Tensor& t) { return t.numel() / t.dim(-1); }

void RunGemm(const Exec& e, const GemmDesc& d, const void* a, const void* b, void* c) {
  if (e.is_cuda()) {
    GTP_CHECK(e.blas != nullptr, "CUDA Exec without a BlasContext");
    cuda::Gemm(*e.blas, d, a, b, c, e.stream);
  } else {
    cpu::Gemm(d, a, b, c);
  }
}

}  // namespace

void Gemm(const Exec& e, const GemmDesc& d, const Tensor& a, const Tensor& b, const Tensor& c) {
  CheckOn(e, a, "a");
  CheckOn(e, b, "b");
  CheckOn(e, c, "c");
  RunGemm(e, d, a.raw_data(), b.raw_data(), c.raw_data());
}

void Linear(const Exec& e, const Tensor& x, const Tensor& w, const Tensor& y, float beta,
            const Tensor& bias) {
  CheckOn(e, x, "x");
  CheckOn(e, w, "w");
  CheckOn(e, y, "y");
  const int64_t n = Rows(x), in = x.dim(-1), out = w.dim(0);
  GTP_CHECK(w.dim(1) == in && Rows(y) == n && y.dim(-1) == out, "Linear: x ", x.ToString(),
            " w ", w.ToString(), " y ", y.ToString());
  GTP_CHECK(x.dtype() == w.dtype(), "Linear: x and w dtypes differ");
  GemmDesc d;
  d.trans_b = true;
  d.m = n, d.n = out, d.k = in, d.beta = beta;
  d.ab_type = x.dtype();
  d.c_type = y.dtype();
  if (bias.defined()) {
    CheckOn(e, bias, "bias");
    GTP_CHECK(bias.numel() == out && bias.dtype() == y.dtype(), "Linear: bias ", bias.ToString(),
              " for y ", y.ToString());
    d.bias = bias.raw_data();
  }
  RunGemm(e, d, x.raw_data(), w.raw_data(), y.raw_data());
}

void LinearBackwardData(const Exec& e, const Tensor& dy, const Tensor& w, const Tensor& dx,
                        float beta) {
  CheckOn(e, dy, "dy");
  CheckOn(e, w, "w");
  CheckOn(e, dx, "dx");
  const int64_t n = Rows(dy), out = dy.dim(-1), in = w.dim(1);
  GTP_CHECK(w.dim(0) == out && Rows(dx) == n && dx.dim(-1) == in, "LinearBackwardData: dy ",
            dy.ToString(), " w ", w.ToString(), " dx ", dx.ToString());
  GemmDesc d;
  d.m = n, d.n = in, d.k = out, d.beta = beta;
  d.ab_type = dy.dtype();
  d.c_type = dx.dtype();
  GTP_CHECK(dy.dtype() == w.dtype(), "LinearBackwardData: dy and w dtypes differ");
  RunGemm(e, d, dy.raw_data(), w.raw_data(), dx.raw_data());
}

void LinearBackwardWeight(const Exec& e, const Tensor& dy, const Tensor& x, const Tensor& dw,
                          float beta) {
  CheckOn(e, dy, "dy");
  CheckOn(e, x, "x");
  CheckOn(e, dw, "dw");
  const int64_t n = Rows(dy), out = dy.dim(-1), in = x.dim(-1);
  GTP_CHECK(Rows(x) == n && dw.dim(0) >= out && dw.dim(1) == in, "LinearBackwardWeight: dy ",
            dy.ToString(), " x ", x.ToString(), " dw ", dw.ToString());
  GTP_CHECK(dy.dtype() == x.dtype(), "LinearBackwardWeight: dy and x dtypes differ");
  GemmDesc d;
  d.trans_a = true;
  d.m = out, d.n = in, d.k = n, d.beta = beta;
  d.ab_type = dy.dtype();
  d.c_type = dw.dtype();
  RunGemm(e, d, dy.raw_data(), x.raw_data(), dw.raw_data());
}

namespace {

void RunGroupedGemm(const Exec& e, const GemmDesc& d, const std::vector<GemmGroup>& groups) {
  GTP_CHECK(groups.size() <= static_cast<size_t>(INT_MAX), "GroupedGemm: ", groups.size(),
            " groups exceed int");
  const int count = static_cast<int>(groups.size());
  if (e.is_cuda()) {
    GTP_CHECK(e.blas != nullptr, "CUDA Exec without a BlasContext");
    cuda::GroupedGemm(*e.blas, d, groups.data(), count, e.stream);
  } else {
    cpu::GroupedGemm(d, groups.data(), count);
  }
}

// Checks the expert row offsets of a grouped linear op over M rows: G + 1
// entries, off[0] = 0, nondecreasing, off[G] = M. Returns G.
int64_t CheckOffsets(const char* op, const std::vector<int64_t>& off, int64_t M) {
  GTP_CHECK(off.size() >= 2, op, ": off needs G + 1 >= 2 entries, got ", off.size());
  GTP_CHECK(off.front() == 0 && off.back() == M, op, ": off must run from 0 to the ", M,
            " rows, got off[0]=", off.front(), " off[G]=", off.back());
  for (size_t g = 0; g + 1 < off.size(); ++g) {
    GTP_CHECK(off[g] <= off[g + 1], op, ": off must be nondecreasing, got off[", g, "]=", off[g],
              " > off[", g + 1, "]=", off[g + 1]);
  }
  return static_cast<int64_t>(off.size()) - 1;
}

// Element `i` of a contiguous tensor's buffer.
char* At(const Tensor& t, int64_t i) {
  return static_cast<char*>(t.raw_data()) + static_cast<size_t>(i) * SizeOf(t.dtype());
}

}  // namespace

void GroupedGemm(const Exec& e, const GemmDesc& d, const std::vector<GemmGroup>& groups) {
  RunGroupedGemm(e, d, groups);
}

void GroupedLinear(const Exec& e, const Tensor& x, const Tensor& w, const std::vector<int64_t>& off,
                   const Tensor& y) {
  CheckOn(e, x, "x");
  CheckOn(e, w, "w");
  CheckOn(e, y, "y");
  GTP_CHECK(w.rank() == 2, "GroupedLinear: w must be [G·N, K], got ", w.ToString());
  const int64_t M = Rows(x), K = x.dim(-1), N = y.dim(-1);
  const int64_t G = CheckOffsets("GroupedLinear", off, M);
  GTP_CHECK(w.dim(0) == G * N && w.dim(1) == K && Rows(y) == M, "GroupedLinear: want x [M, K], w [",
            G, "·N, K], y [M, N] for G=", G, " experts; got x ", x.ToString(), " w ", w.ToString(),
            " y ", y.ToString());
  GTP_CHECK(x.dtype() == w.dtype(), "GroupedLinear: x and w dtypes differ (x ",
            DTypeName(x.dtype()), ", w ", DTypeName(w.dtype()), ")");
  GemmDesc d;
  d.trans_b = true;
  d.ab_type = x.dtype();
  d.c_type = y.dtype();
  std::vector<GemmGroup> groups(G);
  for (int64_t g = 0; g < G; ++g) {
    GemmGroup& p = groups[g];
    p.m = off[g + 1] - off[g], p.n = N, p.k = K;
    p.a = At(x, off[g] * K);
    p.b = At(w, g * N * K);
    p.c = At(y, off[g] * N);
  }
  RunGroupedGemm(e, d, groups);
}

void GroupedLinearBackwardData(const Exec& e, const Tensor& dy, const Tensor& w,
                               const std::vector<int64_t>& off, const Tensor& dx) {
  CheckOn(e, dy, "dy");
  CheckOn(e, w, "w");
  CheckOn(e, dx, "dx");
  GTP_CHECK(w.rank() == 2, "GroupedLinearBackwardData: w must be [G·N, K], got ", w.ToString());
  const int64_t M = Rows(dy), N = dy.dim(-1), K = dx.dim(-1);
  const int64_t G = CheckOffsets("GroupedLinearBackwardData", off, M);
  GTP_CHECK(w.dim(0) == G * N && w.dim(1) == K && Rows(dx) == M,
            "GroupedLinearBackwardData: want dy [M, N], w [", G, "·N, K], dx [M, K] for G=", G,
            " experts; got dy ", dy.ToString(), " w ", w.ToString(), " dx ", dx.ToString());
  GTP_CHECK(dy.dtype() == w.dtype(), "GroupedLinearBackwardData: dy and w dtypes differ (dy ",
            DTypeName(dy.dtype()), ", w ", DTypeName(w.dtype()), ")");
  GemmDesc d;
  d.ab_type = dy.dtype();
  d.c_type = dx.dtype();
  std::vector<GemmGroup> groups(G);
  for (int64_t g = 0; g < G; ++g) {
    GemmGroup& p = groups[g];
    p.m = off[g + 1] - off[g], p.n = K, p.k = N;
    p.a = At(dy, off[g] * N);
    p.b = At(w, g * N * K);
    p.c = At(dx, off[g] * K);
  }
  RunGroupedGemm(e, d, groups);
}

void GroupedLinearBackwardWeight(const Exec& e, const Tensor& dy, const Tensor& x,
                                 const std::vector<int64_t>& off, float alpha, float beta,
                                 const Tensor& dw) {
  CheckOn(e, dy, "dy");
  CheckOn(e, x, "x");
  CheckOn(e, dw, "dw");
  GTP_CHECK(dw.rank() == 2, "GroupedLinearBackwardWeight: dw must be [G·N, K], got ",
            dw.ToString());
  const int64_t M = Rows(dy), N = dy.dim(-1), K = x.dim(-1);
  const int64_t G = CheckOffsets("GroupedLinearBackwardWeight", off, M);
  GTP_CHECK(Rows(x) == M && dw.dim(0) == G * N && dw.dim(1) == K,
            "GroupedLinearBackwardWeight: want dy [M, N], x [M, K], dw [", G, "·N, K] for G=", G,
            " experts; got dy ", dy.ToString(), " x ", x.ToString(), " dw ", dw.ToString());
  GTP_CHECK(dy.dtype() == x.dtype(), "GroupedLinearBackwardWeight: dy and x dtypes differ (dy ",
            DTypeName(dy.dtype()), ", x ", DTypeName(x.dtype()), ")");
  GTP_CHECK(dw.dtype() == DType::kF32, "GroupedLinearBackwardWeight: dw must be f32, got ",
            dw.ToString());
  GemmDesc d;
  d.trans_a = true;
  d.alpha = alpha;
  d.beta = beta;
  d.ab_type = dy.dtype();
  d.c_type = DType::kF32;
  std::vector<GemmGroup> groups(G);
  for (int64_t g = 0; g < G; ++g) {
    GemmGroup& p = groups[g];
    p.m = N, p.n = K, p.k = off[g + 1] - off[g];
    p.a = At(dy, off[g] * N);
    p.b = At(x, off[g] * K);
    p.c = At(dw, g * N * K);
  }
  RunGroupedGemm(e, d, groups);
}

void LinearGelu(const Exec& e, const Tensor& x, const Tensor& w, const Tensor& bias,
                const Tensor& y, const Tensor& pre) {
  CheckOn(e, x, "x");
  CheckOn(e, w, "w");
  CheckOn(e, y, "y");
  CheckOn(e, pre, "pre");
  const int64_t n = Rows(x), in = x.dim(-1), out = w.dim(0);
  GTP_CHECK(w.rank() == 2 && w.dim(1) == in && Rows(y) == n && y.dim(-1) == out &&
                pre.numel() == y.numel() && pre.dim(-1) == out,
            "LinearGelu: x ", x.ToString(), " w ", w.ToString(), " y ", y.ToString(), " pre ",
            pre.ToString());
  GTP_CHECK(x.dtype() == w.dtype() && pre.dtype() == y.dtype(), "LinearGelu: x/w (",
            DTypeName(x.dtype()), "/", DTypeName(w.dtype()), ") and y/pre (", DTypeName(y.dtype()),
            "/", DTypeName(pre.dtype()), ") must share a dtype each");
  GemmDesc d;
  d.trans_b = true;
  d.m = n, d.n = out, d.k = in;
  d.ab_type = x.dtype();
  d.c_type = y.dtype();
  d.epilogue = GemmEpilogue::kGeluAux;
  d.aux = pre.raw_data();
  if (bias.defined()) {
    CheckOn(e, bias, "bias");
    GTP_CHECK(bias.numel() == out && bias.dtype() == y.dtype(), "LinearGelu: bias ",
              bias.ToString(), " for y ", y.ToString());
    d.bias = bias.raw_data();
  }
  RunGemm(e, d, x.raw_data(), w.raw_data(), y.raw_data());
}

void LinearBackwardDataDGelu(const Exec& e, const Tensor& dy, const Tensor& w, const Tensor& pre,
                             const Tensor& dx, const Tensor& dbias) {
  CheckOn(e, dy, "dy");
  CheckOn(e, w, "w");
  CheckOn(e, pre, "pre");
  CheckOn(e, dx, "dx");
  const int64_t n = Rows(dy), out = dy.dim(-1), in = w.dim(1);
  GTP_CHECK(w.rank() == 2 && w.dim(0) == out && Rows(dx) == n && dx.dim(-1) == in &&
                pre.numel() == dx.numel() && pre.dim(-1) == in,
            "LinearBackwardDataDGelu: dy ", dy.ToString(), " w ", w.ToString(), " pre ",
            pre.ToString(), " dx ", dx.ToString());
  GTP_CHECK(dy.dtype() == w.dtype() && pre.dtype() == dx.dtype(), "LinearBackwardDataDGelu: dy/w (",
            DTypeName(dy.dtype()), "/", DTypeName(w.dtype()), ") and dx/pre (",
            DTypeName(dx.dtype()), "/", DTypeName(pre.dtype()), ") must share a dtype each");
  GemmDesc d;
  d.m = n, d.n = in, d.k = out;
  d.ab_type = dy.dtype();
  d.c_type = dx.dtype();
  d.epilogue = GemmEpilogue::kDGeluBGrad;
  d.aux = pre.raw_data();
  if (dbias.defined()) {
    CheckOn(e, dbias, "dbias");
    GTP_CHECK(dbias.numel() == in && dbias.dtype() == DType::kF32,
              "LinearBackwardDataDGelu: dbias ", dbias.ToString(), " must be f32 [", in, "]");
    d.bias_grad = M(dbias);
  }
  RunGemm(e, d, dy.raw_data(), w.raw_data(), dx.raw_data());
}

void LinearBackwardWeightBGrad(const Exec& e, const Tensor& dy, const Tensor& x, const Tensor& dw,
                               float beta, const Tensor& db) {
  CheckOn(e, dy, "dy");
  CheckOn(e, x, "x");
  CheckOn(e, dw, "dw");
  CheckOn(e, db, "db");
  const int64_t n = Rows(dy), out = dy.dim(-1), in = x.dim(-1);
  GTP_CHECK(Rows(x) == n && dw.rank() == 2 && dw.dim(0) >= out && dw.dim(1) == in,
            "LinearBackwardWeightBGrad: dy ", dy.ToString(), " x ", x.ToString(), " dw ",
            dw.ToString());
  GTP_CHECK(dy.dtype() == x.dtype(), "LinearBackwardWeightBGrad: dy and x dtypes differ (",
            DTypeName(dy.dtype()), " vs ", DTypeName(x.dtype()), ")");
  GTP_CHECK(db.numel() == out && db.dtype() == DType::kF32, "LinearBackwardWeightBGrad: db ",
            db.ToString(), " must be f32 [", out, "]");
  GemmDesc d;
  d.trans_a = true;
  d.m = out, d.n = in, d.k = n, d.beta = beta;
  d.ab_type = dy.dtype();
  d.c_type = dw.dtype();
  d.epilogue = GemmEpilogue::kBGrad;
  d.bias_grad = M(db);
  RunGemm(e, d, dy.raw_data(), x.raw_data(), dw.raw_data());
}

void Axpby(const Exec& e, float alpha, const Tensor& x, float beta, const Tensor& y) {
  CheckOn(e, x, "x");
  CheckOn(e, y, "y");
  GTP_CHECK(x.numel() == y.numel(), "Axpby: ", x.ToString(), " vs ", y.ToString());
  if (ActDType("Axpby", {{"x", &x}, {"y", &y}}) == DType::kBF16) {
    if (e.is_cuda()) {
      cuda::Axpby(alpha, FB(x), beta, MB(y), x.numel(), e.stream);
    } else {
      cpu::Axpby(alpha, FB(x), beta, MB(y), x.numel());
    }
    return;
  }
  if (e.is_cuda()) {
    cuda::Axpby(alpha, F(x), beta, M(y), x.numel(), e.stream);
  } else {
    cpu::Axpby(alpha, F(x), beta, M(y), x.numel());
  }
}

void Fill(const Exec& e, const Tensor& x, float value) {
  CheckOn(e, x, "x");
  if (ActDType("Fill", {{"x", &x}}) == DType::kBF16) {
    if (e.is_cuda()) {
      cuda::Fill(MB(x), value, x.numel(), e.stream);
    } else {
      cpu::Fill(MB(x), value, x.numel());
    }
    return;
  }
  if (e.is_cuda()) {
    cuda::Fill(M(x), value, x.numel(), e.stream);
  } else {
    cpu::Fill(M(x), value, x.numel());
  }
}

double SumSquares(const Exec& e, const Tensor& x) {
  CheckOn(e, x, "x");
  const bool bf16_x = ActDType("SumSquares", {{"x", &x}}) == DType::kBF16;
  double out = 0.0;
  if (e.is_cuda()) {
    double* d = nullptr;
    GTP_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&d), sizeof(double), e.stream));
    if (bf16_x) {
      cuda::SumSquares(FB(x), x.numel(), d, e.stream);
    } else {
      cuda::SumSquares(F(x), x.numel(), d, e.stream);
    }
    GTP_CUDA_CHECK(cudaMemcpyAsync(&out, d, sizeof(double), cudaMemcpyDeviceToHost, e.stream));
    GTP_CUDA_CHECK(cudaFreeAsync(d, e.stream));
    internal::CountHostSync();
    GTP_CUDA_CHECK(cudaStreamSynchronize(e.stream));
  } else {
    if (bf16_x) {
      cpu::SumSquares(FB(x), x.numel(), &out);
    } else {
      cpu::SumSquares(F(x), x.numel(), &out);
    }
  }
  return out;
}

void CopyInto(const Exec& e, const Tensor& src, const Tensor& dst) {
  GTP_CHECK_OK(Copy(src, dst, e.stream, /*sync=*/false));
}

void EmbeddingForward(const Exec& e, const Tensor& idx, const Tensor& table, const Tensor& out,
                      int64_t vocab_start) {
  CheckOn(e, idx, "idx");
  CheckOn(e, table, "table");
  CheckOn(e, out, "out");
  const int64_t n = idx.numel(), v = table.dim(0), c = table.dim(1);
  GTP_CHECK(out.numel() == n * c, "EmbeddingForward: out ", out.ToString());
  if (ActDType("EmbeddingForward", {{"table", &table}, {"out", &out}}) == DType::kBF16) {
    if (e.is_cuda()) {
      cuda::EmbeddingForward(I(idx), FB(table), MB(out), n, v, c, vocab_start, e.stream);
    } else {
      cpu::EmbeddingForward(I(idx), FB(table), MB(out), n, v, c, vocab_start);
    }
    return;
  }
  if (e.is_cuda()) {
    cuda::EmbeddingForward(I(idx), F(table), M(out), n, v, c, vocab_start, e.stream);
  } else {
    cpu::EmbeddingForward(I(idx), F(table), M(out), n, v, c, vocab_start);
  }
}

void EmbeddingBackward(const Exec& e, const Tensor& idx, const Tensor& dout, const Tensor& dtable,
                       int64_t vocab_start) {
  CheckOn(e, idx, "idx");
  CheckOn(e, dout, "dout");
  CheckOn(e, dtable, "dtable");
  const int64_t n = idx.numel(), v = dtable.dim(0), c = dtable.dim(1);
  GTP_CHECK(dout.numel() == n * c, "EmbeddingBackward: dout ", dout.ToString());
  if (ActDType("EmbeddingBackward", {{"dout", &dout}}, {{"dtable", &dtable}}) == DType::kBF16) {
    if (e.is_cuda()) {
      Tensor scratch = e.Empty({cuda::EmbeddingBackwardScratchBytes(n, v)}, DType::kU8);
      cuda::EmbeddingBackward(I(idx), FB(dout), M(dtable), n, v, c, vocab_start, e.stream,
                              scratch.raw_data());
    } else {
      cpu::EmbeddingBackward(I(idx), FB(dout), M(dtable), n, v, c, vocab_start);
    }
    return;
  }
  if (e.is_cuda()) {
    Tensor scratch = e.Empty({cuda::EmbeddingBackwardScratchBytes(n, v)}, DType::kU8);
    cuda::EmbeddingBackward(I(idx), F(dout), M(dtable), n, v, c, vocab_start, e.stream,
                            scratch.raw_data());
  } else {
    cpu::EmbeddingBackward(I(idx), F(dout), M(dtable), n, v, c, vocab_start);
  }
}

void LayerNormForward(const Exec& e, const Tensor& x, const Tensor& w, const Tensor& b,
                      const Tensor& y, const Tensor& mean, const Tensor& rstd, float eps) {
  CheckOn(e, x, "x");
  const int64_t n = Rows(x), c = x.dim(-1);
  if (ActDType("LayerNormForward", {{"x", &x}, {"w", &w}, {"b", &b}, {"y", &y}},
               {{"mean", &mean}, {"rstd", &rstd}}) == DType::kBF16) {
    const bf16* bp = b.defined() ? FB(b) : nullptr;
    if (e.is_cuda()) {
      cuda::LayerNormForward(FB(x), FB(w), bp, MB(y), M(mean), M(rstd), n, c, eps, e.stream);
    } else {
      cpu::LayerNormForward(FB(x), FB(w), bp, MB(y), M(mean), M(rstd), n, c, eps);
    }
    return;
  }
  const float* bp = b.defined() ? F(b) : nullptr;
  if (e.is_cuda()) {
    cuda::LayerNormForward(F(x), F(w), bp, M(y), M(mean), M(rstd), n, c, eps, e.stream);
  } else {
    cpu::LayerNormForward(F(x), F(w), bp, M(y), M(mean), M(rstd), n, c, eps);
  }
}

void LayerNormBackward(const Exec& e, const Tensor& dy, const Tensor& x, const Tensor& w,
                       const Tensor& mean, const Tensor& rstd, const Tensor& dx, const Tensor& dw,
                       const Tensor& db, const Tensor& dresidual) {
  CheckOn(e, dy, "dy");
  const int64_t n = Rows(x), c = x.dim(-1);
  float* dbp = db.defined() ? M(db) : nullptr;
  if (dresidual.defined()) {
    CheckOn(e, dresidual, "dresidual");
    GTP_CHECK(dresidual.shape() == dx.shape() && dresidual.dtype() == dx.dtype(),
              "LayerNormBackward: dresidual ", dresidual.ToString(), " for dx ", dx.ToString());
  }
  if (ActDType("LayerNormBackward", {{"dy", &dy}, {"x", &x}, {"w", &w}, {"dx", &dx}},
               {{"mean", &mean}, {"rstd", &rstd}, {"dw", &dw}, {"db", &db}}) == DType::kBF16) {
    const bf16* res = dresidual.defined() ? FB(dresidual) : nullptr;
    if (e.is_cuda()) {
      Tensor scratch = e.Empty({cuda::LayerNormBackwardScratchFloats(n, c)});
      cuda::LayerNormBackward(FB(dy), FB(x), FB(w), F(mean), F(rstd), MB(dx), M(dw), dbp,
                              M(scratch), n, c, e.stream, res);
    } else {
      cpu::LayerNormBackward(FB(dy), FB(x), FB(w), F(mean), F(rstd), MB(dx), M(dw), dbp, n, c,
                             res);
    }
    return;
  }
  const float* res = dresidual.defined() ? F(dresidual) : nullptr;
  if (e.is_cuda()) {
    Tensor scratch = e.Empty({cuda::LayerNormBackwardScratchFloats(n, c)});
    cuda::LayerNormBackward(F(dy), F(x), F(w), F(mean), F(rstd), M(dx), M(dw), dbp, M(scratch), n,
                            c, e.stream, res);
  } else {
    cpu::LayerNormBackward(F(dy), F(x), F(w), F(mean), F(rstd), M(dx), M(dw), dbp, n, c, res);
  }
}

void RMSNormForward(const Exec& e, const Tensor& x, const Tensor& w, const Tensor& y,
                    const Tensor& rstd, float eps) {
  CheckOn(e, x, "x");
  const int64_t n = Rows(x), c = x.dim(-1);
  if (ActDType("RMSNormForward", {{"x", &x}, {"w", &w}, {"y", &y}}, {{"rstd", &rstd}}) ==
      DType::kBF16) {
    if (e.is_cuda()) {
      cuda::RMSNormForward(FB(x), FB(w), MB(y), M(rstd), n, c, eps, e.stream);
    } else {
      cpu::RMSNormForward(FB(x), FB(w), MB(y), M(rstd), n, c, eps);
    }
    return;
  }
  if (e.is_cuda()) {
    cuda::RMSNormForward(F(x), F(w), M(y), M(rstd), n, c, eps, e.stream);
  } else {
    cpu::RMSNormForward(F(x), F(w), M(y), M(rstd), n, c, eps);
  }
}

void RMSNormBackward(const Exec& e, const Tensor& dy, const Tensor& x, const Tensor& w,
                     const Tensor& rstd, const Tensor& dx, const Tensor& dw,
                     const Tensor& dresidual) {
  CheckOn(e, dy, "dy");
  const int64_t n = Rows(x), c = x.dim(-1);
  if (dresidual.defined()) {
    CheckOn(e, dresidual, "dresidual");
    GTP_CHECK(dresidual.shape() == dx.shape() && dresidual.dtype() == dx.dtype(),
              "RMSNormBackward: dresidual ", dresidual.ToString(), " for dx ", dx.ToString());
  }
  if (ActDType("RMSNormBackward", {{"dy", &dy}, {"x", &x}, {"w", &w}, {"dx", &dx}},
               {{"rstd", &rstd}, {"dw", &dw}}) == DType::kBF16) {
    const bf16* res = dresidual.defined() ? FB(dresidual) : nullptr;
    if (e.is_cuda()) {
      Tensor scratch = e.Empty({cuda::RMSNormBackwardScratchFloats(n, c)});
      cuda::RMSNormBackward(FB(dy), FB(x), FB(w), F(rstd), MB(dx), M(dw), M(scratch), n, c,
                            e.stream, res);
    } else {
      cpu::RMSNormBackward(FB(dy), FB(x), FB(w), F(rstd), MB(dx), M(dw), n, c, res);
    }
    return;
  }
  const float* res = dresidual.defined() ? F(dresidual) : nullptr;
  if (e.is_cuda()) {
    Tensor scratch = e.Empty({cuda::LayerNormBackwardScratchFloats(n, c)});
    cuda::RMSNormBackward(F(dy), F(x), F(w), F(rstd), M(dx), M(dw), M(scratch), n, c, e.stream,
                          res);
  } else {
    cpu::RMSNormBackward(F(dy), F(x), F(w), F(rstd), M(dx), M(dw), n, c, res);
  }
}

void GeluForward(const Exec& e, const Tensor& x, const Tensor& y) {
  CheckOn(e, x, "x");
  if (ActDType("GeluForward", {{"x", &x}, {"y", &y}}) == DType::kBF16) {
    if (e.is_cuda()) {
      cuda::GeluForward(FB(x), MB(y), x.numel(), e.stream);
    } else {
      cpu::GeluForward(FB(x), MB(y), x.numel());
    }
    return;
  }
  if (e.is_cuda()) {
    cuda::GeluForward(F(x), M(y), x.numel(), e.stream);
  } else {
    cpu::GeluForward(F(x), M(y), x.numel());
  }
}

void GeluBackward(const Exec& e, const Tensor& dy, const Tensor& x, const Tensor& dx) {
  CheckOn(e, dy, "dy");
  if (ActDType("GeluBackward", {{"dy", &dy}, {"x", &x}, {"dx", &dx}}) == DType::kBF16) {
    if (e.is_cuda()) {
      cuda::GeluBackward(FB(dy), FB(x), MB(dx), x.numel(), e.stream);
    } else {
      cpu::GeluBackward(FB(dy), FB(x), MB(dx), x.numel());
    }
    return;
  }
  if (e.is_cuda()) {
    cuda::GeluBackward(F(dy), F(x), M(dx), x.numel(), e.stream);
  } else {
    cpu::GeluBackward(F(dy), F(x), M(dx), x.numel());
  }
}

void SwiGluForward(const Exec& e, const Tensor& x, const Tensor& y) {
  CheckOn(e, x, "x");
  const int64_t n = Rows(x), h = x.dim(-1) / 2;
  GTP_CHECK(y.numel() == n * h, "SwiGluForward: y ", y.ToString());
  if (ActDType("SwiGluForward", {{"x", &x}, {"y", &y}}) == DType::kBF16) {
    if (e.is_cuda()) {
      cuda::SwiGluForward(FB(x), MB(y), n, h, e.stream);
    } else {
      cpu::SwiGluForward(FB(x), MB(y), n, h);
    }
    return;
  }
  if (e.is_cuda()) {
    cuda::SwiGluForward(F(x), M(y), n, h, e.stream);
  } else {
    cpu::SwiGluForward(F(x), M(y), n, h);
  }
}

void SwiGluBackward(const Exec& e, const Tensor& dy, const Tensor& x, const Tensor& dx) {
  CheckOn(e, dy, "dy");
  const int64_t n = Rows(x), h = x.dim(-1) / 2;
  if (ActDType("SwiGluBackward", {{"dy", &dy}, {"x", &x}, {"dx", &dx}}) == DType::kBF16) {
    if (e.is_cuda()) {
      cuda::SwiGluBackward(FB(dy), FB(x), MB(dx), n, h, e.stream);
    } else {
      cpu::SwiGluBackward(FB(dy), FB(x), MB(dx), n, h);
    }
    return;
  }
  if (e.is_cuda()) {
    cuda::SwiGluBackward(F(dy), F(x), M(dx), n, h, e.stream);
  } else {
    cpu::SwiGluBackward(F(dy), F(x), M(dx), n, h);
  }
}

void AttentionForward(const Exec& e, const Tensor& q, const Tensor& k, const Tensor& v,
                      const Tensor& out, const Tensor& att, bool causal) {
  CheckOn(e, q, "q");
  const int64_t B = q.dim(0), T = q.dim(1), NH = q.dim(2), HS = q.dim(3), NKV = k.dim(2);
  GTP_CHECK(att.numel() == B * NH * T * T, "AttentionForward: att ", att.ToString());
  if (e.is_cuda()) {
    GTP_CHECK(e.blas != nullptr, "CUDA Exec without a BlasContext");
    cuda::AttentionForwardGemm(*e.blas, F(q), F(k), F(v), M(out), M(att), B, T, NH, NKV, HS,
                               e.stream, causal);
  } else {
    cpu::AttentionForward(F(q), F(k), F(v), M(out), M(att), B, T, NH, NKV, HS, causal);
  }
}

void AttentionBackward(const Exec& e, const Tensor& dout, const Tensor& q, const Tensor& k,
                       const Tensor& v, const Tensor& att, const Tensor& dq, const Tensor& dk,
                       const Tensor& dv, bool causal) {
  CheckOn(e, dout, "dout");
  const int64_t B = q.dim(0), T = q.dim(1), NH = q.dim(2), HS = q.dim(3), NKV = k.dim(2);
  Tensor scratch = e.Empty({B * NH * T * T});
  if (e.is_cuda()) {
    GTP_CHECK(e.blas != nullptr, "CUDA Exec without a BlasContext");
    cuda::AttentionBackwardGemm(*e.blas, F(dout), F(q), F(k), F(v), F(att), M(dq), M(dk), M(dv),
                                M(scratch), B, T, NH, NKV, HS, e.stream, causal);
  } else {
    cpu::AttentionBackward(F(dout), F(q), F(k), F(v), F(att), M(dq), M(dk), M(dv), M(scratch), B, T,
                           NH, NKV, HS, causal);
  }
}

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
  if (e.is_cuda() && e.attention != nullptr) {
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
  if (e.is_cuda()) {
    cuda::FlashAttentionForward(q.data<bf16>(), k.data<bf16>(), v.data<bf16>(), out.data<bf16>(),
                                M(lse), B, T, NH, NKV, HS, e.stream, causal);
  } else if (q.dtype() == DType::kBF16) {
    cpu::FlashAttentionForward(q.data<bf16>(), k.data<bf16>(), v.data<bf16>(), out.data<bf16>(),
                               M(lse), B, T, NH, NKV, HS, causal);
  } else {
    cpu::FlashAttentionForward(F(q), F(k), F(v), M(out), M(lse), B, T, NH, NKV, HS, causal);
  }
}

void FlashAttentionBackward(const Exec& e, const Tensor& dout, const Tensor& q, const Tensor& k,
                            const Tensor& v, const Tensor& out, const Tensor& lse, const Tensor& dq,
                            const Tensor& dk, const Tensor& dv, bool causal) {
  CheckFlashShapes(e, "FlashAttentionBackward", q, k, v, out, lse);
  for (const Tensor* t : {&dout, &dq}) {
    CheckOn(e, *t, "dout/dq");
    GTP_CHECK(t->shape() == q.shape() && t->dtype() == q.dtype(), "FlashAttentionBackward: ",
              t->ToString(), " vs q ", q.ToString());
  }
  for (const Tensor* t : {&dk, &dv}) {
    CheckOn(e, *t, "dk/dv");
    GTP_CHECK(t->shape() == k.shape() && t->dtype() == k.dtype(), "FlashAttentionBackward: ",
              t->ToString(), " vs k ", k.ToString());
  }
  const int64_t B = q.dim(0), T = q.dim(1), NH = q.dim(2), HS = q.dim(3), NKV = k.dim(2);
  if (e.is_cuda() && e.attention != nullptr) {
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
  if (e.is_cuda()) {
    const int64_t bytes = cuda::FlashAttentionBackwardScratchBytes(B, T, NH, NKV, HS);
    Tensor scratch = e.Empty({(bytes + 3) / 4});
    cuda::FlashAttentionBackward(dout.data<bf16>(), q.data<bf16>(), k.data<bf16>(), v.data<bf16>(),
                                 out.data<bf16>(), F(lse), dq.data<bf16>(), dk.data<bf16>(),
                                 dv.data<bf16>(), scratch.raw_data(), B, T, NH, NKV, HS, e.stream,
                                 causal);
  } else if (q.dtype() == DType::kBF16) {
    cpu::FlashAttentionBackward(dout.data<bf16>(), q.data<bf16>(), k.data<bf16>(), v.data<bf16>(),
                                out.data<bf16>(), F(lse), dq.data<bf16>(), dk.data<bf16>(),
                                dv.data<bf16>(), B, T, NH, NKV, HS, causal);
  } else {
    cpu::FlashAttentionBackward(F(dout), F(q), F(k), F(v), F(out), F(lse), M(dq), M(dk), M(dv), B,
                                T, NH, NKV, HS, causal);
  }
}

namespace {
const int32_t* Positions(const Exec& e, const Tensor& positions, int64_t T) {
  if (!positions.defined()) return nullptr;
  CheckOn(e, positions, "positions");
  GTP_CHECK(positions.dtype() == DType::kI32 && positions.numel() == T, "RoPE: positions ",
            positions.ToString(), " for ", T, " rows");
  return positions.data<int32_t>();
}
}  // namespace

void RopeForward(const Exec& e, const Tensor& x, const Tensor& y, float theta,
                 const Tensor& positions) {
  CheckOn(e, x, "x");
  CheckOn(e, y, "y");
  GTP_CHECK(x.rank() == 4 && x.shape() == y.shape(), "RoPE: ", x.ToString(), " -> ", y.ToString());
  const int32_t* pos = Positions(e, positions, x.dim(1));
  if (ActDType("RopeForward", {{"x", &x}, {"y", &y}}) == DType::kBF16) {
    if (e.is_cuda()) {
      cuda::RopeForward(FB(x), MB(y), x.dim(0), x.dim(1), x.dim(2), x.dim(3), theta, e.stream, pos);
    } else {
      cpu::RopeForward(FB(x), MB(y), x.dim(0), x.dim(1), x.dim(2), x.dim(3), theta, pos);
    }
    return;
  }
  if (e.is_cuda()) {
    cuda::RopeForward(F(x), M(y), x.dim(0), x.dim(1), x.dim(2), x.dim(3), theta, e.stream, pos);
  } else {
    cpu::RopeForward(F(x), M(y), x.dim(0), x.dim(1), x.dim(2), x.dim(3), theta, pos);
  }
}

void RopeBackward(const Exec& e, const Tensor& dy, const Tensor& dx, float theta,
                  const Tensor& positions) {
  CheckOn(e, dy, "dy");
  CheckOn(e, dx, "dx");
  GTP_CHECK(dy.rank() == 4 && dy.shape() == dx.shape(), "RoPE: ", dy.ToString());
  const int32_t* pos = Positions(e, positions, dy.dim(1));
  if (ActDType("RopeBackward", {{"dy", &dy}, {"dx", &dx}}) == DType::kBF16) {
    if (e.is_cuda()) {
      cuda::RopeBackward(FB(dy), MB(dx), dy.dim(0), dy.dim(1), dy.dim(2), dy.dim(3), theta,
                         e.stream, pos);
    } else {
      cpu::RopeBackward(FB(dy), MB(dx), dy.dim(0), dy.dim(1), dy.dim(2), dy.dim(3), theta, pos);
    }
    return;
  }
  if (e.is_cuda()) {
    cuda::RopeBackward(F(dy), M(dx), dy.dim(0), dy.dim(1), dy.dim(2), dy.dim(3), theta, e.stream, pos);
  } else {
    cpu::RopeBackward(F(dy), M(dx), dy.dim(0), dy.dim(1), dy.dim(2), dy.dim(3), theta, pos);
  }
}

void CrossEntropyStats(const Exec& e, const Tensor& logits, const Tensor& targets,
                       const Tensor& row_max, const Tensor& target_logit, int64_t vocab_start,
                       int64_t valid_cols) {
  CheckOn(e, logits, "logits");
  const int64_t n = Rows(logits), ld = logits.dim(-1), v = valid_cols >= 0 ? valid_cols : ld;
  if (ActDType("CrossEntropyStats", {{"logits", &logits}},
               {{"row_max", &row_max}, {"target_logit", &target_logit}}) == DType::kBF16) {
    if (e.is_cuda()) {
      cuda::CrossEntropyStats(FB(logits), I(targets), M(row_max), M(target_logit), n, v,
                              vocab_start, e.stream, ld);
    } else {
      cpu::CrossEntropyStats(FB(logits), I(targets), M(row_max), M(target_logit), n, v,
                             vocab_start, ld);
    }
    return;
  }
  if (e.is_cuda()) {
    cuda::CrossEntropyStats(F(logits), I(targets), M(row_max), M(target_logit), n, v, vocab_start,
                            e.stream, ld);
  } else {
    cpu::CrossEntropyStats(F(logits), I(targets), M(row_max), M(target_logit), n, v, vocab_start, ld);
  }
}

void CrossEntropySumExp(const Exec& e, const Tensor& logits, const Tensor& row_max,
                        const Tensor& sumexp, int64_t valid_cols) {
  CheckOn(e, logits, "logits");
  const int64_t n = Rows(logits), ld = logits.dim(-1), v = valid_cols >= 0 ? valid_cols : ld;
  if (ActDType("CrossEntropySumExp", {{"logits", &logits}},
               {{"row_max", &row_max}, {"sumexp", &sumexp}}) == DType::kBF16) {
    if (e.is_cuda()) {
      cuda::CrossEntropySumExp(FB(logits), F(row_max), M(sumexp), n, v, e.stream, ld);
    } else {
      cpu::CrossEntropySumExp(FB(logits), F(row_max), M(sumexp), n, v, ld);
    }
    return;
  }
  if (e.is_cuda()) {
    cuda::CrossEntropySumExp(F(logits), F(row_max), M(sumexp), n, v, e.stream, ld);
  } else {
    cpu::CrossEntropySumExp(F(logits), F(row_max), M(sumexp), n, v, ld);
  }
}

void CrossEntropyLoss(const Exec& e, const Tensor& row_max, const Tensor& sumexp,
                      const Tensor& target_logit, const Tensor& targets, const Tensor& loss) {
  CheckOn(e, loss, "loss");
  const int64_t n = loss.numel();
  if (e.is_cuda()) {
    cuda::CrossEntropyLoss(F(row_max), F(sumexp), F(target_logit), I(targets), M(loss), n,
                           e.stream);
  } else {
    cpu::CrossEntropyLoss(F(row_max), F(sumexp), F(target_logit), I(targets), M(loss), n);
  }
}

void CrossEntropyBackward(const Exec& e, const Tensor& logits, const Tensor& row_max,
                          const Tensor& sumexp, const Tensor& targets, const Tensor& dloss,
                          const Tensor& dlogits, int64_t vocab_start, int64_t valid_cols) {
  CheckOn(e, logits, "logits");
  const int64_t n = Rows(logits), ld = logits.dim(-1), v = valid_cols >= 0 ? valid_cols : ld;
  if (ActDType("CrossEntropyBackward", {{"logits", &logits}, {"dlogits", &dlogits}},
               {{"row_max", &row_max}, {"sumexp", &sumexp}, {"dloss", &dloss}}) == DType::kBF16) {
    if (e.is_cuda()) {
      cuda::CrossEntropyBackward(FB(logits), F(row_max), F(sumexp), I(targets), F(dloss),
                                 MB(dlogits), n, v, vocab_start, e.stream, ld);
    } else {
      cpu::CrossEntropyBackward(FB(logits), F(row_max), F(sumexp), I(targets), F(dloss),
                                MB(dlogits), n, v, vocab_start, ld);
    }
    return;
  }
  if (e.is_cuda()) {
    cuda::CrossEntropyBackward(F(logits), F(row_max), F(sumexp), I(targets), F(dloss), M(dlogits),
                               n, v, vocab_start, e.stream, ld);
  } else {
    cpu::CrossEntropyBackward(F(logits), F(row_max), F(sumexp), I(targets), F(dloss), M(dlogits),
                              n, v, vocab_start, ld);
  }
}

std::vector<double> SumSquaresMany(const Exec& e, const std::vector<Tensor>& xs) {
  std::vector<double> out(xs.size(), 0.0);
  if (xs.empty()) return out;
  if (!e.is_cuda()) {
    for (size_t i = 0; i < xs.size(); ++i) {
      CheckOn(e, xs[i], "x");
      cpu::SumSquares(F(xs[i]), xs[i].numel(), &out[i]);
    }
    return out;
  }
  // Doubles in 8-byte storage (there is no f64 DType).
  Tensor sums = e.Empty({static_cast<int64_t>(xs.size())}, DType::kI64);
  double* d = static_cast<double*>(sums.raw_data());
  for (size_t i = 0; i < xs.size(); ++i) {
    CheckOn(e, xs[i], "x");
    cuda::SumSquares(F(xs[i]), xs[i].numel(), d + i, e.stream);
  }
  GTP_CHECK_OK(Copy(sums, Tensor::Wrap(out.data(), sums.shape(), DType::kI64, Device::Cpu()),
                    e.stream, /*sync=*/true));
  return out;
}

void SumSquaresInto(const Exec& e, const std::vector<Tensor>& xs, const Tensor& sums) {
  CheckOn(e, sums, "sums");
  GTP_CHECK(sums.dtype() == DType::kI64 && sums.numel() >= static_cast<int64_t>(xs.size()),
            "SumSquaresInto: sums ", sums.ToString(), " for ", xs.size(), " tensors");
  double* d = static_cast<double*>(sums.raw_data());
  for (size_t i = 0; i < xs.size(); ++i) {
    CheckOn(e, xs[i], "x");
    if (e.is_cuda()) {
      cuda::SumSquares(F(xs[i]), xs[i].numel(), d + i, e.stream);
    } else {
      cpu::SumSquares(F(xs[i]), xs[i].numel(), d + i);
    }
  }
}

void GradNormWords(const Exec& e, const Tensor& sums, int n_count, int n, const Tensor& words) {
  CheckOn(e, sums, "sums");
  CheckOn(e, words, "words");
  GTP_CHECK(sums.dtype() == DType::kI64 && sums.numel() >= n && words.numel() == 2,
            "GradNormWords: sums ", sums.ToString(), " words ", words.ToString(), " n=", n);
  const double* d = static_cast<const double*>(sums.raw_data());
  if (e.is_cuda()) {
    cuda::GradNormWords(d, n_count, n, M(words), e.stream);
  } else {
    cpu::GradNormWords(d, n_count, n, M(words));
  }
}

void GradNormFinalize(const Exec& e, const Tensor& words, double max_norm, const Tensor& out) {
  CheckOn(e, words, "words");
  CheckOn(e, out, "out");
  GTP_CHECK(words.numel() % 2 == 0 && out.numel() == 3, "GradNormFinalize: words ",
            words.ToString(), " out ", out.ToString());
  const int buffers = static_cast<int>(words.numel() / 2);
  if (e.is_cuda()) {
    cuda::GradNormFinalize(F(words), buffers, max_norm, M(out), e.stream);
  } else {
    cpu::GradNormFinalize(F(words), buffers, max_norm, M(out));
  }
}

void MaskedMeanAccumulate(const Exec& e, const Tensor& loss, const Tensor& targets,
                          const Tensor& acc, const Tensor& count) {
  CheckOn(e, loss, "loss");
  CheckOn(e, targets, "targets");
  GTP_CHECK(loss.numel() == targets.numel() && acc.numel() == 1 && count.numel() == 1,
            "MaskedMeanAccumulate: loss ", loss.ToString(), " targets ", targets.ToString());
  if (e.is_cuda()) {
    cuda::MaskedMeanAccumulate(F(loss), I(targets), loss.numel(), M(acc), M(count), e.stream);
  } else {
    cpu::MaskedMeanAccumulate(F(loss), I(targets), loss.numel(), M(acc), M(count));
  }
}

void FillReciprocal(const Exec& e, const Tensor& count, const Tensor& out) {
  CheckOn(e, out, "out");
  GTP_CHECK(count.numel() == 1, "FillReciprocal: count ", count.ToString());
  if (e.is_cuda()) {
    cuda::FillReciprocal(F(count), M(out), out.numel(), e.stream);
  } else {
    cpu::FillReciprocal(F(count), M(out), out.numel());
  }
}

void Cast(const Exec& e, const Tensor& src, const Tensor& dst) {
  CheckOn(e, src, "src");
  CheckOn(e, dst, "dst");
  GTP_CHECK(src.numel() == dst.numel(), "Cast: ", src.ToString(), " -> ", dst.ToString());
  const int64_t n = src.numel();
  if (src.dtype() == dst.dtype()) {
    CopyInto(e, src, dst);
  } else if (src.dtype() == DType::kF32 && dst.dtype() == DType::kBF16) {
    if (e.is_cuda()) {
      cuda::CastF32ToBF16(F(src), MB(dst), n, e.stream);
    } else {
      cpu::CastF32ToBF16(F(src), MB(dst), n);
    }
  } else if (src.dtype() == DType::kBF16 && dst.dtype() == DType::kF32) {
    if (e.is_cuda()) {
      cuda::CastBF16ToF32(FB(src), M(dst), n, e.stream);
    } else {
      cpu::CastBF16ToF32(FB(src), M(dst), n);
    }
  } else {
    GTP_CHECK(false, "Cast: unsupported ", src.ToString(), " -> ", dst.ToString());
  }
}

void CountValid(const Exec& e, const Tensor& targets, const Tensor& count) {
  CheckOn(e, targets, "targets");
  GTP_CHECK(count.numel() == 1, "CountValid: count ", count.ToString());
  if (e.is_cuda()) {
    cuda::CountValid(I(targets), targets.numel(), M(count), e.stream);
  } else {
    cpu::CountValid(I(targets), targets.numel(), M(count));
  }
}

void CrossEntropyFused(const Exec& e, const Tensor& logits, const Tensor& targets,
                       const Tensor& dloss, const Tensor& loss, int64_t valid_cols) {
  CheckOn(e, logits, "logits");
  const int64_t n = Rows(logits), ld = logits.dim(-1), v = valid_cols >= 0 ? valid_cols : ld;
  GTP_CHECK(targets.numel() == n && dloss.numel() == n && loss.numel() == n,
            "CrossEntropyFused: logits ", logits.ToString(), " targets ", targets.ToString(),
            " dloss ", dloss.ToString(), " loss ", loss.ToString());
  if (e.is_cuda() && logits.dtype() == DType::kBF16 &&
      cuda::CrossEntropyFusedSupported(logits.raw_data(), v, ld)) {
    cuda::CrossEntropyFused(MB(logits), I(targets), F(dloss), M(loss), n, v, ld, e.stream);
    return;
  }
  // Every other case: the stages, in place.
  Tensor row_max = e.Empty({n}), sumexp = e.Empty({n}), target_logit = e.Empty({n});
  CrossEntropyStats(e, logits, targets, row_max, target_logit, /*vocab_start=*/0, v);
  CrossEntropySumExp(e, logits, row_max, sumexp, v);
  CrossEntropyLoss(e, row_max, sumexp, target_logit, targets, loss);
  CrossEntropyBackward(e, logits, row_max, sumexp, targets, dloss, logits, /*vocab_start=*/0, v);
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
  if (e.is_cuda()) {
    cuda::QuantizeFp8Blockwise(x.raw_data(), x.dtype(), qp, sp, x.numel(), fmt, e.stream);
  } else {
    cpu::QuantizeFp8Blockwise(x.raw_data(), x.dtype(), qp, sp, x.numel(), fmt);
  }
}

void DequantizeFp8Blockwise(const Exec& e, const Tensor& q, const Tensor& scales, const Tensor& y,
                            DType fmt) {
  CheckFp8(e, "DequantizeFp8Blockwise", y, q, scales);
  const uint8_t* qp = static_cast<const uint8_t*>(q.raw_data());
  const uint8_t* sp = static_cast<const uint8_t*>(scales.raw_data());
  if (e.is_cuda()) {
    cuda::DequantizeFp8Blockwise(qp, sp, y.raw_data(), y.dtype(), y.numel(), fmt, e.stream);
  } else {
    cpu::DequantizeFp8Blockwise(qp, sp, y.raw_data(), y.dtype(), y.numel(), fmt);
  }
}

}  // namespace ops
}  // namespace gtp::kernels
