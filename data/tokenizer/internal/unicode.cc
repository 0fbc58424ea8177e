#include "data/tokenizer/internal/unicode.h"

#include <algorithm>
#include <iterator>

namespace gtp::data::tokenizer_internal {
namespace {

constexpr CharClass L = CharClass::kLetter;
constexpr CharClass N = CharClass::kNumber;
constexpr CharClass S = CharClass::kSpace;

// Letters (L), numbers (N) and White_Space (S) as sorted code point ranges,
// generated from the Unicode data of Python's `regex` module (the one
// GPT-2's encoder.py runs the pattern with), so \p{L}, \p{N} and \s agree
// with it for every code point. Combining marks (Mn, Mc, Me) are not letters;
// U+001C..U+001F are not \s there (unlike Python's `re`).
constexpr CharRange kTable[] = {
#include "data/tokenizer/internal/unicode_table.inc"
};

}  // namespace

absl::Span<const CharRange> CharClassTable() { return absl::MakeConstSpan(kTable); }

CharClass ClassifyCodePoint(int32_t code_point) {
  if (code_point < 0) return CharClass::kOther;
  const uint32_t cp = static_cast<uint32_t>(code_point);
  // ASCII without bisection: most text is mostly ASCII.
  if (cp < 0x80) {
    if ((cp | 0x20) >= 'a' && (cp | 0x20) <= 'z') return CharClass::kLetter;
    if (cp >= '0' && cp <= '9') return CharClass::kNumber;
    if (cp == ' ' || (cp >= 0x09 && cp <= 0x0D)) return CharClass::kSpace;
    return CharClass::kOther;
  }
  // First range whose hi >= cp.
  const CharRange* it = std::lower_bound(std::begin(kTable), std::end(kTable), cp,
                                         [](const CharRange& r, uint32_t v) { return r.hi < v; });
  if (it != std::end(kTable) && it->lo <= cp) return it->cls;
  return CharClass::kOther;
}

Utf8Char DecodeUtf8(absl::string_view text, size_t pos) {
  if (pos >= text.size()) return {-1, 0};
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char b0 = byte(pos);
  if (b0 < 0x80) return {b0, 1};
  uint32_t len, cp, min;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    len = 2, cp = b0 & 0x1F, min = 0x80;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3, cp = b0 & 0x0F, min = 0x800;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4, cp = b0 & 0x07, min = 0x10000;
  } else {
    return {-1, 1};  // continuation byte, C0/C1 (always overlong) or F5..FF
  }
  if (pos + len > text.size()) return {-1, 1};
  for (uint32_t i = 1; i < len; ++i) {
    const unsigned char b = byte(pos + i);
    if ((b & 0xC0) != 0x80) return {-1, 1};
    cp = (cp << 6) | (b & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return {-1, 1};
  return {static_cast<int32_t>(cp), len};
}

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

}  // namespace gtp::data::tokenizer_internal
