// recipes/trainer/sampling.h — train.sample_every: a text sample from the
// model being trained. Every rank puts its pieces of each global tensor
// into a host buffer holding −inf elsewhere; a max all-reduce over the
// ranks assembles the exact values (replicas are identical), which fill a
// single-rank f32 copy of the model; rank 0 decodes from it with the KV
// cache (layers/inference) and prints "step N  sample: …".
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "comm/communicator.h"
#include "core/allocator.h"
#include "core/kernels/ops.h"
#include "layers/gpt.h"
#include "optimizer/optimizer.h"
#include "parallel/process_groups.h"
#include "recipes/trainer/config.pb.h"

namespace gtp::recipes {

// InvalidArgument naming the setting when the recipe's train.sample_every
// cannot be done as asked: an MoE or Mamba model (not sampled yet), or a
// train.sample_prompt longer than the context (model.seq_len; the prompt is
// byte-level, a token a byte). OK without sampling. Pure: the trainer checks
// it before the run directory exists.
absl::Status CheckSampling(const proto::Recipe& r);

class TextSampler {
 public:
  // `host`: the ranks' host-memory communicator; `exec`: where the params
  // live. All must outlive the sampler.
  TextSampler(const proto::Recipe& r, comm::Communicator& host, const kernels::Exec& exec,
              bool progress_bar)
      : r_(r), host_(host), exec_(exec), progress_bar_(progress_bar) {}

  // One sample of train.sample_tokens after train.sample_prompt, from
  // `params` (this rank's dense params) after `step`. CheckSampling's
  // errors. Collective over `host`; blocks.
  absl::Status Print(const optimizer::ParamSet& params, int64_t step);

 private:
  const proto::Recipe& r_;
  comm::Communicator& host_;
  const kernels::Exec& exec_;
  const bool progress_bar_;
  HeapAllocator staging_;
  std::vector<std::unique_ptr<comm::Communicator>> sample_world_;
  std::unique_ptr<parallel::ProcessGroupCollection> sample_pgs_;
  std::unique_ptr<layers::GptModel> sample_model_;
};

}  // namespace gtp::recipes
