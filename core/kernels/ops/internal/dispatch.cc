// core/kernels/ops/internal/dispatch.cc — The argument checks the ops share
// (dispatch.h).
#include "core/kernels/ops/internal/dispatch.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "core/status.h"

namespace gtp::kernels::ops::internal {

void CheckOn(const Exec& e, const Tensor& t, const char* what) {
  GTP_CHECK(t.defined(), what, " is undefined");
  GTP_CHECK(t.device() == e.device, what, " is on ", t.device().ToString(), ", exec on ",
            e.device.ToString());
  GTP_CHECK(t.is_contiguous(), what, " must be contiguous: ", t.ToString());
}

void CheckHeadsOn(const Exec& e, const Tensor& t, const char* what) {
  GTP_CHECK(t.defined(), what, " is undefined");
  GTP_CHECK(t.device() == e.device, what, " is on ", t.device().ToString(), ", exec on ",
            e.device.ToString());
}

int64_t TokenStride(const char* op, const char* what, const Tensor& t) {
  GTP_CHECK(t.rank() == 4, op, ": ", what, " ", t.ToString(), " is not [B, T, heads, HS]");
  const int64_t B = t.dim(0), T = t.dim(1), H = t.dim(2), HS = t.dim(3);
  if (t.is_contiguous()) return H * HS;
  const Shape& st = t.strides();
  const int64_t rs = T > 1 ? st[1] : st[0];  // T = 1: each batch is one token
  GTP_CHECK((HS == 1 || st[3] == 1) && (H == 1 || st[2] == HS) && rs >= H * HS &&
                (B == 1 || st[0] == T * rs),
            op, ": ", what, " ", t.ToString(), " with strides ", st.ToString(),
            " is neither contiguous nor token-strided (strides {T·rs, rs, HS, 1}, rs ≥ heads·HS)");
  return rs;
}

DType ActDType(const char* op, std::initializer_list<Arg> acts, std::initializer_list<Arg> f32s) {
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

cuda::BlasContext& Blas(const Exec& e) {
  GTP_CHECK(e.blas != nullptr, "CUDA Exec without a BlasContext");
  return *e.blas;
}

}  // namespace gtp::kernels::ops::internal
