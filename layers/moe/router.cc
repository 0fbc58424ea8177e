#include "layers/moe/router.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "core/philox.h"
#include "core/status.h"

namespace gtp::layers::moe {

namespace ops = kernels::ops;

absl::Status RouterConfig::Validate() const {
  auto bad = [](const std::string& m) { return absl::InvalidArgumentError("moe router: " + m); };
  if (num_experts < 1) return bad(absl::StrCat("num_experts must be ≥ 1 (got ", num_experts, ")"));
  if (top_k < 1 || top_k > 8 || top_k > num_experts) {
    return bad(absl::StrCat("top_k must be in 1..min(8, num_experts = ", num_experts, ") (got ",
                            top_k, ")"));
  }
  if (num_groups > 0) {
    if (num_experts % num_groups != 0) {
      return bad(absl::StrCat("num_experts ", num_experts, " is not divisible by num_groups ",
                              num_groups));
    }
    if (group_topk < 1 || group_topk > num_groups || top_k % group_topk != 0 ||
        top_k / group_topk > num_experts / num_groups ||
        group_topk * (num_experts / num_groups) < top_k) {
      return bad(absl::StrCat("group_topk ", group_topk, " must be in 1..num_groups (", num_groups,
                              "), divide top_k (", top_k, ") and leave top_k experts eligible"));
    }
  }
  if (!std::isfinite(topk_scaling) || topk_scaling <= 0) {
    return bad(absl::StrCat("topk_scaling must be > 0 (got ", topk_scaling, ")"));
  }
  if (aux_loss_coeff < 0 || z_loss_coeff < 0) return bad("loss coefficients must be ≥ 0");
  if (pad_to_capacity && !(capacity_factor > 0)) {
    return bad(
        absl::StrCat("pad_to_capacity needs capacity_factor > 0 (got ", capacity_factor, ")"));
  }
  return absl::OkStatus();
}

namespace {

// softmax of v[0, n) into out (double sums, max-subtracted).
void Softmax(const float* v, int n, float* out) {
  float m = -std::numeric_limits<float>::infinity();
  for (int i = 0; i < n; ++i) m = std::max(m, v[i]);
  double s = 0;
  for (int i = 0; i < n; ++i) s += std::exp(static_cast<double>(v[i]) - m);
  for (int i = 0; i < n; ++i) out[i] = static_cast<float>(std::exp(static_cast<double>(v[i]) - m) / s);
}

float Sigmoid(float x) { return static_cast<float>(1.0 / (1.0 + std::exp(-static_cast<double>(x)))); }

double LogSumExp(const float* v, int n) {
  float m = -std::numeric_limits<float>::infinity();
  for (int i = 0; i < n; ++i) m = std::max(m, v[i]);
  double s = 0;
  for (int i = 0; i < n; ++i) s += std::exp(static_cast<double>(v[i]) - m);
  return m + std::log(s);
}

// Indices of the k largest of v[0, n): descending, ties to the lower index.
// Insertion into the k kept so far (k ≤ 8): no allocation, O(n·k).
void TopK(const float* v, int n, int k, int32_t* out) {
  int have = 0;
  for (int32_t e = 0; e < n; ++e) {
    // e beats a kept index when its value is larger (equal values keep the earlier index).
    int at = have;
    while (at > 0 && v[e] > v[out[at - 1]]) --at;
    if (at >= k) continue;
    for (int j = std::min(have, k - 1); j > at; --j) out[j] = out[j - 1];
    out[at] = e;
    if (have < k) ++have;
  }
}

}  // namespace

Routing Route(const RouterConfig& c, const float* logits, int64_t n, const float* bias) {
  const int E = c.num_experts, k = c.top_k;
  Routing r;
  r.n = n;
  r.k = k;
  r.num_experts = E;
  r.selected.resize(n * k);
  r.weight.resize(n * k);
  r.scores.resize(n * E);
  r.counts.assign(E, 0);
  std::vector<float> v(E), pw(k);
  const float ninf = -std::numeric_limits<float>::infinity();
  for (int64_t t = 0; t < n; ++t) {
    const float* l = logits + t * E;
    float* sc = r.scores.data() + t * E;
    if (c.score == ScoreFunction::kSigmoid) {
      for (int e = 0; e < E; ++e) sc[e] = Sigmoid(l[e]);
    } else if (c.pre_softmax) {
      Softmax(l, E, sc);
    } else {
      std::copy(l, l + E, sc);
    }
    for (int e = 0; e < E; ++e) v[e] = sc[e] + (bias ? bias[e] : 0.0f);
    if (c.num_groups > 0) {
      const int G = c.num_groups, gs = E / G, per = k / c.group_topk;
      std::vector<float> gscore(G);
      std::vector<int32_t> top(per);
      for (int g = 0; g < G; ++g) {
        TopK(v.data() + g * gs, gs, per, top.data());
        double s = 0;
        for (int i = 0; i < per; ++i) s += v[g * gs + top[i]];
        gscore[g] = static_cast<float>(s);
      }
      std::vector<int32_t> keep(c.group_topk);
      TopK(gscore.data(), G, c.group_topk, keep.data());
      std::vector<bool> kept(G, false);
      for (int32_t g : keep) kept[g] = true;
      for (int e = 0; e < E; ++e)
        if (!kept[e / gs]) v[e] = ninf;
    }
    int32_t* sel = r.selected.data() + t * k;
    TopK(v.data(), E, k, sel);
    float* w = r.weight.data() + t * k;
    if (c.score == ScoreFunction::kSigmoid) {
      double s = 0;
      for (int j = 0; j < k; ++j) s += sc[sel[j]];
      for (int j = 0; j < k; ++j)
        w[j] = c.topk_scaling * (k > 1 ? static_cast<float>(sc[sel[j]] / s) : sc[sel[j]]);
    } else if (c.pre_softmax) {
      for (int j = 0; j < k; ++j) w[j] = c.topk_scaling * sc[sel[j]];
    } else {
      for (int j = 0; j < k; ++j) pw[j] = l[sel[j]];
      Softmax(pw.data(), k, pw.data());
      for (int j = 0; j < k; ++j) w[j] = c.topk_scaling * pw[j];
    }
    for (int j = 0; j < k; ++j) ++r.counts[sel[j]];
  }
  r.expert = r.selected;
  return r;
}

int64_t ApplyCapacity(const RouterConfig& c, Routing* r) {
  if (c.capacity_factor <= 0) return 0;
  const int E = r->num_experts, k = r->k;
  const int64_t cap = static_cast<int64_t>(
      std::ceil(static_cast<double>(c.capacity_factor) * r->n * k / E));
  std::vector<std::vector<int64_t>> by_expert(E);  // slots t·k + j, in token order
  for (int64_t s = 0; s < r->n * k; ++s) by_expert[r->selected[s]].push_back(s);
  r->counts.assign(E, 0);
  r->dropped = 0;
  for (int e = 0; e < E; ++e) {
    std::vector<int64_t>& slots = by_expert[e];
    if (static_cast<int64_t>(slots.size()) > cap && c.drop_policy == DropPolicy::kProbability) {
      std::stable_sort(slots.begin(), slots.end(),
                       [r](int64_t a, int64_t b) { return r->weight[a] > r->weight[b]; });
    }
    for (size_t i = 0; i < slots.size(); ++i) {
      if (static_cast<int64_t>(i) < cap) {
        ++r->counts[e];
      } else {
        r->expert[slots[i]] = -1;
        ++r->dropped;
      }
    }
  }
  return cap;
}

std::vector<float> AuxProbabilities(const RouterConfig& c, const float* logits, int64_t n) {
  const int E = c.num_experts;
  std::vector<float> q(n * E);
  for (int64_t t = 0; t < n; ++t) {
    const float* l = logits + t * E;
    float* o = q.data() + t * E;
    if (c.score == ScoreFunction::kSigmoid) {
      double s = 0;
      for (int e = 0; e < E; ++e) s += Sigmoid(l[e]);
      for (int e = 0; e < E; ++e) o[e] = static_cast<float>(Sigmoid(l[e]) / s);
    } else {
      Softmax(l, E, o);
    }
  }
  return q;
}

std::vector<float> SelectionCounts(const Routing& r, const std::vector<int32_t>& group_of, int G) {
  std::vector<float> counts(static_cast<size_t>(G) * r.num_experts, 0.0f);
  for (int64_t t = 0; t < r.n; ++t)
    for (int j = 0; j < r.k; ++j) counts[group_of[t] * r.num_experts + r.selected[t * r.k + j]] += 1;
  return counts;
}

std::vector<float> AuxGradient(const RouterConfig& c, const std::vector<float>& q, int64_t n,
                               const std::vector<int32_t>& group_of, const std::vector<float>& counts,
                               const std::vector<int64_t>& group_tokens, double* aux_part) {
  const int E = c.num_experts;
  const int G = static_cast<int>(group_tokens.size());
  std::vector<float> d(n * E);
  double aux = 0;
  for (int64_t t = 0; t < n; ++t) {
    const int g = group_of[t];
    const double ng = static_cast<double>(group_tokens[g]);
    const double f = static_cast<double>(c.aux_loss_coeff) * E / (c.top_k * G * ng * ng);
    for (int e = 0; e < E; ++e) {
      d[t * E + e] = static_cast<float>(f * counts[g * E + e]);
      aux += f * counts[g * E + e] * q[t * E + e];
    }
  }
  if (aux_part) *aux_part = aux;
  return d;
}

void RouteBackward(const RouterConfig& c, const Routing& r, const float* logits,
                   const float* dweight, const std::vector<float>& daux, int64_t z_tokens,
                   float loss_scale, float* dlogits, double* z_part) {
  const int E = c.num_experts, k = c.top_k;
  const float s = c.topk_scaling;
  std::vector<float> p(E), d(E), pw(k);
  for (int64_t t = 0; t < r.n; ++t) {
    const float* l = logits + t * E;
    float* dl = dlogits + t * E;
    const int32_t* sel = r.selected.data() + t * k;
    const float* dw = dweight + t * k;
    auto dws = [&](int j) { return r.expert[t * k + j] < 0 ? 0.0f : dw[j]; };
    std::fill(dl, dl + E, 0.0f);
    const float* da = daux.empty() ? nullptr : daux.data() + t * E;
    if (c.score == ScoreFunction::kSigmoid) {
      std::vector<double> ds(E, 0.0);
      double S = 0;
      for (int j = 0; j < k; ++j) S += r.scores[t * E + sel[j]];
      if (k > 1) {
        double dot = 0;
        for (int j = 0; j < k; ++j) dot += static_cast<double>(dws(j)) * r.scores[t * E + sel[j]];
        for (int j = 0; j < k; ++j) ds[sel[j]] += s * (dws(j) / S - dot / (S * S));
      } else {
        ds[sel[0]] += s * dws(0);
      }
      if (da) {
        double T = 0, dot = 0;
        for (int e = 0; e < E; ++e) T += r.scores[t * E + e];
        for (int e = 0; e < E; ++e) dot += r.scores[t * E + e] / T * da[e];
        for (int e = 0; e < E; ++e) ds[e] += loss_scale * (da[e] - dot) / T;
      }
      for (int e = 0; e < E; ++e) {
        const double sg = r.scores[t * E + e];
        dl[e] += static_cast<float>(ds[e] * sg * (1 - sg));
      }
    } else {
      Softmax(l, E, p.data());
      if (c.pre_softmax) {
        std::fill(d.begin(), d.end(), 0.0f);
        for (int j = 0; j < k; ++j) d[sel[j]] += s * dws(j);
        if (da)
          for (int e = 0; e < E; ++e) d[e] += loss_scale * da[e];
        double dot = 0;
        for (int e = 0; e < E; ++e) dot += static_cast<double>(p[e]) * d[e];
        for (int e = 0; e < E; ++e) dl[e] += static_cast<float>(p[e] * (d[e] - dot));
      } else {
        for (int j = 0; j < k; ++j) pw[j] = l[sel[j]];
        Softmax(pw.data(), k, pw.data());
        double dot = 0;
        for (int j = 0; j < k; ++j) dot += static_cast<double>(pw[j]) * dws(j);
        for (int j = 0; j < k; ++j) dl[sel[j]] += static_cast<float>(s * pw[j] * (dws(j) - dot));
        if (da) {
          double dd = 0;
          for (int e = 0; e < E; ++e) dd += static_cast<double>(p[e]) * da[e];
          for (int e = 0; e < E; ++e) dl[e] += static_cast<float>(loss_scale * p[e] * (da[e] - dd));
        }
      }
    }
    if (c.z_loss_coeff > 0) {
      const double lse = LogSumExp(l, E);
      if (z_part) *z_part += c.z_loss_coeff * lse * lse / z_tokens;
      const double f = loss_scale * 2.0 * c.z_loss_coeff * lse / z_tokens;
      const float m = *std::max_element(l, l + E);
      for (int e = 0; e < E; ++e)
        dl[e] += static_cast<float>(f * std::exp(static_cast<double>(l[e]) - m - (lse - m)));
    }
  }
}

void UpdateExpertBias(const RouterConfig& c, const std::vector<double>& counts, float* bias) {
  const int E = c.num_experts;
  double mean = 0;
  for (int e = 0; e < E; ++e) mean += counts[e];
  mean /= E;
  for (int e = 0; e < E; ++e) {
    const double d = mean - counts[e];
    bias[e] += c.bias_update_rate * static_cast<float>((d > 0) - (d < 0));
  }
}

// ---- Router -------------------------------------------------------------------------------------

absl::StatusOr<std::unique_ptr<Router>> Router::Create(const std::string& name,
                                                       const RouterConfig& c, int64_t C,
                                                       int64_t rows, int64_t seq_len,
                                                       int64_t first_row, int64_t lane_rows,
                                                       float init_std, uint64_t seed,
                                                       comm::Communicator* tp,
                                                       const kernels::Exec& e,
                                                       const RouterCp& cp) {
  GTP_RETURN_IF_ERROR(c.Validate());
  const int tp_size = tp != nullptr ? tp->size() : 1;
  if (cp.size < 1 ||
      (cp.size > 1 && (cp.tp_cp == nullptr || cp.tp_cp->size() != tp_size * cp.size))) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, ": context parallelism over ", cp.size, " ranks needs the lane's TP × CP group "
        "(\"tp_cp\") of ", tp_size, " × ", cp.size, " ranks, got ",
        cp.tp_cp != nullptr ? absl::StrCat(cp.tp_cp->size(), " ranks") : "none"));
  }
  std::unique_ptr<Router> r(new Router());
  r->name_ = name;
  r->config_ = c;
  r->exec_ = e;
  r->tp_ = tp;
  r->counts_group_ = cp.size > 1 ? cp.tp_cp : tp;
  r->C_ = C;
  r->rows_ = rows;
  const int E = c.num_experts;
  std::vector<float> w(E * C);
  const uint64_t key = KeyFromName(name + ".weight", seed);
  for (size_t i = 0; i < w.size(); ++i) w[i] = init_std * PhiloxNormal(key, i);
  r->gate_ = ReplicatedParam{name + ".weight", TensorFromHost(e, w.data(), {E, C}, DType::kF32),
                             e.Zeros({E, C}), tp != nullptr && tp->size() > 1,
                             {E, C, [](int64_t i) { return i; }, 0}};
  RouteParams& p = r->params_;
  p.E = E;
  p.k = c.top_k;
  p.sigmoid = c.score == ScoreFunction::kSigmoid;
  p.pre_softmax = c.pre_softmax;
  p.scaling = c.topk_scaling;
  p.num_groups = c.num_groups;
  p.group_topk = c.group_topk;
  // As ApplyCapacity: ceil(cf · n · k / E) of this rank's n tokens.
  p.capacity = c.capacity_factor > 0
                   ? static_cast<int64_t>(
                         std::ceil(static_cast<double>(c.capacity_factor) * rows * c.top_k / E))
                   : 0;
  p.by_position = c.drop_policy == DropPolicy::kPosition;
  p.aux_coeff = c.aux_loss_coeff;
  p.z_coeff = c.z_loss_coeff;
  p.lane_rows = lane_rows;
  p.first_row = first_row;
  p.cp = cp.size;
  if (c.aux_loss_type == AuxLossType::kSequence) {
    if (seq_len <= 0 || lane_rows % seq_len != 0) {
      return absl::InvalidArgumentError(absl::StrCat("moe router: per-sequence aux loss needs the ",
                                                     lane_rows, " rows of a lane in whole sequences of ",
                                                     seq_len));
    }
    p.G = static_cast<int>(lane_rows / seq_len);
    p.seq_len = seq_len;
  }
  r->bias_.assign(E, 0.0f);
  r->counts_.assign(E, 0.0);
  r->acc_ = e.Zeros({E + 3}, DType::kI64);
  return r;
}

absl::StatusOr<const RouterOutput*> Router::Forward(const Tensor& x, bool record) {
  const kernels::Exec& e = exec_;
  const int E = config_.num_experts, k = config_.top_k;
  const int64_t n = x.dim(0), S = n * k;
  if (n != rows_) {
    return absl::InvalidArgumentError(absl::StrCat("moe router: ", n, " rows, built for ", rows_));
  }
  if (x.dtype() == DType::kF32) {
    x32_ = x;
  } else {
    x32_ = e.Empty(x.shape(), DType::kF32);
    ops::Cast(e, x, x32_);
  }
  logits_ = e.Empty({n, E}, DType::kF32);
  ops::Linear(e, x32_, gate_.value, logits_);
  Tensor bias;
  if (config_.expert_bias) {
    Tensor h = Tensor::Wrap(bias_.data(), {E}, DType::kF32, Device::Cpu());
    if (e.is_cuda()) {
      // From pageable memory: staged before the call returns, so bias_ may change after.
      bias = e.Empty({E}, DType::kF32);
      GTP_RETURN_IF_ERROR(Copy(h, bias, e.stream, /*sync=*/false));
    } else {
      bias = h;
    }
  }
  RouterOutput& o = out_;
  o.selected = e.Empty({S}, DType::kI32);
  o.weight = e.Empty({S}, DType::kF32);
  o.pos = e.Empty({S}, DType::kI32);
  o.row_tok = e.Empty({S}, DType::kI32);
  Tensor row_slot = e.Empty({S}, DType::kI32);
  Tensor sel_counts = e.Empty({E}, DType::kI32);
  RouteTokens(e, params_, logits_, bias, o.selected, o.weight);
  Dispatch(e, E, k, o.selected, sel_counts, o.pos, row_slot, o.row_tok);
  if (params_.capacity > 0) {
    o.expert = e.Empty({S}, DType::kI32);
    DropOverCapacity(e, params_, o.selected, o.weight, sel_counts, o.pos, row_slot, o.expert);
    o.counts = e.Empty({E}, DType::kI32);
    Dispatch(e, E, k, o.expert, o.counts, o.pos, row_slot, o.row_tok);
  } else {
    o.expert = o.selected;
    o.counts = sel_counts;
  }
  aux_counts_ = Tensor();
  if (config_.aux_loss_coeff > 0) {
    aux_counts_ = e.Empty({static_cast<int64_t>(params_.G) * E}, DType::kF32);
    CountSelections(e, params_, o.selected, aux_counts_);
    // The lane's counts: its tokens are spread over TP (and CP) ranks.
    if (counts_group_ != nullptr && counts_group_->size() > 1) {
      GTP_RETURN_IF_ERROR(AllReduceSum(*counts_group_, aux_counts_));
    }
    if (record) AuxLoss(e, params_, logits_, aux_counts_, acc_.Slice(E + 1, E + 2));
  }
  record_ = record;
  if (!record) return &out_;
  AccumulateCounts(e, S, sel_counts, o.counts, acc_);
  acc_dirty_ = true;
  ++stats_.forwards;
  return &out_;
}

absl::StatusOr<Tensor> Router::Backward(const Tensor& dweight, float loss_scale) {
  const kernels::Exec& e = exec_;
  const int E = config_.num_experts;
  const int64_t n = rows_;
  RouteParams p = params_;
  p.loss_scale = loss_scale;
  Tensor dlogits = e.Empty({n, E}, DType::kF32);
  const bool z = record_ && config_.z_loss_coeff > 0;
  RouteBackward(e, p, logits_, out_.selected, out_.expert, dweight, aux_counts_, dlogits,
                z ? acc_.Slice(E + 2, E + 3) : Tensor());
  if (z) acc_dirty_ = true;
  Tensor dx = e.Empty({n, C_}, DType::kF32);
  ops::LinearBackwardData(e, dlogits, gate_.value, dx);
  ops::LinearBackwardWeight(e, dlogits, x32_, gate_.grad, /*beta=*/1.0f);
  x32_ = Tensor();
  return dx;
}

void Router::DropActivations() { x32_ = Tensor(); }

void Router::Drain() {
  if (!acc_dirty_) return;
  const int E = config_.num_experts;
  std::vector<double> h(E + 3);
  GTP_CHECK_OK(Copy(acc_, Tensor::Wrap(h.data(), {E + 3}, DType::kI64, Device::Cpu()), exec_.stream,
                    /*sync=*/true));
  for (int i = 0; i < E; ++i) counts_[i] += h[i];
  stats_.dropped += static_cast<int64_t>(h[E]);
  stats_.aux += h[E + 1];
  stats_.z += h[E + 2];
  acc_ = exec_.Zeros({E + 3}, DType::kI64);
  acc_dirty_ = false;
}

std::vector<double> Router::TakeCounts() {
  Drain();
  std::vector<double> c = counts_;
  std::fill(c.begin(), c.end(), 0.0);
  std::swap(c, counts_);
  return c;
}

Router::Stats Router::TakeStats() {
  Drain();
  Stats s = stats_;
  stats_ = Stats();
  return s;
}

}  // namespace gtp::layers::moe
