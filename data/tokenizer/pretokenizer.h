// data/tokenizer/pretokenizer.h — GPT-2's pre-tokenizer, by hand.
//
// GPT-2 (and HF `tokenizers` ByteLevel with use_regex) splits text with
//
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//
// before BPE, so merges never cross those boundaries. This is a scanner with
// the same leftmost-first semantics on UTF-8 bytes:
//   - contractions: an ASCII apostrophe followed by s t re ve m ll d
//     (case-sensitive) at the start of a piece;
//   - a run of letters, of numbers, or of "other" characters, optionally
//     preceded by one U+0020 space;
//   - a run of whitespace: all of it at the end of the text, otherwise all but
//     its last character, which then leads the next piece if it is U+0020
//     and stands alone if not (`\s+(?!\S)`, then `\s+`).
//
// Character classes come from internal/unicode.h (generated from the Unicode
// data of Python's `regex`, which GPT-2's encoder.py uses). Invalid UTF-8
// bytes are single "other" characters, so every byte string splits, and the
// pieces always concatenate back to the input.
//
//   for (absl::string_view piece : Gpt2PreTokenize("he's  here")) ...
//   // "he" "'s" " " " here"
//
// Pure functions: thread-safe, non-blocking.
#pragma once

#include <cstddef>
#include <vector>

#include "absl/strings/string_view.h"

namespace gtp::data {

// The end (byte offset) of the pre-token that starts at `pos` < text.size().
size_t Gpt2NextPreTokenEnd(absl::string_view text, size_t pos);

// All pre-tokens of `text`, as views into it, in order.
std::vector<absl::string_view> Gpt2PreTokenize(absl::string_view text);

}  // namespace gtp::data
