#include "core/kernels/ssm/mamba_ops.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/kernels/ssm/mamba_ops_cuda.h"
#include "core/status.h"

namespace gtp::kernels::ssm {

namespace {

float Sigmoid(float v) { return 1.0f / (1.0f + std::exp(-v)); }
float Silu(float v) { return v * Sigmoid(v); }
// d silu(v) / dv.
float SiluGrad(float v) {
  const float s = Sigmoid(v);
  return s * (1.0f + v * (1.0f - s));
}

// f32, contiguous, on the exec's device.
void CheckF32(const Exec& e, const char* op, std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts) {
    GTP_CHECK(t->defined() && t->dtype() == DType::kF32, op, ": f32 tensors only, got ",
              t->defined() ? t->ToString() : std::string("undefined"));
    GTP_CHECK(t->device() == e.device && t->is_contiguous(), op, ": ", t->ToString(),
              " must be contiguous on ", e.device.ToString());
  }
}

// An output the model dtype may take: f32 or bf16 (the value rounded to
// nearest even, as a cast), contiguous on e's device; `name` in the error.
bool CheckF32OrBf16(const Exec& e, const char* op, const char* name, const Tensor& t) {
  GTP_CHECK(t.defined() && (t.dtype() == DType::kF32 || t.dtype() == DType::kBF16) &&
                t.device() == e.device && t.is_contiguous(),
            op, ": ", name, " must be a contiguous f32 or bf16 tensor on ", e.device.ToString(),
            ", got ", t.defined() ? t.ToString() : std::string("undefined"));
  return t.dtype() == DType::kBF16;
}

const float* F(const Tensor& t) { return t.data<float>(); }
float* M(const Tensor& t) { return t.data<float>(); }

// The conv's pre-activation at (b, t, c).
float ConvAt(const float* x, const float* w, const float* bias, int64_t T, int64_t Ch, int64_t K,
             int64_t b, int64_t t, int64_t c) {
  float acc = bias[c];
  for (int64_t k = 0; k < K; ++k) {
    const int64_t s = t - (K - 1) + k;
    if (s >= 0) acc += w[c * K + k] * x[(b * T + s) * Ch + c];
  }
  return acc;
}

}  // namespace

void CausalConv1dForward(const Exec& e, const Tensor& x, const Tensor& w, const Tensor& bias,
                         const Tensor& y, bool silu) {
  CheckF32(e, "CausalConv1dForward", {&x, &w, &bias, &y});
  GTP_CHECK(x.rank() == 3 && w.rank() == 2 && w.dim(0) == x.dim(2) && bias.numel() == x.dim(2) &&
                y.shape() == x.shape(),
            "CausalConv1dForward: x ", x.ToString(), " w ", w.ToString(), " bias ",
            bias.ToString(), " y ", y.ToString());
  const int64_t B = x.dim(0), T = x.dim(1), Ch = x.dim(2), K = w.dim(1);
  if (e.is_cuda()) {
    cuda::CausalConv1dForward(F(x), F(w), F(bias), M(y), B, T, Ch, K, silu, e.stream);
    return;
  }
  const float *px = x.data<float>(), *pw = w.data<float>(), *pb = bias.data<float>();
  float* py = y.data<float>();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t c = 0; c < Ch; ++c) {
        const float v = ConvAt(px, pw, pb, T, Ch, K, b, t, c);
        py[(b * T + t) * Ch + c] = silu ? Silu(v) : v;
      }
}

void CausalConv1dBackward(const Exec& e, const Tensor& dy, const Tensor& x, const Tensor& w,
                          const Tensor& bias, bool silu, const Tensor& dx, const Tensor& dw,
                          const Tensor& dbias) {
  CheckF32(e, "CausalConv1dBackward", {&dy, &x, &w, &bias, &dw, &dbias});
  const bool dx_bf16 = CheckF32OrBf16(e, "CausalConv1dBackward", "dx", dx);
  GTP_CHECK(dy.shape() == x.shape() && dx.shape() == x.shape() && dw.shape() == w.shape() &&
                dbias.numel() == bias.numel() && x.rank() == 3 && w.dim(0) == x.dim(2),
            "CausalConv1dBackward: dy ", dy.ToString(), " x ", x.ToString(), " w ", w.ToString());
  const int64_t B = x.dim(0), T = x.dim(1), Ch = x.dim(2), K = w.dim(1);
  if (e.is_cuda()) {
    // Freed on return without a sync: reused only by later work on the stream.
    Tensor scratch =
        e.Empty({std::max<int64_t>(cuda::CausalConv1dBackwardScratchFloats(B, T, Ch, K), 1)});
    if (dx_bf16) {
      cuda::CausalConv1dBackward(F(dy), F(x), F(w), F(bias), silu, dx.data<bf16>(), M(dw), M(dbias),
                                 M(scratch), B, T, Ch, K, e.stream);
    } else {
      cuda::CausalConv1dBackward(F(dy), F(x), F(w), F(bias), silu, M(dx), M(dw), M(dbias),
                                 M(scratch), B, T, Ch, K, e.stream);
    }
    return;
  }
  const float *px = x.data<float>(), *pw = w.data<float>(), *pb = bias.data<float>(),
              *pdy = dy.data<float>();
  // A bf16 dx: the f32 sums below, then rounded (as a cast).
  std::vector<float> dx32(dx_bf16 ? static_cast<size_t>(dx.numel()) : 0);
  float *pdx = dx_bf16 ? dx32.data() : dx.data<float>(), *pdw = dw.data<float>(),
        *pdb = dbias.data<float>();
  for (int64_t i = 0; i < dx.numel(); ++i) pdx[i] = 0.0f;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t c = 0; c < Ch; ++c) {
        float g = pdy[(b * T + t) * Ch + c];
        if (silu) g *= SiluGrad(ConvAt(px, pw, pb, T, Ch, K, b, t, c));
        pdb[c] += g;
        for (int64_t k = 0; k < K; ++k) {
          const int64_t s = t - (K - 1) + k;
          if (s < 0) continue;
          pdw[c * K + k] += g * px[(b * T + s) * Ch + c];
          pdx[(b * T + s) * Ch + c] += g * pw[c * K + k];
        }
      }
  if (dx_bf16) {
    for (int64_t i = 0; i < dx.numel(); ++i) dx.data<bf16>()[i] = ToBF16(dx32[i]);
  }
}

void SoftplusBiasForward(const Exec& e, const Tensor& raw, const Tensor& bias, const Tensor& dt) {
  CheckF32(e, "SoftplusBiasForward", {&raw, &bias, &dt});
  GTP_CHECK(raw.rank() == 2 && bias.numel() == raw.dim(1) && dt.shape() == raw.shape(),
            "SoftplusBiasForward: raw ", raw.ToString(), " bias ", bias.ToString(), " dt ",
            dt.ToString());
  const int64_t N = raw.dim(0), H = raw.dim(1);
  if (e.is_cuda()) {
    cuda::SoftplusBiasForward(F(raw), F(bias), M(dt), N, H, e.stream);
    return;
  }
  for (int64_t n = 0; n < N; ++n)
    for (int64_t h = 0; h < H; ++h) {
      const float u = raw.data<float>()[n * H + h] + bias.data<float>()[h];
      dt.data<float>()[n * H + h] = u > 20.0f ? u : std::log1p(std::exp(u));
    }
}

void SoftplusBiasBackward(const Exec& e, const Tensor& ddt, const Tensor& raw, const Tensor& bias,
                          const Tensor& draw, const Tensor& dbias) {
  CheckF32(e, "SoftplusBiasBackward", {&ddt, &raw, &bias, &draw, &dbias});
  GTP_CHECK(ddt.shape() == raw.shape() && draw.shape() == raw.shape() &&
                dbias.numel() == bias.numel() && bias.numel() == raw.dim(1),
            "SoftplusBiasBackward: ddt ", ddt.ToString(), " raw ", raw.ToString());
  const int64_t N = raw.dim(0), H = raw.dim(1);
  if (e.is_cuda()) {
    Tensor scratch =
        e.Empty({std::max<int64_t>(cuda::SoftplusBiasBackwardScratchFloats(N, H), 1)});
    cuda::SoftplusBiasBackward(F(ddt), F(raw), F(bias), M(draw), M(dbias), M(scratch), N, H,
                               e.stream);
    return;
  }
  for (int64_t n = 0; n < N; ++n)
    for (int64_t h = 0; h < H; ++h) {
      const float u = raw.data<float>()[n * H + h] + bias.data<float>()[h];
      const float g = ddt.data<float>()[n * H + h] * (u > 20.0f ? 1.0f : Sigmoid(u));
      draw.data<float>()[n * H + h] = g;
      dbias.data<float>()[h] += g;
    }
}

void NegExpForward(const Exec& e, const Tensor& a_log, const Tensor& a) {
  CheckF32(e, "NegExpForward", {&a_log, &a});
  GTP_CHECK(a.numel() == a_log.numel(), "NegExpForward: a_log ", a_log.ToString(), " a ",
            a.ToString());
  const int64_t H = a.numel();
  if (e.is_cuda()) {
    cuda::NegExpForward(F(a_log), M(a), H, e.stream);
    return;
  }
  for (int64_t h = 0; h < H; ++h) M(a)[h] = -std::exp(F(a_log)[h]);
}

void NegExpBackwardAccumulate(const Exec& e, const Tensor& da, const Tensor& a,
                              const Tensor& a_log_grad) {
  CheckF32(e, "NegExpBackwardAccumulate", {&da, &a, &a_log_grad});
  GTP_CHECK(da.numel() == a.numel() && a_log_grad.numel() == a.numel(),
            "NegExpBackwardAccumulate: da ", da.ToString(), " a ", a.ToString(), " a_log_grad ",
            a_log_grad.ToString());
  const int64_t H = a.numel();
  if (e.is_cuda()) {
    cuda::NegExpBackwardAccumulate(F(da), F(a), M(a_log_grad), H, e.stream);
    return;
  }
  for (int64_t h = 0; h < H; ++h) M(a_log_grad)[h] += F(da)[h] * F(a)[h];
}

void GatedRmsNormForward(const Exec& e, const Tensor& x, const Tensor& z, const Tensor& w,
                         const Tensor& y, const Tensor& rstd, int64_t group, float eps) {
  CheckF32(e, "GatedRmsNormForward", {&x, &z, &w, &rstd});
  const bool y_bf16 = CheckF32OrBf16(e, "GatedRmsNormForward", "y", y);
  GTP_CHECK(x.rank() == 2 && z.shape() == x.shape() && y.shape() == x.shape() &&
                w.numel() == x.dim(1) && group > 0 && x.dim(1) % group == 0 &&
                rstd.numel() == x.dim(0) * (x.dim(1) / group),
            "GatedRmsNormForward: x ", x.ToString(), " z ", z.ToString(), " w ", w.ToString(),
            " rstd ", rstd.ToString(), " group ", group);
  const int64_t N = x.dim(0), Ch = x.dim(1), Gs = Ch / group;
  if (e.is_cuda()) {
    if (y_bf16) {
      cuda::GatedRmsNormForward(F(x), F(z), F(w), y.data<bf16>(), M(rstd), N, Ch, group, eps,
                                e.stream);
    } else {
      cuda::GatedRmsNormForward(F(x), F(z), F(w), M(y), M(rstd), N, Ch, group, eps, e.stream);
    }
    return;
  }
  for (int64_t n = 0; n < N; ++n)
    for (int64_t gi = 0; gi < Gs; ++gi) {
      double ss = 0;
      for (int64_t j = 0; j < group; ++j) {
        const int64_t i = n * Ch + gi * group + j;
        const float g = x.data<float>()[i] * Silu(z.data<float>()[i]);
        ss += static_cast<double>(g) * g;
      }
      const float r = 1.0f / std::sqrt(static_cast<float>(ss / group) + eps);
      rstd.data<float>()[n * Gs + gi] = r;
      for (int64_t j = 0; j < group; ++j) {
        const int64_t c = gi * group + j, i = n * Ch + c;
        const float g = x.data<float>()[i] * Silu(z.data<float>()[i]);
        const float v = g * r * w.data<float>()[c];
        if (y_bf16) {
          y.data<bf16>()[i] = ToBF16(v);
        } else {
          y.data<float>()[i] = v;
        }
      }
    }
}

void GatedRmsNormBackward(const Exec& e, const Tensor& dy, const Tensor& x, const Tensor& z,
                          const Tensor& w, const Tensor& rstd, int64_t group, const Tensor& dx,
                          const Tensor& dz, const Tensor& dw) {
  CheckF32(e, "GatedRmsNormBackward", {&x, &z, &w, &rstd, &dx, &dw});
  const bool dz_bf16 = CheckF32OrBf16(e, "GatedRmsNormBackward", "dz", dz);
  const bool dy_bf16 = CheckF32OrBf16(e, "GatedRmsNormBackward", "dy", dy);
  GTP_CHECK(dy.shape() == x.shape() && z.shape() == x.shape() && dx.shape() == x.shape() &&
                dz.shape() == x.shape() && dw.numel() == w.numel() && w.numel() == x.dim(1) &&
                group > 0 && x.dim(1) % group == 0,
            "GatedRmsNormBackward: dy ", dy.ToString(), " x ", x.ToString(), " group ", group);
  const int64_t N = x.dim(0), Ch = x.dim(1), Gs = Ch / group;
  GTP_CHECK(rstd.numel() == N * Gs, "GatedRmsNormBackward: rstd ", rstd.ToString());
  if (e.is_cuda()) {
    Tensor scratch =
        e.Empty({std::max<int64_t>(cuda::GatedRmsNormBackwardScratchFloats(N, Ch), 1)});
    auto run = [&](auto* dy_data) {
      if (dz_bf16) {
        cuda::GatedRmsNormBackward(dy_data, F(x), F(z), F(w), F(rstd), M(dx), dz.data<bf16>(),
                                   M(dw), M(scratch), N, Ch, group, e.stream);
      } else {
        cuda::GatedRmsNormBackward(dy_data, F(x), F(z), F(w), F(rstd), M(dx), M(dz), M(dw),
                                   M(scratch), N, Ch, group, e.stream);
      }
    };
    if (dy_bf16) {
      run(dy.data<bf16>());
    } else {
      run(F(dy));
    }
    return;
  }
  // dy's values widened exactly (a bf16 dy: its f32 cast's values).
  auto dy_at = [&](int64_t i) { return dy_bf16 ? ToF32(dy.data<bf16>()[i]) : dy.data<float>()[i]; };
  for (int64_t n = 0; n < N; ++n)
    for (int64_t gi = 0; gi < Gs; ++gi) {
      const float r = rstd.data<float>()[n * Gs + gi];
      // y = g·r·w: dg = r·(w·dy) − g·r³·mean(w·dy·g).
      double dot = 0;
      for (int64_t j = 0; j < group; ++j) {
        const int64_t c = gi * group + j, i = n * Ch + c;
        const float g = x.data<float>()[i] * Silu(z.data<float>()[i]);
        dot += static_cast<double>(w.data<float>()[c]) * dy_at(i) * g;
        dw.data<float>()[c] += dy_at(i) * g * r;
      }
      const float m = static_cast<float>(dot / group);
      for (int64_t j = 0; j < group; ++j) {
        const int64_t c = gi * group + j, i = n * Ch + c;
        const float zi = z.data<float>()[i], xi = x.data<float>()[i];
        const float g = xi * Silu(zi);
        const float dg = r * w.data<float>()[c] * dy_at(i) - g * r * r * r * m;
        dx.data<float>()[i] = dg * Silu(zi);
        const float dzi = dg * xi * SiluGrad(zi);
        if (dz_bf16) {
          dz.data<bf16>()[i] = ToBF16(dzi);
        } else {
          dz.data<float>()[i] = dzi;
        }
      }
    }
}

}  // namespace gtp::kernels::ssm
