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
#include "google/protobuf/message.h"
#include "layers/layer_kind.h"
#include "recipes/trainer/config.pb.h"
#include "recipes/trainer/settings.h"

namespace gtp::recipes {

absl::StatusOr<proto::Recipe> ParseRecipe(const std::string& text, const std::string& origin);
absl::StatusOr<proto::Recipe> LoadRecipe(const std::string& path,
                                         const std::vector<std::string>& overrides);
// Applies overrides to a parsed recipe.
absl::Status ApplyOverrides(const std::vector<std::string>& overrides, proto::Recipe* r);
// Fills defaults (documented in config.proto) and checks the settings that
// do not depend on the world size.
absl::Status FinalizeRecipe(proto::Recipe* r);

// Every layer of the recipe's model, by the one rule of layers/layer_kind.h:
// model.layer_pattern's, or model.n_layer transformer layers with a MoE
// where model.moe picks the layer (every_n 0 read as its default, 1).
// InvalidArgument for a bad pattern symbol (FinalizeRecipe refuses those).
absl::StatusOr<std::vector<layers::LayerKind>> LayerKindsOf(const proto::Model& m);

// The largest parallel.world_size accepted (beyond any published GTP run).
inline constexpr int kMaxWorldSize = 65536;
// Text format of the resolved recipe (for the start-up banner and checkpoints).
std::string RecipeText(const proto::Recipe& r);

// The same machinery for a config message of another schema (recipes/vlm_mimo):
// text format into `out` (InvalidArgument "<origin>: line L:C: ..."), the
// text of a config file (NotFound / InvalidArgument naming the path; a
// UTF-8 byte-order mark dropped), `--set` overrides with "did you mean" from
// the schema, and the check that no numeric leaf is negative or non-finite
// (InvalidArgument naming the key). The Recipe functions above are these
// over config.proto.
absl::Status ParseConfig(const std::string& text, const std::string& origin,
                         google::protobuf::Message* out);
absl::StatusOr<std::string> ReadConfigFile(const std::string& path);
absl::Status ApplyOverrides(const std::vector<std::string>& overrides, const SettingsSchema& schema,
                            google::protobuf::Message* m);
absl::Status CheckNumbers(const google::protobuf::Message& m);

// Every --set on the command line, in order, taken out of argv (absl keeps
// only a flag's last occurrence: `--set a=1 --set b=2` dropped a=1).
// "--set a=1,b=2", "--set=a=1" and repeats all count; after "--" nothing
// is taken.
std::vector<std::string> TakeSets(int* argc, char** argv);

// Whether --progress or --noprogress was given at all (absl cannot tell a
// default from an explicit false; the default follows the terminal).
bool ProgressFlagGiven(int argc, char** argv);

// The error line for a positional argument left after the flags (a
// `key=value` without --set says so: it used to be ignored); "" when there
// is none. `positional` as gtp::ParseCommandLine returns it (argv[0] first).
std::string StrayArgumentError(const std::vector<char*>& positional);

}  // namespace gtp::recipes
