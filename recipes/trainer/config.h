// recipes/trainer/config.h — recipe configs: protobuf text files plus
// command-line overrides, defaults filled in and checked.
//
//   GTP_ASSIGN_OR_RETURN(proto::Recipe r, LoadRecipe("recipes/gpt_tiny/gpt_tiny.pbtxt",
//                                                   {"train.steps=50", "optim.lr=1e-3"}));
//
// An override "a.b.c=value" is merged as the text-format message
// `a { b { c: value } }`, so it obeys exactly the config's own syntax (strings
// may be given bare). Errors (unknown field, bad value, impossible settings)
// are InvalidArgument with one line naming the problem. Pure; thread-safe.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "recipes/trainer/config.pb.h"

namespace gtp::recipes {

absl::StatusOr<proto::Recipe> ParseRecipe(const std::string& text, const std::string& origin);
absl::StatusOr<proto::Recipe> LoadRecipe(const std::string& path,
                                         const std::vector<std::string>& overrides);
// Applies overrides to a parsed recipe.
absl::Status ApplyOverrides(const std::vector<std::string>& overrides, proto::Recipe* r);
// Fills defaults (documented in config.proto) and checks the settings that
// do not depend on the world size.
absl::Status FinalizeRecipe(proto::Recipe* r);

// The largest parallel.world_size accepted (beyond any published GTP run).
inline constexpr int kMaxWorldSize = 65536;
// Text format of the resolved recipe (for the start-up banner and checkpoints).
std::string RecipeText(const proto::Recipe& r);

}  // namespace gtp::recipes
