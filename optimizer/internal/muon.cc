#include "optimizer/internal/muon.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <numeric>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "optimizer/internal/device.h"

namespace gtp::optimizer::internal {

namespace ops = kernels::ops;

namespace {

float ScaleFor(MuonScale mode, int64_t M, int64_t N) {
  const double m = static_cast<double>(M), n = static_cast<double>(N);
  switch (mode) {
    case MuonScale::kSpectral: return static_cast<float>(std::sqrt(std::max(m, n)));
    case MuonScale::kShape: return static_cast<float>(std::sqrt(std::max(1.0, m / n)));
    case MuonScale::kUnitRms: return static_cast<float>(std::sqrt(m / n));
  }
  return 1.0f;
}

absl::Status Bad(const std::string& msg) { return absl::InvalidArgumentError(msg); }

}  // namespace

absl::StatusOr<std::unique_ptr<MuonUpdater>> MuonUpdater::Create(const GradBuffer& grads,
                                                                  const std::vector<int>& params,
                                                                  const kernels::Exec& exec,
                                                                  const MuonConfig& config) {
  if (config.ns_steps < 0 || !(config.momentum >= 0.0f && config.momentum < 1.0f)) {
    return Bad(absl::StrCat("MuonConfig: ns_steps must be >= 0 and momentum in [0, 1), got ",
                            config.ns_steps, ", ", config.momentum));
  }
  std::unique_ptr<MuonUpdater> u(new MuonUpdater());
  u->config_ = config;
  u->exec_ = exec;
  comm::Communicator* tp = grads.tp();
  comm::Communicator* gtp = grads.gtp();
  comm::Communicator* rep = grads.replicate();
  const int T = tp->size(), R = rep->size();

  // Ownership is decided per replicate rank; every TP and GTP peer must agree
  // on which replicate rank it is (true for the standard groups).
  for (comm::Communicator* c : {tp, gtp}) {
    GTP_ASSIGN_OR_RETURN(std::vector<int64_t> reps,
                         AllGatherHostI64(exec, c, {static_cast<int64_t>(rep->rank())}));
    for (int64_t r : reps) {
      if (r != rep->rank()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "Muon: ranks of group ", c->name(), " sit at different replicate ranks (", r, " vs ",
            rep->rank(), "); the groups do not form a grid"));
      }
    }
  }

  // Local geometry, exchanged over TP.
  std::vector<int64_t> packet;
  for (int i : params) {
    const GradParam& gp = grads.params()[i];
    const layers::ShardedParam* p = gp.sharded;
    if (p == nullptr) return Bad(absl::StrCat("Muon: ", gp.name, " is not a GTP-sharded matrix"));
    const auto& L = p->matrix_layout();
    if (!L.row_map || L.global_rows <= 0 || L.global_cols <= 0) {
      return Bad(absl::StrCat("Muon: ", gp.name, " has no global layout"));
    }
    packet.push_back(p->rows());
    packet.push_back(p->cols());
    packet.push_back(L.col_offset);
    for (int64_t r = 0; r < p->rows(); ++r) packet.push_back(L.row_map(r));
  }
  GTP_ASSIGN_OR_RETURN(std::vector<int64_t> lens,
                       AllGatherHostI64(exec, tp, {static_cast<int64_t>(packet.size())}));
  for (int64_t l : lens) {
    if (l != static_cast<int64_t>(packet.size())) {
      return absl::FailedPreconditionError(
          absl::StrCat("Muon: TP ranks of ", tp->name(), " disagree on the matrices' shapes"));
    }
  }
  GTP_ASSIGN_OR_RETURN(std::vector<int64_t> all, AllGatherHostI64(exec, tp, packet));

  size_t pos = 0;  // offset inside one TP rank's packet
  for (int i : params) {
    const GradParam& gp = grads.params()[i];
    const layers::ShardedParam* p = gp.sharded;
    Matrix m;
    m.param = i;
    m.rows = p->rows();
    m.cols = p->cols();
    const int64_t M = p->matrix_layout().global_rows, N = p->matrix_layout().global_cols;
    m.name = gp.name;
    m.M = M;
    m.N = N;
    m.blocks = p->matrix_blocks();
    if (m.blocks < 1 || M % m.blocks != 0) {
      return Bad(absl::StrCat("Muon: ", gp.name, ": ", m.blocks, " stacked matrices of ", M, " rows"));
    }
    m.block_rows = M / m.blocks;
    // Stacked matrices (MoE experts): each one's own dims give its scale.
    m.scale = ScaleFor(config.scale, M / m.blocks, N);
    m.runs.resize(T);
    m.col_offset.resize(T);
    int64_t area = 0;
    std::vector<std::pair<std::pair<int64_t, int64_t>, std::pair<int64_t, int64_t>>> rects;
    for (int t = 0; t < T; ++t) {
      const int64_t* q = all.data() + t * packet.size() + pos;
      const int64_t rows = q[0], cols = q[1], col_off = q[2];
      if (rows != m.rows || cols != m.cols || col_off < 0 || col_off + cols > N) {
        return Bad(absl::StrCat("Muon: ", gp.name, ": TP rank ", t, " holds [", rows, ", ", cols,
                                "] at column ", col_off, " of a [", M, ", ", N, "] matrix"));
      }
      m.col_offset[t] = col_off;
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t g = q[3 + r];
        if (g < 0 || g >= M) return Bad(absl::StrCat("Muon: ", gp.name, ": row map out of range"));
        std::vector<Run>& runs = m.runs[t];
        if (!runs.empty() && runs.back().local + runs.back().len == r &&
            runs.back().global + runs.back().len == g && g % m.block_rows != 0) {
          ++runs.back().len;
        } else {
          runs.push_back(Run{r, g, 1});
        }
      }
      for (const Run& run : m.runs[t]) {
        rects.push_back({{run.global, run.global + run.len}, {col_off, col_off + cols}});
        area += run.len * cols;
      }
    }
    // Every global element exactly once: total area and no overlaps.
    bool overlap = false;
    for (size_t a = 0; a < rects.size() && !overlap; ++a) {
      for (size_t b = a + 1; b < rects.size() && !overlap; ++b) {
        overlap = rects[a].first.first < rects[b].first.second &&
                  rects[b].first.first < rects[a].first.second &&
                  rects[a].second.first < rects[b].second.second &&
                  rects[b].second.first < rects[a].second.second;
      }
    }
    if (overlap || area != M * N) {
      return Bad(absl::StrCat("Muon: the TP ranks' pieces of ", gp.name,
                              " do not tile its global [", M, ", ", N, "] matrix"));
    }
    pos += 3 + m.rows;
    if (config.mode == MuonMode::kDuplicated) {
      // One unit per stacked matrix, each costed by its own dims.
      const int64_t Mb = m.block_rows;
      const double big = static_cast<double>(std::max(Mb, N)), small = static_cast<double>(std::min(Mb, N));
      for (int b = 0; b < m.blocks; ++b) {
        MuonMatrixInfo info;
        info.name = m.blocks > 1 ? absl::StrCat(gp.name, "[", b, "]") : gp.name;
        info.block = b;
        info.rows = Mb;
        info.cols = N;
        info.cost = big * small * small;
        m.units.push_back(std::move(info));
      }
    } else {
      // The shard is orthogonalised whole: a stack stays one unit.
      MuonMatrixInfo info;
      info.name = gp.name;
      info.rows = M;
      info.cols = N;
      const double lb = static_cast<double>(std::max(m.rows, m.cols));
      const double ls = static_cast<double>(std::min(m.rows, m.cols));
      info.cost = lb * ls * ls;
      m.units.push_back(std::move(info));
    }
    u->matrices_.push_back(std::move(m));
  }

  // Owners: every unit (matrices and stacked blocks alike), largest cost
  // first, onto the least-loaded replicate rank.
  std::vector<MuonMatrixInfo*> order;
  for (Matrix& m : u->matrices_) {
    for (MuonMatrixInfo& info : m.units) order.push_back(&info);
  }
  std::stable_sort(order.begin(), order.end(),
                   [](const MuonMatrixInfo* a, const MuonMatrixInfo* b) { return a->cost > b->cost; });
  std::vector<double> load(R, 0.0);
  for (MuonMatrixInfo* info : order) {
    info->owner = static_cast<int>(std::min_element(load.begin(), load.end()) - load.begin());
    load[info->owner] += info->cost;
  }
  // Inside each owner replica (kDuplicated): the rank of its TP×GTP grid
  // that orthogonalises the unit, balanced the same way.
  const int TG = T * gtp->size();
  std::vector<std::vector<double>> ns_load(R, std::vector<double>(TG, 0.0));
  for (MuonMatrixInfo* info : order) {
    std::vector<double>& l = ns_load[info->owner];
    info->ns_rank = static_cast<int>(std::min_element(l.begin(), l.end()) - l.begin());
    l[info->ns_rank] += info->cost;
  }

  // This rank's shard cut into runs of rows with one owner replica.
  for (Matrix& m : u->matrices_) {
    const layers::ShardedParam* p = grads.params()[m.param].sharded;
    const auto& row_map = p->matrix_layout().row_map;
    for (const MuonMatrixInfo& info : m.units) m.owned |= info.owner == rep->rank();
    int64_t state_rows = 0;
    for (int64_t sr = 0; sr < p->shard_rows(); ++sr) {
      const int64_t r = std::min(p->shard_row_begin() + sr, m.rows - 1);  // pad: the last row's
      const int owner = m.unit_of_row(row_map(r)).owner;
      if (m.segments.empty() || m.segments.back().owner != owner) {
        m.segments.push_back(Segment{sr, 0, owner, owner == rep->rank() ? state_rows : -1});
      }
      ++m.segments.back().len;
      if (owner == rep->rank()) ++state_rows;
    }
    m.whole = m.segments.size() == 1 && m.segments[0].state_row == 0;
    if (state_rows == 0) continue;
    m.momentum = exec.Zeros({state_rows, p->cols()});
    if (p->dtype() != DType::kF32) {
      m.master = exec.Empty({state_rows, p->cols()});
      for (const Segment& s : m.segments) {
        if (s.state_row < 0) continue;
        CastInto(exec, p->shard().Slice(s.row, s.row + s.len),
                 m.master.Slice(s.state_row, s.state_row + s.len));
      }
    }
  }
  return u;
}

void MuonUpdater::RunNewtonSchulz(const Tensor& G, const Tensor& X) {
  NewtonSchulz(exec_, G, X, config_.ns_steps, config_.coefficients);
  ++ns_calls_;
}

absl::StatusOr<MuonUpdater::InFlight> MuonUpdater::Begin(const GradBuffer& grads, const Matrix& m) {
  const float beta = config_.momentum;
  const GradParam& gp = grads.params()[m.param];
  const layers::ShardedParam* p = gp.sharded;
  const Shape shape{p->shard_rows(), p->cols()};
  Tensor g = grads.data().Slice(gp.offset, gp.offset + gp.numel).View(shape);
  InFlight f;
  f.m = &m;
  if (m.whole) {
    ops::Axpby(exec_, 1.0f - beta, g, beta, m.momentum);
    f.u = m.momentum;
    if (config_.nesterov) {
      f.u = exec_.Empty(shape);
      ops::Axpby(exec_, beta, m.momentum, 0.0f, f.u);
      ops::Axpby(exec_, 1.0f - beta, g, 1.0f, f.u);
    }
  } else {
    // Rows of units other replicas own stay zero (they are gathered, never used).
    f.u = exec_.Zeros(shape);
    for (const Segment& s : m.segments) {
      if (s.state_row < 0) continue;
      const Tensor gs = g.Slice(s.row, s.row + s.len), us = f.u.Slice(s.row, s.row + s.len);
      const Tensor ms = m.momentum.Slice(s.state_row, s.state_row + s.len);
      ops::Axpby(exec_, 1.0f - beta, gs, beta, ms);
      if (config_.nesterov) {
        ops::Axpby(exec_, beta, ms, 0.0f, us);
        ops::Axpby(exec_, 1.0f - beta, gs, 1.0f, us);
      } else {
        Copy2D(exec_, ms.data<float>(), m.cols, us.data<float>(), m.cols, s.len, m.cols);
      }
    }
  }
  f.update = exec_.Zeros(shape);  // pad rows stay zero
  f.full = f.u;
  comm::Communicator* gtp = grads.gtp();
  if (config_.mode == MuonMode::kDuplicated && gtp->size() > 1) {
    f.full = exec_.Empty({p->padded_rows(), p->cols()});
    GTP_ASSIGN_OR_RETURN(f.gtp_gather, gtp->AllGather(f.u.raw_data(), f.full.raw_data(),
                                                      shape[0] * shape[1], DType::kF32));
  }
  return f;
}

absl::Status MuonUpdater::GatherTp(const GradBuffer& grads, InFlight& f) {
  if (config_.mode == MuonMode::kBlockwise) return absl::OkStatus();
  const Matrix& m = *f.m;
  if (f.gtp_gather != nullptr) {
    GTP_RETURN_IF_ERROR(
        Annotate(f.gtp_gather->Wait(), absl::StrCat("Muon: gathering ", m.name), grads.gtp()));
    f.gtp_gather.reset();
  }
  // The GTP gather is TP-local [padded_rows, cols], the pad at the tail.
  Tensor local = f.full.Slice(0, m.rows);
  f.blocks = local;
  comm::Communicator* tp = grads.tp();
  if (tp->size() > 1) {
    f.blocks = exec_.Empty({tp->size() * m.rows, m.cols});
    GTP_ASSIGN_OR_RETURN(f.tp_gather, tp->AllGather(local.raw_data(), f.blocks.raw_data(),
                                                    m.rows * m.cols, DType::kF32));
  }
  return absl::OkStatus();
}

absl::Status MuonUpdater::Orthogonalize(const GradBuffer& grads, InFlight& f) {
  const Matrix& m = *f.m;
  if (config_.mode == MuonMode::kBlockwise) {
    const layers::ShardedParam* p = grads.params()[m.param].sharded;
    const int64_t valid = std::clamp<int64_t>(m.rows - p->shard_row_begin(), 0, p->shard_rows());
    if (valid > 0) RunNewtonSchulz(f.u.Slice(0, valid), f.update.Slice(0, valid));
    return absl::OkStatus();
  }
  comm::Communicator* gtp = grads.gtp();
  comm::Communicator* tp = grads.tp();
  comm::Communicator* rep = grads.replicate();
  if (f.tp_gather != nullptr) {
    GTP_RETURN_IF_ERROR(Annotate(f.tp_gather->Wait(), absl::StrCat("Muon: gathering ", m.name), tp));
    f.tp_gather.reset();
  }
  const int64_t M = m.M, N = m.N, Mb = m.block_rows, cols = m.cols;
  const int G = gtp->size();
  f.X = exec_.Empty({M, N});
  // The units (blocks of M / blocks rows) this rank orthogonalises: their
  // rows of the global matrix, assembled from every TP rank's block.
  auto mine = [&](const MuonMatrixInfo& info) {
    return info.owner == rep->rank() && tp->rank() == info.ns_rank / G && gtp->rank() == info.ns_rank % G;
  };
  Tensor Gm;
  for (const MuonMatrixInfo& info : m.units) {
    if (!mine(info)) continue;
    if (!Gm.defined()) Gm = exec_.Empty({M, N});
    const int64_t lo = info.block * Mb, hi = lo + Mb;
    const float* src = f.blocks.data<float>();
    for (int t = 0; t < tp->size(); ++t) {
      for (const Run& r : m.runs[t]) {
        if (r.global < lo || r.global >= hi) continue;  // runs never cross a block
        Copy2D(exec_, src + (t * m.rows + r.local) * cols, cols,
               Gm.data<float>() + r.global * N + m.col_offset[t], N, r.len, cols);
      }
    }
  }
  f.blocks = Tensor();
  f.full = Tensor();
  // Unit by unit, in order: its NS rank (t0, g0) orthogonalises it, then its
  // rows of X travel over that rank's GTP group (root g0) and every TP group
  // (root t0). Every rank of a group issues these in the same order.
  for (const MuonMatrixInfo& info : m.units) {
    if (info.owner != rep->rank()) continue;
    const int64_t lo = info.block * Mb, n = Mb;
    const int t0 = info.ns_rank / G, g0 = info.ns_rank % G;
    Tensor Xb = f.X.Slice(lo, lo + n);
    if (mine(info)) RunNewtonSchulz(Gm.Slice(lo, lo + n), Xb);
    const std::string what = absl::StrCat("Muon: broadcasting the orthogonalised ", info.name);
    if (G > 1 && tp->rank() == t0) {
      GTP_ASSIGN_OR_RETURN(comm::WorkPtr w, gtp->Broadcast(Xb.raw_data(), n * N, DType::kF32, g0));
      // This rank forwards Xb over TP: it must have arrived. (Issuing the TP
      // broadcast later would break the TP group's collective order.)
      if (tp->size() > 1 && gtp->rank() != g0) {
        GTP_RETURN_IF_ERROR(Annotate(w->Wait(), what, gtp));
      } else {
        f.bcasts.emplace_back(std::move(w), gtp);
      }
    }
    if (tp->size() > 1) {
      GTP_ASSIGN_OR_RETURN(comm::WorkPtr w, tp->Broadcast(Xb.raw_data(), n * N, DType::kF32, t0));
      f.bcasts.emplace_back(std::move(w), tp);
    }
  }
  return absl::OkStatus();
}

absl::Status MuonUpdater::Finish(const GradBuffer& grads, InFlight& f, float lr) {
  const Matrix& m = *f.m;
  const layers::ShardedParam* p = grads.params()[m.param].sharded;
  if (config_.mode == MuonMode::kDuplicated) {
    const std::string what = absl::StrCat("Muon: broadcasting the orthogonalised ", m.name);
    for (auto& [w, c] : f.bcasts) GTP_RETURN_IF_ERROR(Annotate(w->Wait(), what, c));
    f.bcasts.clear();
    // This rank's slice of the units its replica owns: TP-local rows
    // [begin, min(begin + sr, rows)).
    const int t = grads.tp()->rank(), rep = grads.replicate()->rank();
    const int64_t begin = p->shard_row_begin(), N = m.N, cols = m.cols;
    const int64_t lo = begin, hi = std::min(begin + p->shard_rows(), m.rows);
    for (const Run& r : m.runs[t]) {
      const int64_t a = std::max(lo, r.local), b = std::min(hi, r.local + r.len);
      if (a >= b || m.unit_of_row(r.global).owner != rep) continue;
      Copy2D(exec_, f.X.data<float>() + (r.global + (a - r.local)) * N + m.col_offset[t], N,
             f.update.data<float>() + (a - begin) * cols, cols, b - a, cols);
    }
    f.X = Tensor();
  }
  const float decay = 1.0f - lr * config_.weight_decay;
  if (m.whole) {
    const Tensor& target = m.master.defined() ? m.master : p->shard();
    ops::Axpby(exec_, -lr * m.scale, f.update, decay, target);
    if (m.master.defined()) CastInto(exec_, m.master, p->shard());
    return absl::OkStatus();
  }
  for (const Segment& s : m.segments) {  // only the rows of owned units
    if (s.state_row < 0) continue;
    const Tensor shard = p->shard().Slice(s.row, s.row + s.len);
    const Tensor target =
        m.master.defined() ? m.master.Slice(s.state_row, s.state_row + s.len) : shard;
    ops::Axpby(exec_, -lr * m.scale, f.update.Slice(s.row, s.row + s.len), decay, target);
    if (m.master.defined()) CastInto(exec_, target, shard);
  }
  return absl::OkStatus();
}

absl::Status MuonUpdater::Step(const GradBuffer& grads, float lr) {
  comm::Communicator* rep = grads.replicate();
  // The matrices with an owned unit in order (a stack is gathered once for
  // all of its owned blocks), pipelined so that no collective is waited on
  // right after it is issued: matrix k+1's GTP gather is issued before k is
  // orthogonalised (overlapping Newton–Schulz) and its TP gather right
  // after; k's result broadcasts (one pair per owned unit, each from its NS
  // rank) stay in flight while the next kResultWindow matrices are
  // orthogonalised, then k's parameter is updated. Every rank of a TP or
  // GTP group issues its group's collectives in the same order (gtp: gather
  // k+1, broadcasts of k's units, ...; tp: gather k, broadcasts of k's
  // units, ...) and waits only for collectives its peers issue earlier in
  // that order, so the pipeline cannot deadlock. Results are those of the
  // one-at-a-time order.
  constexpr size_t kResultWindow = 2;
  std::vector<const Matrix*> owned;
  for (const Matrix& m : matrices_) {
    if (m.owned) owned.push_back(&m);
  }
  std::optional<InFlight> next;
  if (!owned.empty()) {
    GTP_ASSIGN_OR_RETURN(InFlight f, Begin(grads, *owned[0]));
    next = std::move(f);
    GTP_RETURN_IF_ERROR(GatherTp(grads, *next));
  }
  std::deque<InFlight> broadcasting;
  for (size_t k = 0; k < owned.size(); ++k) {
    InFlight cur = std::move(*next);
    next.reset();
    if (k + 1 < owned.size()) {
      GTP_ASSIGN_OR_RETURN(InFlight f, Begin(grads, *owned[k + 1]));
      next = std::move(f);
    }
    GTP_RETURN_IF_ERROR(Orthogonalize(grads, cur));
    if (next.has_value()) GTP_RETURN_IF_ERROR(GatherTp(grads, *next));
    broadcasting.push_back(std::move(cur));
    if (broadcasting.size() > kResultWindow) {
      GTP_RETURN_IF_ERROR(Finish(grads, broadcasting.front(), lr));
      broadcasting.pop_front();
    }
  }
  for (; !broadcasting.empty(); broadcasting.pop_front()) {
    GTP_RETURN_IF_ERROR(Finish(grads, broadcasting.front(), lr));
  }
  if (rep->size() == 1) return absl::OkStatus();
  std::vector<comm::WorkPtr> works;
  for (const Matrix& m : matrices_) {
    const layers::ShardedParam* p = grads.params()[m.param].sharded;
    for (const Segment& s : m.segments) {  // the same cut on every replica
      GTP_ASSIGN_OR_RETURN(comm::WorkPtr w,
                           rep->Broadcast(p->shard().Slice(s.row, s.row + s.len).raw_data(),
                                          s.len * m.cols, p->dtype(), s.owner));
      works.push_back(std::move(w));
    }
  }
  for (comm::WorkPtr& w : works) {
    GTP_RETURN_IF_ERROR(Annotate(w->Wait(), "Muon: broadcasting updated matrices", rep));
  }
  return absl::OkStatus();
}

std::vector<MuonMatrixInfo> MuonUpdater::matrices() const {
  std::vector<MuonMatrixInfo> out;
  for (const Matrix& m : matrices_) out.insert(out.end(), m.units.begin(), m.units.end());
  return out;
}

void MuonUpdater::AppendState(const GradBuffer& grads, std::vector<StateTensor>* out) const {
  for (const Matrix& m : matrices_) {
    if (!m.momentum.defined()) continue;
    const std::string& name = grads.params()[m.param].name;
    for (const Segment& s : m.segments) {  // a piece per run of owned rows
      if (s.state_row < 0) continue;
      const int64_t begin = s.row * m.cols, n = s.len * m.cols;
      for (const Tensor* t : {&m.momentum, &m.master}) {
        if (!t->defined()) continue;
        out->push_back(StateTensor{name, t == &m.momentum ? "momentum" : "master", begin,
                                   t->Slice(s.state_row, s.state_row + s.len).View({n})});
      }
    }
  }
}

int64_t MuonUpdater::state_bytes() const {
  int64_t b = 0;
  for (const Matrix& m : matrices_) {
    if (m.momentum.defined()) b += m.momentum.nbytes();
    if (m.master.defined()) b += m.master.nbytes();
  }
  return b;
}

}  // namespace gtp::optimizer::internal
