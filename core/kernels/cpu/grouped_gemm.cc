// Grouped GEMM on the CPU: for each group g, C_g = alpha·op(A_g)·op(B_g) +
// beta·C_g (GemmGroup in core/kernels/kernels.h), one cpu::Gemm per group in
// order. Groups with m == 0 or n == 0 are skipped; k == 0 groups are scaled
// here (C = beta·C, zeros when beta == 0 without reading C), so A and B are
// never touched for them.
#include <cstddef>

#include "core/kernels/cpu.h"
#include "core/status.h"

namespace gtp::kernels::cpu {
namespace {

// C[m, n] (packed) = beta·C; beta == 0 writes zeros.
void ScaleC(void* c, DType type, int64_t m, int64_t n, float beta) {
  const size_t count = static_cast<size_t>(m) * static_cast<size_t>(n);
  if (type == DType::kBF16) {
    bf16* p = static_cast<bf16*>(c);
    for (size_t i = 0; i < count; ++i) {
      p[i].bits = F32ToBF16Bits(beta == 0.0f ? 0.0f : beta * BF16BitsToF32(p[i].bits));
    }
  } else {
    float* p = static_cast<float*>(c);
    for (size_t i = 0; i < count; ++i) p[i] = beta == 0.0f ? 0.0f : beta * p[i];
  }
}

}  // namespace

void GroupedGemm(const GemmDesc& d, const GemmGroup* groups, int count) {
  CheckGroupedGemm(d, groups, count);
  for (int g = 0; g < count; ++g) {
    const GemmGroup& p = groups[g];
    if (p.m == 0 || p.n == 0) continue;
    if (p.k == 0) {
      ScaleC(p.c, d.c_type, p.m, p.n, d.beta);
      continue;
    }
    GemmDesc one = d;
    one.m = p.m, one.n = p.n, one.k = p.k;
    Gemm(one, p.a, p.b, p.c);
  }
}

}  // namespace gtp::kernels::cpu
