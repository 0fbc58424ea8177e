// recipes/trainer/state.h — one rank's training state, built from the
// recipe on its world: the process groups, this rank's model parts (one, or
// its pipeline chunks with the runner that drives them), the gradient
// buffers (dense and expert) and the distributed optimizer, the train and
// validation datasets and the data sampler. The trainer's parts (step,
// evaluation, checkpointing, sampling) read it; it owns all of it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "comm/communicator.h"
#include "core/kernels/ops.h"
#include "data/gpt_dataset.h"
#include "data/sampler.h"
#include "layers/gpt.h"
#include "optimizer/grad_buffer.h"
#include "optimizer/optimizer.h"
#include "parallel/process_groups.h"
#include "pipeline/runner.h"
#include "recipes/trainer/config.pb.h"

namespace gtp::recipes {

// Train and validation datasets for the recipe's data source (the embedded
// corpus, mock tokens, or Megatron indexed files split by document: the last
// data.valid_fraction of them, 2 % by default, for validation).
absl::Status MakeDatasets(const proto::Recipe& r, std::unique_ptr<data::GptDataset>* train,
                          std::unique_ptr<data::GptDataset>* valid);

struct RankState {
  // Builds everything for this rank. InvalidArgument naming the setting for
  // a layout the model cannot take (e.g. too few micro-batches for PP).
  // `recipe`, the communicators and `exec` must outlive the state.
  // Collective over `world`; blocks.
  static absl::StatusOr<std::unique_ptr<RankState>> Build(const proto::Recipe& recipe,
                                                          comm::Communicator& world,
                                                          comm::Communicator& host,
                                                          const kernels::Exec& exec);

  bool has_moe() const { return recipe.model().moe().num_experts() > 0; }
  std::vector<layers::GptModel*> RawParts() const;

  const proto::Recipe& recipe;
  comm::Communicator& world;
  comm::Communicator& host;
  const kernels::Exec& exec;
  std::unique_ptr<parallel::ProcessGroupCollection> pgs;
  comm::Communicator* data = nullptr;  // the data lanes
  comm::Communicator* pp = nullptr;
  std::string order, expert_order;     // the rank orders the groups were built with
  // This rank's model chunks (one unless parallel.vpp > 1) and the first;
  // with pipeline stages the runner drives them.
  std::vector<std::unique_ptr<layers::GptModel>> parts;
  layers::GptModel* model = nullptr;
  std::unique_ptr<pipeline::PipelineRunner> runner;
  optimizer::ParamSet params;
  optimizer::ParamSet experts;  // MoE expert weights (their own grad buffer)
  std::unique_ptr<optimizer::GradBuffer> grads;
  std::unique_ptr<optimizer::GradBuffer> expert_grads;  // null without MoE
  std::unique_ptr<optimizer::DistributedOptimizer> opt;
  std::unique_ptr<data::GptDataset> train, valid;
  std::unique_ptr<data::DistributedSampler> sampler;
  int64_t local_params = 0;  // elements of the params this rank holds

 private:
  RankState(const proto::Recipe& recipe, comm::Communicator& world, comm::Communicator& host,
            const kernels::Exec& exec);
};

}  // namespace gtp::recipes
