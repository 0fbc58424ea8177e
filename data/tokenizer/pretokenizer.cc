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

bool IsCrLf(char c) { return c == '\r' || c == '\n'; }

char AsciiLower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c + 32) : c; }

// `(?i:'s|'t|'re|'ve|'m|'ll|'d)` at `pos`: its length, or 0. Unicode case
// folding also maps U+017F (ſ, UTF-8 C5 BF) to s.
size_t CaselessContraction(absl::string_view text, size_t pos) {
  if (text[pos] != '\'' || pos + 1 >= text.size()) return 0;
  const char a = AsciiLower(text[pos + 1]);
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  if (text.substr(pos + 1, 2) == "\xC5\xBF") return 3;
  if (pos + 2 >= text.size()) return 0;
  const char b = AsciiLower(text[pos + 2]);
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  return 0;
}

// Llama-3's pattern (Qwen2's with max_digits = 1), alternative by alternative.
size_t Llama3NextPreTokenEnd(absl::string_view text, size_t pos, int max_digits) {
  if (size_t n = CaselessContraction(text, pos); n > 0) return pos + n;
  const Char c = At(text, pos);
  // [^\r\n\p{L}\p{N}]?\p{L}+
  if (c.cls == CharClass::kLetter) return RunEnd(text, pos + c.length, CharClass::kLetter);
  if (c.cls != CharClass::kNumber && !IsCrLf(text[pos]) && pos + c.length < text.size()) {
    const Char next = At(text, pos + c.length);
    if (next.cls == CharClass::kLetter) {
      return RunEnd(text, pos + c.length + next.length, CharClass::kLetter);
    }
  }
  // \p{N}{1,3} (Llama-3) or \p{N} (Qwen2)
  if (c.cls == CharClass::kNumber) {
    size_t end = pos;
    for (int k = 0; k < max_digits && end < text.size(); ++k) {
      const Char d = At(text, end);
      if (d.cls != CharClass::kNumber) break;
      end += d.length;
    }
    return end;
  }
  // ` ?[^\s\p{L}\p{N}]+[\r\n]*`
  size_t p = pos;
  if (text[p] == ' ' && p + 1 < text.size() && At(text, p + 1).cls == CharClass::kOther) ++p;
  if (At(text, p).cls == CharClass::kOther) {
    size_t end = RunEnd(text, p, CharClass::kOther);
    while (end < text.size() && IsCrLf(text[end])) ++end;
    return end;
  }
  // c is whitespace. `\s*[\r\n]+`: the run up to and including its last
  // CR/LF (\s* backtracks to it; [\r\n]+ cannot reach further).
  size_t end = pos, last = pos, crlf_end = 0;
  while (end < text.size()) {
    const Char w = At(text, end);
    if (w.cls != CharClass::kSpace) break;
    if (IsCrLf(text[end])) crlf_end = end + 1;
    last = end;
    end += w.length;
  }
  if (crlf_end > 0) return crlf_end;
  // `\s+(?!\S)` then `\s+`, as in GPT-2's.
  if (end == text.size() || last == pos) return end;
  return last;
}

}  // namespace

absl::string_view SplitRegexPattern(SplitRegex regex) {
  switch (regex) {
    case SplitRegex::kGpt2:
      return R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
    case SplitRegex::kLlama3:
      return R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
    case SplitRegex::kQwen2:
      return R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  }
  return "";
}

size_t NextPreTokenEnd(SplitRegex regex, absl::string_view text, size_t pos) {
  switch (regex) {
    case SplitRegex::kGpt2:
      return Gpt2NextPreTokenEnd(text, pos);
    case SplitRegex::kLlama3:
      return Llama3NextPreTokenEnd(text, pos, 3);
    case SplitRegex::kQwen2:
      return Llama3NextPreTokenEnd(text, pos, 1);
  }
  return text.size();
}

std::vector<absl::string_view> PreTokenize(SplitRegex regex, absl::string_view text) {
  std::vector<absl::string_view> out;
  for (size_t pos = 0; pos < text.size();) {
    const size_t end = NextPreTokenEnd(regex, text, pos);
    out.push_back(text.substr(pos, end - pos));
    pos = end;
  }
  return out;
}

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
