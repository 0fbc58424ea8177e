// recipes/vlm_mimo/config.h — the vision-language recipe's config
// (vlm_config.proto): the recipe's own vlm_mimo.pbtxt (compiled in), a
// --config file and --set overrides through recipes/trainer's settings
// machinery, defaults and checks naming the setting, and the one translation
// into what the library takes (the shapes task, the MIMO model, the
// optimizers, the module grids) and what the trainer's parts take (world,
// metrics).
//
//   GTP_ASSIGN_OR_RETURN(vlm::VlmRecipe r, LoadVlmRecipe("", {"train.steps=50"}));
//   GTP_RETURN_IF_ERROR(CheckVlmLayout(r));   // before any rank starts
//
// Pure functions; thread-safe. Errors are InvalidArgument, one line naming
// the setting and what works.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "data/shapes/shapes.h"
#include "mimo/model.h"
#include "optimizer/optimizer.h"
#include "parallel/parallel_config.h"
#include "recipes/trainer/config.pb.h"
#include "recipes/trainer/settings.h"
#include "recipes/vlm_mimo/vlm_config.pb.h"

namespace gtp::recipes::vlm {

// Where the recipe's own config lives in the repository (its text is
// compiled into the binary; --list_settings names it).
inline constexpr char kDefaultConfigPath[] = "recipes/vlm_mimo/vlm_mimo.pbtxt";

// vlm_config.proto's keys, comments and fixed choices.
SettingsSchema Schema();

// `path` ("": the recipe's own) parsed, `overrides` applied, finalized.
absl::StatusOr<VlmRecipe> LoadVlmRecipe(const std::string& path,
                                        const std::vector<std::string>& overrides);
// Fills the defaults vlm_config.proto documents and checks every setting
// that does not need the module grids.
absl::Status FinalizeVlmRecipe(VlmRecipe* r);
// The module grids and the batch over them (CheckVlmLayout below).
absl::Status CheckVlmLayout(const VlmRecipe& r);
// Text format of the resolved recipe (recipe.pbtxt, checkpoints).
std::string VlmRecipeText(const VlmRecipe& r);

// Ranks of the whole job: both grids, or one when colocated.
int WorldSize(const VlmRecipe& r);
// A module's layout as the grid builder takes it (ranks = TP × GTP × DP).
parallel::ParallelConfig GridConfig(const Grid& g);
// Data lanes of a module's grid (DP × GTP = ranks / TP).
int DataLanes(const Grid& g);

data::shapes::ShapesConfig ShapesConfigOf(const VlmRecipe& r);
mimo::MimoConfig MimoConfigOf(const VlmRecipe& r, const data::shapes::ShapesTask& task);
// One module's optimizer (both take the same).
optimizer::OptimizerConfig OptimConfigOf(const VlmRecipe& r);

// What recipes/trainer's world (RunOnRanks) and metrics read, as a GPT
// recipe: name, device (f32, gtp's own attention kernels), world size,
// backend and timeout, steps, log_every, tensorboard_dir. No model: the
// metrics show no MFU (mfu.h counts one GPT's FLOPs).
proto::Recipe TrainerRecipe(const VlmRecipe& r);

// The first setting in which a checkpoint's recipe `theirs` and `ours`
// cannot continue the same run: the model (its weights would not fit), the
// seed, the matrices' optimizer (another state) or the learning-rate
// schedule; FailedPrecondition naming it, both values and the fix; OK
// otherwise (layouts may differ: checkpoints reshard).
absl::Status CanResume(const VlmRecipe& theirs, const VlmRecipe& ours, const std::string& dir);

}  // namespace gtp::recipes::vlm
