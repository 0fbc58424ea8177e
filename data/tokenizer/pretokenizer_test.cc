#include "data/tokenizer/pretokenizer.h"

#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace gtp::data {
namespace {

using Pieces = std::vector<std::string>;

Pieces Split(const std::string& text) {
  Pieces out;
  for (absl::string_view p : Gpt2PreTokenize(text)) out.emplace_back(p);
  return out;
}

TEST(Gpt2PreTokenize, WordsTakeOneLeadingSpace) {
  EXPECT_EQ(Split("Hello world"), (Pieces{"Hello", " world"}));
  EXPECT_EQ(Split(" Hello"), (Pieces{" Hello"}));
  EXPECT_EQ(Split(""), Pieces{});
}

TEST(Gpt2PreTokenize, Contractions) {
  EXPECT_EQ(Split("he's"), (Pieces{"he", "'s"}));
  EXPECT_EQ(Split("they're"), (Pieces{"they", "'re"}));
  EXPECT_EQ(Split("I'll've"), (Pieces{"I", "'ll", "'ve"}));
  EXPECT_EQ(Split("don't'm'd"), (Pieces{"don", "'t", "'m", "'d"}));
  // Only lower case, and the apostrophe must start the piece.
  EXPECT_EQ(Split("HE'S"), (Pieces{"HE", "'", "S"}));
  EXPECT_EQ(Split("'sup"), (Pieces{"'s", "up"}));
  EXPECT_EQ(Split("!'s"), (Pieces{"!'", "s"}));
  EXPECT_EQ(Split(" 's"), (Pieces{" '", "s"}));
  EXPECT_EQ(Split("'"), (Pieces{"'"}));
  EXPECT_EQ(Split("'r"), (Pieces{"'", "r"}));
}

TEST(Gpt2PreTokenize, WhitespaceRunsLeaveTheirLastSpaceToTheNextWord) {
  EXPECT_EQ(Split("a  b"), (Pieces{"a", " ", " b"}));
  EXPECT_EQ(Split("a    b"), (Pieces{"a", "   ", " b"}));
  EXPECT_EQ(Split("a  "), (Pieces{"a", "  "}));  // at the end: the whole run
  EXPECT_EQ(Split("  "), (Pieces{"  "}));
  EXPECT_EQ(Split(" "), (Pieces{" "}));
  EXPECT_EQ(Split("a \n b"), (Pieces{"a", " \n", " b"}));
  EXPECT_EQ(Split("a\tb"), (Pieces{"a", "\t", "b"}));  // only U+0020 joins a word
  EXPECT_EQ(Split("a\t\tb"), (Pieces{"a", "\t", "\t", "b"}));
}

TEST(Gpt2PreTokenize, Newlines) {
  EXPECT_EQ(Split("a\nb"), (Pieces{"a", "\n", "b"}));
  EXPECT_EQ(Split("a\n\nb"), (Pieces{"a", "\n", "\n", "b"}));
  EXPECT_EQ(Split("a\n\n"), (Pieces{"a", "\n\n"}));
  EXPECT_EQ(Split("x:\n    return"), (Pieces{"x", ":", "\n   ", " return"}));
  EXPECT_EQ(Split("\r\n"), (Pieces{"\r\n"}));
}

TEST(Gpt2PreTokenize, DigitsAndPunctuation) {
  EXPECT_EQ(Split("abc123def"), (Pieces{"abc", "123", "def"}));
  EXPECT_EQ(Split("pi 3.14159"), (Pieces{"pi", " 3", ".", "14159"}));
  EXPECT_EQ(Split("wow!!! ?.."), (Pieces{"wow", "!!!", " ?.."}));
  EXPECT_EQ(Split("(a+b)*c"), (Pieces{"(", "a", "+", "b", ")*", "c"}));
  EXPECT_EQ(Split("x²"), (Pieces{"x", "²"}));            // No is \p{N}
  EXPECT_EQ(Split("１２３ｱ"), (Pieces{"１２３", "ｱ"}));  // fullwidth
  EXPECT_EQ(Split("٣٤ Ⅻ"), (Pieces{"٣٤", " Ⅻ"}));        // Arabic-Indic, Roman
}

TEST(Gpt2PreTokenize, NonAsciiLetters) {
  EXPECT_EQ(Split("café au lait"), (Pieces{"café", " au", " lait"}));
  EXPECT_EQ(Split("Жук и ёж"), (Pieces{"Жук", " и", " ёж"}));
  EXPECT_EQ(Split("中文字 日本語のテキスト"), (Pieces{"中文字", " 日本語のテキスト"}));
  EXPECT_EQ(Split("한국어 שלום مرحبا Ελλάδα"), (Pieces{"한국어", " שלום", " مرحبا", " Ελλάδα"}));
  EXPECT_EQ(Split("नमस्ते"), (Pieces{"नमस", "्", "त", "े"}));    // vowel signs are marks
  EXPECT_EQ(Split("e\xcc\x81"), (Pieces{"e", "\xcc\x81"}));  // combining acute
}

TEST(Gpt2PreTokenize, EmojiAreOther) {
  EXPECT_EQ(Split("hi 👋🏽!"), (Pieces{"hi", " 👋🏽!"}));
  EXPECT_EQ(Split("👍ok"), (Pieces{"👍", "ok"}));
}

TEST(Gpt2PreTokenize, UnicodeWhitespace) {
  EXPECT_EQ(Split("a\u00a0b"), (Pieces{"a", "\u00a0", "b"}));
  EXPECT_EQ(Split("a\u3000\u3000b"), (Pieces{"a", "\u3000", "\u3000", "b"}));
  EXPECT_EQ(Split("a\u3000 b"), (Pieces{"a", "\u3000", " b"}));
}

TEST(Gpt2PreTokenize, InvalidUtf8BytesAreOther) {
  EXPECT_EQ(Split("a\xff"
                  "b"),
            (Pieces{"a", "\xff", "b"}));
  EXPECT_EQ(Split("\xff\xfe!"), (Pieces{"\xff\xfe!"}));
  EXPECT_EQ(Split(" \xe4\xb8"), (Pieces{" \xe4\xb8"}));  // truncated 中
  EXPECT_EQ(Split("\xc0\xaf"
                  "a"),
            (Pieces{"\xc0\xaf", "a"}));                        // overlong '/'
  EXPECT_EQ(Split("\xed\xa0\x80"), (Pieces{"\xed\xa0\x80"}));  // surrogate
}

TEST(Gpt2PreTokenize, PiecesConcatenateToTheInput) {
  std::mt19937 rng(7);
  const std::vector<std::string> atoms = {"a",  "Z",  " ",    "  ",       "\n",    "\t",
                                          "'",  "'s", "'ll",  "1",        "!",     "é",
                                          "中", "👋",  "\xff", "\xe4\xb8", "\u00a0"};
  for (int iter = 0; iter < 2000; ++iter) {
    std::string text;
    const int n = static_cast<int>(rng() % 20);
    for (int i = 0; i < n; ++i) {
      if (rng() % 4 == 0)
        text.push_back(static_cast<char>(rng() % 256));
      else
        text += atoms[rng() % atoms.size()];
    }
    std::string joined;
    for (absl::string_view p : Gpt2PreTokenize(text)) {
      ASSERT_FALSE(p.empty());
      joined.append(p.data(), p.size());
    }
    ASSERT_EQ(joined, text);
  }
}

}  // namespace
}  // namespace gtp::data

namespace gtp::data {
namespace {

Pieces SplitWith(SplitRegex regex, const std::string& text) {
  Pieces out;
  for (absl::string_view p : PreTokenize(regex, text)) out.emplace_back(p);
  return out;
}

// Expected pieces derived by hand from the pattern's alternatives, in order:
// contractions | [^\r\n\p{L}\p{N}]?\p{L}+ | \p{N}{1,3} | ?[^\s\p{L}\p{N}]+[\r\n]*
// | \s*[\r\n]+ | \s+(?!\S) | \s+
TEST(Llama3PreTokenize, WordsTakeOneNonLetterBeforeThem) {
  const SplitRegex r = SplitRegex::kLlama3;
  EXPECT_EQ(SplitWith(r, "Hello world"), (Pieces{"Hello", " world"}));
  EXPECT_EQ(SplitWith(r, "(hello"), (Pieces{"(hello"}));        // GPT-2: "(" "hello"
  EXPECT_EQ(SplitWith(r, "\thello"), (Pieces{"\thello"}));      // GPT-2: "\t" "hello"
  EXPECT_EQ(SplitWith(r, "\nhello"), (Pieces{"\n", "hello"}));  // never CR or LF
  EXPECT_EQ(SplitWith(r, "a  b"), (Pieces{"a", " ", " b"}));
  EXPECT_EQ(SplitWith(r, "über 中文字"), (Pieces{"über", " 中文字"}));
  // A combining mark is not a letter: it ends the run and starts its own.
  EXPECT_EQ(SplitWith(r, "e\xCC\x81t"), (Pieces{"e", "\xCC\x81t"}));
  EXPECT_EQ(SplitWith(r, ""), Pieces{});
}

TEST(Llama3PreTokenize, ContractionsIgnoreCase) {
  const SplitRegex r = SplitRegex::kLlama3;
  EXPECT_EQ(SplitWith(r, "IT'S they'RE"), (Pieces{"IT", "'S", " they", "'RE"}));
  EXPECT_EQ(SplitWith(r, "'sup"), (Pieces{"'s", "up"}));
  EXPECT_EQ(SplitWith(r, "we'Ll"), (Pieces{"we", "'Ll"}));
  // U+017F (ſ) case-folds to s.
  EXPECT_EQ(SplitWith(r, "'\xC5\xBF"), (Pieces{"'\xC5\xBF"}));
  // "!'" is a run of other characters; then "s".
  EXPECT_EQ(SplitWith(r, "!'s"), (Pieces{"!'", "s"}));
}

TEST(Llama3PreTokenize, DigitsInThreesQwen2InOnes) {
  EXPECT_EQ(SplitWith(SplitRegex::kLlama3, "12345"), (Pieces{"123", "45"}));
  EXPECT_EQ(SplitWith(SplitRegex::kLlama3, "1234567"), (Pieces{"123", "456", "7"}));
  // \p{N} takes no space before it: " " "123" (GPT-2: " 123").
  EXPECT_EQ(SplitWith(SplitRegex::kLlama3, "a 123"), (Pieces{"a", " ", "123"}));
  EXPECT_EQ(SplitWith(SplitRegex::kLlama3, "\xD9\xA1\xD9\xA2\xD9\xA3\xD9\xA4"),  // ١٢٣٤
            (Pieces{"\xD9\xA1\xD9\xA2\xD9\xA3", "\xD9\xA4"}));
  EXPECT_EQ(SplitWith(SplitRegex::kQwen2, "12345"), (Pieces{"1", "2", "3", "4", "5"}));
  EXPECT_EQ(SplitWith(SplitRegex::kQwen2, "x1y"), (Pieces{"x", "1", "y"}));
}

TEST(Llama3PreTokenize, PunctuationKeepsItsNewlines) {
  const SplitRegex r = SplitRegex::kLlama3;
  EXPECT_EQ(SplitWith(r, "wow!!! ok"), (Pieces{"wow", "!!!", " ok"}));
  EXPECT_EQ(SplitWith(r, "!!\n\nx"), (Pieces{"!!\n\n", "x"}));
  EXPECT_EQ(SplitWith(r, "a {\r\n}"), (Pieces{"a", " {\r\n", "}"}));
  EXPECT_EQ(SplitWith(r, "\xFF\xFE"), (Pieces{"\xFF\xFE"}));  // invalid bytes are "other"
}

TEST(Llama3PreTokenize, WhitespaceUpToItsLastNewline) {
  const SplitRegex r = SplitRegex::kLlama3;
  // `\s*[\r\n]+` takes " \n\n" (up to the last newline), then " y".
  EXPECT_EQ(SplitWith(r, "x \n\n y"), (Pieces{"x", " \n\n", " y"}));
  EXPECT_EQ(SplitWith(r, "x\n  \n"), (Pieces{"x", "\n  \n"}));
  EXPECT_EQ(SplitWith(r, "a   "), (Pieces{"a", "   "}));
  EXPECT_EQ(SplitWith(r, "a   b"), (Pieces{"a", "  ", " b"}));
  EXPECT_EQ(SplitWith(r, "a \t!"), (Pieces{"a", " ", "\t", "!"}));
}

TEST(PreTokenize, Gpt2PatternIsGpt2PreTokenize) {
  const std::string text = "He's  12 (x) \n\n ok!";
  Pieces gpt2;
  for (absl::string_view p : Gpt2PreTokenize(text)) gpt2.emplace_back(p);
  EXPECT_EQ(SplitWith(SplitRegex::kGpt2, text), gpt2);
}

TEST(PreTokenize, PatternsAreTheTokenizerJsonStrings) {
  // Qwen2's differs from Llama-3's only in the digit group.
  std::string llama3(SplitRegexPattern(SplitRegex::kLlama3));
  llama3.replace(llama3.find("\\p{N}{1,3}"), 10, "\\p{N}");
  EXPECT_EQ(llama3, SplitRegexPattern(SplitRegex::kQwen2));
  EXPECT_EQ(SplitRegexPattern(SplitRegex::kGpt2),
            "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+");
}

}  // namespace
}  // namespace gtp::data
