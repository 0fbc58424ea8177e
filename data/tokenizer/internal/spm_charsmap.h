// data/tokenizer/internal/spm_charsmap.h — SentencePiece's precompiled
// normalization rules (NormalizerSpec.precompiled_charsmap: "nmt_nfkc",
// "nfkc", "nmt_nfkc_cf", ... as compiled into a tokenizer.model).
//
// The blob is <uint32 little-endian: trie size in bytes><trie><replacements>:
// the trie is a darts-clone double array over the UTF-8 bytes of the source
// strings whose value is an offset into <replacements>, a run of
// NUL-terminated UTF-8 strings. SentencePiece's normalizer replaces the
// longest source string that prefixes the text. Load checks the layout and
// every value the array holds (offsets inside the replacements, each ending
// in a NUL), so lookups never read outside the blob. Internal to data/tokenizer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace gtp::data::tokenizer_internal {

class SpmCharsMap {
 public:
  // InvalidArgumentError naming what is malformed.
  static absl::StatusOr<SpmCharsMap> Load(absl::string_view blob);

  // The longest rule whose source prefixes `text`: sets `*consumed` to its
  // length in bytes and returns its replacement; returns false (and leaves
  // both alone) when no rule applies.
  bool LongestMatch(absl::string_view text, size_t* consumed, absl::string_view* replacement) const;

  size_t num_units() const { return units_.size(); }

 private:
  std::vector<uint32_t> units_;  // the double array
  std::string replacements_;
};

}  // namespace gtp::data::tokenizer_internal
