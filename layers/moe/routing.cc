#include "layers/moe/routing.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/status.h"
#include "layers/moe/cuda/routing_cuda.h"

namespace gtp::layers::moe {

namespace ri = routing_internal;

namespace {

void OnDevice(const kernels::Exec& e, const char* what, std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts) {
    if (!t->defined()) continue;
    GTP_CHECK(t->device() == e.device && t->is_contiguous(), what, ": tensor ", t->ToString(),
              " must be contiguous on ", e.device.ToString());
  }
}

void CheckType(const Tensor& t, DType d, int64_t numel, const char* what) {
  GTP_CHECK(t.dtype() == d && t.numel() == numel, what, ": ", t.ToString(), " should be ",
            DTypeName(d), " of ", numel, " elements");
}

double* Acc(const Tensor& acc) {
  if (!acc.defined()) return nullptr;
  GTP_CHECK(acc.dtype() == DType::kI64, "moe routing: accumulators are f64 in i64 tensors");
  return static_cast<double*>(acc.raw_data());
}

}  // namespace

void RouteTokens(const kernels::Exec& e, const RouteParams& p, const Tensor& logits,
                 const Tensor& bias, const Tensor& selected, const Tensor& weight) {
  OnDevice(e, "moe::RouteTokens", {&logits, &bias, &selected, &weight});
  const int64_t n = logits.dim(0);
  GTP_CHECK(p.k >= 1 && p.k <= ri::kMaxTopK, "moe::RouteTokens: top_k ", p.k);
  CheckType(logits, DType::kF32, n * p.E, "moe::RouteTokens logits");
  CheckType(selected, DType::kI32, n * p.k, "moe::RouteTokens selected");
  CheckType(weight, DType::kF32, n * p.k, "moe::RouteTokens weight");
  if (bias.defined()) CheckType(bias, DType::kF32, p.E, "moe::RouteTokens bias");
  const float* b = bias.defined() ? bias.data<float>() : nullptr;
  if (e.is_cuda()) {
    cuda::RouteTokens(p, logits.data<float>(), b, n, selected.data<int32_t>(), weight.data<float>(),
                      e.stream);
    return;
  }
  for (int64_t t = 0; t < n; ++t) {
    ri::RouteToken(p, logits.data<float>() + t * p.E, b, selected.data<int32_t>() + t * p.k,
                   weight.data<float>() + t * p.k);
  }
}

void CountSelections(const kernels::Exec& e, const RouteParams& p, const Tensor& selected,
                     const Tensor& counts) {
  OnDevice(e, "moe::CountSelections", {&selected, &counts});
  const int64_t S = selected.numel(), n = S / p.k;
  CheckType(counts, DType::kF32, static_cast<int64_t>(p.G) * p.E, "moe::CountSelections counts");
  if (e.is_cuda()) {
    cuda::CountSelections(p, selected.data<int32_t>(), n, counts.data<float>(), e.stream);
    return;
  }
  float* c = counts.data<float>();
  std::fill(c, c + counts.numel(), 0.0f);
  const int32_t* sel = selected.data<int32_t>();
  for (int64_t s = 0; s < S; ++s) c[ri::GroupOf(p, s / p.k) * p.E + sel[s]] += 1.0f;
}

void Dispatch(const kernels::Exec& e, int E, int k, const Tensor& expert, const Tensor& counts,
              const Tensor& pos, const Tensor& row_slot, const Tensor& row_tok) {
  OnDevice(e, "moe::Dispatch", {&expert, &counts, &pos, &row_slot, &row_tok});
  const int64_t S = expert.numel();
  CheckType(expert, DType::kI32, S, "moe::Dispatch expert");
  CheckType(counts, DType::kI32, E, "moe::Dispatch counts");
  CheckType(pos, DType::kI32, S, "moe::Dispatch pos");
  CheckType(row_slot, DType::kI32, S, "moe::Dispatch row_slot");
  if (row_tok.defined()) CheckType(row_tok, DType::kI32, S, "moe::Dispatch row_tok");
  int32_t* rt = row_tok.defined() ? row_tok.data<int32_t>() : nullptr;
  if (e.is_cuda()) {
    Tensor ws = e.Empty({cuda::DispatchWorkspaceInts(S, E)}, DType::kI32);
    cuda::Dispatch(expert.data<int32_t>(), S, k, E, counts.data<int32_t>(), pos.data<int32_t>(),
                   row_slot.data<int32_t>(), rt, ws.data<int32_t>(), e.stream);
    return;
  }
  const int32_t* ex = expert.data<int32_t>();
  int32_t* c = counts.data<int32_t>();
  std::fill(c, c + E, 0);
  for (int64_t s = 0; s < S; ++s)
    if (ex[s] >= 0) ++c[ex[s]];
  std::vector<int32_t> next(E, 0);
  for (int i = 1; i < E; ++i) next[i] = next[i - 1] + c[i - 1];
  int32_t *ps = pos.data<int32_t>(), *rs = row_slot.data<int32_t>();
  for (int64_t s = 0; s < S; ++s) {
    if (ex[s] < 0) {
      ps[s] = -1;
      continue;
    }
    const int32_t r = next[ex[s]]++;
    ps[s] = r;
    rs[r] = static_cast<int32_t>(s);
    if (rt != nullptr) rt[r] = static_cast<int32_t>(s / k);
  }
}

void DropOverCapacity(const kernels::Exec& e, const RouteParams& p, const Tensor& selected,
                      const Tensor& weight, const Tensor& counts, const Tensor& pos,
                      const Tensor& row_slot, const Tensor& expert) {
  OnDevice(e, "moe::DropOverCapacity", {&selected, &weight, &counts, &pos, &row_slot, &expert});
  const int64_t S = selected.numel();
  CheckType(weight, DType::kF32, S, "moe::DropOverCapacity weight");
  CheckType(counts, DType::kI32, p.E, "moe::DropOverCapacity counts");
  CheckType(expert, DType::kI32, S, "moe::DropOverCapacity expert");
  if (e.is_cuda()) {
    cuda::DropOverCapacity(p, selected.data<int32_t>(), weight.data<float>(),
                           counts.data<int32_t>(), pos.data<int32_t>(), row_slot.data<int32_t>(), S,
                           expert.data<int32_t>(), e.stream);
    return;
  }
  const int32_t* sel = selected.data<int32_t>();
  for (int64_t s = 0; s < S; ++s) {
    expert.data<int32_t>()[s] =
        ri::KeepSlot(p, s, sel, weight.data<float>(), counts.data<int32_t>(), pos.data<int32_t>(),
                     row_slot.data<int32_t>())
            ? sel[s]
            : -1;
  }
}

void PadToCapacity(const kernels::Exec& e, int E, int64_t cap, const Tensor& expert,
                   const Tensor& counts, const Tensor& pos, const Tensor& row_tok,
                   const Tensor& padded_pos, const Tensor& padded_tok) {
  OnDevice(e, "moe::PadToCapacity", {&expert, &counts, &pos, &row_tok, &padded_pos, &padded_tok});
  const int64_t S = expert.numel();
  GTP_CHECK(cap >= 0 && E * cap <= INT32_MAX, "moe::PadToCapacity: ", E, " experts × capacity ",
            cap, " rows do not fit i32 positions");
  CheckType(expert, DType::kI32, S, "moe::PadToCapacity expert");
  CheckType(counts, DType::kI32, E, "moe::PadToCapacity counts");
  CheckType(pos, DType::kI32, S, "moe::PadToCapacity pos");
  CheckType(row_tok, DType::kI32, S, "moe::PadToCapacity row_tok");
  CheckType(padded_pos, DType::kI32, S, "moe::PadToCapacity padded_pos");
  CheckType(padded_tok, DType::kI32, E * cap, "moe::PadToCapacity padded_tok");
  if (e.is_cuda()) {
    cuda::PadToCapacity(expert.data<int32_t>(), counts.data<int32_t>(), pos.data<int32_t>(),
                        row_tok.data<int32_t>(), S, E, cap, padded_pos.data<int32_t>(),
                        padded_tok.data<int32_t>(), e.stream);
    return;
  }
  const int32_t* c = counts.data<int32_t>();
  std::vector<int32_t> off(E, 0);
  for (int i = 1; i < E; ++i) off[i] = off[i - 1] + c[i - 1];
  const int32_t *ex = expert.data<int32_t>(), *ps = pos.data<int32_t>();
  int32_t *pp = padded_pos.data<int32_t>(), *pt = padded_tok.data<int32_t>();
  for (int64_t s = 0; s < S; ++s) {
    pp[s] = ex[s] < 0 ? -1 : static_cast<int32_t>(ps[s] - off[ex[s]] + ex[s] * cap);
  }
  for (int i = 0; i < E; ++i) {
    GTP_CHECK(c[i] <= cap, "moe::PadToCapacity: expert ", i, " has ", c[i], " rows > capacity ",
              cap);
    for (int64_t r = 0; r < cap; ++r) {
      pt[i * cap + r] = r < c[i] ? row_tok.data<int32_t>()[off[i] + r] : -1;
    }
  }
}

void SelectLocalExperts(const kernels::Exec& e, int e0, int el, const Tensor& expert,
                        const Tensor& local) {
  OnDevice(e, "moe::SelectLocalExperts", {&expert, &local});
  const int64_t S = expert.numel();
  CheckType(expert, DType::kI32, S, "moe::SelectLocalExperts expert");
  CheckType(local, DType::kI32, S, "moe::SelectLocalExperts local");
  if (e.is_cuda()) {
    cuda::SelectLocalExperts(expert.data<int32_t>(), S, e0, el, local.data<int32_t>(), e.stream);
    return;
  }
  const int32_t* ex = expert.data<int32_t>();
  int32_t* lo = local.data<int32_t>();
  for (int64_t s = 0; s < S; ++s) lo[s] = ex[s] >= e0 && ex[s] < e0 + el ? ex[s] - e0 : -1;
}

void AuxLoss(const kernels::Exec& e, const RouteParams& p, const Tensor& logits,
             const Tensor& counts, const Tensor& acc) {
  OnDevice(e, "moe::AuxLoss", {&logits, &counts, &acc});
  const int64_t n = logits.dim(0);
  CheckType(counts, DType::kF32, static_cast<int64_t>(p.G) * p.E, "moe::AuxLoss counts");
  double* a = Acc(acc);
  if (e.is_cuda()) {
    Tensor part = e.Empty({n}, DType::kF32);
    cuda::AuxLoss(p, logits.data<float>(), counts.data<float>(), n, part.data<float>(), a,
                  e.stream);
    return;
  }
  double sum = 0;
  for (int64_t t = 0; t < n; ++t)
    sum += ri::AuxPart(p, logits.data<float>() + t * p.E, t, counts.data<float>());
  *a += sum;
}

void RouteBackward(const kernels::Exec& e, const RouteParams& p, const Tensor& logits,
                   const Tensor& selected, const Tensor& expert, const Tensor& dweight,
                   const Tensor& counts, const Tensor& dlogits, const Tensor& acc) {
  OnDevice(e, "moe::RouteBackward",
           {&logits, &selected, &expert, &dweight, &counts, &dlogits, &acc});
  const int64_t n = logits.dim(0);
  CheckType(selected, DType::kI32, n * p.k, "moe::RouteBackward selected");
  CheckType(expert, DType::kI32, n * p.k, "moe::RouteBackward expert");
  CheckType(dweight, DType::kF32, n * p.k, "moe::RouteBackward dweight");
  CheckType(dlogits, DType::kF32, n * p.E, "moe::RouteBackward dlogits");
  if (counts.defined()) {
    CheckType(counts, DType::kF32, static_cast<int64_t>(p.G) * p.E, "moe::RouteBackward counts");
  }
  const float* c = counts.defined() ? counts.data<float>() : nullptr;
  double* a = Acc(acc);
  if (e.is_cuda()) {
    Tensor zpart = a != nullptr ? e.Empty({n}, DType::kF32) : Tensor();
    cuda::RouteBackward(p, logits.data<float>(), selected.data<int32_t>(), expert.data<int32_t>(),
                        dweight.data<float>(), c, n, dlogits.data<float>(),
                        a != nullptr ? zpart.data<float>() : nullptr, a, e.stream);
    return;
  }
  double z = 0;
  for (int64_t t = 0; t < n; ++t) {
    z += ri::BackwardToken(p, logits.data<float>() + t * p.E, t, selected.data<int32_t>() + t * p.k,
                           expert.data<int32_t>() + t * p.k, dweight.data<float>() + t * p.k, c,
                           dlogits.data<float>() + t * p.E);
  }
  if (a != nullptr) *a += z;
}

void AccumulateCounts(const kernels::Exec& e, int64_t S, const Tensor& selected_counts,
                      const Tensor& kept_counts, const Tensor& acc) {
  OnDevice(e, "moe::AccumulateCounts", {&selected_counts, &kept_counts, &acc});
  const int E = static_cast<int>(selected_counts.numel());
  CheckType(kept_counts, DType::kI32, E, "moe::AccumulateCounts kept_counts");
  GTP_CHECK(acc.numel() >= E + 1, "moe::AccumulateCounts: acc too small");
  double* a = Acc(acc);
  if (e.is_cuda()) {
    cuda::AccumulateCounts(selected_counts.data<int32_t>(), kept_counts.data<int32_t>(), E, S, a,
                           e.stream);
    return;
  }
  int64_t kept = 0;
  for (int i = 0; i < E; ++i) {
    a[i] += selected_counts.data<int32_t>()[i];
    kept += kept_counts.data<int32_t>()[i];
  }
  a[E] += static_cast<double>(S - kept);
}

}  // namespace gtp::layers::moe
