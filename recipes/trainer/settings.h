// recipes/trainer/settings.h — the catalogue of `--set` keys: every leaf of
// the recipe (recipes/trainer/config.proto) as a dotted key with its type
// and its comment from config.proto, for `--list_settings` and for "did you
// mean" on an unknown key.
#pragma once

#include <string>
#include <vector>

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

// One line per setting: key, its value in `r`, its type, its comment.
std::string SettingsTable(const proto::Recipe& r);

}  // namespace gtp::recipes
