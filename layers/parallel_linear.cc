#include "layers/parallel_linear.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include <string>

#include "core/kernels/fp8/linear.h"
#include "core/status.h"
#include "layers/param_io.h"
#include "layers/tp_comm.h"

namespace gtp::layers {

namespace ops = kernels::ops;

absl::StatusOr<TpGtpGroups> TpGtpGroups::From(const parallel::ProcessGroupCollection& pgs) {
  TpGtpGroups g;
  GTP_ASSIGN_OR_RETURN(g.tp, pgs.Get(parallel::groups::kTp));
  GTP_ASSIGN_OR_RETURN(g.gtp, pgs.Get(parallel::groups::kGtp));
  return g;
}

// ---- bias GEMMs -----------------------------------------------------------------------

void AccumulateBiasGrad(GtpChain& chain, const Tensor& dy, const Tensor& db) {
  const kernels::Exec& e = chain.exec();
  const int64_t n = dy.numel() / dy.dim(-1), c = dy.dim(-1);
  const Tensor& ones = chain.Ones(n, dy.dtype());
  kernels::GemmDesc d;  // db[1, C] += ones[1, N] · dy[N, C]
  d.m = 1, d.n = c, d.k = n, d.beta = 1.0f;
  d.ab_type = dy.dtype();
  d.c_type = db.dtype();
  ops::Gemm(e, d, ones, dy, db);
}

void WeightAndBiasGrad(GtpChain& chain, const Tensor& dy, const Tensor& x, const Tensor& dw,
                       float beta, const Tensor& db) {
  const kernels::Exec& e = chain.exec();
  if (!db.defined() || !e.is_cuda()) {
    // On the CPU the separate column sum (a BLAS GEMM against ones) is as
    // fast and keeps the f32 summation order the layout-parity tests pin.
    ops::LinearBackwardWeight(e, dy, x, dw, beta);
    if (db.defined()) AccumulateBiasGrad(chain, dy, db);
    return;
  }
  // CUDA: db += Σ dy by ops::ColumnSumAccumulate (one read of dy, straight
  // into db), not cuBLASLt's BGRADB epilogue, which writes (=) through its
  // own reduction kernel (5.4 % of a 124M step: docs/PERFORMANCE.md) and
  // needed an Axpby after it; core/kernels/bench:gemm_benchmark
  // BM_CudaBiasGrad compares the two. (Tried, a52d7ab: the sums on a second,
  // low-priority stream beside the wgrad GEMM — the same bits, no faster:
  // GPT-2 124M 16.89 / 16.96 ms a step on one stream, 16.98 / 16.99 on two,
  // one H100, 2026-12-07, docs/PERFORMANCE.md. Reverted.)
  ops::LinearBackwardWeight(e, dy, x, dw, beta);
  ops::ColumnSumAccumulate(e, dy, db);
}

void AddBias(GtpChain& chain, const Tensor& y, const Tensor& b) {
  const kernels::Exec& e = chain.exec();
  const int64_t n = y.numel() / y.dim(-1), c = y.dim(-1);
  const Tensor& ones = chain.Ones(n, b.dtype());
  kernels::GemmDesc d;  // y[N, C] += ones[N, 1] · b[1, C]
  d.m = n, d.n = c, d.k = 1, d.beta = 1.0f;
  d.ab_type = b.dtype();
  d.c_type = y.dtype();
  ops::Gemm(e, d, ones, b, y);
}

namespace {

ReplicatedParam MakeBias(const kernels::Exec& e, const std::string& name, int64_t n,
                         ShardedParam::GlobalLayout layout, bool tp_sharded, DType dtype) {
  ReplicatedParam b{name, e.Zeros({n}, dtype), e.Zeros({n}), false};
  b.layout = std::move(layout);
  b.tp_sharded = tp_sharded;
  return b;
}

absl::Status CheckDivisible(const std::string& what, int64_t n, int tp) {
  if (n % tp != 0) {
    return absl::InvalidArgumentError(absl::StrCat(what, " = ", n,
                                                   " is not divisible by the tensor-parallel "
                                                   "size ",
                                                   tp));
  }
  return absl::OkStatus();
}

// An fp8 linear's shard [out, in] (linear.h's requirements, named here
// instead of cuBLASLt's abort).
absl::Status CheckFp8(const LinearConfig& c, int64_t out, int64_t in) {
  if (!c.fp8) return absl::OkStatus();
  if (c.dtype != DType::kBF16) {
    return absl::InvalidArgumentError(
        absl::StrCat(c.name, ": FP8 GEMMs need bf16 parameters (train.precision=fp8 sets both)"));
  }
  constexpr int64_t kMultiple = 16;
  if (out % kMultiple != 0 || in % kMultiple != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        c.name, ": FP8 GEMMs need this rank's weight [out, in] = [", out, ", ", in,
        "] in multiples of ", kMultiple,
        " (cuBLASLt's FP8 rows): choose model sizes that give that (heads, head_dim, groups, "
        "ffn_hidden over TP), or use train.precision=bf16"));
  }
  return absl::OkStatus();
}

namespace fp8 = kernels::fp8;
using Fp8Cache = std::optional<fp8::Fp8Matrix>;

// fp8: the weight's GEMM operands for `dir`: its 128×128 codes — gathered as
// codes (ShardedParam::fp8_tiles) or quantised from the gathered weight, the
// same codes either way — and Wᵀ's (TransposeTiles: no second rounding).
// The caller Releases the weight after the GEMMs that read them.
absl::StatusOr<fp8::Fp8WeightPair> Fp8Weight(const kernels::Exec& e, ShardedParam& weight,
                                             Direction dir) {
  if (weight.fp8_tiles()) {
    GTP_ASSIGN_OR_RETURN(fp8::Fp8Matrix w, weight.MaterializeFp8(dir));
    fp8::Fp8Matrix wt = fp8::TransposeWeight(e, w);
    return fp8::Fp8WeightPair{std::move(w), std::move(wt)};
  }
  GTP_ASSIGN_OR_RETURN(Tensor w, weight.Materialize(dir));
  return fp8::QuantizeWeightPair(e, w);
}

// fp8: y = x·wᵀ (+ bias in the GEMM's epilogue: y is then bf16, the params'
// dtype), x's codes from `shared` (or made here), and Wᵀ's
// codes kept in *wt for the backward's dgrad. With xt (an fp8 wgrad), x is
// quantised both ways from one read (QuantizeRowsAndTransposed: the same
// codes) and xᵀ's codes are kept in *xt for the wgrad. gelu_of_x: the
// input is GELU(x), applied as x is quantised (needs xt).
void Fp8Forward(GtpChain& chain, fp8::Fp8SharedInput* shared, const Tensor& x,
                fp8::Fp8WeightPair wq, const Tensor& y, const Tensor& bias, Fp8Cache* wt,
                Fp8Cache* xt, bool gelu_of_x = false) {
  const kernels::Exec& e = chain.exec();
  fp8::Fp8SharedInput local(e);
  fp8::Fp8SharedInput& in = shared != nullptr ? *shared : local;
  GTP_CHECK(!gelu_of_x || xt != nullptr, "fp8 forward of GELU(x) without an fp8 wgrad");
  if (gelu_of_x) {
    in.BothOf(fp8::Fp8InputAct::kGelu, x, Tensor());
    *xt = in.Transposed(x);
  } else if (xt != nullptr) {
    in.Both(x);
    *xt = in.Transposed(x);
  }
  fp8::Fp8Linear(e, in.Rows(x), wq.w, y, 0.0f, bias);
  *wt = std::move(wq.wt);
}

// fp8: dx = dy·w + beta·dx from dy's codes (dyq) and Wᵀ's codes (*wt:
// BackwardWeight made sure of them), released after.
void Fp8Dgrad(const kernels::Exec& e, fp8::Fp8SharedInput& dyq, const Tensor& dy, const Tensor& dx,
              float beta, Fp8Cache* wt) {
  GTP_CHECK(wt->has_value(), "fp8 dgrad without Wᵀ's codes");
  fp8::Fp8LinearBackwardData(e, dyq.Rows(dy), **wt, dx, beta);
  wt->reset();
}

// What a backward needs of the weight. Under fp8 only Wᵀ's codes (the
// wgrad needs no weight): the forward's, kept in *wt — then the backward's
// GTP gather is skipped, and the linears' weights are marked not gathered in
// backward (ShardedParam::set_gathered_in_backward) so the chain does not
// prefetch them either — or, when no forward kept them, made here from a
// gather. Otherwise the gathered weight. *gathered: whether the caller must
// Release it. (Every backward follows its own forward — the pipeline runner
// re-runs a micro-batch's forward before its backward, as block recompute
// does — so the gather serves only a bf16-wgrad linear whose codes a
// backward already consumed; an fp8 wgrad needs the forward's xᵀ codes too
// and refuses to run without them, naming the layer.)
absl::StatusOr<Tensor> BackwardWeight(GtpChain& chain, ShardedParam& weight, bool fp8, Fp8Cache* wt,
                                      bool* gathered) {
  *gathered = false;
  if (fp8 && wt->has_value()) {
    chain.Freeze();  // as the first backward materialisation would
    return Tensor();
  }
  *gathered = true;
  if (fp8) {
    GTP_ASSIGN_OR_RETURN(fp8::Fp8WeightPair wq,
                         Fp8Weight(chain.exec(), weight, Direction::kBackward));
    *wt = std::move(wq.wt);
    return Tensor();
  }
  return weight.Materialize(Direction::kBackward);
}

// fp8: dw = dyᵀ·x + beta·dw (dyᵀ's codes from dyq; xᵀ's the forward kept
// in *xt, released here). The bias gradient came with dyq (Both).
void Fp8WeightGrad(const std::string& name, const kernels::Exec& e, fp8::Fp8SharedInput& dyq,
                   const Tensor& dy, const Tensor& dw, float beta, Fp8Cache* xt) {
  GTP_CHECK(xt->has_value(), name,
            ": an fp8 wgrad without the codes of xᵀ its forward keeps (a backward needs its "
            "own forward first)");
  fp8::Fp8LinearBackwardWeight(e, dyq.Transposed(dy), **xt, dw, beta);
  xt->reset();
}

}  // namespace

// ---- ColumnParallelLinear -------------------------------------------------------------

ColumnParallelLinear::ColumnParallelLinear(const LinearConfig& c, TpGtpGroups g, GtpChain* chain)
    : config_(c), groups_(g), chain_(chain), out_tp_(c.out_features / g.tp->size()) {}

absl::StatusOr<std::unique_ptr<ColumnParallelLinear>> ColumnParallelLinear::Create(
    const LinearConfig& config, const parallel::ProcessGroupCollection& pgs, GtpChain* chain) {
  GTP_ASSIGN_OR_RETURN(TpGtpGroups g, TpGtpGroups::From(pgs));
  const int parts = config.fused_parts;
  if (parts < 1 || config.out_features % parts != 0) {
    return absl::InvalidArgumentError(absl::StrCat(config.name,
                                                   ".out_features = ", config.out_features,
                                                   " is not divisible by ", parts, " fused parts"));
  }
  GTP_RETURN_IF_ERROR(
      CheckDivisible(config.name + (parts == 1 ? ".out_features" : ".out_features / fused_parts"),
                     config.out_features / parts, g.tp->size()));
  GTP_RETURN_IF_ERROR(CheckFp8(config, config.out_features / g.tp->size(), config.in_features));
  if (config.f32_output && config.bias) {
    return absl::InvalidArgumentError(
        absl::StrCat(config.name, ": an f32 output is for bias-free linears"));
  }
  if (config.f32_input_grad) {
    return absl::InvalidArgumentError(
        absl::StrCat(config.name, ": f32_input_grad is a row-parallel linear's setting"));
  }
  std::unique_ptr<ColumnParallelLinear> l(new ColumnParallelLinear(config, g, chain));
  l->weight_ = std::make_unique<ShardedParam>(config.name + ".weight", l->out_tp_,
                                              config.in_features, config.dtype, g.gtp, chain);
  const int64_t part_rows = config.out_features / parts, part_tp = part_rows / g.tp->size();
  const int64_t t = g.tp->rank();
  InitShardFromGlobal(
      *l->weight_,
      {config.out_features, config.in_features,
       [=](int64_t r) { return (r / part_tp) * part_rows + t * part_tp + r % part_tp; }, 0},
      config.seed, config.init_std);
  if (config.fp8) {
    l->weight_->set_gathered_in_backward(false);  // BackwardWeight
    // GtpOptions::fp8_tile_gather: where its shards are whole tiles.
    if (chain->options().fp8_tile_gather) l->weight_->UseFp8TileGather();
  }
  if (config.bias) {
    l->bias_ = MakeBias(chain->exec(), config.name + ".bias", l->out_tp_,
                        l->weight_->global_layout(), g.tp->size() > 1, config.dtype);
    l->bias_.layout.global_cols = 1;
    l->bias_.layout.col_offset = 0;
  }
  return l;
}

absl::StatusOr<Tensor> ColumnParallelLinear::Forward(const Tensor& x, Direction dir,
                                                     fp8::Fp8SharedInput* shared) {
  return ForwardImpl(x, dir, nullptr, shared);
}

absl::StatusOr<Tensor> ColumnParallelLinear::ForwardGelu(const Tensor& x, Direction dir,
                                                         Tensor* pre) {
  return ForwardImpl(x, dir, pre, nullptr);
}

absl::StatusOr<Tensor> ColumnParallelLinear::ForwardImpl(const Tensor& x, Direction dir,
                                                         Tensor* gelu_pre,
                                                         fp8::Fp8SharedInput* shared) {
  const kernels::Exec& e = chain_->exec();
  if (config_.sequence_parallel && !config_.caller_reduces_input_grad) {
    GTP_ASSIGN_OR_RETURN(x_saved_, AllGatherRows(e, *groups_.tp, x));
  } else {
    x_saved_ = x;
  }
  const int64_t n = x_saved_.numel() / config_.in_features;
  GTP_CHECK(!config_.f32_output || gelu_pre == nullptr, config_.name,
            ": ForwardGelu with an f32 output");
  Tensor y = e.Empty({n, out_tp_}, config_.f32_output ? DType::kF32 : config_.dtype);
  const Tensor x2 = x_saved_.View({n, config_.in_features});
  if (gelu_pre != nullptr) *gelu_pre = e.Empty({n, out_tp_}, config_.dtype);
  rows_ = n;
  if (config_.fp8) {
    GTP_ASSIGN_OR_RETURN(fp8::Fp8WeightPair wq, Fp8Weight(e, *weight_, dir));
    const bool keep_xt = config_.fp8_wgrad;
    Fp8Forward(*chain_, shared, x2, std::move(wq), gelu_pre != nullptr ? *gelu_pre : y, bias_.value,
               &wt_q_, keep_xt ? &xt_q_ : nullptr);
    if (keep_xt) x_saved_ = Tensor();  // the wgrad reads xt_q_
    if (gelu_pre != nullptr) ops::GeluForward(e, *gelu_pre, y);
  } else {
    GTP_ASSIGN_OR_RETURN(Tensor w, weight_->Materialize(dir));
    if (gelu_pre != nullptr) {
      ops::LinearGelu(e, x2, w, bias_.value, y, *gelu_pre);
    } else {
      ops::Linear(e, x2, w, y, 0.0f, bias_.value);
    }
  }
  weight_->Release(dir);
  return y;
}

absl::StatusOr<Tensor> ColumnParallelLinear::Backward(const Tensor& dy, const Tensor& accumulate) {
  return BackwardImpl(dy, accumulate, Tensor());
}

absl::StatusOr<Tensor> ColumnParallelLinear::BackwardThroughGelu(const Tensor& dact,
                                                                 const Tensor& pre) {
  GTP_CHECK(fp8_both_ways(), config_.name,
            ": BackwardThroughGelu needs fp8 GEMMs with an fp8 wgrad");
  return BackwardImpl(dact, Tensor(), pre);
}

absl::StatusOr<Tensor> ColumnParallelLinear::BackwardImpl(const Tensor& dy,
                                                          const Tensor& accumulate,
                                                          const Tensor& gelu_pre) {
  const kernels::Exec& e = chain_->exec();
  const int64_t n = rows_;
  Tensor dy2 = dy.View({n, out_tp_});
  bool gathered = false;
  GTP_ASSIGN_OR_RETURN(Tensor w, BackwardWeight(*chain_, *weight_, config_.fp8, &wt_q_, &gathered));
  GTP_CHECK(!accumulate.defined() || config_.caller_reduces_input_grad, config_.name,
            ": accumulating dx needs caller_reduces_input_grad");
  Tensor dx = accumulate.defined() ? accumulate : e.Empty({n, config_.in_features}, config_.dtype);
  const float dx_beta = accumulate.defined() ? 1.0f : 0.0f;
  fp8::Fp8SharedInput dyq(e);
  const bool fp8_wgrad = config_.fp8 && config_.fp8_wgrad;
  // dy's codes for both GEMMs and db += Σ dy, one read (through GELU: of
  // GELU'(pre)·dy, made as dy and pre are read).
  if (gelu_pre.defined()) {
    dyq.BothOf(fp8::Fp8InputAct::kGeluGrad, dy2, gelu_pre.View({n, out_tp_}), bias_.grad);
  } else if (fp8_wgrad) {
    dyq.Both(dy2, bias_.grad);
  }
  if (config_.fp8) {
    Fp8Dgrad(e, dyq, dy2, dx, dx_beta, &wt_q_);
  } else {
    ops::LinearBackwardData(e, dy2, w, dx, dx_beta);
  }
  bool fresh = false;  // the wgrad buffer after the dgrad GEMM (as before fp8)
  Tensor wgrad = weight_->Wgrad(&fresh);
  if (fp8_wgrad) {
    Fp8WeightGrad(config_.name, e, dyq, dy2, wgrad, fresh ? 0.0f : 1.0f, &xt_q_);
  } else {
    WeightAndBiasGrad(*chain_, dy2, x_saved_.View({n, config_.in_features}), wgrad,
                      fresh ? 0.0f : 1.0f, bias_.grad);
  }
  if (gathered) weight_->Release(Direction::kBackward);
  GTP_RETURN_IF_ERROR(weight_->ReduceGrad());
  x_saved_ = Tensor();
  if (config_.caller_reduces_input_grad) return dx;
  if (config_.sequence_parallel) return ReduceScatterRows(e, *groups_.tp, dx);
  GTP_RETURN_IF_ERROR(AllReduceSum(*groups_.tp, dx));
  return dx;
}

// ---- RowParallelLinear ----------------------------------------------------------------

RowParallelLinear::RowParallelLinear(const LinearConfig& c, TpGtpGroups g, GtpChain* chain)
    : config_(c), groups_(g), chain_(chain), in_tp_(c.in_features / g.tp->size()) {}

absl::StatusOr<std::unique_ptr<RowParallelLinear>> RowParallelLinear::Create(
    const LinearConfig& config, const parallel::ProcessGroupCollection& pgs, GtpChain* chain) {
  GTP_ASSIGN_OR_RETURN(TpGtpGroups g, TpGtpGroups::From(pgs));
  GTP_RETURN_IF_ERROR(
      CheckDivisible(config.name + ".in_features", config.in_features, g.tp->size()));
  GTP_RETURN_IF_ERROR(CheckFp8(config, config.out_features, config.in_features / g.tp->size()));
  if (config.f32_output) {
    return absl::InvalidArgumentError(
        absl::StrCat(config.name, ": f32_output is a column-parallel linear's setting"));
  }
  std::unique_ptr<RowParallelLinear> l(new RowParallelLinear(config, g, chain));
  l->weight_ = std::make_unique<ShardedParam>(config.name + ".weight", config.out_features,
                                              l->in_tp_, config.dtype, g.gtp, chain);
  InitShardFromGlobal(*l->weight_,
                      {config.out_features, config.in_features, [](int64_t r) { return r; },
                       static_cast<int64_t>(g.tp->rank()) * l->in_tp_},
                      config.seed, config.init_std);
  if (config.fp8) {
    l->weight_->set_gathered_in_backward(false);  // BackwardWeight
    // GtpOptions::fp8_tile_gather: where its shards are whole tiles.
    if (chain->options().fp8_tile_gather) l->weight_->UseFp8TileGather();
  }
  if (config.bias) {
    l->bias_ =
        MakeBias(chain->exec(), config.name + ".bias", config.out_features,
                 {config.out_features, 1, [](int64_t r) { return r; }, 0}, false, config.dtype);
    l->bias_.grad_needs_tp_sum = config.sequence_parallel && g.tp->size() > 1;
  }
  return l;
}

absl::StatusOr<Tensor> RowParallelLinear::Forward(const Tensor& x, Direction dir,
                                                  const Tensor& residual) {
  return ForwardImpl(x, dir, residual, false);
}

absl::StatusOr<Tensor> RowParallelLinear::ForwardOfGelu(const Tensor& pre, Direction dir,
                                                        const Tensor& residual) {
  GTP_CHECK(fp8_both_ways(), config_.name, ": ForwardOfGelu needs fp8 GEMMs with an fp8 wgrad");
  return ForwardImpl(pre, dir, residual, true);
}

absl::StatusOr<Tensor> RowParallelLinear::ForwardImpl(const Tensor& x, Direction dir,
                                                      const Tensor& residual, bool gelu_of_x) {
  const kernels::Exec& e = chain_->exec();
  x_saved_ = x;
  const int64_t n = x.numel() / in_tp_;
  rows_ = n;
  Tensor y = e.Empty({n, config_.out_features}, config_.dtype);
  // The bias is added once: fused into the GEMM without TP, else after the
  // reduction. The residual likewise, on CUDA (the CPU keeps the separate
  // add, and with it the f32 summation order its tests pin).
  const bool reduced = groups_.tp->size() > 1;
  const Tensor bias = reduced ? Tensor() : bias_.value;
  const bool residual_in_gemm = residual.defined() && !reduced && !config_.fp8 && e.is_cuda();
  if (residual_in_gemm) {
    GTP_ASSIGN_OR_RETURN(Tensor w, weight_->Materialize(dir));
    ops::LinearResidual(e, x.View({n, in_tp_}), w, y, bias, residual);
  } else if (config_.fp8) {
    GTP_ASSIGN_OR_RETURN(fp8::Fp8WeightPair wq, Fp8Weight(e, *weight_, dir));
    const bool keep_xt = config_.fp8_wgrad;
    Fp8Forward(*chain_, nullptr, x.View({n, in_tp_}), std::move(wq), y, bias, &wt_q_,
               keep_xt ? &xt_q_ : nullptr, gelu_of_x);
    if (keep_xt) x_saved_ = Tensor();  // the wgrad reads xt_q_
  } else {
    GTP_ASSIGN_OR_RETURN(Tensor w, weight_->Materialize(dir));
    ops::Linear(e, x.View({n, in_tp_}), w, y, 0.0f, bias);
  }
  weight_->Release(dir);
  if (config_.sequence_parallel) {
    GTP_ASSIGN_OR_RETURN(y, ReduceScatterRows(e, *groups_.tp, y));
  } else {
    GTP_RETURN_IF_ERROR(AllReduceSum(*groups_.tp, y));
  }
  if (reduced && bias_.value.defined()) AddBias(*chain_, y, bias_.value);
  if (residual.defined() && !residual_in_gemm) ops::Axpby(e, 1.0f, residual, 1.0f, y);
  return y;
}

absl::StatusOr<Tensor> RowParallelLinear::Backward(const Tensor& dy) {
  return BackwardImpl(dy, Tensor());
}

absl::StatusOr<Tensor> RowParallelLinear::BackwardDGelu(const Tensor& dy, const Tensor& pre) {
  return BackwardImpl(dy, pre);
}

absl::StatusOr<Tensor> RowParallelLinear::BackwardImpl(const Tensor& dy, const Tensor& gelu_pre) {
  const kernels::Exec& e = chain_->exec();
  Tensor dy_full = dy;
  // With SP the bias grad covers this rank's rows only (summed over TP in
  // finalisation), so it comes from dy before the gather; otherwise with the
  // wgrad (WeightAndBiasGrad, or dy's fp8 codes: Both).
  const bool bias_from_wgrad = bias_.value.defined() && !config_.sequence_parallel;
  if (bias_.value.defined() && !bias_from_wgrad) AccumulateBiasGrad(*chain_, dy, bias_.grad);
  if (config_.sequence_parallel) {
    GTP_ASSIGN_OR_RETURN(dy_full, AllGatherRows(e, *groups_.tp, dy));
  }
  const int64_t n = rows_;
  Tensor dy2 = dy_full.View({n, config_.out_features});
  bool gathered = false;
  GTP_ASSIGN_OR_RETURN(Tensor w, BackwardWeight(*chain_, *weight_, config_.fp8, &wt_q_, &gathered));
  GTP_CHECK(!config_.f32_input_grad || !gelu_pre.defined(), config_.name,
            ": BackwardDGelu with an f32 input gradient");
  Tensor dx = e.Empty({n, in_tp_}, config_.f32_input_grad ? DType::kF32 : config_.dtype);
  fp8::Fp8SharedInput dyq(e);
  // fp8: dy's codes for both GEMMs (and db += Σ dy when it is the wgrad's)
  // from one read of dy; with a bf16 wgrad, the dgrad's alone (made there).
  const bool fp8_wgrad = config_.fp8 && config_.fp8_wgrad;
  if (fp8_wgrad) dyq.Both(dy2, bias_from_wgrad ? bias_.grad : Tensor());
  if (config_.fp8 && gelu_pre.defined()) {
    Tensor dgelu = e.Empty({n, in_tp_}, config_.dtype);  // dy·W, before GELU's derivative
    Fp8Dgrad(e, dyq, dy2, dgelu, 0.0f, &wt_q_);
    ops::GeluBackward(e, dgelu, gelu_pre.View({n, in_tp_}), dx);
  } else if (config_.fp8) {
    Fp8Dgrad(e, dyq, dy2, dx, 0.0f, &wt_q_);
  } else if (gelu_pre.defined()) {
    ops::LinearBackwardDataDGelu(e, dy2, w, gelu_pre.View({n, in_tp_}), dx);
  } else {
    ops::LinearBackwardData(e, dy2, w, dx);
  }
  bool fresh = false;  // the wgrad buffer after the dgrad GEMM (as before fp8)
  Tensor wgrad = weight_->Wgrad(&fresh);
  const Tensor db = bias_from_wgrad ? bias_.grad : Tensor();
  if (fp8_wgrad) {
    Fp8WeightGrad(config_.name, e, dyq, dy2, wgrad, fresh ? 0.0f : 1.0f, &xt_q_);
  } else {
    WeightAndBiasGrad(*chain_, dy2, x_saved_.View({n, in_tp_}), wgrad, fresh ? 0.0f : 1.0f, db);
  }
  if (gathered) weight_->Release(Direction::kBackward);
  GTP_RETURN_IF_ERROR(weight_->ReduceGrad());
  x_saved_ = Tensor();
  return dx;
}

}  // namespace gtp::layers
