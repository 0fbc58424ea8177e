#include "layers/sharded_param.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "core/kernels/fp8/block_quant.h"
#include "core/status.h"
#include "layers/gtp_wire.h"

namespace gtp::layers {

namespace ops = kernels::ops;

const char* DirectionName(Direction d) {
  switch (d) {
    case Direction::kForward:
      return "forward";
    case Direction::kBackward:
      return "backward";
    case Direction::kRecompute:
      return "recompute";
  }
  return "?";
}

int64_t PaddedRows(int64_t rows, int gtp, int64_t alignment) {
  const int64_t unit = static_cast<int64_t>(gtp) * alignment;
  return (rows + unit - 1) / unit * unit;
}

// ---- BufferCache -------------------------------------------------------------------

BufferCache::Key BufferCache::MakeKey(const Shape& s, DType d, Purpose purpose) {
  return Key(std::vector<int64_t>(s.begin(), s.end()), d, static_cast<int>(purpose));
}

Tensor BufferCache::Acquire(const Shape& shape, DType dtype, Purpose purpose) {
  auto& list = free_[MakeKey(shape, dtype, purpose)];
  if (!list.empty()) {
    Tensor t = std::move(list.back());
    list.pop_back();
    return t;
  }
  ++num_allocated_;
  return exec_.Zeros(shape, dtype);
}

void BufferCache::Release(const Tensor& t, Purpose purpose) {
  free_[MakeKey(t.shape(), t.dtype(), purpose)].push_back(t);
}

// ---- GtpChain ----------------------------------------------------------------------

GtpChain::GtpChain(const kernels::Exec& exec, const GtpOptions& options)
    : exec_(exec), options_(options), cache_(exec) {
  if (exec_.is_cuda()) exposed_.set_stream(exec_.stream);
}

const Tensor& GtpChain::Ones(int64_t n, DType dtype) {
  auto it = ones_.find({n, dtype});
  if (it != ones_.end()) return it->second;
  Tensor t = exec_.Empty({n}, dtype);
  ops::Fill(exec_, t, 1.0f);
  return ones_.emplace(std::make_pair(n, dtype), std::move(t)).first->second;
}

void GtpChain::Record(GtpTraceEvent::Kind kind, const ShardedParam& p, Direction dir, bool async,
                      const void* buffer) {
  if (tracing_) trace_.push_back(GtpTraceEvent{kind, p.name(), dir, async, seq_++, buffer});
}

void GtpChain::Register(ShardedParam* p) {
  if (frozen_ || p->registered_) return;
  p->registered_ = true;
  order_.push_back(p);
}

ShardedParam* GtpChain::Neighbour(const ShardedParam* p, Direction dir) const {
  if (tail_ != nullptr && p == tail_ && dir == Direction::kBackward) {
    // The tail's (head's) backward comes first: the chain's last param next.
    for (size_t j = order_.size(); j-- > 0;) {
      if (order_[j] != tail_ && order_[j]->gathered_in_backward()) return order_[j];
    }
    return nullptr;
  }
  for (size_t i = 0; i < order_.size(); ++i) {
    if (order_[i] != p) continue;
    if (dir == Direction::kForward) {
      if (i + 1 < order_.size()) return order_[i + 1];
      return tail_ != p ? tail_ : nullptr;  // the last param prefetches the tail
    }
    if (dir == Direction::kRecompute) {
      const bool same = i + 1 < order_.size() && p->recompute_group() >= 0 &&
                        order_[i + 1]->recompute_group() == p->recompute_group();
      return same ? order_[i + 1] : nullptr;
    }
    for (size_t j = i; j-- > 0;) {
      if (order_[j]->gathered_in_backward()) return order_[j];
    }
    return nullptr;
  }
  return nullptr;
}

absl::Status GtpChain::FinishBackward() {
  // Oldest first, so main grads fill in chain order.
  std::vector<ShardedParam*> pending = std::move(pending_reduce_);
  pending_reduce_.clear();
  for (ShardedParam* p : pending) GTP_RETURN_IF_ERROR(p->FinalizeReduce(/*deferred=*/false));
  // A backward prefetch that no backward consumed — a param whose backward
  // ran before its chain neighbour's, out of the forward's reverse order —
  // holds weights from before the optimizer's update: left in place, the
  // next step's backward would compute its gradients with them. Dropped.
  for (ShardedParam* p : order_) {
    for (Direction dir : {Direction::kBackward, Direction::kRecompute}) {
      CommState st = p->gather_state(dir);
      if (st != CommState::kAsyncWait) continue;
      GTP_RETURN_IF_ERROR(p->WaitGather(dir));
      p->Release(dir);
    }
  }
  return absl::OkStatus();
}

// ---- ShardedParam ------------------------------------------------------------------

ShardedParam::ShardedParam(std::string name, int64_t rows, int64_t cols, DType dtype,
                           comm::Communicator* gtp, GtpChain* chain)
    : name_(std::move(name)), rows_(rows), cols_(cols), dtype_(dtype), gtp_(gtp), chain_(chain) {
  GTP_CHECK(chain_ != nullptr, "ShardedParam ", name_, " needs a GtpChain");
  GTP_CHECK(rows > 0 && cols > 0, "ShardedParam ", name_, ": empty weight");
  GTP_CHECK(dtype == DType::kF32 || dtype == DType::kBF16, "ShardedParam ", name_,
            ": param dtype must be f32 or bf16");
  padded_rows_ = PaddedRows(rows, gtp_size(), chain_->options().alignment);
  shard_rows_ = padded_rows_ / gtp_size();
  shard_ = chain_->exec().Zeros({shard_rows_, cols_}, dtype_);
  main_grad_ = chain_->exec().Zeros({shard_rows_, cols_}, DType::kF32);
  const GtpOptions& o = chain_->options();
  GTP_CHECK(!(o.fp8_gather && o.nvfp4_gather), "ShardedParam ", name_,
            ": fp8_gather and nvfp4_gather are exclusive");
  if (o.fp8_gather || o.nvfp4_gather) {
    // The coded wire of this shard (gtp_wire.h).
    codec_ = o.nvfp4_gather ? GatherCodec::kNvfp4 : GatherCodec::kMxfp8;
    wire_ = chain_->exec().Zeros({WireBytes(codec_, shard_rows_ * cols_)}, DType::kU8);
    // GTP 1 gathers nothing, but its weight takes the same round trip
    // (GtpOptions::fp8_gather / nvfp4_gather), into a copy of its own.
    if (gtp_size() == 1) rounded_ = chain_->exec().Zeros({padded_rows_, cols_}, dtype_);
  }
}

int64_t ShardedParam::gather_wire_bytes() const {
  if (gtp_size() == 1) return 0;
  if (fp8_tiles_) return tile_q_.nbytes() + tile_s_.nbytes();
  return coded() ? wire_.numel() : shard_.nbytes();
}

bool ShardedParam::UseFp8TileGather() {
  namespace fp8 = kernels::fp8;
  if (gtp_size() == 1 || coded() || dtype_ != DType::kBF16 || shard_rows_ % fp8::kFp8Block != 0) {
    return false;
  }
  GTP_CHECK(gather_[0].state == CommState::kNone && gather_[1].state == CommState::kNone &&
                gather_[2].state == CommState::kNone,
            name_, ": UseFp8TileGather after a gather was issued");
  const kernels::Exec& e = chain_->exec();
  tile_q_ = e.Zeros({shard_rows_, cols_}, DType::kF8E4M3);
  tile_s_ = e.Zeros(fp8::Fp8ScaleShape(shard_rows_, cols_, fp8::Fp8Layout::kTile128x128));
  fp8_tiles_ = true;
  wire_fresh_ = false;
  return true;
}

const kernels::Exec& ShardedParam::exec() const { return chain_->exec(); }

void ShardedParam::set_main_grad_storage(const Tensor& storage) {
  GTP_CHECK(storage.dtype() == DType::kF32 && storage.shape() == main_grad_.shape() &&
                storage.is_contiguous() && storage.device() == main_grad_.device(),
            name_, ": main-grad storage must be contiguous f32 ", main_grad_.ToString(), ", got ",
            storage.ToString());
  GTP_CHECK(reduce_.state == CommState::kNone && !reduce_.open, name_,
            ": set_main_grad_storage while a gradient reduction is pending");
  if (storage.raw_data() != main_grad_.raw_data())
    ops::CopyInto(chain_->exec(), main_grad_, storage);
  main_grad_ = storage;
}

void ShardedParam::set_shard_storage(const Tensor& storage) {
  GTP_CHECK(storage.dtype() == dtype_ && storage.shape() == shard_.shape() &&
                storage.is_contiguous() && storage.device() == shard_.device(),
            name_, ": shard storage must be contiguous ", shard_.ToString(), ", got ",
            storage.ToString());
  for (const GatherSlot& g : gather_) {
    GTP_CHECK(g.state == CommState::kNone, name_, ": set_shard_storage with a gather in flight");
  }
  if (storage.raw_data() != shard_.raw_data()) ops::CopyInto(chain_->exec(), shard_, storage);
  shard_ = storage;
  wire_fresh_ = false;
}

absl::Status ShardedParam::IssueGather(Direction dir, bool async) {
  GatherSlot& g = gather_[static_cast<int>(dir)];
  GTP_CHECK(g.state == CommState::kNone, name_, ": gather issued twice in ", DirectionName(dir));
  const auto purpose = static_cast<BufferCache::Purpose>(dir);
  if (fp8_tiles_) {
    namespace fp8 = kernels::fp8;
    const fp8::Fp8Layout tiles = fp8::Fp8Layout::kTile128x128;
    if (!wire_fresh_) {  // once per weight update, not per micro-batch
      fp8::QuantizeBlocks(chain_->exec(), shard_, tiles, tile_q_, tile_s_);
      wire_fresh_ = true;
    }
    g.codes = chain_->cache().Acquire({padded_rows_, cols_}, DType::kF8E4M3, purpose);
    g.scales = chain_->cache().Acquire(fp8::Fp8ScaleShape(padded_rows_, cols_, tiles), DType::kF32,
                                       purpose);
    // The shards are whole tiles: rank r's codes and scales are rows
    // [r·shard_rows, …) of the codes and [r·shard_rows/128, …) of the scales.
    GTP_ASSIGN_OR_RETURN(g.work, gtp_->AllGather(tile_q_.raw_data(), g.codes.raw_data(),
                                                 tile_q_.numel(), DType::kU8));
    GTP_ASSIGN_OR_RETURN(g.scales_work, gtp_->AllGather(tile_s_.raw_data(), g.scales.raw_data(),
                                                        tile_s_.numel(), DType::kF32));
    g.state = CommState::kAsyncWait;
    chain_->Record(GtpTraceEvent::kGatherIssued, *this, dir, async);
    return absl::OkStatus();
  }
  g.buffer = chain_->cache().Acquire({padded_rows_, cols_}, dtype_, purpose);
  if (coded()) {
    const int64_t w = wire_.numel();
    if (!wire_fresh_) {  // once per weight update, not per micro-batch
      EncodeWire(codec_, chain_->exec(), shard_, wire_);
      wire_fresh_ = true;
    }
    g.wire = chain_->cache().Acquire({gtp_size() * w}, DType::kU8,
                                     static_cast<BufferCache::Purpose>(dir));
    GTP_ASSIGN_OR_RETURN(g.work,
                         gtp_->AllGather(wire_.raw_data(), g.wire.raw_data(), w, DType::kU8));
  } else {
    GTP_ASSIGN_OR_RETURN(
        g.work, gtp_->AllGather(shard_.raw_data(), g.buffer.raw_data(), shard_.numel(), dtype_));
  }
  g.state = CommState::kAsyncWait;
  chain_->Record(GtpTraceEvent::kGatherIssued, *this, dir, async);
  return absl::OkStatus();
}

absl::Status ShardedParam::WaitGather(Direction dir) {
  GatherSlot& g = gather_[static_cast<int>(dir)];
  if (g.state != CommState::kAsyncWait) return absl::OkStatus();
  absl::Status st = chain_->exposed_.Wait(*g.work, chain_->comm_timeline(), "gather", name_);
  if (!st.ok()) {
    return absl::Status(st.code(), absl::StrCat("gathering weight ", name_, " (",
                                                DirectionName(dir), "): ", st.message()));
  }
  g.work.reset();
  if (g.scales_work != nullptr) {
    st = chain_->exposed_.Wait(*g.scales_work, chain_->comm_timeline(), "gather", name_);
    if (!st.ok()) {
      return absl::Status(st.code(), absl::StrCat("gathering weight ", name_, "'s FP8 scales (",
                                                  DirectionName(dir), "): ", st.message()));
    }
    g.scales_work.reset();
  }
  if (coded()) {  // each rank's codes and scales → its rows of the gathered weight
    DecodeGatheredWire(codec_, chain_->exec(), g.wire, gtp_size(), g.buffer);
    chain_->cache().Release(g.wire, static_cast<BufferCache::Purpose>(dir));
    g.wire = Tensor();
  }
  g.state = CommState::kDataReady;
  chain_->Record(GtpTraceEvent::kGatherWaited, *this, dir, false);
  return absl::OkStatus();
}

void ShardedParam::BeginUse(Direction dir) {
  if (dir == Direction::kForward) {
    chain_->Register(this);
  } else {
    chain_->Freeze();
  }
  GTP_CHECK(dir != Direction::kRecompute || chain_->order_frozen(), name_,
            ": recompute before the chain was recorded");
}

absl::StatusOr<Tensor> ShardedParam::Materialize(Direction dir, bool prefetch) {
  BeginUse(dir);
  if (gtp_size() == 1) {
    if (coded()) {
      // Rounded at every use, not once per update: a CUDA graph replays
      // this after every update (the host-side flag would not be re-read).
      EncodeWire(codec_, chain_->exec(), shard_, wire_);
      DecodeWire(codec_, chain_->exec(), wire_, rounded_);
      chain_->Record(GtpTraceEvent::kConsumed, *this, dir, false, rounded_.raw_data());
      return rounded_.Slice(0, rows_);
    }
    chain_->Record(GtpTraceEvent::kConsumed, *this, dir, false, shard_.raw_data());
    return shard_.Slice(0, rows_);
  }
  GTP_CHECK(!fp8_tiles_, name_, ": gathered as FP8 tiles (UseFp8TileGather): MaterializeFp8");
  GTP_RETURN_IF_ERROR(Gathered(dir, prefetch));
  GatherSlot& g = gather_[static_cast<int>(dir)];
  chain_->Record(GtpTraceEvent::kConsumed, *this, dir, false, g.buffer.raw_data());
  return g.buffer.Slice(0, rows_);
}

absl::StatusOr<kernels::fp8::Fp8Matrix> ShardedParam::MaterializeFp8(Direction dir, bool prefetch) {
  namespace fp8 = kernels::fp8;
  GTP_CHECK(fp8_tiles_, name_, ": MaterializeFp8 without UseFp8TileGather");
  BeginUse(dir);
  GTP_RETURN_IF_ERROR(Gathered(dir, prefetch));
  GatherSlot& g = gather_[static_cast<int>(dir)];
  chain_->Record(GtpTraceEvent::kConsumed, *this, dir, false, g.codes.raw_data());
  // Rows past `rows` are zero padding: a partial last tile's scale is its
  // real rows' (zeros never raise amax).
  return fp8::Fp8Matrix{g.codes.Slice(0, rows_), g.scales.Slice(0, fp8::Fp8NumBlocks(rows_)),
                        fp8::Fp8Layout::kTile128x128};
}

absl::Status ShardedParam::Gathered(Direction dir, bool prefetch) {
  GatherSlot& g = gather_[static_cast<int>(dir)];
  if (g.state == CommState::kNone) GTP_RETURN_IF_ERROR(IssueGather(dir, /*async=*/false));
  GTP_RETURN_IF_ERROR(WaitGather(dir));
  // Prefetch the neighbour so its gather overlaps this param's GEMMs.
  if (prefetch && chain_->options().weight_prefetch) {
    ShardedParam* next = chain_->Neighbour(this, dir);
    // The next param, and with it the rest of its prefetch group.
    const int group = next != nullptr ? next->prefetch_group() : -1;
    while (next != nullptr) {
      if (next->gtp_size() > 1 && next->gather_[static_cast<int>(dir)].state == CommState::kNone) {
        GTP_RETURN_IF_ERROR(next->IssueGather(dir, /*async=*/true));
      }
      if (group < 0) break;
      next = chain_->Neighbour(next, dir);
      if (next == nullptr || next->prefetch_group() != group) break;
    }
  }
  return absl::OkStatus();
}

void ShardedParam::Release(Direction dir) {
  if (gtp_size() == 1) return;
  GatherSlot& g = gather_[static_cast<int>(dir)];
  GTP_CHECK(g.state == CommState::kDataReady, name_, ": Release without Materialize (",
            DirectionName(dir), ")");
  const auto purpose = static_cast<BufferCache::Purpose>(dir);
  if (fp8_tiles_) {
    chain_->cache().Release(g.codes, purpose);
    chain_->cache().Release(g.scales, purpose);
    g.codes = g.scales = Tensor();
  } else {
    chain_->cache().Release(g.buffer, purpose);
    g.buffer = Tensor();
  }
  g.state = CommState::kNone;
}

Tensor ShardedParam::Wgrad(bool* fresh) {
  if (reduce_.open) {
    *fresh = false;
    return reduce_.wgrad;
  }
  GTP_CHECK(reduce_.state == CommState::kNone, name_, ": new wgrad while a reduction is pending");
  if (gtp_size() == 1) {
    // Nothing to reduce: the GEMMs accumulate straight into the main grad
    // (its pad rows are zero and are never written).
    if (grad_write_hook_) grad_write_hook_(*this);
    reduce_.wgrad = main_grad_;
    reduce_.open = true;
    *fresh = grad_zero_deferred_;
    grad_zero_deferred_ = false;
    return main_grad_;
  }
  Tensor w = chain_->cache().Acquire({padded_rows_, cols_}, DType::kF32, BufferCache::kWgrad);
  // Cached buffers are shared by params of one padded shape: re-zero the pad.
  if (padded_rows_ > rows_) ops::Fill(chain_->exec(), w.Slice(rows_, padded_rows_), 0.0f);
  reduce_.wgrad = w;
  reduce_.open = true;
  *fresh = true;
  return w;
}

void ShardedParam::DeferGradZero() {
  GTP_CHECK(gtp_size() == 1, name_,
            ": DeferGradZero needs GTP 1 (the main grad is the wgrad buffer); GTP ", gtp_size(),
            " adds reduced shards into it");
  if (reduce_.open || reduce_.state != CommState::kNone) {
    // Left open by a failed iteration: its next Wgrad accumulates, so zero now.
    ops::Fill(chain_->exec(), main_grad_, 0.0f);
    grad_zero_deferred_ = false;
    return;
  }
  grad_zero_deferred_ = true;
}

void ShardedParam::FillUnwrittenGrad() const {
  if (!grad_zero_deferred_) return;
  ops::Fill(chain_->exec(), main_grad_, 0.0f);
  grad_zero_deferred_ = false;
}

absl::Status ShardedParam::ReduceGrad() {
  GTP_CHECK(reduce_.open, name_, ": ReduceGrad without an open wgrad (call Wgrad first)");
  GTP_CHECK(reduce_.state == CommState::kNone, name_, ": ReduceGrad while a reduction is pending");
  reduce_.open = false;
  if (gtp_size() > 1) {
    reduce_.scatter =
        chain_->cache().Acquire({shard_rows_, cols_}, DType::kF32, BufferCache::kWgrad);
    if (chain_->options().bf16_reduce_scatter) {
      reduce_.wire =
          chain_->cache().Acquire({padded_rows_, cols_}, DType::kBF16, BufferCache::kWgrad);
      reduce_.pieces =
          chain_->cache().Acquire({padded_rows_, cols_}, DType::kBF16, BufferCache::kWgrad);
      EncodeBf16Wire(chain_->exec(), reduce_.wgrad, reduce_.wire);
      GTP_ASSIGN_OR_RETURN(reduce_.work,
                           gtp_->AllToAll(reduce_.wire.raw_data(), reduce_.pieces.raw_data(),
                                          shard_rows_ * cols_, DType::kBF16));
    } else {
      GTP_ASSIGN_OR_RETURN(
          reduce_.work,
          gtp_->ReduceScatter(reduce_.wgrad.raw_data(), reduce_.scatter.raw_data(),
                              shard_rows_ * cols_, DType::kF32, chain_->options().grad_reduce));
    }
  }
  reduce_.state = CommState::kAsyncWait;
  chain_->Record(GtpTraceEvent::kReduceIssued, *this, Direction::kBackward,
                 chain_->options().async_reduction, reduce_.wgrad.raw_data());
  if (!chain_->options().async_reduction) return FinalizeReduce(/*deferred=*/false);
  // Finalise the reductions issued before this one: they overlapped with
  // this param's backward GEMMs.
  std::vector<ShardedParam*> pending = std::move(chain_->pending_reduce_);
  chain_->pending_reduce_.clear();
  for (ShardedParam* p : pending) GTP_RETURN_IF_ERROR(p->FinalizeReduce(/*deferred=*/true));
  chain_->pending_reduce_.push_back(this);
  return absl::OkStatus();
}

absl::Status ShardedParam::FinalizeReduce(bool deferred) {
  if (reduce_.state != CommState::kAsyncWait) return absl::OkStatus();
  const kernels::Exec& e = chain_->exec();
  if (gtp_size() > 1) {
    absl::Status st =
        chain_->exposed_.Wait(*reduce_.work, chain_->comm_timeline(), "reduce-scatter", name_);
    if (!st.ok()) {
      return absl::Status(
          st.code(), absl::StrCat("reduce-scattering the gradient of ", name_, ": ", st.message()));
    }
    reduce_.work.reset();
    reduce_.state = CommState::kDataReady;
    if (reduce_.pieces.defined()) {
      // Σ over the GTP ranks' pieces in rank order, in f32; then the mean.
      Tensor piece =
          chain_->cache().Acquire({shard_rows_, cols_}, DType::kF32, BufferCache::kWgrad);
      SumBf16Pieces(e, reduce_.pieces, gtp_size(), chain_->options().grad_reduce, piece,
                    reduce_.scatter);
      chain_->cache().Release(piece, BufferCache::kWgrad);
      chain_->cache().Release(reduce_.wire, BufferCache::kWgrad);
      chain_->cache().Release(reduce_.pieces, BufferCache::kWgrad);
      reduce_.wire = reduce_.pieces = Tensor();
    }
    if (grad_write_hook_) grad_write_hook_(*this);
    ops::Axpby(e, 1.0f, reduce_.scatter, 1.0f, main_grad_);
    chain_->cache().Release(reduce_.scatter, BufferCache::kWgrad);
    reduce_.scatter = Tensor();
    chain_->cache().Release(reduce_.wgrad, BufferCache::kWgrad);
  } else {
    reduce_.state = CommState::kDataReady;  // the wgrad was the main grad itself
  }
  reduce_.wgrad = Tensor();
  reduce_.state = CommState::kNone;
  chain_->Record(GtpTraceEvent::kReduceFinalized, *this, Direction::kBackward, deferred);
  if (ready_hook_) ready_hook_(*this);
  return absl::OkStatus();
}

}  // namespace gtp::layers
