#include "data/tokenizer/pretokenizer.h"

#include "data/tokenizer/internal/unicode.h"

namespace gtp::data {
namespace {

using tokenizer_internal::CharClass;
using tokenizer_internal::ClassifyCodePoint;
using tokenizer_internal::DecodeUtf8;

struct Char {
  CharClass cls;
  size_t length;
};

Char At(absl::string_view text, size_t pos) {
  tokenizer_internal::Utf8Char c = DecodeUtf8(text, pos);
  return {ClassifyCodePoint(c.code_point), c.length};
}

// The end of the run of `cls` characters starting at `pos`.
size_t RunEnd(absl::string_view text, size_t pos, CharClass cls) {
  while (pos < text.size()) {
    Char c = At(text, pos);
    if (c.cls != cls) break;
    pos += c.length;
  }
  return pos;
}

// Length of a contraction at `pos` ('s 't 're 've 'm 'll 'd), or 0.
size_t Contraction(absl::string_view text, size_t pos) {
  if (text[pos] != '\'' || pos + 1 >= text.size()) return 0;
  const char a = text[pos + 1];
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  if (pos + 2 >= text.size()) return 0;
  const char b = text[pos + 2];
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  return 0;
}

}  // namespace

size_t Gpt2NextPreTokenEnd(absl::string_view text, size_t pos) {
  if (size_t n = Contraction(text, pos); n > 0) return pos + n;
  const Char c = At(text, pos);
  if (c.cls != CharClass::kSpace) return RunEnd(text, pos + c.length, c.cls);
  // ` ?\p{L}+`, ` ?\p{N}+`, ` ?[^\s\p{L}\p{N}]+`: one ASCII space, then a
  // non-space run.
  if (text[pos] == ' ' && pos + 1 < text.size()) {
    const Char next = At(text, pos + 1);
    if (next.cls != CharClass::kSpace) return RunEnd(text, pos + 1 + next.length, next.cls);
  }
  // `\s+(?!\S)` then `\s+`: the whitespace run, less its last character when
  // a non-space follows and that leaves something.
  size_t last = pos, end = pos;
  while (end < text.size()) {
    const Char w = At(text, end);
    if (w.cls != CharClass::kSpace) break;
    last = end;
    end += w.length;
  }
  if (end == text.size() || last == pos) return end;
  return last;
}

std::vector<absl::string_view> Gpt2PreTokenize(absl::string_view text) {
  std::vector<absl::string_view> out;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t end = Gpt2NextPreTokenEnd(text, pos);
    out.push_back(text.substr(pos, end - pos));
    pos = end;
  }
  return out;
}

}  // namespace gtp::data
