// data/tokenizer/internal/hf_config.h — a Hugging Face tokenizer.json read
// into plain structs, with every part HfTokenizer does not implement refused.
//
// The reader accepts only the components, fields and values listed in
// data/tokenizer/README.md; anything else (another model type, an unknown
// field, a Split regex without a scanner, a normalizer such as NFKC) is an
// InvalidArgumentError that names the JSON path and the value, e.g.
//   normalizer.type: "NFKC" is not supported (supported: Prepend, Replace, Sequence)
// so a file is either encoded exactly as HF encodes it or not loaded at all.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "data/tokenizer/pretokenizer.h"

namespace gtp::data::tokenizer_internal {

struct HfAddedToken {
  int32_t id = 0;
  std::string content;
  bool special = false;
  bool normalized = false;  // matched in the normalized text, not the raw text
  bool lstrip = false;      // the match takes the whitespace before it
  bool rstrip = false;      // the match takes the whitespace after it
};

// Metaspace's prepend_scheme ("always", "first", "never").
enum class PrependScheme { kAlways, kFirst, kNever };

struct HfNormalizer {
  enum class Kind { kNfc, kPrepend, kReplace };
  Kind kind;
  std::string from;  // Replace: the literal pattern
  std::string to;    // Prepend: the prefix; Replace: the replacement
};

struct HfPreTokenizer {
  enum class Kind { kSplit, kByteLevel, kMetaspace };
  Kind kind;
  SplitRegex regex = SplitRegex::kGpt2;  // Split; ByteLevel with use_regex
  bool use_regex = false;                // ByteLevel
  bool add_prefix_space = false;         // ByteLevel
  std::string replacement;               // Metaspace (one character)
  PrependScheme prepend = PrependScheme::kAlways;
  bool split = false;  // Metaspace: pieces start at each replacement character
};

struct HfDecoder {
  enum class Kind { kByteLevel, kMetaspace, kByteFallback, kFuse, kStrip, kReplace };
  Kind kind;
  std::string from;  // Replace: pattern; Metaspace: replacement; Strip: content
  std::string to;    // Replace: content
  int start = 0;     // Strip: how many leading `from` to remove (stop must be 0)
  PrependScheme prepend = PrependScheme::kAlways;  // Metaspace
};

struct HfConfig {
  std::vector<HfAddedToken> added_tokens;
  std::vector<HfNormalizer> normalizers;       // applied in order
  std::vector<HfPreTokenizer> pre_tokenizers;  // applied in order
  std::vector<HfDecoder> decoders;             // applied in order
  // model (type BPE)
  std::vector<std::pair<std::string, int32_t>> vocab;
  std::vector<std::pair<std::string, std::string>> merges;  // rank = index
  std::optional<std::string> unk_token;
  bool fuse_unk = false;
  bool byte_fallback = false;
  bool ignore_merges = false;
};

// Parses and validates `json` (the text of a tokenizer.json).
absl::StatusOr<HfConfig> ParseHfConfig(absl::string_view json);

}  // namespace gtp::data::tokenizer_internal
