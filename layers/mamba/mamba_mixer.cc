#include "layers/mamba/mamba_mixer.h"

#include <cmath>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/kernels/ssm/mamba_ops.h"
#include "core/kernels/ssm/ssd_scan.h"
#include "core/philox.h"
#include "core/status.h"
#include "core/timeline.h"

namespace gtp::layers::mamba {

namespace ops = kernels::ops;
namespace ssm = kernels::ssm;

namespace {

absl::Status Bad(const std::string& name, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(name, ": ", what));
}

// A TP-sharded, GTP-replicated param of `rows_tp` rows × `cols` (this TP
// rank's rows [t·rows_tp, (t+1)·rows_tp) of the global [tp·rows_tp, cols]),
// element (R, C) of the global tensor = init(R, C).
// Its value in `dtype`, its gradient f32.
template <typename Init>
ReplicatedParam ByHead(const kernels::Exec& e, const std::string& name, int64_t rows_tp,
                       int64_t cols, int tp, int t, DType dtype, Init init) {
  std::vector<float> v(rows_tp * cols);
  for (int64_t r = 0; r < rows_tp; ++r)
    for (int64_t c = 0; c < cols; ++c) v[r * cols + c] = init(t * rows_tp + r, c);
  const Shape s = cols == 1 ? Shape{rows_tp} : Shape{rows_tp, cols};
  ReplicatedParam p{name, TensorFromHost(e, v.data(), s, dtype), e.Zeros(s), false,
                    {tp * rows_tp, cols, [=](int64_t r) { return t * rows_tp + r; }, 0}};
  p.tp_sharded = tp > 1;
  return p;
}

LinearConfig Lin(const std::string& name, int64_t in, int64_t out, float std, uint64_t seed,
                 bool caller_reduces, DType dtype, bool fp8, bool fp8_wgrad,
                 bool sequence_parallel = false) {
  LinearConfig l{name, in, out};
  l.bias = false;
  l.sequence_parallel = sequence_parallel;
  l.init_std = std;
  l.seed = seed;
  l.caller_reduces_input_grad = caller_reduces;
  l.dtype = dtype;
  l.fp8 = fp8;
  l.fp8_wgrad = fp8_wgrad;
  return l;
}

// t converted to `dtype` on e's device (t itself when it already is).
Tensor As(const kernels::Exec& e, const Tensor& t, DType dtype) {
  if (t.dtype() == dtype) return t;
  Tensor out = e.Empty(t.shape(), dtype);
  ops::Cast(e, t, out);
  return out;
}

// Each of ts as a contiguous tensor of `dtype`: itself where it is one, the
// rest converted or copied in one launch (a layer's ten small parameters
// widened, a packed projection's column blocks copied out).
std::vector<Tensor> AsDense(const kernels::Exec& e, std::vector<Tensor> ts, DType dtype) {
  std::vector<Tensor> from, to;
  for (Tensor& t : ts) {
    if (t.dtype() == dtype && t.is_contiguous()) continue;
    from.push_back(t);
    t = e.Empty(t.shape(), dtype);
    to.push_back(t);
  }
  ops::CastMany(e, from, to);
  return ts;
}

// The scan's CUDA kernels (CPU execs ignore the choice): kAuto's, with the
// warp-level kernel's products in bf16 when the model is bf16 — Mamba-2's
// own kernels' precision (bf16 operands, f32 accumulation, the decays and
// the state recurrence in f32) — and in split bf16 (about f32) for an f32
// model.
ssm::SsdCudaKernel ScanKernel(const MambaConfig& c, bool backward) {
  const ssm::SsdCudaKernel k = ssm::SsdAutoKernel(backward, c.head_dim, c.d_state, c.chunk);
  return k == ssm::SsdCudaKernel::kChunkedMma && c.dtype == DType::kBF16
             ? ssm::SsdCudaKernel::kChunkedMmaBf16
             : k;
}

}  // namespace

absl::StatusOr<std::unique_ptr<MambaMixer>> MambaMixer::Create(
    const std::string& name, const MambaConfig& c, int64_t B, int64_t T,
    const parallel::ProcessGroupCollection& pgs, GtpChain* chain) {
  if (c.d_model <= 0 || c.expand <= 0 || c.head_dim <= 0 || c.d_state <= 0 || c.d_conv <= 0 ||
      c.n_groups <= 0 || c.chunk <= 0) {
    return Bad(name, "d_model, expand, head_dim, d_state, d_conv, n_groups and chunk must be > 0");
  }
  const int64_t Di = c.d_inner(), H = c.n_heads(), G = c.n_groups;
  if (Di % c.head_dim != 0) {
    return Bad(name, absl::StrCat("d_inner ", Di, " is not divisible by head_dim ", c.head_dim));
  }
  if (H % G != 0) return Bad(name, absl::StrCat(H, " heads are not divisible by ", G, " groups"));
  if (c.dtype != DType::kF32 && c.dtype != DType::kBF16) {
    return Bad(name, absl::StrCat("dtype must be f32 or bf16, got ", DTypeName(c.dtype)));
  }
  std::unique_ptr<MambaMixer> m(new MambaMixer());
  m->c_ = c;
  m->exec_ = chain->exec();
  m->chain_ = chain;
  GTP_ASSIGN_OR_RETURN(m->tp_, pgs.Get(parallel::groups::kTp));
  const int tp = m->tp_->size(), t = m->tp_->rank();
  if (H % tp != 0 || G % tp != 0) {
    return Bad(name, absl::StrCat(H, " heads and ", G, " groups must both be divisible by TP = ", tp));
  }
  m->B_ = B;
  m->T_ = T;
  m->sp_ = c.sequence_parallel && tp > 1;
  if (m->sp_ && (B * T) % tp != 0) {
    return Bad(name, absl::StrCat("sequence parallelism needs B·T = ", B * T,
                                  " rows divisible by TP = ", tp));
  }
  m->di_ = Di / tp;
  m->h_ = H / tp;
  m->g_ = G / tp;
  const int64_t Ns = c.d_state, K = c.d_conv;
  GTP_RETURN_IF_ERROR(m->SetUpContextParallel(name, pgs));
  auto in_proj = [&](const std::string& part, int64_t out) {
    LinearConfig l = Lin(name + ".in_proj_" + part, c.d_model, out, c.init_std, c.seed, true,
                         c.dtype, c.fp8, c.fp8_wgrad);
    l.f32_output = true;  // the SSM's math is f32: no cast after the GEMM
    return l;
  };
  GTP_ASSIGN_OR_RETURN(m->in_z_, ColumnParallelLinear::Create(in_proj("z", Di), pgs, chain));
  GTP_ASSIGN_OR_RETURN(m->in_x_, ColumnParallelLinear::Create(in_proj("x", Di), pgs, chain));
  // B, C and dt are narrow (G·N, G·N, H rows): one GEMM for the three where
  // packing is on.
  GTP_ASSIGN_OR_RETURN(
      m->in_bcdt_,
      PackedLinears::Create({in_proj("B", G * Ns), in_proj("C", G * Ns), in_proj("dt", H)},
                            PacksOn(c.packing, !c.fp8, chain->exec()), pgs, chain));
  // Under SP out_proj reduce-scatters its output rows (and gathers dout back).
  LinearConfig out_proj = Lin(name + ".out_proj", Di, c.d_model, c.out_std, c.seed, false, c.dtype,
                              c.fp8, c.fp8_wgrad, m->sp_);
  out_proj.f32_input_grad = true;  // into the gated norm's f32 backward: no cast
  GTP_ASSIGN_OR_RETURN(m->out_, RowParallelLinear::Create(out_proj, pgs, chain));
  const kernels::Exec& e = m->exec_;
  // Conv filters ~ U(−1/√K, 1/√K), zero biases; by global channel.
  auto conv = [&](const std::string& n, int64_t rows_tp) {
    const uint64_t key = KeyFromName(n, c.seed);
    const float bound = 1.0f / std::sqrt(static_cast<float>(K));
    return ByHead(e, n, rows_tp, K, tp, t, c.dtype, [=](int64_t r, int64_t k) {
      return bound * (2.0f * PhiloxUniform(key, r * K + k) - 1.0f);
    });
  };
  auto zero = [](int64_t, int64_t) { return 0.0f; };
  m->conv_x_w_ = conv(name + ".conv_x.weight", m->di_);
  m->conv_x_b_ = ByHead(e, name + ".conv_x.bias", m->di_, 1, tp, t, c.dtype, zero);
  m->conv_b_w_ = conv(name + ".conv_B.weight", m->g_ * Ns);
  m->conv_b_b_ = ByHead(e, name + ".conv_B.bias", m->g_ * Ns, 1, tp, t, c.dtype, zero);
  m->conv_c_w_ = conv(name + ".conv_C.weight", m->g_ * Ns);
  m->conv_c_b_ = ByHead(e, name + ".conv_C.bias", m->g_ * Ns, 1, tp, t, c.dtype, zero);
  // Mamba-2's inits: dt = exp(U(log 1e-3, log 1e-1)) through an inverse
  // softplus; A = −U(1, 16) (A_log its log); D = 1; the norm weight 1.
  const uint64_t kdt = KeyFromName(name + ".dt_bias", c.seed), ka = KeyFromName(name + ".A_log", c.seed);
  m->dt_bias_ = ByHead(e, name + ".dt_bias", m->h_, 1, tp, t, c.dtype, [=](int64_t r, int64_t) {
    const float dt = std::exp(std::log(1e-3f) + (std::log(1e-1f) - std::log(1e-3f)) * PhiloxUniform(kdt, r));
    return dt + std::log(-std::expm1(-dt));
  });
  m->a_log_ = ByHead(e, name + ".A_log", m->h_, 1, tp, t, c.dtype,
                     [=](int64_t r, int64_t) { return std::log(1.0f + 15.0f * PhiloxUniform(ka, r)); });
  m->d_ = ByHead(e, name + ".D", m->h_, 1, tp, t, c.dtype, [](int64_t, int64_t) { return 1.0f; });
  m->norm_w_ = ByHead(e, name + ".norm.weight", m->di_, 1, tp, t, c.dtype,
                      [](int64_t, int64_t) { return 1.0f; });
  return m;
}

absl::Status MambaMixer::SetUpContextParallel(const std::string& name,
                                              const parallel::ProcessGroupCollection& pgs) {
  const int64_t P = c_.head_dim, Ns = c_.d_state;
  int n = 1;
  comm::Communicator* cp = nullptr;
  if (pgs.Has(parallel::groups::kCp) && (*pgs.Group(parallel::groups::kCp))->is_member()) {
    GTP_ASSIGN_OR_RETURN(cp, pgs.Get(parallel::groups::kCp));
    n = cp->size();
  }
  // Without CP: one part, all of this TP rank's channels.
  hs_ = h_ / n;
  x_split_ = ChannelSplit{di_, di_, {}};
  dt_split_ = ChannelSplit{h_, h_, {}};
  bc_split_ = ChannelSplit{g_ * Ns, g_ * Ns, {}};
  if (n == 1) {
    x_split_.offset = dt_split_.offset = bc_split_.offset = {0};
    return absl::OkStatus();
  }
  if (h_ % n != 0 || T_ % 2 != 0) {
    return Bad(name, absl::StrCat(
        "context parallelism splits each TP rank's ", h_, " Mamba heads (d_inner / "
        "model.mamba.head_dim / parallel.tp) by head over parallel.cp = ", n,
        ": they must be divisible by it (e.g. parallel.cp=", h_ % 2 == 0 ? 2 : 1,
        ", or a model.mamba.head_dim giving a multiple of ", n, " heads)"));
  }
  // The B/C groups a part's heads read: whole groups per part, or one
  // group shared by several parts.
  const int64_t per_group = h_ / g_;
  int64_t gs = 0;
  std::vector<int64_t> group_of_part(n);
  if (hs_ % per_group == 0) {
    gs = hs_ / per_group;
    for (int q = 0; q < n; ++q) group_of_part[q] = q * gs;
  } else if (per_group % hs_ == 0) {
    gs = 1;
    for (int q = 0; q < n; ++q) group_of_part[q] = q * hs_ / per_group;
  } else {
    return Bad(name, absl::StrCat(
        "context parallelism gives each of parallel.cp = ", n, " parts ", hs_,
        " Mamba heads, which neither hold whole B/C groups nor fit in one (", per_group,
        " heads per group of model.mamba.n_groups): choose n_groups so that heads per group "
        "divides or is a multiple of ", hs_));
  }
  cp_ = std::make_unique<HeadExchange>(exec_, cp, B_, T_);
  for (int q = 0; q < n; ++q) {
    x_split_.offset.push_back(q * hs_ * P);
    dt_split_.offset.push_back(q * hs_);
    bc_split_.offset.push_back(group_of_part[q] * Ns);
  }
  x_split_.part = hs_ * P;
  dt_split_.part = hs_;
  bc_split_.part = gs * Ns;
  return absl::OkStatus();
}

MambaMixer::PartSlices MambaMixer::Slices(const F32Values& v) const {
  const int j = cp_ ? cp_->part() : 0;
  const int64_t ox = x_split_.offset[j], ob = bc_split_.offset[j], oh = dt_split_.offset[j];
  const int64_t cx = x_split_.part, cb = bc_split_.part;
  return PartSlices{v.conv_x_w.Slice(ox, ox + cx), v.conv_x_b.Slice(ox, ox + cx),
                    v.conv_b_w.Slice(ob, ob + cb), v.conv_b_b.Slice(ob, ob + cb),
                    v.conv_c_w.Slice(ob, ob + cb), v.conv_c_b.Slice(ob, ob + cb),
                    a_.Slice(oh, oh + hs_),        v.d.Slice(oh, oh + hs_)};
}

absl::StatusOr<Tensor> MambaMixer::Forward(const Tensor& h, const Tensor& residual, Direction dir) {
  const kernels::Exec& e = exec_;
  const int64_t N = B_ * T_, Ns = c_.d_state, P = c_.head_dim;
  const int64_t rows = sp_ ? N / tp_->size() : N;
  if (h.rank() != 2 || h.dim(0) != rows || h.dim(1) != c_.d_model || h.dtype() != c_.dtype) {
    return absl::InvalidArgumentError(absl::StrCat("mamba mixer input must be [", rows, ", ",
                                                   c_.d_model, "] ", DTypeName(c_.dtype),
                                                   ", got ", h.ToString()));
  }
  // The mixer's parts as trace spans (train.trace_steps; no-ops otherwise).
  std::optional<Timeline::Scope> span;
  auto section = [&](const char* name) {
    span.reset();
    span.emplace(chain_->timeline(), name, e.stream);
  };
  section("mamba in_proj");
  // Sequence parallelism: every TP rank's rows, in order (whole sequences).
  Tensor hin = h;
  if (sp_) {
    GTP_ASSIGN_OR_RETURN(hin, AllGatherRows(e, *tp_, h));
  }
  // The projections read the model dtype and write f32 (LinearConfig::f32_output);
  // everything up to out_proj is f32.
  const DType f32 = DType::kF32;
  kernels::fp8::Fp8SharedInput hin_fp8(e);  // fp8: hin quantised once for the five parts
  GTP_ASSIGN_OR_RETURN(Tensor z, in_z_->Forward(hin, dir, &hin_fp8));
  GTP_ASSIGN_OR_RETURN(Tensor xr_in, in_x_->Forward(hin, dir, &hin_fp8));
  GTP_ASSIGN_OR_RETURN(PackedLinears::Parts bcdt, in_bcdt_->Forward(hin, dir, &hin_fp8));
  z_ = As(e, z, f32);
  // Packed, B, C and dt are column blocks of one matrix: dense copies (small).
  const Tensor xr = As(e, xr_in, f32);
  const std::vector<Tensor> bcdt_f32 = AsDense(e, bcdt.part, f32);
  const Tensor br = bcdt_f32[0], cr = bcdt_f32[1];
  dtr_ = bcdt_f32[2];
  // The params as they are now (the optimizer steps after Backward).
  {
    const std::vector<Tensor> f = AsDense(
        e,
        {conv_x_w_.value, conv_x_b_.value, conv_b_w_.value, conv_b_b_.value, conv_c_w_.value,
         conv_c_b_.value, dt_bias_.value, a_log_.value, d_.value, norm_w_.value},
        f32);
    v32_ = F32Values{f[0], f[1], f[2], f[3], f[4], f[5], f[6], f[7], f[8], f[9]};
  }
  const F32Values& v = v32_;
  Tensor dt = e.Empty({N, h_});
  ssm::SoftplusBiasForward(e, dtr_, v.dt_bias, dt);
  a_ = e.Empty({h_});
  ssm::NegExpForward(e, v.a_log, a_);
  // The conv and the scan see whole sequences: this rank's own without CP;
  // under CP this part's heads of every rank's chunks (cp_exchange.h).
  if (cp_) {
    GTP_ASSIGN_OR_RETURN(std::vector<Tensor> t,
                         cp_->ToHeads({xr, br, cr, dt}, {x_split_, bc_split_, bc_split_, dt_split_}));
    xs_ = t[0], bs_ = t[1], cs_ = t[2], dts_ = t[3];
  } else {
    xs_ = xr.View({B_, T_, di_}), bs_ = br.View({B_, T_, g_ * Ns}), cs_ = cr.View({B_, T_, g_ * Ns});
    dts_ = dt.View({B_, T_, h_});
  }
  section("mamba conv");
  const int64_t Ts = xs_.dim(1), cx = x_split_.part, cb = bc_split_.part;
  const PartSlices w = Slices(v);
  xc_ = e.Empty({B_, Ts, cx});
  bc_ = e.Empty({B_, Ts, cb});
  cc_ = e.Empty({B_, Ts, cb});
  ssm::CausalConv1dForward(e, xs_, w.conv_x_w, w.conv_x_b, xc_, true);
  ssm::CausalConv1dForward(e, bs_, w.conv_b_w, w.conv_b_b, bc_, true);
  ssm::CausalConv1dForward(e, cs_, w.conv_c_w, w.conv_c_b, cc_, true);
  section("mamba scan");
  Tensor ys = e.Empty({B_, Ts, hs_, P});
  ssm::SsdScanForward(e, xc_.View({B_, Ts, hs_, P}), dts_.View({B_, Ts, hs_}), w.a,
                      bc_.View({B_, Ts, cb / Ns, Ns}), cc_.View({B_, Ts, cb / Ns, Ns}), w.d, ys,
                      c_.chunk, ScanKernel(c_, /*backward=*/false));
  if (cp_) {
    GTP_ASSIGN_OR_RETURN(std::vector<Tensor> t, cp_->FromHeads({ys.View({B_, Ts, cx})}, {x_split_}));
    y_ = t[0];
  } else {
    y_ = ys;
  }
  section("mamba norm");
  // The norm writes out_proj's input in the model dtype (no cast after it).
  Tensor yn = e.Empty({N, di_}, c_.dtype == DType::kBF16 ? DType::kBF16 : f32);
  rstd_ = e.Empty({N, di_ / (c_.d_inner() / c_.n_groups)});
  ssm::GatedRmsNormForward(e, y_.View({N, di_}), z_, v.norm_w, yn, rstd_,
                           c_.d_inner() / c_.n_groups, c_.norm_eps);
  section("mamba out_proj");
  return out_->Forward(As(e, yn, c_.dtype), dir, residual);
}

absl::StatusOr<Tensor> MambaMixer::Backward(const Tensor& dout) {
  const kernels::Exec& e = exec_;
  const int64_t N = B_ * T_, Ns = c_.d_state, P = c_.head_dim;
  if (!y_.defined()) return absl::FailedPreconditionError("mamba mixer: Backward without Forward");
  // out_proj keeps what its backward needs of its input (the normalised,
  // gated scan output, or its codes).
  const DType f32 = DType::kF32;
  const F32Values& v = v32_;
  std::optional<Timeline::Scope> span;
  auto section = [&](const char* name) {
    span.reset();
    span.emplace(chain_->timeline(), name, e.stream);
  };
  section("mamba out_proj bwd");
  GTP_ASSIGN_OR_RETURN(Tensor dyn, out_->Backward(dout));
  section("mamba norm bwd");
  // dz in the model dtype for in_proj_z's backward (written so, not cast);
  // dyn read in out_proj's dtype (widened in the kernel, not cast).
  Tensor dy = e.Empty({N, di_}),
         dz = e.Empty({N, di_}, c_.dtype == DType::kBF16 ? DType::kBF16 : f32);
  ssm::GatedRmsNormBackward(e, dyn, y_.View({N, di_}), z_, v.norm_w, rstd_,
                            c_.d_inner() / c_.n_groups, dy, dz, norm_w_.grad);
  Tensor dys;
  if (cp_) {
    GTP_ASSIGN_OR_RETURN(std::vector<Tensor> t, cp_->ToHeads({dy}, {x_split_}));
    dys = t[0];
  } else {
    dys = dy.View({B_, T_, di_});
  }
  const int64_t Ts = xs_.dim(1), cx = x_split_.part, cb = bc_split_.part;
  const int64_t oh = dt_split_.offset[cp_ ? cp_->part() : 0];
  const PartSlices w = Slices(v);
  Tensor dxc = e.Empty({B_, Ts, hs_, P}), ddts = e.Empty({B_, Ts, hs_}),
         dbc = e.Empty({B_, Ts, cb / Ns, Ns}), dcc = e.Empty({B_, Ts, cb / Ns, Ns}), da = e.Zeros({h_});
  section("mamba scan bwd");
  ssm::SsdScanBackward(e, dys.View({B_, Ts, hs_, P}), xc_.View({B_, Ts, hs_, P}),
                       dts_.View({B_, Ts, hs_}), w.a, bc_.View({B_, Ts, cb / Ns, Ns}),
                       cc_.View({B_, Ts, cb / Ns, Ns}), w.d, dxc, ddts, da.Slice(oh, oh + hs_), dbc,
                       dcc, d_.grad.Slice(oh, oh + hs_), c_.chunk,
                       ScanKernel(c_, /*backward=*/true));
  section("mamba conv bwd");
  ssm::NegExpBackwardAccumulate(e, da, a_, a_log_.grad);
  // The conv params' gradients land in this part's rows (the other parts'
  // rows come from their CP ranks through the dp_cp gradient reduction).
  // Without CP the conv writes in_proj_x's gradient input in the model dtype
  // (not cast after; under CP it goes through the exchange in f32 first).
  const DType dx_type = !cp_ && c_.dtype == DType::kBF16 ? DType::kBF16 : f32;
  Tensor dxs = e.Empty({B_, Ts, cx}, dx_type), dbs = e.Empty({B_, Ts, cb}),
         dcs = e.Empty({B_, Ts, cb});
  const int64_t ox = x_split_.offset[cp_ ? cp_->part() : 0];
  const int64_t ob = bc_split_.offset[cp_ ? cp_->part() : 0];
  ssm::CausalConv1dBackward(e, dxc.View({B_, Ts, cx}), xs_, w.conv_x_w, w.conv_x_b, true, dxs,
                            conv_x_w_.grad.Slice(ox, ox + cx), conv_x_b_.grad.Slice(ox, ox + cx));
  ssm::CausalConv1dBackward(e, dbc.View({B_, Ts, cb}), bs_, w.conv_b_w, w.conv_b_b, true, dbs,
                            conv_b_w_.grad.Slice(ob, ob + cb), conv_b_b_.grad.Slice(ob, ob + cb));
  ssm::CausalConv1dBackward(e, dcc.View({B_, Ts, cb}), cs_, w.conv_c_w, w.conv_c_b, true, dcs,
                            conv_c_w_.grad.Slice(ob, ob + cb), conv_c_b_.grad.Slice(ob, ob + cb));
  Tensor dxr = dxs, dbr = dbs, dcr = dcs, ddt = ddts;
  if (cp_) {
    GTP_ASSIGN_OR_RETURN(std::vector<Tensor> t,
                         cp_->FromHeads({dxs, dbs, dcs, ddts},
                                        {x_split_, bc_split_, bc_split_, dt_split_}));
    dxr = t[0], dbr = t[1], dcr = t[2], ddt = t[3];
  }
  section("mamba in_proj bwd");
  Tensor ddtr = e.Empty({N, h_});
  ssm::SoftplusBiasBackward(e, ddt.View({N, h_}), dtr_, v.dt_bias, ddtr, dt_bias_.grad);
  // The in_proj parts in reverse forward order (the GTP chain's backward order), their
  // output gradients back in the model dtype; one TP reduction.
  const DType dt = c_.dtype;
  // B, C and dt: packed, their gradients go into one matrix's column blocks
  // (small; one launch converts and places the three).
  PackedLinears::Parts dbcdt;
  const std::vector<Tensor> dbcdt_in = {dbr.View({N, g_ * Ns}), dcr.View({N, g_ * Ns}), ddtr};
  if (in_bcdt_->packed()) {
    dbcdt = in_bcdt_->NewGrads();
    ops::CastMany(e, dbcdt_in, dbcdt.part);
  } else {
    dbcdt.part = AsDense(e, dbcdt_in, dt);
  }
  GTP_ASSIGN_OR_RETURN(Tensor dh, in_bcdt_->Backward(dbcdt));
  GTP_RETURN_IF_ERROR(in_x_->Backward(As(e, dxr.View({N, di_}), dt), dh).status());
  GTP_RETURN_IF_ERROR(in_z_->Backward(As(e, dz, dt), dh).status());
  DropActivations();
  // The TP ranks' partial input gradients: summed, or under SP summed and
  // scattered back to each rank's rows.
  if (sp_) return ReduceScatterRows(e, *tp_, dh);
  GTP_RETURN_IF_ERROR(AllReduceSum(*tp_, dh));
  return dh;
}

void MambaMixer::DropActivations() {
  z_ = dtr_ = xs_ = bs_ = cs_ = dts_ = xc_ = bc_ = cc_ = a_ = y_ = rstd_ = Tensor();
  v32_ = F32Values{};
  in_z_->DropActivations();
  in_x_->DropActivations();
  in_bcdt_->DropActivations();
  out_->DropActivations();
}

void MambaMixer::CollectParams(std::vector<ShardedParam*>* sharded,
                               std::vector<ReplicatedParam*>* repl) {
  for (ColumnParallelLinear* l :
       {in_z_.get(), in_x_.get(), &in_bcdt_->part(0), &in_bcdt_->part(1), &in_bcdt_->part(2)}) {
    sharded->push_back(&l->weight());
  }
  sharded->push_back(&out_->weight());
  for (ReplicatedParam* p : {&conv_x_w_, &conv_x_b_, &conv_b_w_, &conv_b_b_, &conv_c_w_, &conv_c_b_,
                             &dt_bias_, &a_log_, &d_, &norm_w_}) {
    repl->push_back(p);
  }
}

}  // namespace gtp::layers::mamba
