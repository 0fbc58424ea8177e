#include "core/kernels/kernels.h"

#include <cmath>

#include "core/status.h"

namespace gtp::kernels {

void NsCoefficientsAt(NsCoefficients set, int step, float* a, float* b, float* c) {
  static constexpr float kQuintic[5][3] = {{4.0848f, -6.8946f, 2.9270f},
                                           {3.9505f, -6.3029f, 2.6377f},
                                           {3.7418f, -5.5913f, 2.3037f},
                                           {2.8769f, -3.1427f, 1.2046f},
                                           {2.8366f, -3.0525f, 1.2012f}};
  GTP_CHECK(step >= 0, "negative Newton-Schulz step ", step);
  if (set == NsCoefficients::kSimple) {
    *a = 3.4445f;
    *b = -4.7750f;
    *c = 2.0315f;
    return;
  }
  const float* k = kQuintic[step % 5];
  *a = k[0];
  *b = k[1];
  *c = k[2];
}

const char* GemmEpilogueName(GemmEpilogue e) {
  switch (e) {
    case GemmEpilogue::kNone:
      return "none";
    case GemmEpilogue::kGeluAux:
      return "gelu_aux";
    case GemmEpilogue::kDGeluBGrad:
      return "dgelu_bgrad";
    case GemmEpilogue::kBGrad:
      return "bgrad";
  }
  return "invalid";
}

void CheckGemmEpilogue(const GemmDesc& d) {
  const char* name = GemmEpilogueName(d.epilogue);
  GTP_CHECK(d.c_in == nullptr || d.epilogue == GemmEpilogue::kNone, "Gemm(", name,
            "): c_in (a separate beta·C input) is for epilogue none only");
  switch (d.epilogue) {
    case GemmEpilogue::kNone:
      GTP_CHECK(d.aux == nullptr && d.bias_grad == nullptr,
                "Gemm: aux/bias_grad are set but epilogue is none");
      return;
    case GemmEpilogue::kGeluAux:
      GTP_CHECK(d.beta == 0.0f && d.bias_grad == nullptr, "Gemm(", name,
                "): needs beta == 0 and no bias_grad (beta=", d.beta, ")");
      break;
    case GemmEpilogue::kDGeluBGrad:
      GTP_CHECK(d.beta == 0.0f && d.alpha == 1.0f && d.bias == nullptr && d.aux != nullptr,
                "Gemm(", name, "): needs beta == 0, alpha == 1, no bias and the saved "
                "pre-activation in aux (beta=", d.beta, " alpha=", d.alpha,
                " bias=", d.bias != nullptr, " aux=", d.aux != nullptr, ")");
      break;
    case GemmEpilogue::kBGrad:
      GTP_CHECK(d.alpha == 1.0f && d.bias == nullptr && d.aux == nullptr && d.bias_grad != nullptr,
                "Gemm(", name, "): needs alpha == 1, no bias, no aux and a bias_grad [m] (alpha=",
                d.alpha, " bias=", d.bias != nullptr, " aux=", d.aux != nullptr,
                " bias_grad=", d.bias_grad != nullptr, ")");
      break;
    default:
      GTP_CHECK(false, "Gemm: invalid epilogue ", static_cast<int>(d.epilogue));
  }
  const int64_t ld_aux = d.ld_aux > 0 ? d.ld_aux : d.n;
  GTP_CHECK(d.ld_aux >= 0 && (d.aux == nullptr || ld_aux >= d.n), "Gemm(", name, "): ld_aux=",
            d.ld_aux, " < n=", d.n);
}

void CheckGroupedGemm(const GemmDesc& d, const GemmGroup* groups, int count) {
  GTP_CHECK(count >= 0, "GroupedGemm: negative group count ", count);
  GTP_CHECK(count == 0 || groups != nullptr, "GroupedGemm: null groups for count ", count);
  GTP_CHECK(d.m == 0 && d.n == 0 && d.k == 0,
            "GroupedGemm: sizes come from each GemmGroup; the shared GemmDesc must have "
            "m = n = k = 0 (got m=", d.m, " n=", d.n, " k=", d.k, ")");
  GTP_CHECK(d.lda == 0 && d.ldb == 0 && d.ldc == 0,
            "GroupedGemm: groups are packed; the shared GemmDesc must have lda = ldb = ldc = 0 "
            "(got lda=", d.lda, " ldb=", d.ldb, " ldc=", d.ldc, ")");
  GTP_CHECK(d.epilogue == GemmEpilogue::kNone && d.bias == nullptr && d.aux == nullptr &&
                d.bias_grad == nullptr && d.c_in == nullptr,
            "GroupedGemm: no epilogue, bias, aux, bias_grad or c_in (epilogue=",
            GemmEpilogueName(d.epilogue), " bias=", d.bias != nullptr, " aux=", d.aux != nullptr,
            " bias_grad=", d.bias_grad != nullptr, " c_in=", d.c_in != nullptr, ")");
  GTP_CHECK(d.ab_type == DType::kF32 || d.ab_type == DType::kBF16,
            "GroupedGemm: ab_type must be f32 or bf16, got ", DTypeName(d.ab_type));
  GTP_CHECK(d.c_type == DType::kF32 || d.c_type == DType::kBF16,
            "GroupedGemm: c_type must be f32 or bf16, got ", DTypeName(d.c_type));
  GTP_CHECK(!(d.ab_type == DType::kF32 && d.c_type == DType::kBF16),
            "GroupedGemm: f32 A/B with a bf16 C is not supported; use bf16 operands or an f32 C");
  for (int g = 0; g < count; ++g) {
    const GemmGroup& p = groups[g];
    GTP_CHECK(p.m >= 0 && p.n >= 0 && p.k >= 0, "GroupedGemm: group ", g, " has a negative size m=",
              p.m, " n=", p.n, " k=", p.k);
    if (p.m == 0 || p.n == 0) continue;
    GTP_CHECK(p.c != nullptr, "GroupedGemm: group ", g, " has a null C (m=", p.m, " n=", p.n, ")");
    GTP_CHECK(p.k == 0 || (p.a != nullptr && p.b != nullptr), "GroupedGemm: group ", g,
              " has a null A or B (m=", p.m, " n=", p.n, " k=", p.k, ")");
  }
}

void AdamWStepScalars(const AdamWParams& hp, float out[3]) {
  const double t = static_cast<double>(hp.step);
  out[0] = hp.lr;
  out[1] = static_cast<float>(1.0 - std::pow(static_cast<double>(hp.beta1), t));
  out[2] = static_cast<float>(1.0 - std::pow(static_cast<double>(hp.beta2), t));
}

}  // namespace gtp::kernels
