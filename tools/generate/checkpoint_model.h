// tools/generate/checkpoint_model.h — a trainer checkpoint's recipe and
// weights, for tools that rebuild its model (generate, eval).
//
//   GTP_ASSIGN_OR_RETURN(CheckpointRecipe c, ReadCheckpointRecipe("runs/x/checkpoints"));
//   ... build a GptModel from recipes::ModelConfig(c.recipe) on any layout ...
//   GTP_RETURN_IF_ERROR(LoadGlobalWeights(c.dir, *model));
//
// Every function returns Status (NotFound, DataLoss naming the file,
// InvalidArgument naming the tensor) and blocks on file I/O.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "layers/gpt.h"
#include "recipes/trainer/config.pb.h"

namespace gtp::tools {

struct CheckpointRecipe {
  std::string dir;  // the iter_ directory
  int64_t iteration = 0;
  recipes::proto::Recipe recipe;  // as the trainer stored it (resolved)
};

// `path`: a checkpoint root (its `latest`) or one iter_ directory.
// FailedPrecondition when the metadata holds no recipe (not the trainer's).
absl::StatusOr<CheckpointRecipe> ReadCheckpointRecipe(const std::string& path);

// Sets every parameter of `model` (any layout; each rank takes its part)
// from the checkpoint's full global tensors: a bf16 run's f32 master
// (`<name>/master`) where there is one, else the saved value (f32, or bf16
// widened). NotFound naming a parameter the checkpoint lacks.
absl::Status LoadGlobalWeights(const std::string& iteration_dir, layers::GptModel& model);

}  // namespace gtp::tools
