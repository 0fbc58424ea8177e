// recipes/trainer/settings.h — the catalogue of `--set` keys: every leaf of
// the recipe (recipes/trainer/config.proto) as a dotted key with its type
// and its comment from config.proto, for `--list_settings` and for "did you
// mean" on an unknown key. The same over another config message
// (SettingsSchema: recipes/vlm_mimo's).
#pragma once

#include <string>
#include <vector>

#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"
#include "recipes/trainer/config.pb.h"

namespace gtp::recipes {

struct SettingInfo {
  std::string key;      // "train.steps"
  std::string type;     // "int64", "string", "list of int32", ...
  std::string comment;  // config.proto's comment for the field ("" if none)
};

// Every leaf setting, in config.proto's order.
std::vector<SettingInfo> AllSettings();

// The known key nearest to `key` by edit distance when it is near enough to
// be a typo (at most 2 edits, or a quarter of its length); "" otherwise.
std::string ClosestSetting(const std::string& key);

// One line per setting: key, its value in `r`, its type, its comment (and
// the words it takes, for a setting with fixed choices).
std::string SettingsTable(const proto::Recipe& r);

// A string setting that takes one of a fixed set of words. This table is the
// one list of them: the config checks (config.cc) and --list_settings read it.
struct Choice {
  std::string key;                  // "train.precision"
  std::vector<std::string> values;  // {"f32", "bf16"}
};
const std::vector<Choice>& Choices();
// "" when `value` is one of `key`'s words (or `key` has no fixed choices);
// else "KEY must be a, b or c, got VALUE", with "(did you mean b?)" when the
// value is near one of them.
std::string ChoiceError(const std::string& key, const std::string& value);

// The same catalogue for a config of another schema (recipes/vlm_mimo's
// vlm_config.proto): `root` its top message, `proto_text` its .proto file's
// text (the comments), `choices` its fixed-word settings (may be null). The
// functions above are these over config.proto's Recipe.
struct SettingsSchema {
  const google::protobuf::Descriptor* root = nullptr;
  const char* proto_text = "";
  const std::vector<Choice>* choices = nullptr;
};
// config.proto's.
SettingsSchema RecipeSchema();
std::vector<SettingInfo> AllSettings(const SettingsSchema& schema);
std::string ClosestSetting(const std::string& key, const SettingsSchema& schema);
// `m` must be a schema.root message.
std::string SettingsTable(const google::protobuf::Message& m, const SettingsSchema& schema);
std::string ChoiceError(const SettingsSchema& schema, const std::string& key,
                        const std::string& value);

}  // namespace gtp::recipes
