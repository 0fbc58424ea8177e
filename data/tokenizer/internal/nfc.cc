#include "data/tokenizer/internal/nfc.h"

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "data/tokenizer/internal/unicode.h"

namespace gtp::data::tokenizer_internal {
namespace {

struct CccRange {
  uint32_t lo, hi;
  uint8_t ccc;
};
struct DecompositionRow {
  uint32_t cp, first, second;  // second 0: a singleton
  uint8_t composes;            // first + second recompose to cp
};

constexpr CccRange kCombiningClass[] = {
#define GTP_NFC_COMBINING_CLASS
#include "data/tokenizer/internal/nfc_table.inc"
#undef GTP_NFC_COMBINING_CLASS
};
constexpr DecompositionRow kDecomposition[] = {
#define GTP_NFC_DECOMPOSITION
#include "data/tokenizer/internal/nfc_table.inc"
#undef GTP_NFC_DECOMPOSITION
};

// Hangul syllables (Unicode ch. 3.12).
constexpr uint32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr uint32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount,
                   kSCount = kLCount * kNCount;

// An invalid UTF-8 byte b is carried as kInvalid + b: a starter that
// neither decomposes nor composes.
constexpr uint32_t kInvalid = 0x200000;

uint8_t CombiningClass(uint32_t cp) {
  if (cp < 0x300 || cp >= kInvalid) return 0;
  const CccRange* it = std::lower_bound(std::begin(kCombiningClass), std::end(kCombiningClass), cp,
                                        [](const CccRange& r, uint32_t v) { return r.hi < v; });
  return it != std::end(kCombiningClass) && it->lo <= cp ? it->ccc : 0;
}

struct Tables {
  absl::flat_hash_map<uint32_t, const DecompositionRow*> decomposition;
  absl::flat_hash_map<uint64_t, uint32_t> composition;  // first << 32 | second -> composite
};

const Tables& GetTables() {
  static const Tables* const t = [] {
    auto* t = new Tables;
    for (const DecompositionRow& r : kDecomposition) {
      t->decomposition[r.cp] = &r;
      if (r.composes) t->composition[(uint64_t{r.first} << 32) | r.second] = r.cp;
    }
    return t;
  }();
  return *t;
}

void Decompose(const Tables& t, uint32_t cp, std::vector<uint32_t>* out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const uint32_t s = cp - kSBase;
    out->push_back(kLBase + s / kNCount);
    out->push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount != 0) out->push_back(kTBase + s % kTCount);
    return;
  }
  auto it = t.decomposition.find(cp);
  if (it == t.decomposition.end()) {
    out->push_back(cp);
    return;
  }
  Decompose(t, it->second->first, out);
  if (it->second->second != 0) Decompose(t, it->second->second, out);
}

// The primary composite of (a, b), or 0.
uint32_t Compose(const Tables& t, uint32_t a, uint32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount) {
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  }
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase &&
      b < kTBase + kTCount) {
    return a + (b - kTBase);
  }
  auto it = t.composition.find((uint64_t{a} << 32) | b);
  return it == t.composition.end() ? 0 : it->second;
}

}  // namespace

std::string Nfc(absl::string_view text) {
  if (std::all_of(text.begin(), text.end(), [](char c) { return (c & 0x80) == 0; })) {
    return std::string(text);
  }
  const Tables& t = GetTables();
  // 1. Full canonical decomposition.
  std::vector<uint32_t> d;
  d.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    const Utf8Char c = DecodeUtf8(text, pos);
    if (c.code_point < 0) {
      d.push_back(kInvalid + static_cast<unsigned char>(text[pos]));
    } else {
      Decompose(t, static_cast<uint32_t>(c.code_point), &d);
    }
    pos += c.length;
  }
  // 2. Canonical ordering: each run of non-starters stably sorted by class.
  for (size_t i = 0; i < d.size();) {
    if (CombiningClass(d[i]) == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < d.size() && CombiningClass(d[j]) != 0) ++j;
    std::stable_sort(d.begin() + i, d.begin() + j,
                     [](uint32_t a, uint32_t b) { return CombiningClass(a) < CombiningClass(b); });
    i = j;
  }
  // 3. Canonical composition (UAX #15's sample algorithm): a character
  // combines with the last starter unless blocked by a character between
  // them of class 0 or of a class not below its own.
  if (!d.empty()) {
    size_t starter = 0, out = 1;
    int last_class = CombiningClass(d[0]) == 0 ? 0 : 256;
    for (size_t i = 1; i < d.size(); ++i) {
      const uint32_t ch = d[i];
      const int ch_class = CombiningClass(ch);
      const uint32_t composite = Compose(t, d[starter], ch);
      if (composite != 0 && (last_class < ch_class || last_class == 0)) {
        d[starter] = composite;
        continue;
      }
      if (ch_class == 0) starter = out;
      last_class = ch_class;
      d[out++] = ch;
    }
    d.resize(out);
  }
  std::string result;
  result.reserve(text.size());
  for (uint32_t cp : d) {
    if (cp >= kInvalid) {
      result.push_back(static_cast<char>(cp - kInvalid));
    } else {
      AppendUtf8(cp, &result);
    }
  }
  return result;
}

}  // namespace gtp::data::tokenizer_internal
