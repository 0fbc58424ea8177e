#include "layers/mamba/cp_exchange.h"

#include "absl/strings/str_cat.h"
#include "core/status.h"

namespace gtp::layers::mamba {

namespace ops = kernels::ops;

HeadExchange::HeadExchange(const kernels::Exec& e, comm::Communicator* cp, int64_t B,
                           int64_t T_local)
    : e_(e), cp_(cp), B_(B), Tl_(T_local) {}

absl::Status HeadExchange::Check(const std::vector<Tensor>& ts,
                                 const std::vector<ChannelSplit>& splits, bool heads) const {
  const int n = cp_->size();
  if (ts.size() != splits.size() || Tl_ % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat("mamba CP exchange: ", ts.size(), " tensors, ",
                                                   splits.size(), " splits, T/CP = ", Tl_));
  }
  for (size_t k = 0; k < ts.size(); ++k) {
    const ChannelSplit& s = splits[k];
    const Shape want = heads ? Shape{B_, Tl_ * n, s.part} : Shape{B_ * Tl_, s.width};
    bool ok = static_cast<int>(s.offset.size()) == n && ts[k].shape() == want &&
              ts[k].dtype() == DType::kF32 && ts[k].is_contiguous();
    for (int64_t o : s.offset) ok = ok && o >= 0 && o + s.part <= s.width;
    if (!ok) {
      return absl::InvalidArgumentError(absl::StrCat(
          "mamba CP exchange: tensor ", k, " is ", ts[k].ToString(), ", want contiguous f32 ",
          want.ToString(), " with ", n, " channel offsets within ", s.width));
    }
  }
  return absl::OkStatus();
}

void HeadExchange::MoveChunks(const Tensor& wire, const std::vector<Tensor>& seqs,
                              const std::vector<ChannelSplit>& splits, int64_t per,
                              bool to_sequences) const {
  const int n = cp_->size();
  const int64_t Nl = B_ * Tl_, Tc = Tl_ / 2, T = Tl_ * n;
  for (int r = 0; r < n; ++r) {
    int64_t at = r * per;
    for (size_t k = 0; k < seqs.size(); ++k) {
      const int64_t w = splits[k].part, row = Tc * w;
      const Tensor blk = wire.Slice(at, at + Nl * w);
      const Tensor seq = seqs[k].View({B_ * T * w});
      for (int c = 0; c < 2; ++c) {
        const Tensor held = blk.Strided({B_, row}, {2 * row, 1}, c * row);
        const Tensor placed = seq.Strided({B_, row}, {T * w, 1}, ChunkOf(r, c) * row);
        ops::CopyInto(e_, to_sequences ? held : placed, to_sequences ? placed : held);
      }
      at += Nl * w;
    }
  }
}

absl::StatusOr<std::vector<Tensor>> HeadExchange::ToHeads(
    const std::vector<Tensor>& xs, const std::vector<ChannelSplit>& splits) const {
  GTP_RETURN_IF_ERROR(Check(xs, splits, false));
  const int n = cp_->size();
  const int64_t Nl = B_ * Tl_, T = Tl_ * n;
  int64_t per = 0;  // elements sent to each part
  for (const ChannelSplit& s : splits) per += Nl * s.part;
  Tensor send = e_.Empty({n * per}), recv = e_.Empty({n * per});
  // To part j: each tensor's columns of part j, rows as held.
  for (int j = 0; j < n; ++j) {
    int64_t at = j * per;
    for (size_t k = 0; k < xs.size(); ++k) {
      const ChannelSplit& s = splits[k];
      ops::CopyInto(e_, xs[k].Strided({Nl, s.part}, {s.width, 1}, s.offset[j]),
                    send.Slice(at, at + Nl * s.part).View({Nl, s.part}));
      at += Nl * s.part;
    }
  }
  GTP_RETURN_IF_ERROR(
      comm::Run(cp_->AllToAll(send.raw_data(), recv.raw_data(), per, DType::kF32)));
  // From rank r: its two chunks of each sequence, into their places.
  std::vector<Tensor> out;
  for (const ChannelSplit& s : splits) out.push_back(e_.Empty({B_, T, s.part}));
  MoveChunks(recv, out, splits, per, /*to_sequences=*/true);
  return out;
}

absl::StatusOr<std::vector<Tensor>> HeadExchange::FromHeads(
    const std::vector<Tensor>& ys, const std::vector<ChannelSplit>& splits) const {
  GTP_RETURN_IF_ERROR(Check(ys, splits, true));
  const int n = cp_->size();
  const int64_t Nl = B_ * Tl_;
  int64_t per = 0;
  for (const ChannelSplit& s : splits) per += Nl * s.part;
  Tensor send = e_.Empty({n * per}), recv = e_.Empty({n * per});
  // To rank r: its two chunks of each sequence, in its row order.
  MoveChunks(send, ys, splits, per, /*to_sequences=*/false);
  GTP_RETURN_IF_ERROR(
      comm::Run(cp_->AllToAll(send.raw_data(), recv.raw_data(), per, DType::kF32)));
  // From part j: its columns. A column block that another part also holds
  // (a shared B/C group) is the sum over those parts, in part order.
  std::vector<Tensor> out;
  for (size_t k = 0; k < ys.size(); ++k) {
    const ChannelSplit& s = splits[k];
    out.push_back(e_.Zeros({Nl, s.width}));
    std::vector<bool> shared(n, false);
    for (int i = 0; i < n; ++i) {
      for (int j = 0; j < n; ++j) {
        if (i != j && s.offset[i] < s.offset[j] + s.part && s.offset[j] < s.offset[i] + s.part) {
          shared[i] = true;
        }
      }
    }
    Tensor sum = e_.Empty({Nl, s.part});
    for (int j = 0; j < n; ++j) {
      int64_t at = j * per;
      for (size_t q = 0; q < k; ++q) at += Nl * splits[q].part;
      const Tensor blk = recv.Slice(at, at + Nl * s.part).View({Nl, s.part});
      const Tensor cols = out[k].Strided({Nl, s.part}, {s.width, 1}, s.offset[j]);
      if (!shared[j]) {
        ops::CopyInto(e_, blk, cols);
        continue;
      }
      ops::CopyInto(e_, cols, sum);
      ops::Axpby(e_, 1.0f, blk, 1.0f, sum);
      ops::CopyInto(e_, sum, cols);
    }
  }
  return out;
}

}  // namespace gtp::layers::mamba
