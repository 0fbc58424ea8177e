#include "data/tokenizer/internal/spm_charsmap.h"

#include <cstring>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace gtp::data::tokenizer_internal {
namespace {

// darts-clone's DoubleArrayUnit: a value unit has bit 31 set and holds the
// value in bits 0..30; any other unit holds a label (bits 0..7), a has-leaf
// flag (bit 8) and an offset to its children (bits 10..30, scaled by 2^8
// when bit 9 is set).
inline bool HasLeaf(uint32_t u) { return (u >> 8) & 1; }
inline uint32_t Value(uint32_t u) { return u & ((1U << 31) - 1); }
inline uint32_t Label(uint32_t u) { return u & ((1U << 31) | 0xFF); }
inline uint32_t Offset(uint32_t u) { return (u >> 10) << ((u & (1U << 9)) >> 6); }

}  // namespace

absl::StatusOr<SpmCharsMap> SpmCharsMap::Load(absl::string_view blob) {
  auto bad = [](const std::string& what) {
    return absl::InvalidArgumentError(
        absl::StrCat("normalizer_spec.precompiled_charsmap is malformed: ", what));
  };
  if (blob.size() <= 4) return bad(absl::StrCat("it has ", blob.size(), " bytes"));
  const uint8_t* p = reinterpret_cast<const uint8_t*>(blob.data());
  const uint32_t trie_size = p[0] | (p[1] << 8) | (p[2] << 16) | (static_cast<uint32_t>(p[3]) << 24);
  if (trie_size >= blob.size() - 4 + 1 || trie_size % 4 != 0 || trie_size == 0) {
    return bad(absl::StrCat("its trie claims ", trie_size, " bytes of ", blob.size() - 4));
  }
  SpmCharsMap m;
  m.units_.resize(trie_size / 4);
  for (size_t i = 0; i < m.units_.size(); ++i) {
    const uint8_t* u = p + 4 + 4 * i;
    m.units_[i] = u[0] | (u[1] << 8) | (u[2] << 16) | (static_cast<uint32_t>(u[3]) << 24);
  }
  m.replacements_ = std::string(blob.substr(4 + trie_size));
  for (size_t i = 0; i < m.units_.size(); ++i) {
    if (!(m.units_[i] >> 31)) continue;
    const uint32_t v = Value(m.units_[i]);
    if (v >= m.replacements_.size() ||
        std::memchr(m.replacements_.data() + v, '\0', m.replacements_.size() - v) == nullptr) {
      return bad(absl::StrCat("trie unit ", i, " points at byte ", v, " of ",
                              m.replacements_.size(), " bytes of replacements, or at a string "
                              "with no terminating NUL"));
    }
  }
  return m;
}

bool SpmCharsMap::LongestMatch(absl::string_view text, size_t* consumed,
                               absl::string_view* replacement) const {
  // darts-clone's commonPrefixSearch, keeping the longest result.
  const size_t n = units_.size();
  size_t node = Offset(units_[0]);
  size_t best_len = 0;
  uint32_t best_value = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const uint8_t c = static_cast<uint8_t>(text[i]);
    node ^= c;
    if (node >= n) break;
    const uint32_t unit = units_[node];
    if (Label(unit) != c) break;
    node ^= Offset(unit);
    if (HasLeaf(unit)) {
      if (node >= n || !(units_[node] >> 31)) break;  // a malformed array: no value there
      best_len = i + 1;
      best_value = Value(units_[node]);
    }
  }
  if (best_len == 0) return false;
  *consumed = best_len;
  *replacement = absl::string_view(replacements_.data() + best_value);  // NUL-terminated (Load)
  return true;
}

}  // namespace gtp::data::tokenizer_internal
