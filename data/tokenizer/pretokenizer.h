// data/tokenizer/pretokenizer.h — GPT-2's, Llama-3's and Qwen2's pre-tokenizer
// regexes, by hand.
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
// Llama-3's tokenizer.json splits with (one line; JSON escapes undone)
//
//   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
//   ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//
// and Qwen2's with the same pattern but \p{N} for \p{N}{1,3}. Scanned here
// with the leftmost-first semantics of the regex engines HF runs it with:
//   - contractions as above, case-insensitive (ASCII, and U+017F ſ matches s
//     as Unicode case folding has it);
//   - a run of letters, optionally preceded by one character that is not CR,
//     LF, a letter or a number (" hello", "\thello", "(hello");
//   - numbers in runs of at most 3 (Llama-3: "12345" is "123" "45") or 1 (Qwen2);
//   - a run of "other" characters, optionally preceded by one U+0020 space,
//     with any CR/LF run that follows (" !!\n");
//   - a whitespace run holding CR or LF: up to and including its last CR/LF;
//   - otherwise whitespace as in GPT-2's `\s+(?!\S)|\s+`.
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

// The split regexes of HF tokenizer.json files that have a scanner here.
enum class SplitRegex { kGpt2, kLlama3, kQwen2 };

// The pattern exactly as tokenizer.json spells it (after JSON unescaping).
absl::string_view SplitRegexPattern(SplitRegex regex);

// The end of the pre-token that starts at `pos` < text.size().
size_t NextPreTokenEnd(SplitRegex regex, absl::string_view text, size_t pos);

// All pre-tokens of `text` under `regex`, as views into it, in order.
std::vector<absl::string_view> PreTokenize(SplitRegex regex, absl::string_view text);

}  // namespace gtp::data
