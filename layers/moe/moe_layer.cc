#include "layers/moe/moe_layer.h"

#include <algorithm>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "layers/moe/combine.h"

namespace gtp::layers::moe {

namespace ops = kernels::ops;

bool MoeConfig::IsMoeLayer(int layer) const {
  if (!enabled()) return false;
  if (!pattern.empty()) return layer < static_cast<int>(pattern.size()) && pattern[layer] == 'E';
  return every_n > 0 && layer % every_n == 0;
}

absl::Status MoeConfig::Validate(int n_layer) const {
  if (!enabled()) return absl::OkStatus();
  GTP_RETURN_IF_ERROR(router.Validate());
  if (!pattern.empty()) {
    if (static_cast<int>(pattern.size()) != n_layer ||
        pattern.find_first_not_of("E-") != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat(
          "moe layer pattern \"", pattern, "\" must have one character per layer (", n_layer,
          "), 'E' for MoE and '-' for dense"));
    }
  } else if (every_n < 1) {
    return absl::InvalidArgumentError(absl::StrCat("moe every_n must be ≥ 1 (got ", every_n, ")"));
  }
  if (ffn_hidden < 0 || shared_ffn_hidden < 0) {
    return absl::InvalidArgumentError("moe ffn_hidden and shared_ffn_hidden must be ≥ 0");
  }
  return absl::OkStatus();
}

namespace {

template <typename T>
Tensor ToDevice(const kernels::Exec& e, const std::vector<T>& v) {
  return HostToDevice(e, v, {static_cast<int64_t>(v.size())});
}

template <typename T>
std::vector<T> ToHost(const kernels::Exec& e, const Tensor& t) {
  return DeviceToHost<T>(e, t);
}

std::vector<int64_t> Offsets(const std::vector<int64_t>& counts) {
  std::vector<int64_t> off(counts.size() + 1, 0);
  for (size_t i = 0; i < counts.size(); ++i) off[i + 1] = off[i] + counts[i];
  return off;
}

// parts [R·m, c] → Σ_r parts[r] [m, c] in f32, r ascending (deterministic).
Tensor SumInRankOrder(const kernels::Exec& e, const Tensor& parts, int R) {
  const int64_t m = parts.dim(0) / R, C = parts.dim(1);
  Tensor acc = e.Zeros({m, C}, DType::kF32);
  if (m == 0) return acc;
  Tensor part32 = parts.dtype() == DType::kF32 ? Tensor() : e.Empty({m, C}, DType::kF32);
  for (int r = 0; r < R; ++r) {
    Tensor p = parts.Slice(r * m, (r + 1) * m);
    if (part32.defined()) {
      ops::Cast(e, p, part32);
      p = part32;
    }
    ops::Axpby(e, 1.0f, p, 1.0f, acc);
  }
  return acc;
}

// The expert-major order of received rows [r][src][local expert] (all_cnt
// [R·P·el] rows per block): reorder / inv_reorder and the rows per expert.
void BuildReorder(const int32_t* all_cnt, int R, int P, int el, std::vector<int64_t>* ne,
                  std::vector<int32_t>* reorder, std::vector<int32_t>* inv_reorder) {
  std::vector<int64_t> block(static_cast<size_t>(R) * P * el + 1, 0);
  for (int b = 0; b < R * P * el; ++b) block[b + 1] = block[b] + all_cnt[b];
  for (int i = 0; i < el; ++i) {
    for (int rs = 0; rs < R * P; ++rs) {
      const int b = rs * el + i;
      for (int64_t q = block[b]; q < block[b + 1]; ++q) reorder->push_back(static_cast<int32_t>(q));
      (*ne)[i] += all_cnt[b];
    }
  }
  inv_reorder->resize(reorder->size());
  for (size_t q = 0; q < reorder->size(); ++q)
    (*inv_reorder)[(*reorder)[q]] = static_cast<int32_t>(q);
}

}  // namespace

absl::StatusOr<std::unique_ptr<MoeLayer>> MoeLayer::Create(const std::string& name,
                                                           const MoeConfig& c, const MoeShape& s,
                                                           const parallel::ProcessGroupCollection& pgs,
                                                           GtpChain* chain) {
  GTP_RETURN_IF_ERROR(c.router.Validate());
  std::unique_ptr<MoeLayer> m(new MoeLayer());
  m->shape_ = s;
  m->exec_ = chain->exec();
  m->chain_ = chain;
  GTP_ASSIGN_OR_RETURN(m->tp_, pgs.Get(parallel::groups::kTp));
  GTP_ASSIGN_OR_RETURN(m->ep_, pgs.Get(parallel::groups::kEp));
  GTP_ASSIGN_OR_RETURN(m->etp_, pgs.Get(parallel::groups::kEtp));
  GTP_ASSIGN_OR_RETURN(comm::Communicator * egtp, pgs.Get(parallel::groups::kEgtp));
  m->etp_size_ = m->etp_->size();
  const int etp_rank = m->etp_->rank();
  if (s.H % m->etp_size_ != 0) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": expert hidden size ", s.H,
                                                   " is not divisible by ETP = ", m->etp_size_));
  }
  m->E_ = c.router.num_experts;
  m->k_ = c.router.top_k;
  m->ep_size_ = m->ep_->size();
  m->ep_rank_ = m->ep_->rank();
  if (m->E_ % m->ep_size_ != 0) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": ", m->E_,
                                                   " experts are not divisible by EP = ",
                                                   m->ep_size_));
  }
  m->e_loc_ = m->E_ / m->ep_size_;
  // Context parallelism: the block's T is this CP rank's share of each
  // sequence; the router sums its aux-loss counts over the lane's TP × CP
  // ranks (router.h).
  RouterCp rcp;
  if (pgs.Has(parallel::groups::kCp)) {
    GTP_ASSIGN_OR_RETURN(const parallel::ProcessGroup* cpg, pgs.Group(parallel::groups::kCp));
    if (cpg->is_member() && cpg->size() > 1) {
      rcp.size = cpg->size();
      GTP_ASSIGN_OR_RETURN(rcp.tp_cp, pgs.Get(parallel::groups::kTpCp));
    }
  }
  if (rcp.size > 1 && c.router.capacity_factor > 0) {
    // Dropping picks among a rank's own tokens: under CP those are 2 of each
    // sequence's 2·CP chunks, so the kept tokens would differ from CP = 1's.
    return absl::InvalidArgumentError(absl::StrCat(
        name, ": capacity dropping (moe.capacity_factor = ", c.router.capacity_factor,
        ") is not supported under context parallelism (CP = ", rcp.size,
        "): each rank would drop among its own chunks of the sequences, not among the whole "
        "sequences' tokens; use moe.capacity_factor=0 (dropless) with parallel.cp > 1"));
  }
  m->cp_ = rcp.size;
  const int tp = m->tp_->size(), t = m->tp_->rank();
  const int64_t N = s.B * s.T;
  if (N % tp != 0) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": the micro-batch's ", N,
                                                   " tokens are not divisible by TP = ", tp));
  }
  m->rows_ = tp > 1 ? N / tp : N;
  m->row0_ = tp > 1 ? t * m->rows_ : 0;
  m->slice_ = tp > 1 && !s.sequence_parallel;
  m->all_gather_ = c.dispatcher == Dispatcher::kAllGather;
  m->pad_ = c.router.pad_to_capacity;
  // Expert wgrads: see the file comment.
  m->wgrad_scale_ =
      s.loss_sum ? 1.0f : static_cast<float>(tp) / static_cast<float>(m->etp_size_ * m->ep_size_);
  GTP_ASSIGN_OR_RETURN(m->router_,
                       Router::Create(name + ".router", c.router, s.C, m->rows_, s.T, m->row0_, N,
                                      s.init_std, s.seed, m->tp_, m->exec_, rcp));
  // This ETP rank's slice of each expert: hidden units [etp_rank·Hl, (etp_rank+1)·Hl)
  // (of gate and of up for SwiGLU, stacked [gate_l; up_l] as the activation wants).
  const int64_t C = s.C, H = s.H, Hl = H / m->etp_size_, H1 = s.swiglu ? 2 * H : H;
  const int64_t H1l = s.swiglu ? 2 * Hl : Hl;
  m->H_loc_ = Hl;
  m->H1_ = H1l;
  const int e_loc = m->e_loc_, e0 = m->ep_rank_ * e_loc;
  m->fc1_ = std::make_unique<ShardedParam>(name + ".experts.fc1.weight", e_loc * H1l, C, s.dtype,
                                           egtp, chain);
  m->fc2_ = std::make_unique<ShardedParam>(name + ".experts.fc2.weight", e_loc * C, Hl, s.dtype,
                                           egtp, chain);
  InitShardFromGlobal(*m->fc1_,
                      {static_cast<int64_t>(m->E_) * H1, C,
                       [=](int64_t r) {
                         const int64_t e = e0 + r / H1l, j = r % H1l;
                         const int64_t part = j / Hl, i = j % Hl;  // 0 = gate (or GELU), 1 = up
                         return e * H1 + part * H + etp_rank * Hl + i;
                       },
                       0},
                      s.seed, s.init_std);
  InitShardFromGlobal(*m->fc2_,
                      {static_cast<int64_t>(m->E_) * C, H,
                       [C, e0](int64_t r) { return (e0 + r / C) * C + r % C; }, etp_rank * Hl},
                      s.seed, s.out_std);
  // Muon sees each local expert's matrices (the layout of this EP rank's experts only).
  m->fc1_->set_matrix_layout({static_cast<int64_t>(e_loc) * H1, C,
                              [=](int64_t r) {
                                const int64_t e = r / H1l, j = r % H1l;
                                return e * H1 + (j / Hl) * H + etp_rank * Hl + j % Hl;
                              },
                              0},
                             e_loc);
  m->fc2_->set_matrix_layout({static_cast<int64_t>(e_loc) * C, H, [](int64_t r) { return r; },
                              etp_rank * Hl},
                             e_loc);
  return m;
}

absl::Status MoeLayer::Plan(const RouterOutput& r) {
  const int P = ep_size_, el = e_loc_, R = etp_size_;
  if (pad_) {
    // Static sizes: every (source, expert) block holds the capacity rows.
    const int64_t cap = router_->capacity(), S = r.expert.numel();
    pos_d_ = exec_.Empty({S}, DType::kI32);
    perm_d_ = exec_.Empty({E_ * cap}, DType::kI32);
    PadToCapacity(exec_, E_, cap, r.expert, r.counts, r.pos, r.row_tok, pos_d_, perm_d_);
    M_ = E_ * cap;
    send_rows_.assign(P, el * cap);
    recv_rows_.assign(P, el * cap);
    etp_rows_.assign(R, P * el * cap);
    ne_.assign(el, static_cast<int64_t>(R) * P * cap);
    if (P * R > 1 && !static_plan_) {
      const std::vector<int32_t> all_cnt(static_cast<size_t>(R) * P * el,
                                         static_cast<int32_t>(cap));
      std::vector<int64_t> ne(el, 0);
      std::vector<int32_t> reorder, inv_reorder;
      BuildReorder(all_cnt.data(), R, P, el, &ne, &reorder, &inv_reorder);
      reorder_ = ToDevice(exec_, reorder);
      inv_reorder_ = ToDevice(exec_, inv_reorder);
    }
    static_plan_ = true;
    return absl::OkStatus();
  }
  // One device buffer of the counts the host needs, read in one copy:
  // [send: E per global expert | recv: P·el from each source | all: R·P·el,
  // every ETP rank's recv (ETP: every rank of the group computes its hidden
  // slice for the group's tokens)].
  const int64_t nr = static_cast<int64_t>(P) * el, na = R * nr;
  Tensor cnt = exec_.Empty({E_ + nr + na}, DType::kI32);
  Tensor send = cnt.Slice(0, E_), recv = cnt.Slice(E_, E_ + nr),
         all = cnt.Slice(E_ + nr, E_ + nr + na);
  GTP_RETURN_IF_ERROR(Copy(r.counts, send, exec_.stream, /*sync=*/false));
  if (P > 1) {
    GTP_RETURN_IF_ERROR(
        comm::Run(ep_->AllToAll(send.raw_data(), recv.raw_data(), el, DType::kI32)));
  } else {
    GTP_RETURN_IF_ERROR(Copy(send, recv, exec_.stream, /*sync=*/false));
  }
  if (R > 1) {
    GTP_RETURN_IF_ERROR(
        comm::Run(etp_->AllGather(recv.raw_data(), all.raw_data(), nr, DType::kI32)));
  } else {
    GTP_RETURN_IF_ERROR(Copy(recv, all, exec_.stream, /*sync=*/false));
  }
  const std::vector<int32_t> h = ToHost<int32_t>(exec_, cnt);  // the layer's one host sync
  const int32_t* send_cnt = h.data();
  const int32_t* recv_cnt = h.data() + E_;
  const int32_t* all_cnt = h.data() + E_ + nr;
  M_ = 0;
  send_rows_.assign(P, 0);
  for (int e = 0; e < E_; ++e) {
    send_rows_[e / el] += send_cnt[e];
    M_ += send_cnt[e];
  }
  recv_rows_.assign(P, 0);
  for (int src = 0; src < P; ++src)
    for (int i = 0; i < el; ++i) recv_rows_[src] += recv_cnt[src * el + i];
  etp_rows_.assign(R, 0);
  for (int q = 0; q < R; ++q)
    for (int b = 0; b < P * el; ++b) etp_rows_[q] += all_cnt[q * P * el + b];
  // The experts want the rows [local expert][r][src].
  std::vector<int32_t> reorder, inv_reorder;
  ne_.assign(el, 0);
  if (P * R > 1) {
    BuildReorder(all_cnt, R, P, el, &ne_, &reorder, &inv_reorder);
  } else {
    for (int i = 0; i < el; ++i) ne_[i] = recv_cnt[i];
  }
  // Uploaded once (no wait), for the forward's and the backward's gathers.
  reorder_ = reorder.empty() ? Tensor() : ToDevice(exec_, reorder);
  inv_reorder_ = inv_reorder.empty() ? Tensor() : ToDevice(exec_, inv_reorder);
  pos_d_ = r.pos;
  perm_d_ = r.row_tok.Slice(0, M_);
  return absl::OkStatus();
}

absl::StatusOr<Tensor> MoeLayer::Exchange(const Tensor& x, const std::vector<int64_t>& send_rows,
                                          const std::vector<int64_t>& recv_rows) {
  if (ep_size_ == 1) return x;
  const int64_t C = x.dim(1);
  std::vector<int64_t> sc(ep_size_), rc(ep_size_), sd(ep_size_), rd(ep_size_);
  int64_t so = 0, ro = 0;
  for (int p = 0; p < ep_size_; ++p) {
    sc[p] = send_rows[p] * C;
    rc[p] = recv_rows[p] * C;
    sd[p] = so;
    rd[p] = ro;
    so += sc[p];
    ro += rc[p];
  }
  Tensor out = exec_.Empty({ro / C, C}, x.dtype());
  GTP_RETURN_IF_ERROR(
      comm::Run(ep_->AllToAllV(x.raw_data(), sc, sd, out.raw_data(), rc, rd, x.dtype())));
  return out;
}

absl::StatusOr<Tensor> MoeLayer::EtpGather(const Tensor& x) {
  if (etp_size_ == 1) return x;
  const int64_t C = x.dim(1);
  const int R = etp_size_, me = etp_->rank();
  std::vector<int64_t> sc(R, etp_rows_[me] * C), sd(R, 0), rc(R), rd(R);
  int64_t ro = 0;
  for (int r = 0; r < R; ++r) {
    rc[r] = etp_rows_[r] * C;
    rd[r] = ro;
    ro += rc[r];
  }
  Tensor out = exec_.Empty({ro / C, C}, x.dtype());
  GTP_RETURN_IF_ERROR(
      comm::Run(etp_->AllToAllV(x.raw_data(), sc, sd, out.raw_data(), rc, rd, x.dtype())));
  return out;
}

absl::StatusOr<Tensor> MoeLayer::EtpReduceScatter(const Tensor& y) {
  if (etp_size_ == 1) return y;
  const int64_t C = y.dim(1);
  const int R = etp_size_, me = etp_->rank();
  const int64_t mine = etp_rows_[me];
  std::vector<int64_t> sc(R), sd(R), rc(R, mine * C), rd(R);
  int64_t so = 0;
  for (int r = 0; r < R; ++r) {
    sc[r] = etp_rows_[r] * C;
    sd[r] = so;
    so += sc[r];
    rd[r] = r * mine * C;
  }
  Tensor parts = exec_.Empty({R * mine, C}, y.dtype());
  GTP_RETURN_IF_ERROR(
      comm::Run(etp_->AllToAllV(y.raw_data(), sc, sd, parts.raw_data(), rc, rd, y.dtype())));
  // Σ over the ETP ranks' partial sums, in rank order, in f32.
  if (mine == 0) return exec_.Empty({0, C}, y.dtype());
  Tensor acc = SumInRankOrder(exec_, parts, R);
  if (y.dtype() == DType::kF32) return acc;
  Tensor out = exec_.Empty({mine, C}, y.dtype());
  ops::Cast(exec_, acc, out);
  return out;
}

absl::StatusOr<Tensor> MoeLayer::GatherGroup(const Tensor& x) {
  Tensor cur = x;
  for (comm::Communicator* g : {ep_, etp_}) {
    if (g->size() == 1) continue;
    Tensor out = exec_.Empty({g->size() * cur.dim(0), cur.dim(1)}, cur.dtype());
    GTP_RETURN_IF_ERROR(
        comm::Run(g->AllGather(cur.raw_data(), out.raw_data(), cur.numel(), cur.dtype())));
    cur = out;
  }
  return cur;
}

absl::StatusOr<Tensor> MoeLayer::ReduceScatterGroup(const Tensor& x) {
  Tensor cur = x;
  for (comm::Communicator* g : {etp_, ep_}) {
    if (g->size() == 1) continue;
    const int R = g->size();
    const int64_t m = cur.dim(0) / R, C = cur.dim(1);
    Tensor parts = exec_.Empty({R * m, C}, cur.dtype());
    if (m > 0) {
      GTP_RETURN_IF_ERROR(
          comm::Run(g->AllToAll(cur.raw_data(), parts.raw_data(), m * C, cur.dtype())));
    }
    cur = SumInRankOrder(exec_, parts, R);
  }
  if (cur.dtype() == DType::kF32) return cur;
  Tensor out = exec_.Empty(cur.shape(), DType::kF32);
  ops::Cast(exec_, cur, out);
  return out;
}

Tensor MoeLayer::GatherRows(const Tensor& x, const Tensor& idx) {
  if (!idx.defined()) return x;
  Tensor out = exec_.Empty({idx.numel(), x.dim(1)}, x.dtype());
  ops::EmbeddingForward(exec_, idx, x, out, 0);
  return out;
}

absl::StatusOr<Tensor> MoeLayer::Forward(const Tensor& h, Direction dir) {
  Tensor x = slice_ ? h.Slice(row0_, row0_ + rows_) : h;
  GTP_ASSIGN_OR_RETURN(const RouterOutput* r, router_->Forward(x, dir != Direction::kRecompute));
  Tensor y;
  if (all_gather_) {
    GTP_ASSIGN_OR_RETURN(y, ForwardAllGather(x, *r, dir));
  } else {
    GTP_ASSIGN_OR_RETURN(y, ForwardAllToAll(x, *r, dir));
  }
  if (slice_) return AllGatherRows(exec_, *tp_, y);
  return y;
}

absl::StatusOr<Tensor> MoeLayer::ForwardAllToAll(const Tensor& x, const RouterOutput& r,
                                                 Direction dir) {
  const kernels::Exec& e = exec_;
  const int64_t C = shape_.C;
  GTP_RETURN_IF_ERROR(Plan(r));  // perm_d_, pos_d_
  const int64_t M = M_;
  w_d_ = r.weight;
  Tensor xp = e.Empty({M, C}, x.dtype());
  if (M > 0) ops::EmbeddingForward(e, perm_d_, x, xp, 0);
  GTP_ASSIGN_OR_RETURN(Tensor recv, Exchange(xp, send_rows_, recv_rows_));
  GTP_ASSIGN_OR_RETURN(Tensor group, EtpGather(recv));
  GTP_ASSIGN_OR_RETURN(Tensor ye, Experts(GatherRows(group, reorder_), dir));
  GTP_ASSIGN_OR_RETURN(Tensor yr, EtpReduceScatter(GatherRows(ye, inv_reorder_)));
  GTP_ASSIGN_OR_RETURN(yp_, Exchange(yr, recv_rows_, send_rows_));
  Tensor y = e.Empty({rows_, C}, x.dtype());
  CombineForward(e, yp_, pos_d_, w_d_, y);
  return y;
}

absl::StatusOr<Tensor> MoeLayer::ForwardAllGather(const Tensor& x, const RouterOutput& r,
                                                  Direction dir) {
  const kernels::Exec& e = exec_;
  const int64_t C = shape_.C, S = rows_ * k_;
  const int64_t G = static_cast<int64_t>(ep_size_) * etp_size_, GS = G * S;
  GTP_ASSIGN_OR_RETURN(Tensor xg, GatherGroup(x));  // [G·rows, C]
  GTP_ASSIGN_OR_RETURN(Tensor eg, GatherGroup(r.expert.View({S, 1})));
  GTP_ASSIGN_OR_RETURN(Tensor wg, GatherGroup(r.weight.View({S, 1})));
  w_d_ = wg.View({GS});
  // The gathered slots of this rank's experts, in the all-to-all's order:
  // local expert, then (etp rank, ep rank, token, j).
  Tensor local = e.Empty({GS}, DType::kI32), cnt = e.Empty({e_loc_}, DType::kI32);
  Tensor pos = e.Empty({GS}, DType::kI32), row_slot = e.Empty({GS}, DType::kI32),
         tok = e.Empty({GS}, DType::kI32);
  SelectLocalExperts(e, ep_rank_ * e_loc_, e_loc_, eg.View({GS}), local);
  Dispatch(e, e_loc_, k_, local, cnt, pos, row_slot, tok);
  if (pad_) {
    // Each expert gets at most capacity rows from each of the G ranks.
    const int64_t cap = G * router_->capacity();
    pos_d_ = e.Empty({GS}, DType::kI32);
    perm_d_ = e.Empty({e_loc_ * cap}, DType::kI32);
    PadToCapacity(e, e_loc_, cap, local, cnt, pos, tok, pos_d_, perm_d_);
    ne_.assign(e_loc_, cap);
  } else {
    const std::vector<int32_t> hc = ToHost<int32_t>(e, cnt);  // the layer's one host sync
    ne_.assign(hc.begin(), hc.end());
    pos_d_ = pos;
    perm_d_ = tok.Slice(0, Offsets(ne_).back());
  }
  const int64_t Me = Offsets(ne_).back();
  Tensor xe = e.Empty({Me, C}, x.dtype());
  if (Me > 0) ops::EmbeddingForward(e, perm_d_, xg, xe, 0);
  GTP_ASSIGN_OR_RETURN(yp_, Experts(xe, dir));
  Tensor yg = e.Empty({G * rows_, C}, x.dtype());
  CombineForward(e, yp_, pos_d_, w_d_, yg);
  GTP_ASSIGN_OR_RETURN(Tensor y32, ReduceScatterGroup(yg));
  if (x.dtype() == DType::kF32) return y32;
  Tensor y = e.Empty({rows_, C}, x.dtype());
  ops::Cast(e, y32, y);
  return y;
}

absl::StatusOr<Tensor> MoeLayer::Experts(const Tensor& xe, Direction dir) {
  const kernels::Exec& e = exec_;
  const int64_t C = shape_.C;
  xe_ = xe;
  const int64_t Me = xe_.dim(0);
  const std::vector<int64_t> off = Offsets(ne_);
  // fc1 → act → fc2, one grouped GEMM over the local experts each.
  GTP_ASSIGN_OR_RETURN(Tensor w1, fc1_->Materialize(dir));
  pre_ = e.Empty({Me, H1_}, xe.dtype());
  if (Me > 0) ops::GroupedLinear(e, xe_, w1, off, pre_);
  fc1_->Release(dir);
  act_ = e.Empty({Me, H_loc_}, xe.dtype());
  if (Me > 0) {
    if (shape_.swiglu) {
      ops::SwiGluForward(e, pre_, act_);
    } else {
      ops::GeluForward(e, pre_, act_);
    }
  }
  GTP_ASSIGN_OR_RETURN(Tensor w2, fc2_->Materialize(dir));
  Tensor ye = e.Empty({Me, C}, xe.dtype());
  if (Me > 0) ops::GroupedLinear(e, act_, w2, off, ye);
  fc2_->Release(dir);
  return ye;
}

absl::StatusOr<Tensor> MoeLayer::Backward(const Tensor& dout) {
  const kernels::Exec& e = exec_;
  const int64_t C = shape_.C;
  Tensor dy = slice_ ? dout.Slice(row0_, row0_ + rows_) : dout;
  const DType dt = dy.dtype();
  Tensor dw = e.Empty({rows_ * k_}, DType::kF32);
  Tensor dx32;
  if (all_gather_) {
    GTP_ASSIGN_OR_RETURN(dx32, BackwardAllGather(dy, dw));
  } else {
    GTP_ASSIGN_OR_RETURN(dx32, BackwardAllToAll(dy, dw));
  }
  // The aux / z gradients' scale (Router::Backward): under CP the gradient
  // reduction averages the CP ranks' parts (mean) or divides by the tokens of
  // every CP rank (sum), so each part is scaled by CP or by the whole lane's tokens.
  const float loss_scale = shape_.loss_sum ? static_cast<float>(shape_.B * shape_.T * cp_)
                                           : static_cast<float>(cp_);
  GTP_ASSIGN_OR_RETURN(Tensor dxr, router_->Backward(dw, loss_scale));
  ops::Axpby(e, 1.0f, dxr, 1.0f, dx32);
  Tensor dx = dx32;
  if (dt != DType::kF32) {
    dx = e.Empty({rows_, C}, dt);
    ops::Cast(e, dx32, dx);
  }
  if (slice_) return AllGatherRows(e, *tp_, dx);
  return dx;
}

absl::StatusOr<Tensor> MoeLayer::BackwardAllToAll(const Tensor& dy, const Tensor& dw) {
  const kernels::Exec& e = exec_;
  const int64_t C = shape_.C;
  const int64_t M = M_;
  Tensor dyp = e.Empty({M, C}, dy.dtype());
  CombineBackward(e, dy, yp_, pos_d_, w_d_, dyp, dw);
  yp_ = Tensor();
  GTP_ASSIGN_OR_RETURN(Tensor drecv, Exchange(dyp, send_rows_, recv_rows_));
  GTP_ASSIGN_OR_RETURN(Tensor dgroup, EtpGather(drecv));
  GTP_ASSIGN_OR_RETURN(Tensor dxe, ExpertsBackward(GatherRows(dgroup, reorder_)));
  GTP_ASSIGN_OR_RETURN(Tensor dxr_etp, EtpReduceScatter(GatherRows(dxe, inv_reorder_)));
  GTP_ASSIGN_OR_RETURN(Tensor dxp, Exchange(dxr_etp, recv_rows_, send_rows_));
  Tensor dx32 = e.Zeros({rows_, C}, DType::kF32);
  if (M > 0) ops::EmbeddingBackward(e, perm_d_, dxp, dx32, 0);
  return dx32;
}

absl::StatusOr<Tensor> MoeLayer::BackwardAllGather(const Tensor& dy, const Tensor& dw) {
  const kernels::Exec& e = exec_;
  const int64_t C = shape_.C, S = rows_ * k_;
  const int64_t G = static_cast<int64_t>(ep_size_) * etp_size_;
  GTP_ASSIGN_OR_RETURN(Tensor dyg, GatherGroup(dy));  // [G·rows, C]
  const int64_t Me = yp_.dim(0);
  Tensor dye = e.Empty({Me, C}, dy.dtype());
  Tensor dwg = e.Empty({G * S, 1}, DType::kF32);  // 0 on the slots of others' experts
  CombineBackward(e, dyg, yp_, pos_d_, w_d_, dye, dwg.View({G * S}));
  yp_ = Tensor();
  GTP_ASSIGN_OR_RETURN(Tensor dw_own, ReduceScatterGroup(dwg));
  ops::CopyInto(e, dw_own.View({S}), dw);
  GTP_ASSIGN_OR_RETURN(Tensor dxe, ExpertsBackward(dye));
  Tensor dxg = e.Zeros({G * rows_, C}, DType::kF32);
  if (Me > 0) ops::EmbeddingBackward(e, perm_d_, dxe, dxg, 0);
  return ReduceScatterGroup(dxg);
}

absl::StatusOr<Tensor> MoeLayer::ExpertsBackward(const Tensor& dye) {
  const kernels::Exec& e = exec_;
  const int64_t Me = dye.dim(0);
  const std::vector<int64_t> off = Offsets(ne_);
  const DType dt = dye.dtype();
  // The stacked weight gradient of every local expert (one grouped GEMM;
  // an expert without rows adds nothing, or zeroes a fresh buffer).
  auto wgrad = [&](ShardedParam& p, const Tensor& dyv, const Tensor& xv) {
    bool fresh = false;
    // The stacked weight's rows: under an uneven EGTP split the buffer has
    // pad rows past them (zero, never written).
    Tensor g = p.Wgrad(&fresh).Slice(0, p.rows());
    ops::GroupedLinearBackwardWeight(e, dyv, xv, off, wgrad_scale_, fresh ? 0.0f : 1.0f, g);
  };
  GTP_ASSIGN_OR_RETURN(Tensor w2, fc2_->Materialize(Direction::kBackward));
  Tensor dact = e.Empty({Me, H_loc_}, dt);
  if (Me > 0) ops::GroupedLinearBackwardData(e, dye, w2, off, dact);
  wgrad(*fc2_, dye, act_);
  fc2_->Release(Direction::kBackward);
  GTP_RETURN_IF_ERROR(fc2_->ReduceGrad());
  act_ = Tensor();
  Tensor dpre = e.Empty({Me, H1_}, dt);
  if (Me > 0) {
    if (shape_.swiglu) {
      ops::SwiGluBackward(e, dact, pre_, dpre);
    } else {
      ops::GeluBackward(e, dact, pre_, dpre);
    }
  }
  pre_ = Tensor();
  GTP_ASSIGN_OR_RETURN(Tensor w1, fc1_->Materialize(Direction::kBackward));
  Tensor dxe = e.Empty({Me, shape_.C}, dt);
  if (Me > 0) ops::GroupedLinearBackwardData(e, dpre, w1, off, dxe);
  wgrad(*fc1_, dpre, xe_);
  fc1_->Release(Direction::kBackward);
  GTP_RETURN_IF_ERROR(fc1_->ReduceGrad());
  xe_ = Tensor();
  return dxe;
}

void MoeLayer::DropActivations() {
  router_->DropActivations();
  perm_d_ = pos_d_ = w_d_ = xe_ = pre_ = act_ = yp_ = Tensor();
}

}  // namespace gtp::layers::moe
