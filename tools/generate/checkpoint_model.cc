#include "tools/generate/checkpoint_model.h"

#include <cstring>
#include <filesystem>
#include <map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "checkpoint/checkpoint.h"
#include "core/dtype.h"
#include "core/status.h"
#include "recipes/trainer/config.h"

namespace gtp::tools {

absl::StatusOr<CheckpointRecipe> ReadCheckpointRecipe(const std::string& path) {
  CheckpointRecipe out;
  out.dir = path;
  if (!std::filesystem::exists(path + "/metadata.pb")) {
    GTP_ASSIGN_OR_RETURN(int64_t it, checkpoint::LatestIteration(path));
    out.dir = checkpoint::IterationDir(path, it);
  }
  GTP_ASSIGN_OR_RETURN(checkpoint::proto::Metadata meta,
                       checkpoint::ReadCheckpointMetadata(out.dir));
  out.iteration = meta.iteration();
  const auto it = meta.extra().find("recipe");
  if (it == meta.extra().end()) {
    return absl::FailedPreconditionError(
        absl::StrCat(out.dir, " has no recipe in its metadata (not written by the trainer)"));
  }
  GTP_ASSIGN_OR_RETURN(out.recipe, recipes::ParseRecipe(it->second, out.dir + " (its recipe)"));
  return out;
}

absl::Status LoadGlobalWeights(const std::string& iteration_dir, layers::GptModel& model) {
  GTP_ASSIGN_OR_RETURN(std::vector<checkpoint::GlobalTensor> all,
                       checkpoint::ReadAllGlobal(iteration_dir));
  std::map<std::string, const checkpoint::GlobalTensor*> by;
  for (const auto& g : all) by[g.key] = &g;
  std::vector<std::string> names;
  for (const layers::ShardedParam* p : model.sharded_params()) names.push_back(p->name());
  for (const layers::ShardedParam* p : model.expert_params()) names.push_back(p->name());
  for (const layers::ReplicatedParam* p : model.replicated_params()) names.push_back(p->name);
  for (const std::string& name : names) {
    auto src = by.find(name + "/master");
    if (src == by.end()) src = by.find(name);
    if (src == by.end()) {
      return absl::NotFoundError(absl::StrCat(iteration_dir, " has no tensor ", name));
    }
    const checkpoint::GlobalTensor& g = *src->second;
    std::vector<float> f(g.shape.numel());
    if (g.dtype == DType::kF32) {
      std::memcpy(f.data(), g.bytes.data(), f.size() * sizeof(float));
    } else if (g.dtype == DType::kBF16) {
      const bf16* b = reinterpret_cast<const bf16*>(g.bytes.data());
      for (size_t i = 0; i < f.size(); ++i) f[i] = ToF32(b[i]);
    } else {
      return absl::InvalidArgumentError(absl::StrCat(iteration_dir, ": ", g.key, " is ",
                                                     DTypeName(g.dtype), ", not f32 or bf16"));
    }
    GTP_RETURN_IF_ERROR(model.LoadGlobal(name, f.data(), g.shape));
  }
  return absl::OkStatus();
}

}  // namespace gtp::tools
