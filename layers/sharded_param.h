// layers/sharded_param.h — a weight sharded over the GTP group (DESIGN.md §4).
//
// The TP-local weight W[rows, cols] (rows = out_features / TP for a column-
// parallel linear, the full out_features for a row-parallel one) is padded to
// padded_rows = round_up(rows, GTP·alignment) and split along rows: GTP rank g
// owns rows [g·shard_rows, (g+1)·shard_rows). Before a GEMM the shard is
// all-gathered into a full [padded_rows, cols] buffer ("materialised"), whose
// first `rows` rows are the weight (the pad is stripped by a dim-0 slice).
// After the backward GEMMs the full weight gradient is reduce-scattered back
// to a [shard_rows, cols] piece and added into this rank's f32 main grad.
//
// Overlap, as in Megatron-LM's GTP:
//   - A GtpChain records the order in which params are first materialised in
//     forward. Forward materialisation of param i issues the async gather of
//     param i+1 before returning; backward materialisation of param i issues
//     the gather of param i−1. The first gather of each direction is
//     synchronous (cold start).
//   - The wgrad reduce-scatter is async; its accumulation into the main grad
//     is deferred until the next param's reduce-scatter has been issued (so
//     it overlaps that param's backward GEMMs). GtpChain::FinishBackward
//     finalises whatever is left (the chain head synchronously).
//   - Each param has independent gather and reduce-scatter state machines:
//     kNone → kAsyncWait → kDataReady → kNone.
//   - Gather buffers come from the chain's BufferCache keyed by (shape,
//     dtype, direction): addresses repeat from one iteration to the next.
//   - The ready hook fires only after {reduce-scatter → add into main grad}.
//   - Exposed communication: every gather / reduce-scatter Wait that blocks
//     the host is timed into the chain's comm::ExposedComm (and, on CPU,
//     drawn as a span on the timeline's "comm" track).
// With GTP = 1 every step degenerates to a no-op view of the shard, so the
// numbers equal plain TP + DP exactly. What travels under fp8_gather and
// bf16_reduce_scatter is encoded and decoded by layers/gtp_wire.h.
//
// Threading: a param and its chain are driven by one thread (the rank's
// training thread). Nothing here blocks except Wait-type steps documented below.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "comm/communicator.h"
#include "comm/exposed_comm.h"
#include "core/allocator.h"
#include "core/kernels/fp8/block_gemm.h"
#include "core/kernels/ops.h"
#include "core/tensor.h"
#include "core/timeline.h"
#include "layers/gtp_wire.h"

namespace gtp::layers {

struct GtpOptions {
  // out_features is padded to a multiple of GTP·alignment.
  int64_t alignment = 1;
  // Issue the next weight's gather while this one is used.
  bool weight_prefetch = true;
  // Defer {wait reduce-scatter → add into main grad} by one param.
  bool async_reduction = true;
  // kMean (the default loss normalisation: gradients averaged over the data
  // lanes) or kSum (per-token normalisation: one division at the end).
  comm::ReduceOp grad_reduce = comm::ReduceOp::kMean;
  // FP8 gather: a shard travels as MXFP8, e4m3 with one E8M0 (power-of-two)
  // scale byte per 32 elements (kernels::kFp8BlockSize, ops::QuantizeFp8Blockwise),
  // quantised once after each weight update (ShardedParam::MarkUpdated) and
  // dequantised to the param dtype after the gather, before the GEMM. Wire
  // bytes per element 1 + 1/32 (0.516× bf16) instead of 2 (bf16) or 4 (f32).
  // Gradients are unaffected (reduce-scatter as before). At GTP 1 (nothing
  // to gather) the weight takes the same round trip before every use, so one
  // rank computes what a sharded layout does: exactly, when that layout's
  // shard (shard_rows · cols elements) is a whole number of 32-blocks, as the
  // blocks then fall on the same elements of the flattened weight.
  bool fp8_gather = false;
  // NVFP4 gather (exclusive with fp8_gather): the same, with a shard
  // travelling as NVFP4 — e2m1 values, an e4m3 scale per 16 elements and an
  // f32 scale for the shard (kernels::Nvfp4WireBytes, ops::EncodeNvfp4):
  // 0.5625 bytes per element (0.28× bf16). At GTP 1 the same round trip,
  // exactly a sharded layout's when its shards are whole 16-blocks and the
  // shard scale is the same — which it is not in general (each shard's own
  // amax sets its scale), so unlike MXFP8 a one-rank run is close to, not
  // equal to, a sharded one.
  bool nvfp4_gather = false;
  // FP8 tile gather (train.precision=fp8): the FP8 linears' weights travel as
  // their GEMMs' own 128×128 e4m3 tiles where their shards are whole tiles
  // (ShardedParam::UseFp8TileGather: the same codes as quantising after the
  // gather, about half bf16's bytes); every other weight as the params'
  // dtype. The linears read it at Create.
  bool fp8_tile_gather = false;
  // Gradient reduce-scatter with bf16 on the wire and f32 accumulation (as
  // Megatron's --gtp-remat-reduce-scatter-with-fp32-accumulation): the f32
  // wgrad is rounded to bf16, exchanged by all-to-all, and each rank adds the
  // GTP ranks' pieces of its shard in f32 in rank order. Half the bytes of
  // the f32 reduce-scatter.
  bool bf16_reduce_scatter = false;
};

// Which pass a materialisation serves. kRecompute is the forward re-run of an
// activation-recomputed block during backward: it has its own gather slot and
// prefetches only within its recompute group, so it never disturbs the
// backward chain.
enum class Direction { kForward = 0, kBackward = 1, kRecompute = 2 };
enum class CommState { kNone, kAsyncWait, kDataReady };

const char* DirectionName(Direction d);

// One instrumented step, for tests and profiling.
struct GtpTraceEvent {
  enum Kind { kGatherIssued, kGatherWaited, kConsumed, kReduceIssued, kReduceFinalized };
  Kind kind;
  std::string param;
  Direction dir;
  bool async;   // issued as a prefetch / finalised deferred
  int64_t seq;  // global order of events on this rank
  // kConsumed: the weight handed to the GEMMs; kReduceIssued: the wgrad
  // buffer reduced (stable addresses are what CUDA-graph capture needs).
  const void* buffer = nullptr;
};

// Free lists of buffers keyed by (shape, dtype, purpose). Purposes are the
// two gather directions and the wgrad buffers (kept apart so a wgrad's zero
// pad rows are never overwritten). Acquire returns a cached buffer when one
// is free; Release returns it.
class BufferCache {
 public:
  explicit BufferCache(const kernels::Exec& exec) : exec_(exec) {}
  // A buffer of that shape; new ones are zero-filled.
  enum Purpose { kGatherForward = 0, kGatherBackward = 1, kGatherRecompute = 2, kWgrad = 3 };
  Tensor Acquire(const Shape& shape, DType dtype, Purpose purpose);
  void Release(const Tensor& t, Purpose purpose);
  int64_t num_allocated() const { return num_allocated_; }

 private:
  using Key = std::tuple<std::vector<int64_t>, DType, int>;
  static Key MakeKey(const Shape& s, DType d, Purpose purpose);
  kernels::Exec exec_;
  std::map<Key, std::vector<Tensor>> free_;
  int64_t num_allocated_ = 0;
};

class ShardedParam;

// The prefetch chain of one model (one per model replica on a rank).
class GtpChain {
 public:
  // Kernels and buffers of every param of this chain use `exec` (kept by
  // value; its allocator must outlive the chain).
  GtpChain(const kernels::Exec& exec, const GtpOptions& options);
  GtpChain(const GtpChain&) = delete;
  GtpChain& operator=(const GtpChain&) = delete;

  const GtpOptions& options() const { return options_; }
  const kernels::Exec& exec() const { return exec_; }
  BufferCache& cache() { return cache_; }
  // A vector of n ones in `dtype` (bias GEMMs), made once per (n, dtype).
  const Tensor& Ones(int64_t n, DType dtype);

  // Finalises every pending reduce-scatter (waits; synchronous) and drops
  // any backward prefetch no backward consumed (its weights would be stale
  // after the update). Call at the end of each backward pass, before the
  // optimizer reads main grads.
  absl::Status FinishBackward();

  // Params in forward order, as recorded on the first forward.
  const std::vector<ShardedParam*>& order() const { return order_; }
  bool order_frozen() const { return frozen_; }
  // Ends chain recording (called automatically by the first backward
  // materialisation, or explicitly after the first forward).
  void Freeze() { frozen_ = true; }
  // A param used once more after the chain's last one in forward and first
  // in backward — the tied LM head (the embedding table, the chain's first
  // param): the last param prefetches it in forward, and its backward
  // materialisation prefetches the last param gathered in backward.
  void set_tail(ShardedParam* p) { tail_ = p; }

  // Where the layers of this chain's model record their spans (null: none).
  void set_timeline(Timeline* t) { timeline_ = t; }
  Timeline* timeline() const { return timeline_; }

  // Host time this chain's gathers and reduce-scatters blocked the training
  // thread (see comm::ExposedComm); the caller resets it, e.g. once per step.
  comm::ExposedComm& exposed_comm() { return exposed_; }
  const comm::ExposedComm& exposed_comm() const { return exposed_; }

  void set_tracing(bool on) { tracing_ = on; }
  const std::vector<GtpTraceEvent>& trace() const { return trace_; }
  void ClearTrace() { trace_.clear(); }

 private:
  friend class ShardedParam;
  void Record(GtpTraceEvent::Kind kind, const ShardedParam& p, Direction dir, bool async,
              const void* buffer = nullptr);
  void Register(ShardedParam* p);
  ShardedParam* Neighbour(const ShardedParam* p, Direction dir) const;
  // The timeline for comm spans: host-clock (CPU) timelines only.
  Timeline* comm_timeline() const { return exec_.is_cuda() ? nullptr : timeline_; }

  kernels::Exec exec_;
  GtpOptions options_;
  BufferCache cache_;
  std::map<std::pair<int64_t, DType>, Tensor> ones_;
  std::vector<ShardedParam*> order_;
  bool frozen_ = false;
  ShardedParam* tail_ = nullptr;
  // Params whose reduce-scatter was issued and awaits finalisation (FIFO).
  std::vector<ShardedParam*> pending_reduce_;
  bool tracing_ = false;
  Timeline* timeline_ = nullptr;
  comm::ExposedComm exposed_;
  std::vector<GtpTraceEvent> trace_;
  int64_t seq_ = 0;
};

class ShardedParam {
 public:
  // A [rows, cols] TP-local weight sharded over `gtp` (size 1 allowed).
  // `dtype` is the parameter/gather dtype (f32 or bf16); the main grad is f32.
  // Allocates the shard and main grad (both zeroed) through chain->exec().
  ShardedParam(std::string name, int64_t rows, int64_t cols, DType dtype, comm::Communicator* gtp,
               GtpChain* chain);
  ShardedParam(const ShardedParam&) = delete;
  ShardedParam& operator=(const ShardedParam&) = delete;

  const std::string& name() const { return name_; }
  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }
  int64_t padded_rows() const { return padded_rows_; }
  int64_t shard_rows() const { return shard_rows_; }
  // First TP-local row held by this rank's shard.
  int64_t shard_row_begin() const { return static_cast<int64_t>(gtp_rank()) * shard_rows_; }
  int gtp_size() const { return gtp_ ? gtp_->size() : 1; }
  int gtp_rank() const { return gtp_ ? gtp_->rank() : 0; }
  DType dtype() const { return dtype_; }
  // The chain's execution context (device, allocator, stream).
  const kernels::Exec& exec() const;

  // This rank's [shard_rows, cols] piece (rows past `rows` are padding: zero).
  // Whoever writes it (optimizer, checkpoint restore, initialisation) calls
  // MarkUpdated afterwards.
  const Tensor& shard() const { return shard_; }
  // The shard's values changed: a coded gather (GtpOptions::fp8_gather /
  // nvfp4_gather) re-quantises it before the next gather (else a no-op).
  void MarkUpdated() { wire_fresh_ = false; }
  // Bytes this rank sends per gather of the weight.
  int64_t gather_wire_bytes() const;
  // f32 [shard_rows, cols]; reduce-scattered gradients add (+=) into it. A
  // deferred zero (DeferGradZero) is written out at the first access here, so
  // whoever reads or writes the grad through this accessor sees its value.
  const Tensor& main_grad() const {
    FillUnwrittenGrad();
    return main_grad_;
  }
  // Makes the main grad live in `storage` (f32 [shard_rows, cols], contiguous,
  // on the chain's device), e.g. a view into the optimizer's flat gradient
  // buffer; the current main-grad values are copied into it. Call between
  // iterations (no reduction pending). Enqueued on the chain's stream.
  void set_main_grad_storage(const Tensor& storage);
  // Makes the shard live in `storage` (contiguous [shard_rows, cols] of the
  // param dtype, on the chain's device), e.g. a block of rows of one buffer
  // holding several weights one GEMM reads together (layers/packed_linears.h);
  // the current values are copied into it. Call before the first gather.
  void set_shard_storage(const Tensor& storage);

  // The full TP-local weight [rows, cols] for `dir`'s GEMMs. Waits for an
  // in-flight prefetch or gathers synchronously (cold start), then issues
  // the neighbour's prefetch (unless `prefetch` is false: a tied weight's
  // second use). Blocks on this param's gather only.
  absl::StatusOr<Tensor> Materialize(Direction dir, bool prefetch = true);

  // Under train.precision=fp8: gather the weight as the FP8 GEMM's operand —
  // each rank's shard quantised in 128×128 tiles (once per update, as a coded
  // gather is), its codes and scales all-gathered — instead of the bf16 weight
  // quantised after the gather. When the shards are whole tiles (shard_rows %
  // 128 == 0) the gathered tiles are the tiles of the gathered weight, so the
  // codes are those of quantising it, bit for bit, for half the bytes on the
  // wire. Takes effect (true) for a bf16, uncoded weight with GTP > 1 whose
  // shards are whole tiles, called before its first gather; else (false)
  // nothing changes.
  bool UseFp8TileGather();
  bool fp8_tiles() const { return fp8_tiles_; }
  // With fp8_tiles(): the gathered weight's 128×128 codes [rows, cols] and
  // scales, for `dir`'s GEMMs, as Materialize (which it replaces) otherwise.
  absl::StatusOr<kernels::fp8::Fp8Matrix> MaterializeFp8(Direction dir, bool prefetch = true);
  // Returns the gathered buffer to the cache (after its GEMMs were issued;
  // on GPU the cache is stream-ordered with the compute stream).
  void Release(Direction dir);

  // The open [padded_rows, cols] f32 buffer for the full weight gradient
  // (pad rows zero). `*fresh` is true when it was just opened: write rows
  // [0, rows) with beta = 0; false when it already holds a contribution
  // (a tied weight used twice) — or, with GTP = 1, when it is the main grad
  // itself (nothing to reduce): accumulate with beta = 1, unless its zeroing
  // was deferred (DeferGradZero) and this is the iteration's first write:
  // then fresh, beta = 0.
  Tensor Wgrad(bool* fresh);
  // GTP 1 only. The main grad counts as zero without being written: the
  // iteration's first Wgrad reports fresh (its writer overwrites rows
  // [0, rows) with beta = 0; the pad rows, never written, stay zero), so an
  // optimizer need not zero-fill it (GradBuffer::ZeroGrad). Until then
  // main_grad() and FillUnwrittenGrad write the zeros out (a reader of the
  // flat buffer calls FillUnwrittenGrad first). A wgrad left open by a failed
  // iteration is zeroed at once instead: its next Wgrad accumulates.
  void DeferGradZero();
  void FillUnwrittenGrad() const;
  bool grad_zero_deferred() const { return grad_zero_deferred_; }
  // Closes the open wgrad buffer and reduce-scatters it over GTP, then adds
  // into the main grad — deferred by one param when async_reduction is on.
  absl::Status ReduceGrad();

  // Params never gathered in backward (an embedding table: its backward is a
  // scatter-add) are skipped when choosing what to prefetch there.
  void set_gathered_in_backward(bool on) { gathered_in_backward_ = on; }
  bool gathered_in_backward() const { return gathered_in_backward_; }
  // A copy of a weight another pipeline stage holds too (the tied LM head on
  // the last stage): checkpoints save the first stage's copy only, and the
  // global grad norm counts that one only.
  void set_tied_copy(bool on) { tied_copy_ = on; }
  bool tied_copy() const { return tied_copy_; }
  // Params of one recompute group (a block with activation recompute) are
  // prefetched among themselves during recomputation; -1: none.
  void set_recompute_group(int g) { recompute_group_ = g; }
  int recompute_group() const { return recompute_group_; }
  // Params of one prefetch group (a MoE layer's stacked expert weights, fc1
  // and fc2) are prefetched together: when the param before the group
  // prefetches the group's first member, every member of the group that
  // follows it in the chain's order (for this direction) is issued at once,
  // so the whole group's gathers hide behind the previous layer. -1: none.
  void set_prefetch_group(int g) { prefetch_group_ = g; }
  int prefetch_group() const { return prefetch_group_; }
  // Params of one grad group (the parts of one fused GEMM: attention's q, k
  // and v, layers/packed_linears.h) that a ParamSet lists one after another
  // keep their main grads adjacent in an optimizer's flat buffer, in the
  // listed order and in one bucket (optimizer/grad_buffer.h), so the GEMM
  // writes them as one matrix. Any non-null key shared by the group's members
  // (e.g. the object that fuses them); null: none.
  void set_grad_group(const void* key) { grad_group_ = key; }
  const void* grad_group() const { return grad_group_; }

  CommState gather_state(Direction dir) const { return gather_[static_cast<int>(dir)].state; }
  CommState reduce_state() const { return reduce_.state; }

  // Where this TP-local weight sits in the global (unsharded) weight:
  // TP-local row r is global row row_map(r); TP-local column c is global
  // column col_offset + c; the global weight is [global_rows, global_cols].
  struct GlobalLayout {
    int64_t global_rows = 0;
    int64_t global_cols = 0;
    std::function<int64_t(int64_t)> row_map;
    int64_t col_offset = 0;
  };
  void set_global_layout(GlobalLayout layout) { layout_ = std::move(layout); }
  const GlobalLayout& global_layout() const { return layout_; }

  // The matrices Muon orthogonalises, when they are not the global weight:
  // `blocks` matrices stacked along rows in `layout` (MoE: a rank's local
  // experts, each [H1, C] or [C, H], the layout covering this EP rank's
  // experts only). Default: the global layout, one matrix.
  void set_matrix_layout(GlobalLayout layout, int blocks) {
    matrix_layout_ = std::move(layout);
    matrix_blocks_ = blocks;
  }
  const GlobalLayout& matrix_layout() const {
    return matrix_layout_.row_map ? matrix_layout_ : layout_;
  }
  int matrix_blocks() const { return matrix_blocks_; }

  // Called after each finalisation {reduce-scatter → add} (optimizer buckets).
  void set_ready_hook(std::function<void(ShardedParam&)> hook) { ready_hook_ = std::move(hook); }
  // Called right before backward writes the main grad (the reduced shard
  // added, or — GTP 1 — a new wgrad accumulating into it), on the training
  // thread: a bucket still reducing that memory (a second synchronising
  // backward) waits there instead of racing the write.
  void set_grad_write_hook(std::function<void(ShardedParam&)> hook) {
    grad_write_hook_ = std::move(hook);
  }

 private:
  friend class GtpChain;
  struct GatherSlot {
    CommState state = CommState::kNone;
    Tensor buffer;         // [padded_rows, cols]
    Tensor wire;           // coded gather: u8 [gtp · wire bytes], the ranks' packed shards
    Tensor codes, scales;  // fp8_tiles: the gathered 128×128 codes and their scales
    comm::WorkPtr work;
    comm::WorkPtr scales_work;  // fp8_tiles: the scales' gather
  };
  // What every use of the weight in `dir` does first: the forward records the
  // chain's order, anything else ends the recording.
  void BeginUse(Direction dir);
  // Waits for the gathers Materialize and MaterializeFp8 need (issuing them
  // on a cold start) and issues the neighbours' prefetch.
  absl::Status Gathered(Direction dir, bool prefetch);
  bool coded() const { return wire_.defined(); }
  struct ReduceSlot {
    CommState state = CommState::kNone;
    bool open = false;    // wgrad acquired, not yet reduced
    Tensor wgrad;         // [padded_rows, cols] f32
    Tensor scatter;       // [shard_rows, cols] f32
    Tensor wire, pieces;  // bf16 reduce-scatter: bf16 wgrad, the ranks' pieces of this shard
    comm::WorkPtr work;
  };
  absl::Status IssueGather(Direction dir, bool async);
  absl::Status WaitGather(Direction dir);
  absl::Status FinalizeReduce(bool deferred);

  std::string name_;
  int64_t rows_, cols_, padded_rows_, shard_rows_;
  DType dtype_;
  comm::Communicator* gtp_;
  GtpChain* chain_;
  Tensor shard_, main_grad_;
  // coded gather: this shard's wire (gtp_wire.h, codec_), and whether it
  // holds the current values.
  GatherCodec codec_ = GatherCodec::kMxfp8;
  Tensor wire_;
  bool wire_fresh_ = false;
  bool fp8_tiles_ = false;
  Tensor tile_q_, tile_s_;  // fp8_tiles: the shard's 128×128 codes and scales
  Tensor rounded_;          // GTP 1 with a coded gather: the shard after the round trip
  GatherSlot gather_[3];
  ReduceSlot reduce_;
  std::function<void(ShardedParam&)> ready_hook_;
  std::function<void(ShardedParam&)> grad_write_hook_;
  bool registered_ = false;
  bool gathered_in_backward_ = true;
  bool tied_copy_ = false;
  mutable bool grad_zero_deferred_ = false;  // DeferGradZero: no Wgrad since
  int recompute_group_ = -1;
  int prefetch_group_ = -1;
  const void* grad_group_ = nullptr;
  GlobalLayout layout_;
  GlobalLayout matrix_layout_;
  int matrix_blocks_ = 1;
};

// round_up(rows, gtp·alignment).
int64_t PaddedRows(int64_t rows, int gtp, int64_t alignment);

}  // namespace gtp::layers
