#include "layers/moe/all_to_all_dispatcher.h"

#include "core/status.h"
#include "layers/linear.h"
#include "layers/moe/combine.h"
#include "layers/moe/internal/dispatch_math.h"

namespace gtp::layers::moe {

namespace ops = kernels::ops;
using dispatch_internal::SumInRankOrder;

namespace {

template <typename T>
Tensor ToDevice(const kernels::Exec& e, const std::vector<T>& v) {
  return HostToDevice(e, v, {static_cast<int64_t>(v.size())});
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

AllToAllDispatcher::AllToAllDispatcher(const DispatchSetup& s)
    : s_(s),
      E_(s.num_experts),
      e_loc_(s.num_experts / s.ep->size()),
      ep_size_(s.ep->size()),
      etp_size_(s.etp->size()) {}

absl::Status AllToAllDispatcher::Plan(const RouterOutput& r) {
  const kernels::Exec& exec = s_.exec;
  const int P = ep_size_, el = e_loc_, R = etp_size_;
  if (s_.pad_to_capacity) {
    // Static sizes: every (source, expert) block holds the capacity rows.
    const int64_t cap = s_.capacity, S = r.expert.numel();
    pos_d_ = exec.Empty({S}, DType::kI32);
    perm_d_ = exec.Empty({E_ * cap}, DType::kI32);
    PadToCapacity(exec, E_, cap, r.expert, r.counts, r.pos, r.row_tok, pos_d_, perm_d_);
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
      reorder_ = ToDevice(exec, reorder);
      inv_reorder_ = ToDevice(exec, inv_reorder);
    }
    static_plan_ = true;
    return absl::OkStatus();
  }
  // One device buffer of the counts the host needs, read in one copy:
  // [send: E per global expert | recv: P·el from each source | all: R·P·el,
  // every ETP rank's recv (ETP: every rank of the group computes its hidden
  // slice for the group's tokens)].
  const int64_t nr = static_cast<int64_t>(P) * el, na = R * nr;
  Tensor cnt = exec.Empty({E_ + nr + na}, DType::kI32);
  Tensor send = cnt.Slice(0, E_), recv = cnt.Slice(E_, E_ + nr),
         all = cnt.Slice(E_ + nr, E_ + nr + na);
  GTP_RETURN_IF_ERROR(Copy(r.counts, send, exec.stream, /*sync=*/false));
  if (P > 1) {
    GTP_RETURN_IF_ERROR(
        comm::Run(s_.ep->AllToAll(send.raw_data(), recv.raw_data(), el, DType::kI32)));
  } else {
    GTP_RETURN_IF_ERROR(Copy(send, recv, exec.stream, /*sync=*/false));
  }
  if (R > 1) {
    GTP_RETURN_IF_ERROR(
        comm::Run(s_.etp->AllGather(recv.raw_data(), all.raw_data(), nr, DType::kI32)));
  } else {
    GTP_RETURN_IF_ERROR(Copy(recv, all, exec.stream, /*sync=*/false));
  }
  const std::vector<int32_t> h = DeviceToHost<int32_t>(exec, cnt);  // the layer's one host sync
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
  reorder_ = reorder.empty() ? Tensor() : ToDevice(exec, reorder);
  inv_reorder_ = inv_reorder.empty() ? Tensor() : ToDevice(exec, inv_reorder);
  pos_d_ = r.pos;
  perm_d_ = r.row_tok.Slice(0, M_);
  return absl::OkStatus();
}

absl::StatusOr<Tensor> AllToAllDispatcher::Exchange(const Tensor& x,
                                                    const std::vector<int64_t>& send_rows,
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
  Tensor out = s_.exec.Empty({ro / C, C}, x.dtype());
  GTP_RETURN_IF_ERROR(
      comm::Run(s_.ep->AllToAllV(x.raw_data(), sc, sd, out.raw_data(), rc, rd, x.dtype())));
  return out;
}

absl::StatusOr<Tensor> AllToAllDispatcher::EtpGather(const Tensor& x) {
  if (etp_size_ == 1) return x;
  const int64_t C = x.dim(1);
  const int R = etp_size_, me = s_.etp->rank();
  std::vector<int64_t> sc(R, etp_rows_[me] * C), sd(R, 0), rc(R), rd(R);
  int64_t ro = 0;
  for (int r = 0; r < R; ++r) {
    rc[r] = etp_rows_[r] * C;
    rd[r] = ro;
    ro += rc[r];
  }
  Tensor out = s_.exec.Empty({ro / C, C}, x.dtype());
  GTP_RETURN_IF_ERROR(
      comm::Run(s_.etp->AllToAllV(x.raw_data(), sc, sd, out.raw_data(), rc, rd, x.dtype())));
  return out;
}

absl::StatusOr<Tensor> AllToAllDispatcher::EtpReduceScatter(const Tensor& y) {
  if (etp_size_ == 1) return y;
  const kernels::Exec& exec = s_.exec;
  const int64_t C = y.dim(1);
  const int R = etp_size_, me = s_.etp->rank();
  const int64_t mine = etp_rows_[me];
  std::vector<int64_t> sc(R), sd(R), rc(R, mine * C), rd(R);
  int64_t so = 0;
  for (int r = 0; r < R; ++r) {
    sc[r] = etp_rows_[r] * C;
    sd[r] = so;
    so += sc[r];
    rd[r] = r * mine * C;
  }
  Tensor parts = exec.Empty({R * mine, C}, y.dtype());
  GTP_RETURN_IF_ERROR(
      comm::Run(s_.etp->AllToAllV(y.raw_data(), sc, sd, parts.raw_data(), rc, rd, y.dtype())));
  // Σ over the ETP ranks' partial sums, in rank order, in f32.
  if (mine == 0) return exec.Empty({0, C}, y.dtype());
  Tensor acc = SumInRankOrder(exec, parts, R);
  if (y.dtype() == DType::kF32) return acc;
  Tensor out = exec.Empty({mine, C}, y.dtype());
  ops::Cast(exec, acc, out);
  return out;
}

Tensor AllToAllDispatcher::GatherRows(const Tensor& x, const Tensor& idx) {
  if (!idx.defined()) return x;
  Tensor out = s_.exec.Empty({idx.numel(), x.dim(1)}, x.dtype());
  ops::EmbeddingForward(s_.exec, idx, x, out, 0);
  return out;
}

absl::StatusOr<Tensor> AllToAllDispatcher::Dispatch(const Tensor& x, const RouterOutput& r) {
  const kernels::Exec& e = s_.exec;
  GTP_RETURN_IF_ERROR(Plan(r));  // perm_d_, pos_d_
  const int64_t M = M_;
  w_d_ = r.weight;
  Tensor xp = e.Empty({M, s_.C}, x.dtype());
  if (M > 0) ops::EmbeddingForward(e, perm_d_, x, xp, 0);
  GTP_ASSIGN_OR_RETURN(Tensor recv, Exchange(xp, send_rows_, recv_rows_));
  GTP_ASSIGN_OR_RETURN(Tensor group, EtpGather(recv));
  return GatherRows(group, reorder_);
}

absl::StatusOr<Tensor> AllToAllDispatcher::Combine(const Tensor& ye) {
  GTP_ASSIGN_OR_RETURN(Tensor yr, EtpReduceScatter(GatherRows(ye, inv_reorder_)));
  GTP_ASSIGN_OR_RETURN(yp_, Exchange(yr, recv_rows_, send_rows_));
  Tensor y = s_.exec.Empty({s_.rows, s_.C}, ye.dtype());
  CombineForward(s_.exec, yp_, pos_d_, w_d_, y);
  return y;
}

absl::StatusOr<Tensor> AllToAllDispatcher::CombineBackward(const Tensor& dy, const Tensor& dw) {
  Tensor dyp = s_.exec.Empty({M_, s_.C}, dy.dtype());
  moe::CombineBackward(s_.exec, dy, yp_, pos_d_, w_d_, dyp, dw);
  yp_ = Tensor();
  GTP_ASSIGN_OR_RETURN(Tensor drecv, Exchange(dyp, send_rows_, recv_rows_));
  GTP_ASSIGN_OR_RETURN(Tensor dgroup, EtpGather(drecv));
  return GatherRows(dgroup, reorder_);
}

absl::StatusOr<Tensor> AllToAllDispatcher::DispatchBackward(const Tensor& dxe, const Tensor& add,
                                                            DType dt) {
  GTP_ASSIGN_OR_RETURN(Tensor dxr_etp, EtpReduceScatter(GatherRows(dxe, inv_reorder_)));
  GTP_ASSIGN_OR_RETURN(Tensor dxp, Exchange(dxr_etp, recv_rows_, send_rows_));
  Tensor dx32 = s_.exec.Zeros({s_.rows, s_.C}, DType::kF32);
  if (M_ > 0) ops::EmbeddingBackward(s_.exec, perm_d_, dxp, dx32, 0);
  return dispatch_internal::AddThenCast(s_.exec, dx32, add, dt);
}

void AllToAllDispatcher::DropActivations() { perm_d_ = pos_d_ = w_d_ = yp_ = Tensor(); }

}  // namespace gtp::layers::moe
