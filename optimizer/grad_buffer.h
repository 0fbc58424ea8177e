// optimizer/grad_buffer.h — flat fp32 gradient buffer, buckets and the
// data-parallel reduction (DESIGN.md §5).
//
// A GradBuffer owns one contiguous f32 buffer holding every gradient of a
// ParamSet: each ShardedParam's main grad and each ReplicatedParam's grad
// become views into it. The buffer is cut into buckets of whole params, and
// each bucket's length is a multiple of the replicate-group size R, so rank r
// of the replicate group owns the contiguous slice [r·len/R, (r+1)·len/R) of
// every bucket: the distributed optimizer's shard.
//
// One iteration (one optimizer step), with M micro-batches:
//
//   for (int m = 0; m < M; ++m) {
//     model->Forward(tokens[m], targets[m]);
//     grads->StartMicrobatch(/*last=*/m == M - 1, model->num_valid_tokens());
//     model->Backward();                // buckets reduce as they complete
//   }
//   GTP_RETURN_IF_ERROR(grads->FinishGradSync());  // (or let the optimizer do it)
//
//   - GTP-sharded params: the model's GTP reduce-scatter adds into the main
//     grad and fires the param's ready hook. On the last micro-batch a bucket
//     of sharded params is reduced over the replicate group as soon as every
//     param in it is ready — overlapped with the rest of backward — and never
//     earlier (the ordering invariant of DESIGN.md §5). Earlier micro-batches
//     only accumulate.
//   - Replicated params (norms, biases, position table): at FinishGradSync,
//     summed over TP where grad_needs_tp_sum (sequence parallelism), all-reduced
//     over GTP, then reduced over the replicate group in their own buckets
//     (their grads are complete only when backward is).
//   - Each bucket is reduce-scattered (kReduceScatter: only this rank's slice
//     is final afterwards — the distributed optimizer) or all-reduced.
//   - kMean normalisation: every collective averages and the result is scaled
//     by 1/M, giving the gradient of the mean of the lanes' mean losses over
//     all DP × GTP × CP lanes and micro-batches. kPerToken: every collective
//     sums and the result is divided once by the global number of tokens (the
//     sum over the data_cp group of the counts given to StartMicrobatch). The
//     model must match: GtpOptions::grad_reduce kMean / kSum and, for
//     kPerToken, a model whose backward differentiates the summed loss
//     (layers::LossReduction::kSum).
//
// Groups come from the collection, by the names in GradGroups (defaults:
// "replicate", "tp", "gtp", "data_cp"; "pp" for the norm).
// Threading: driven by the rank's training thread, like the params (the
// ready hooks run inside the model's backward on that thread). Methods that
// communicate say so and block only where noted.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "comm/communicator.h"
#include "comm/exposed_comm.h"
#include "core/kernels/ops.h"
#include "core/tensor.h"
#include "layers/linear.h"
#include "layers/sharded_param.h"
#include "optimizer/grad_sync.h"
#include "parallel/process_groups.h"

namespace gtp::optimizer {

// How gradients are normalised (see the file comment).
enum class LossNormalization { kMean, kPerToken };

// How a bucket is reduced over the replicate group.
enum class ReduceMode { kReduceScatter, kAllReduce };

// One parameter's place in the buffer.
struct GradParam {
  std::string name;
  layers::ShardedParam* sharded = nullptr;       // exactly one of the two is set
  layers::ReplicatedParam* replicated = nullptr;
  int64_t offset = 0;  // first element in the flat buffer
  int64_t numel = 0;   // shard_rows·cols (sharded) or value.numel()
  int bucket = -1;
  // Elements differ between TP ranks: every sharded param (a TP-local
  // weight) and column-parallel biases. Else every TP rank holds a copy.
  bool tp_sharded = false;
  // Rank of the full tensor: 2 for sharded params, value.rank() otherwise.
  int dims = 0;

  // Flat view of this rank's parameter storage (the shard or the value),
  // f32 or bf16.
  Tensor value() const;
};

// A run of whole params reduced by one collective.
struct Bucket {
  int index = 0;
  int64_t offset = 0;  // in the flat buffer
  int64_t numel = 0;   // multiple of the replicate size (tail is padding)
  bool replicated = false;
  std::vector<int> params;  // indices into GradBuffer::params()
};

// One step of the reduction, recorded when tracing is on.
struct GradSyncEvent {
  enum Kind { kParamReady, kBucketIssued, kBucketDone };
  Kind kind;
  int bucket;
  std::string param;  // kParamReady only
  int64_t seq;
};

// Which groups of the collection a buffer uses. The defaults are the dense
// grid's; a buffer of expert params uses the expert grid's, e.g.
// {"edp", "etp", "egtp", "data_cp", {"ep", "pp"}}.
struct GradGroups {
  std::string replicate = "replicate";  // DDP reduction, optimizer sharding
  std::string tp = "tp";
  std::string gtp = "gtp";
  std::string data_cp = "data_cp";      // token counts (kPerToken)
  // Further groups whose ranks hold different params of this buffer; the
  // global grad norm sums over them too. Absent or size-1 groups are skipped.
  std::vector<std::string> distinct = {"pp"};
};

struct GradBufferOptions {
  LossNormalization normalization = LossNormalization::kMean;
  ReduceMode reduce = ReduceMode::kReduceScatter;
  // Target elements per bucket; a larger param gets a bucket of its own.
  int64_t bucket_elements = int64_t{1} << 22;
  // Issue sharded buckets from the ready hooks (overlapping backward). Off:
  // everything is reduced in FinishGradSync.
  bool overlap = true;
  GradGroups groups;
  // Instrumentation: called right before a bucket's reduction is issued (on
  // the training thread).
  std::function<void(const Bucket&)> on_bucket_issue;
};

class GradBuffer {
 public:
  // Lays out the buffer (sharded params in reverse order, i.e. roughly the
  // order backward finishes them — except that a run of one grad group keeps
  // its listed order, whole in one bucket: ShardedParam::set_grad_group —
  // then replicated params, those needing the TP sum first), allocates it through exec, moves every
  // grad into it (current values are kept) and installs the ready hooks. The params themselves (not
  // the ParamSet) and `pgs` must outlive the buffer. Does not communicate. InvalidArgument for an
  // empty ParamSet or bad options; NotFound for a missing group.
  static absl::StatusOr<std::unique_ptr<GradBuffer>> Create(
      const ParamSet& params, const parallel::ProcessGroupCollection& pgs,
      const kernels::Exec& exec, const GradBufferOptions& options = {});
  // Removes the ready hooks (the grads stay views of the freed buffer's
  // storage, which they keep alive).
  ~GradBuffer();
  GradBuffer(const GradBuffer&) = delete;
  GradBuffer& operator=(const GradBuffer&) = delete;

  // Declares the micro-batch whose backward comes next (call it before that
  // backward): `last` makes its backward reduce buckets
  // as they complete; `num_tokens` is this lane's count of valid targets in
  // it (kPerToken). Without any call, one micro-batch marked last is
  // assumed. Does not communicate.
  void StartMicrobatch(bool last, int64_t num_tokens = 0);

  // Issues what backward has not (replicated buckets after their TP and GTP
  // reductions; any sharded bucket not yet issued), waits for every bucket
  // and applies the normalisation. Afterwards valid_range() of each bucket
  // holds the final gradient. Collective over tp, gtp, replicate (and
  // data_cp for kPerToken); blocks. Reports errors deferred from the hooks.
  absl::Status FinishGradSync();
  bool finished() const { return finished_; }

  // Zeroes the buffer and starts a new iteration (micro-batch count, token
  // count, readiness). Enqueued on the exec's stream; does not communicate.
  // A GTP-1 sharded param's grad (most of the buffer: a GEMM's wgrad writes
  // it directly) is not filled: its zeroing is deferred
  // (ShardedParam::DeferGradZero), so the iteration's first wgrad GEMM
  // writes it with beta = 0, and FinishGradSync zeroes any such grad no
  // backward wrote. The same values as a fill, without writing the buffer
  // once more each step (4 bytes a parameter).
  void ZeroGrad();
  // The [begin, end) element ranges ZeroGrad fills (every other element is a
  // deferred param's, or bucket padding, which nothing writes but zeros).
  const std::vector<std::pair<int64_t, int64_t>>& zero_ranges() const { return zero_ranges_; }
  // Whether ZeroGrad ran since Create: from then on every iteration starts
  // with the same deferred grads, so a CUDA graph captured over one (which
  // bakes each wgrad GEMM's beta in) replays right for the next.
  bool zeroed() const { return zeroed_; }

  // Elements of bucket b that hold the final gradient after FinishGradSync
  // on this rank: the whole bucket (kAllReduce) or this rank's slice.
  std::pair<int64_t, int64_t> valid_range(int b) const;
  // This rank's slice of bucket b (its distributed-optimizer shard),
  // whatever the reduce mode.
  std::pair<int64_t, int64_t> shard_range(int b) const;

  const std::vector<GradParam>& params() const { return params_; }
  const std::vector<Bucket>& buckets() const { return buckets_; }
  // The flat f32 buffer [numel].
  const Tensor& data() const { return data_; }
  const GradBufferOptions& options() const { return options_; }
  const kernels::Exec& exec() const { return exec_; }
  comm::Communicator* replicate() const { return replicate_; }
  comm::Communicator* tp() const { return tp_; }
  comm::Communicator* gtp() const { return gtp_; }
  // The `distinct` groups present with more than one rank.
  const std::vector<comm::Communicator*>& distinct() const { return distinct_; }
  // The global token count of the last FinishGradSync (kPerToken), else 0.
  int64_t global_tokens() const { return global_tokens_; }

  void set_tracing(bool on) { tracing_ = on; }
  const std::vector<GradSyncEvent>& trace() const { return trace_; }
  void ClearTrace() { trace_.clear(); }

  // Host time FinishGradSync blocked on communication: bucket Waits that had
  // not completed and the synchronous TP / GTP all-reduces of replicated
  // grads (comm::ExposedComm). The caller resets it, e.g. once per step.
  comm::ExposedComm& exposed_comm() { return exposed_; }
  const comm::ExposedComm& exposed_comm() const { return exposed_; }
  // Where those waits are drawn ("comm" track; CPU timelines only). Not owned.
  void set_timeline(Timeline* t) { timeline_ = t; }

 private:
  GradBuffer() = default;
  void OnParamReady(int param);
  void OnGradWrite(int param);
  absl::Status IssueBucket(int b);
  void Record(GradSyncEvent::Kind kind, int bucket, const std::string& param);

  GradBufferOptions options_;
  kernels::Exec exec_;
  comm::Communicator* replicate_ = nullptr;
  comm::Communicator* tp_ = nullptr;
  comm::Communicator* gtp_ = nullptr;
  comm::Communicator* data_cp_ = nullptr;
  std::vector<comm::Communicator*> distinct_;
  std::vector<GradParam> params_;
  std::vector<Bucket> buckets_;
  Tensor data_;
  int64_t replicated_begin_ = 0, tp_sum_end_ = 0;  // [begin, tp_sum_end): needs the TP sum
  std::vector<std::pair<int64_t, int64_t>> zero_ranges_;  // what ZeroGrad fills
  bool zeroed_ = false;

  // Per-iteration state.
  struct BucketState {
    int ready = 0;
    bool issued = false;
    comm::WorkPtr work;
  };
  std::vector<BucketState> state_;
  std::vector<char> param_ready_;
  bool sync_ = true;  // the current micro-batch is the last one
  int num_microbatches_ = 0;
  int64_t local_tokens_ = 0, global_tokens_ = 0;
  bool finished_ = false;
  absl::Status deferred_error_;

  comm::ExposedComm exposed_;
  Timeline* timeline_ = nullptr;
  bool tracing_ = false;
  std::vector<GradSyncEvent> trace_;
  int64_t seq_ = 0;
};

}  // namespace gtp::optimizer
