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
    m.info.name = gp.name;
    m.info.rows = M;
    m.info.cols = N;
    m.blocks = p->matrix_blocks();
    if (m.blocks < 1 || M % m.blocks != 0) {
      return Bad(absl::StrCat("Muon: ", gp.name, ": ", m.blocks, " stacked matrices of ", M, " rows"));
    }
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
            runs.back().global + runs.back().len == g) {
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
    const int64_t Mb = M / m.blocks;
    const double big = static_cast<double>(std::max(Mb, N)), small = static_cast<double>(std::min(Mb, N));
    if (config.mode == MuonMode::kDuplicated) {
      m.info.cost = m.blocks * big * small * small;
    } else {
      const double lb = static_cast<double>(std::max(m.rows, m.cols));
      const double ls = static_cast<double>(std::min(m.rows, m.cols));
      m.info.cost = lb * ls * ls;
    }
    u->matrices_.push_back(std::move(m));
  }

  // Owners: largest cost first onto the least-loaded replicate rank.
  std::vector<size_t> order(u->matrices_.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return u->matrices_[a].info.cost > u->matrices_[b].info.cost;
  });
  std::vector<double> load(R, 0.0);
  for (size_t k : order) {
    const int owner = static_cast<int>(std::min_element(load.begin(), load.end()) - load.begin());
    u->matrices_[k].info.owner = owner;
    load[owner] += u->matrices_[k].info.cost;
  }
  // Inside each owner replica (kDuplicated): the rank of its TP×GTP grid
  // that orthogonalises the matrix, balanced the same way.
  const int TG = T * gtp->size();
  std::vector<std::vector<double>> ns_load(R, std::vector<double>(TG, 0.0));
  for (size_t k : order) {
    MuonMatrixInfo& info = u->matrices_[k].info;
    std::vector<double>& l = ns_load[info.owner];
    info.ns_rank = static_cast<int>(std::min_element(l.begin(), l.end()) - l.begin());
    l[info.ns_rank] += info.cost;
  }

  for (Matrix& m : u->matrices_) {
    if (m.info.owner != rep->rank()) continue;
    const layers::ShardedParam* p = grads.params()[m.param].sharded;
    m.momentum = exec.Zeros({p->shard_rows(), p->cols()});
    if (p->dtype() != DType::kF32) {
      m.master = exec.Empty({p->shard_rows(), p->cols()});
      CastInto(exec, p->shard(), m.master);
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
  ops::Axpby(exec_, 1.0f - beta, g, beta, m.momentum);
  InFlight f;
  f.m = &m;
  f.u = m.momentum;
  if (config_.nesterov) {
    f.u = exec_.Empty(shape);
    ops::Axpby(exec_, beta, m.momentum, 0.0f, f.u);
    ops::Axpby(exec_, 1.0f - beta, g, 1.0f, f.u);
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
        Annotate(f.gtp_gather->Wait(), absl::StrCat("Muon: gathering ", m.info.name), grads.gtp()));
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
  if (f.tp_gather != nullptr) {
    GTP_RETURN_IF_ERROR(
        Annotate(f.tp_gather->Wait(), absl::StrCat("Muon: gathering ", m.info.name), tp));
    f.tp_gather.reset();
  }
  const int64_t M = m.info.rows, N = m.info.cols, cols = m.cols;
  f.X = exec_.Empty({M, N});
  // The NS rank (t0, g0) assembles and orthogonalises; X then travels over
  // its GTP group (root g0) and every TP group (root t0).
  const int G = gtp->size(), t0 = m.info.ns_rank / G, g0 = m.info.ns_rank % G;
  if (tp->rank() == t0 && gtp->rank() == g0) {
    Tensor Gm = exec_.Empty({M, N});
    const float* src = f.blocks.data<float>();
    for (int t = 0; t < tp->size(); ++t) {
      for (const Run& r : m.runs[t]) {
        Copy2D(exec_, src + (t * m.rows + r.local) * cols, cols,
               Gm.data<float>() + r.global * N + m.col_offset[t], N, r.len, cols);
      }
    }
    const int64_t Mb = M / m.blocks;  // each stacked matrix alone
    for (int b = 0; b < m.blocks; ++b) {
      RunNewtonSchulz(Gm.Slice(b * Mb, (b + 1) * Mb), f.X.Slice(b * Mb, (b + 1) * Mb));
    }
  }
  f.blocks = Tensor();
  f.full = Tensor();
  const std::string what = absl::StrCat("Muon: broadcasting the orthogonalised ", m.info.name);
  if (G > 1 && tp->rank() == t0) {
    GTP_ASSIGN_OR_RETURN(f.gtp_bcast, gtp->Broadcast(f.X.raw_data(), M * N, DType::kF32, g0));
    // This rank forwards X over TP: it must have arrived. (Issuing the TP
    // broadcast later would break the TP group's collective order.)
    if (tp->size() > 1 && gtp->rank() != g0) {
      GTP_RETURN_IF_ERROR(Annotate(f.gtp_bcast->Wait(), what, gtp));
      f.gtp_bcast.reset();
    }
  }
  if (tp->size() > 1) {
    GTP_ASSIGN_OR_RETURN(f.tp_bcast, tp->Broadcast(f.X.raw_data(), M * N, DType::kF32, t0));
  }
  return absl::OkStatus();
}

absl::Status MuonUpdater::Finish(const GradBuffer& grads, InFlight& f, float lr) {
  const Matrix& m = *f.m;
  const layers::ShardedParam* p = grads.params()[m.param].sharded;
  if (config_.mode == MuonMode::kDuplicated) {
    const std::string what = absl::StrCat("Muon: broadcasting the orthogonalised ", m.info.name);
    if (f.gtp_bcast != nullptr)
      GTP_RETURN_IF_ERROR(Annotate(f.gtp_bcast->Wait(), what, grads.gtp()));
    if (f.tp_bcast != nullptr) GTP_RETURN_IF_ERROR(Annotate(f.tp_bcast->Wait(), what, grads.tp()));
    f.gtp_bcast.reset();
    f.tp_bcast.reset();
    // This rank's slice: TP-local rows [begin, min(begin + sr, rows)).
    const int t = grads.tp()->rank();
    const int64_t begin = p->shard_row_begin(), N = m.info.cols, cols = m.cols;
    const int64_t lo = begin, hi = std::min(begin + p->shard_rows(), m.rows);
    for (const Run& r : m.runs[t]) {
      const int64_t a = std::max(lo, r.local), b = std::min(hi, r.local + r.len);
      if (a >= b) continue;
      Copy2D(exec_, f.X.data<float>() + (r.global + (a - r.local)) * N + m.col_offset[t], N,
             f.update.data<float>() + (a - begin) * cols, cols, b - a, cols);
    }
    f.X = Tensor();
  }
  const Tensor& target = m.master.defined() ? m.master : p->shard();
  ops::Axpby(exec_, -lr * m.scale, f.update, 1.0f - lr * config_.weight_decay, target);
  if (m.master.defined()) CastInto(exec_, m.master, p->shard());
  return absl::OkStatus();
}

absl::Status MuonUpdater::Step(const GradBuffer& grads, float lr) {
  comm::Communicator* rep = grads.replicate();
  // The owned matrices in order, pipelined so that no collective is waited
  // on right after it is issued: matrix k+1's GTP gather is issued before k
  // is orthogonalised (overlapping Newton–Schulz) and its TP gather right
  // after; k's result broadcasts stay in flight while the next kResultWindow
  // matrices are orthogonalised, then k's parameter is updated. Every rank
  // of a TP or GTP group issues its group's collectives in the same order
  // (gtp: gather k+1, broadcast k, ...; tp: gather k, broadcast k, ...) and
  // waits only for collectives its peers issue earlier in that order, so the
  // pipeline cannot deadlock. Results are those of the one-at-a-time order.
  constexpr size_t kResultWindow = 2;
  std::vector<const Matrix*> owned;
  for (const Matrix& m : matrices_) {
    if (m.info.owner == rep->rank()) owned.push_back(&m);
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
    GTP_ASSIGN_OR_RETURN(comm::WorkPtr w, rep->Broadcast(p->shard().raw_data(), p->shard().numel(),
                                                         p->dtype(), m.info.owner));
    works.push_back(std::move(w));
  }
  for (comm::WorkPtr& w : works) {
    GTP_RETURN_IF_ERROR(Annotate(w->Wait(), "Muon: broadcasting updated matrices", rep));
  }
  return absl::OkStatus();
}

std::vector<MuonMatrixInfo> MuonUpdater::matrices() const {
  std::vector<MuonMatrixInfo> out;
  for (const Matrix& m : matrices_) out.push_back(m.info);
  return out;
}

void MuonUpdater::AppendState(const GradBuffer& grads, std::vector<StateTensor>* out) const {
  for (const Matrix& m : matrices_) {
    if (!m.momentum.defined()) continue;
    const std::string& name = grads.params()[m.param].name;
    out->push_back(StateTensor{name, "momentum", 0, m.momentum.View({m.momentum.numel()})});
    if (m.master.defined()) {
      out->push_back(StateTensor{name, "master", 0, m.master.View({m.master.numel()})});
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
