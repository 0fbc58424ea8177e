// recipes/trainer/batches.h — a micro-batch's tokens and targets from a
// dataset onto the rank's device. On GPUs the host staging is pinned and the
// host→device copies are enqueued without waiting; two staging slots
// alternate, and a slot is refilled only after its last copy ran. The
// training set's batches also go to train.dump_tokens when set.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "core/allocator.h"
#include "core/cuda_runtime.h"
#include "core/kernels/ops.h"
#include "core/tensor.h"
#include "data/gpt_dataset.h"
#include "recipes/trainer/config.pb.h"
#include "recipes/trainer/token_dump.h"

namespace gtp::recipes {

class BatchStager {
 public:
  // `train`: the dataset whose batches are dumped to `dump_tokens` ("" none).
  // All must outlive the stager.
  BatchStager(const proto::Recipe& r, const kernels::Exec& exec, const data::GptDataset* train,
              const std::string& dump_tokens);

  // Tokens and targets of `samples` as [B, T] i32 tensors on the exec's
  // device (on CPU: the staging slot itself, valid until the slot's next
  // use). With `dst` (tokens, targets on the device) the copies land there
  // instead of in new tensors: the fixed buffers a captured CUDA graph reads.
  absl::StatusOr<std::pair<Tensor, Tensor>> Batch(const data::GptDataset& ds,
                                                  const std::vector<uint64_t>& samples,
                                                  const std::pair<Tensor, Tensor>* dst = nullptr);

 private:
  // InvalidArgument naming the sample, the id and the setting when a token
  // or target of the batch just staged lies outside [0, model.vocab_size)
  // (−1 targets are ignored ones).
  absl::Status CheckTokenIds(const data::GptDataset& ds, const std::vector<uint64_t>& samples,
                             int64_t T) const;

  // Host staging for one micro-batch: pinned on GPUs, so the copies are
  // asynchronous; `copied` marks when the device has read it.
  struct Staging {
    Tensor tok, tgt;
    std::optional<Event> copied;
  };
  const proto::Recipe& r_;
  const kernels::Exec& exec_;
  const data::GptDataset* train_;
  HeapAllocator staging_;
  PinnedHostAllocator pinned_;
  Staging staging_slots_[2];
  int next_slot_ = 0;
  Tensor host_tok_, host_tgt_;  // the slot Batch filled last
  TokenDump dump_;              // train.dump_tokens
};

}  // namespace gtp::recipes
